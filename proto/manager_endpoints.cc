// SPDX-License-Identifier: Apache-2.0
// See manager_endpoints.h.
#include "proto/manager_endpoints.h"

#include "common/secret_file.h"

#include <chrono>
#include <fstream>
#include <sstream>
#include <thread>

namespace tributary::manager {

std::vector<std::string> SplitAddressList(const std::string& list) {
  std::vector<std::string> out;
  std::stringstream in(list);
  std::string item;
  while (std::getline(in, item, ',')) {
    const size_t b = item.find_first_not_of(" \t");
    const size_t e = item.find_last_not_of(" \t");
    if (b != std::string::npos) out.push_back(item.substr(b, e - b + 1));
  }
  return out;
}

bool ReadSecretFile(const std::string& path, std::string* secret, std::string* error) {
  std::string text;
  // A token is one line; more than this is not a token file.
  if (!base::ReadPrivateFile(path, 4096, &text, error)) return false;
  const size_t eol = text.find('\n');
  const std::string line = text.substr(0, eol);
  base::ZeroString(&text);
  const size_t b = line.find_first_not_of(" \t\r");
  const size_t e = line.find_last_not_of(" \t\r");
  if (b == std::string::npos) {
    *error = path + " is empty";
    return false;
  }
  *secret = line.substr(b, e - b + 1);
  return true;
}

ManagerEndpoints::ManagerEndpoints(ManagerConnectionOptions options, grpc::ChannelArguments args)
    : options_(std::move(options)), args_(std::move(args)) {}

bool ManagerEndpoints::Init(std::string* error) {
  if (options_.addresses.empty()) {
    *error = "no manager address";
    return false;
  }
  std::shared_ptr<grpc::ChannelCredentials> creds = grpc::InsecureChannelCredentials();
  if (!options_.ca_file.empty()) {
    std::ifstream in(options_.ca_file);
    std::stringstream pem;
    pem << in.rdbuf();
    if (!in || pem.str().empty()) {
      *error = "cannot read the manager CA file " + options_.ca_file;
      return false;
    }
    grpc::SslCredentialsOptions ssl;
    ssl.pem_root_certs = pem.str();
    creds = grpc::SslCredentials(ssl);
  }
  stubs_.clear();
  for (const std::string& a : options_.addresses) {
    stubs_.push_back(v1::Manager::NewStub(grpc::CreateCustomChannel(a, creds, args_)));
  }
  current_ = 0;
  return true;
}

grpc::Status ManagerEndpoints::Call(const Rpc& rpc, int deadline_ms) {
  grpc::Status status(grpc::StatusCode::UNAVAILABLE, "no manager address");
  // What to report when no replica answers: the most telling refusal seen
  // (the leader's "etcd has no quorum" rather than a follower's "not the
  // leader", or than our own deadline passing mid-call).
  grpc::Status telling;
  auto remember = [&](const grpc::Status& s) {
    const bool not_leader = s.error_message().find("is not the leader; the leader is") != std::string::npos;
    const bool bare_deadline = s.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED;
    if (!not_leader && !bare_deadline) telling = s;
  };
  auto give_up = [&] { return telling.ok() ? status : telling; };
  const auto deadline =
      std::chrono::system_clock::now() + std::chrono::milliseconds(deadline_ms);
  // Rounds over every replica until one answers or the deadline passes: a
  // takeover leaves a few seconds in which no replica leads.
  while (true) {
    const size_t first = current_;
    for (size_t attempt = 0; attempt < stubs_.size(); ++attempt) {
      const size_t i = (first + attempt) % stubs_.size();
      grpc::ClientContext ctx;
      ctx.set_deadline(deadline);
      if (!options_.token.empty()) ctx.AddMetadata("authorization", "Bearer " + options_.token);
      status = rpc(stubs_[i].get(), &ctx);
      current_ = i;
      if (status.error_code() != grpc::StatusCode::UNAVAILABLE &&
          status.error_code() != grpc::StatusCode::DEADLINE_EXCEEDED) {
        return status;
      }
      remember(status);
      if (std::chrono::system_clock::now() >= deadline) return give_up();
    }
    const auto pause = std::chrono::milliseconds(200);
    if (std::chrono::system_clock::now() + pause >= deadline) return give_up();
    std::this_thread::sleep_for(pause);
  }
}

std::string ManagerEndpoints::Describe() const {
  std::string out;
  for (const std::string& a : options_.addresses) out += (out.empty() ? "" : ",") + a;
  return out;
}

}  // namespace tributary::manager
