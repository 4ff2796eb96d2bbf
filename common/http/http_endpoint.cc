// SPDX-License-Identifier: Apache-2.0
// See http_endpoint.h.
#include "common/http/http_endpoint.h"

#include <httplib.h>

#include "common/net/host_port.h"

namespace tributary::http {

HttpEndpoint::HttpEndpoint() : server_(std::make_unique<httplib::Server>()) {}

HttpEndpoint::~HttpEndpoint() { Stop(); }

void HttpEndpoint::Handle(const std::string& path, std::function<Reply()> handler) {
  server_->Get(path, [handler = std::move(handler)](const httplib::Request&, httplib::Response& res) {
    Reply r = handler();
    res.status = r.status;
    res.set_content(r.body, r.content_type);
  });
}

Status HttpEndpoint::Start(const std::string& option, const std::string& address) {
  Result<net::HostPort> hp = net::ParseHostPort(address, net::PortRule::kAllowZero);
  if (!hp.ok()) return Status(StatusCode::kInvalidArgument, option + " " + hp.status().message());
  int port = static_cast<int>(hp->port);
  const bool bound = port == 0 ? (port = server_->bind_to_any_port(hp->host)) > 0
                               : server_->bind_to_port(hp->host, port);
  if (!bound) {
    return Status(StatusCode::kUnavailable,
                  option + " " + address + ": cannot bind (in use, or not an address here)");
  }
  address_ = hp->host + ":" + std::to_string(port);
  thread_ = std::thread([this] { server_->listen_after_bind(); });
  return Status::Ok();
}

void HttpEndpoint::Stop() {
  if (!thread_.joinable()) return;
  server_->stop();
  thread_.join();
}

}  // namespace tributary::http
