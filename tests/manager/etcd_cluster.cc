// SPDX-License-Identifier: Apache-2.0
// See etcd_cluster.h.
#include "tests/manager/etcd_cluster.h"

#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <thread>

#include "manager/etcd_client.h"
#include "tests/common/process.h"

namespace tributary::testing {
namespace {

// Free loopback ports: all bound at once (so they differ), then released.
std::vector<int> FreePorts(int n) {
  std::vector<int> fds;
  std::vector<int> ports;
  for (int i = 0; i < n; ++i) {
    const int fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof(a);
    if (fd < 0 || bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0 ||
        getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
      ports.push_back(0);
    } else {
      ports.push_back(ntohs(a.sin_port));
    }
    fds.push_back(fd);
  }
  for (int fd : fds) close(fd);
  return ports;
}

}  // namespace

EtcdCluster::EtcdCluster(int members) : pids_(members, -1) {
  char tmpl[] = "/tmp/trib-etcd.XXXXXX";
  dir_ = mkdtemp(tmpl) ? tmpl : "";
  const std::vector<int> ports = FreePorts(2 * members);
  for (int i = 0; i < members; ++i) {
    client_ports_.push_back(ports[2 * i]);
    peer_ports_.push_back(ports[2 * i + 1]);
  }
}

EtcdCluster::~EtcdCluster() {
  for (size_t i = 0; i < pids_.size(); ++i) Kill(static_cast<int>(i));
  if (!dir_.empty() && std::getenv("KEEP_LOGS") != nullptr) {
    std::fprintf(stderr, "etcd and test logs kept in %s\n", dir_.c_str());
  } else if (!dir_.empty()) {
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
}

std::string EtcdCluster::Endpoints() const {
  std::string out;
  for (int p : client_ports_) out += (out.empty() ? "" : ",") + std::string("127.0.0.1:") + std::to_string(p);
  return out;
}

std::string EtcdCluster::Url(const std::string& prefix) const {
  return "etcd://" + Endpoints() + "/" + prefix;
}

Status EtcdCluster::Spawn(int member) {
  const char* env = std::getenv("ETCD");
  const std::string bin = env != nullptr && *env != '\0' ? env : "etcd";
  std::string initial;
  for (size_t i = 0; i < peer_ports_.size(); ++i) {
    initial += (i ? "," : "") + std::string("m") + std::to_string(i) + "=http://127.0.0.1:" +
               std::to_string(peer_ports_[i]);
  }
  const std::string name = "m" + std::to_string(member);
  const std::string client =
      (tls_ ? "https://127.0.0.1:" : "http://127.0.0.1:") + std::to_string(client_ports_[member]);
  const std::string peer = "http://127.0.0.1:" + std::to_string(peer_ports_[member]);
  std::vector<std::string> args = {
      bin, "--name", name, "--data-dir", dir_ + "/" + name,
      "--listen-client-urls", client, "--advertise-client-urls", client,
      "--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
      "--initial-cluster", initial, "--initial-cluster-state", "new",
      "--initial-cluster-token", "tributary-test"};
  if (tls_) {
    args.insert(args.end(), {"--cert-file", dir_ + "/server.pem", "--key-file", dir_ + "/server.key",
                             "--trusted-ca-file", ca_file(), "--client-cert-auth"});
  }
  const std::string log = dir_ + "/" + name + ".log";
  const pid_t pid = SpawnLogged(args, log, /*append=*/true);
  if (pid < 0) return Internal("cannot run " + bin);
  pids_[member] = pid;
  return Status::Ok();
}

Status EtcdCluster::EnableTls() {
  const std::string d = dir_;
  const std::string ec = "-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes";
  const std::string script =
      "set -e; cd " + d + "; " +
      "openssl req -x509 " + ec + " -keyout ca.key -out ca.pem -days 1 -subj /CN=tributary-test-ca; " +
      "printf 'subjectAltName=IP:127.0.0.1\\nextendedKeyUsage=serverAuth,clientAuth\\n' > server.ext; " +
      "printf 'extendedKeyUsage=clientAuth\\n' > client.ext; " +
      "for n in server client; do " +
      "openssl req " + ec + " -keyout $n.key -out $n.csr -subj /CN=$n; " +
      "openssl x509 -req -in $n.csr -CA ca.pem -CAkey ca.key -CAcreateserial -out $n.pem " +
      "-days 1 -extfile $n.ext; done";
  const int rc = std::system(("(" + script + ") > " + d + "/openssl.log 2>&1").c_str());
  if (rc != 0) return Internal("openssl could not make the test certificates (see " + d + "/openssl.log)");
  tls_ = true;
  return Status::Ok();
}

Status EtcdCluster::Start() {
  if (dir_.empty()) return Internal("cannot create a temporary directory");
  for (size_t i = 0; i < pids_.size(); ++i) {
    Status s = Spawn(static_cast<int>(i));
    if (!s.ok()) return s;
  }
  if (!WaitWritable(60)) {
    return TimedOut("etcd cluster " + Endpoints() + " not writable within 60 s (" + last_error_ +
                    "; logs in " + dir_ + "; is etcd-server installed?)");
  }
  return Status::Ok();
}

void EtcdCluster::Kill(int member) {
  if (pids_[member] <= 0) return;
  kill(pids_[member], SIGKILL);
  waitpid(pids_[member], nullptr, 0);
  pids_[member] = -1;
}

Status EtcdCluster::Restart(int member) {
  Kill(member);
  return Spawn(member);
}

bool EtcdCluster::WaitWritable(int max_s) {
  manager::EtcdTls tls;
  if (tls_ && !manager::LoadEtcdTls(ca_file(), client_cert_file(), client_key_file(), &tls).ok()) {
    last_error_ = "cannot read the test certificates";
    return false;
  }
  manager::EtcdClient client(manager::ParseEtcdUrl(Url("x"))->endpoints, 3000, tls);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(max_s);
  while (std::chrono::steady_clock::now() < deadline) {
    etcdserverpb::TxnRequest txn;
    auto* put = txn.add_success()->mutable_request_put();
    put->set_key("/tributary-test/probe");
    put->set_value("1");
    etcdserverpb::TxnResponse resp;
    const Status s = client.Txn(txn, &resp);
    if (s.ok()) return true;
    last_error_ = s.ToString();
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  return false;
}

}  // namespace tributary::testing
