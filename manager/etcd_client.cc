// SPDX-License-Identifier: Apache-2.0
// See etcd_client.h.
#include "manager/etcd_client.h"

#include <grpcpp/grpcpp.h>

#include <chrono>
#include <fstream>
#include <sstream>

#include "common/net/host_port.h"

namespace tributary::manager {

Result<EtcdUrl> ParseEtcdUrl(const std::string& url) {
  constexpr std::string_view kScheme = "etcd://";
  if (url.rfind(kScheme, 0) != 0) {
    return InvalidArgument("'" + url + "' is not an etcd URL (etcd://host:port[,host:port]/prefix)");
  }
  std::string rest = url.substr(kScheme.size());
  EtcdUrl out;
  const size_t slash = rest.find('/');
  std::string hosts = rest.substr(0, slash);
  out.prefix = slash == std::string::npos ? "/tributary" : rest.substr(slash);
  while (out.prefix.size() > 1 && out.prefix.back() == '/') out.prefix.pop_back();
  if (out.prefix == "/") {
    return InvalidArgument("etcd URL '" + url + "': the key prefix must not be the root '/'");
  }
  size_t start = 0;
  while (start <= hosts.size()) {
    const size_t comma = hosts.find(',', start);
    const std::string item =
        hosts.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    if (!item.empty()) {
      Result<net::HostPort> hp = net::ParseHostPort(item);
      if (!hp.ok()) {
        return InvalidArgument("etcd URL '" + url + "': endpoint " + hp.status().message());
      }
      out.endpoints.push_back(item);
    }
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  if (out.endpoints.empty()) return InvalidArgument("etcd URL '" + url + "' names no endpoint");
  return out;
}

std::string PrefixRangeEnd(const std::string& prefix) {
  std::string end = prefix;
  while (!end.empty()) {
    if (static_cast<unsigned char>(end.back()) < 0xff) {
      end.back() = static_cast<char>(static_cast<unsigned char>(end.back()) + 1);
      return end;
    }
    end.pop_back();
  }
  return std::string(1, '\0');  // every key
}

namespace {

int64_t SteadyNowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

}  // namespace

Status LoadEtcdTls(const std::string& ca_file, const std::string& cert_file,
                   const std::string& key_file, EtcdTls* out) {
  *out = EtcdTls{};
  if (ca_file.empty()) {
    if (!cert_file.empty() || !key_file.empty()) {
      return InvalidArgument("--etcd-cert/--etcd-key need --etcd-ca");
    }
    return Status::Ok();
  }
  if (cert_file.empty() != key_file.empty()) {
    return InvalidArgument("--etcd-cert and --etcd-key go together");
  }
  auto read = [](const std::string& path, std::string* text) {
    std::ifstream in(path, std::ios::binary);
    std::stringstream buf;
    buf << in.rdbuf();
    *text = buf.str();
    return in.good() || in.eof() ? !text->empty() : false;
  };
  if (!read(ca_file, &out->ca)) return InvalidArgument("cannot read the etcd CA file " + ca_file);
  if (!cert_file.empty() && !read(cert_file, &out->cert)) {
    return InvalidArgument("cannot read the etcd client certificate " + cert_file);
  }
  if (!key_file.empty() && !read(key_file, &out->key)) {
    return InvalidArgument("cannot read the etcd client key " + key_file);
  }
  return Status::Ok();
}

EtcdClient::EtcdClient(std::vector<std::string> endpoints, int timeout_ms, EtcdTls tls)
    : endpoints_(std::move(endpoints)), timeout_ms_(timeout_ms), tls_(std::move(tls)) {
  for (size_t i = 0; i < endpoints_.size(); ++i) {
    stubs_.push_back(Connect(i));
    connected_ms_.push_back(SteadyNowMs());
  }
}

std::shared_ptr<EtcdClient::Stubs> EtcdClient::Connect(size_t i) {
  // Fail over quickly: a member that was down answers again soon after it
  // restarts, and gRPC's default backoff grows to two minutes. (gRPC also
  // takes the minimum backoff as the connect timeout: not below a second.)
  // A channel of its own, not one shared from gRPC's global pool.
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 1000);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  // The whole state comes back in one Range at a takeover: past gRPC's
  // default 4 MiB a replica could not lead (review of 2026-12-07).
  args.SetMaxReceiveMessageSize(256 << 20);
  std::shared_ptr<grpc::ChannelCredentials> creds = grpc::InsecureChannelCredentials();
  if (tls_.enabled()) {
    grpc::SslCredentialsOptions ssl;
    ssl.pem_root_certs = tls_.ca;
    ssl.pem_cert_chain = tls_.cert;
    ssl.pem_private_key = tls_.key;
    creds = grpc::SslCredentials(ssl);
  }
  auto channel = grpc::CreateCustomChannel(endpoints_[i], creds, args);
  auto stubs = std::make_shared<Stubs>();
  stubs->kv = etcdserverpb::KV::NewStub(channel);
  stubs->lease = etcdserverpb::Lease::NewStub(channel);
  return stubs;
}

std::shared_ptr<EtcdClient::Stubs> EtcdClient::Get(size_t i) {
  std::lock_guard<std::mutex> lock(mu_);
  return stubs_[i];
}

void EtcdClient::Failed(size_t i, const std::shared_ptr<Stubs>& stubs) {
  std::lock_guard<std::mutex> lock(mu_);
  const int64_t now = SteadyNowMs();
  if (stubs_[i] != stubs || now - connected_ms_[i] < 1000) return;
  stubs_[i] = Connect(i);
  connected_ms_[i] = now;
}

std::string EtcdClient::Describe() const {
  std::string out = "etcd ";
  for (size_t i = 0; i < endpoints_.size(); ++i) out += (i ? "," : "") + endpoints_[i];
  return out;
}

bool EtcdMemberCouldNotAnswer(const grpc::Status& status) {
  switch (status.error_code()) {
    case grpc::StatusCode::UNAVAILABLE:
    case grpc::StatusCode::DEADLINE_EXCEEDED:
    case grpc::StatusCode::UNKNOWN:
      return true;
    default:
      return false;
  }
}

template <typename Attempt>
Status EtcdClient::Run(const char* what, const Attempt& attempt) {
  grpc::Status last;
  const size_t first = current_.load();
  for (size_t n = 0; n < endpoints_.size(); ++n) {
    const size_t i = (first + n) % endpoints_.size();
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::milliseconds(timeout_ms_));
    const std::shared_ptr<Stubs> stubs = Get(i);
    last = attempt(*stubs, &ctx);
    if (last.ok()) {
      current_.store(i);
      return Status::Ok();
    }
    if (!EtcdMemberCouldNotAnswer(last)) {
      return Internal("etcd member " + endpoints_[i] + " refused the " + what + ": " +
                      last.error_message());
    }
    Failed(i, stubs);
  }
  return Unavailable(Describe() + ": " + what + " failed on every member (unreachable, or "
                     "no quorum): " + last.error_message());
}

Status EtcdClient::Range(const std::string& key, const std::string& range_end,
                         etcdserverpb::RangeResponse* out) {
  etcdserverpb::RangeRequest req;
  req.set_key(key);
  req.set_range_end(range_end);
  return Run("range", [&](Stubs& stub, grpc::ClientContext* ctx) {
    out->Clear();
    return stub.kv->Range(ctx, req, out);
  });
}

Status EtcdClient::Txn(const etcdserverpb::TxnRequest& request, etcdserverpb::TxnResponse* out) {
  return Run("transaction", [&](Stubs& stub, grpc::ClientContext* ctx) {
    out->Clear();
    return stub.kv->Txn(ctx, request, out);
  });
}

Result<int64_t> EtcdClient::LeaseGrant(int64_t ttl_s) {
  etcdserverpb::LeaseGrantRequest req;
  req.set_ttl(ttl_s);
  etcdserverpb::LeaseGrantResponse resp;
  Status s = Run("lease grant", [&](Stubs& stub, grpc::ClientContext* ctx) {
    resp.Clear();
    return stub.lease->LeaseGrant(ctx, req, &resp);
  });
  if (!s.ok()) return s;
  if (!resp.error().empty() || resp.id() == 0) {
    return Internal(Describe() + ": lease grant refused: " + resp.error());
  }
  return resp.id();
}

Status EtcdClient::LeaseKeepAlive(int64_t id, int64_t* ttl_s) {
  etcdserverpb::LeaseKeepAliveRequest req;
  req.set_id(id);
  return Run("lease keepalive", [&](Stubs& stub, grpc::ClientContext* ctx) {
    // The API is a stream; one request and its answer is one keepalive.
    auto stream = stub.lease->LeaseKeepAlive(ctx);
    etcdserverpb::LeaseKeepAliveResponse resp;
    if (!stream->Write(req) || !stream->Read(&resp)) {
      stream->WritesDone();
      grpc::Status st = stream->Finish();
      return st.ok() ? grpc::Status(grpc::StatusCode::UNAVAILABLE, "keepalive stream closed") : st;
    }
    stream->WritesDone();
    ctx->TryCancel();  // the server keeps the stream open; Finish reports CANCELLED
    stream->Finish();
    *ttl_s = resp.ttl();
    return grpc::Status::OK;
  });
}

Status EtcdClient::LeaseKeepAliveMany(const std::vector<int64_t>& ids,
                                      std::map<int64_t, int64_t>* ttl_s) {
  return Run("lease keepalive", [&](Stubs& stub, grpc::ClientContext* ctx) {
    auto stream = stub.lease->LeaseKeepAlive(ctx);
    grpc::Status failed;
    // A batch written, then its answers read: the stream's flow control
    // never holds more than a batch of unread answers.
    for (size_t first = 0; first < ids.size() && failed.ok(); first += kKeepAliveBatch) {
      const size_t last = std::min(ids.size(), first + kKeepAliveBatch);
      etcdserverpb::LeaseKeepAliveRequest req;
      etcdserverpb::LeaseKeepAliveResponse resp;
      for (size_t i = first; i < last && failed.ok(); ++i) {
        req.set_id(ids[i]);
        if (!stream->Write(req)) failed = grpc::Status(grpc::StatusCode::UNAVAILABLE, "write");
      }
      for (size_t i = first; i < last && failed.ok(); ++i) {
        if (!stream->Read(&resp)) {
          failed = grpc::Status(grpc::StatusCode::UNAVAILABLE, "keepalive stream closed");
        } else {
          (*ttl_s)[resp.id()] = resp.ttl();
        }
      }
    }
    stream->WritesDone();
    if (!failed.ok()) {
      const grpc::Status st = stream->Finish();
      return st.ok() ? failed : st;
    }
    ctx->TryCancel();  // the server keeps the stream open; Finish reports CANCELLED
    stream->Finish();
    return grpc::Status::OK;
  });
}

Status EtcdClient::LeaseRevoke(int64_t id) {
  etcdserverpb::LeaseRevokeRequest req;
  req.set_id(id);
  etcdserverpb::LeaseRevokeResponse resp;
  Status s = Run("lease revoke", [&](Stubs& stub, grpc::ClientContext* ctx) {
    return stub.lease->LeaseRevoke(ctx, req, &resp);
  });
  // A lease that is already gone is what revoking wanted.
  if (!s.ok() && s.message().find("requested lease not found") != std::string::npos) {
    return Status::Ok();
  }
  return s;
}

}  // namespace tributary::manager
