// SPDX-License-Identifier: Apache-2.0
// A small HTTP endpoint for operations: Prometheus /metrics and health
// probes of tributaryd and tributary-manager, served by cpp-httplib on a
// thread of its own. Each path has a handler that returns the whole reply.
//
// Thread-safety: Handle() before Start(); Start()/Stop() from one thread;
// handlers run on the server's threads and must be thread-safe.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "common/status.h"

namespace httplib {
class Server;
}

namespace tributary::http {

struct Reply {
  int status = 200;
  std::string body;
  std::string content_type = "text/plain";
};

// The content type of the Prometheus text exposition format 0.0.4.
inline constexpr const char* kPrometheusContentType = "text/plain; version=0.0.4; charset=utf-8";

class HttpEndpoint {
 public:
  HttpEndpoint();
  ~HttpEndpoint();
  HttpEndpoint(const HttpEndpoint&) = delete;
  HttpEndpoint& operator=(const HttpEndpoint&) = delete;

  // GET `path` answers handler().
  void Handle(const std::string& path, std::function<Reply()> handler);
  // Binds "HOST:PORT" (port 0: the kernel picks) and serves. `option` names
  // the setting in errors ("metrics_address"): kInvalidArgument for a
  // malformed address, kUnavailable when the bind fails. address() is then
  // the bound one.
  Status Start(const std::string& option, const std::string& address);
  void Stop();  // idempotent
  const std::string& address() const { return address_; }

 private:
  std::unique_ptr<httplib::Server> server_;
  std::thread thread_;
  std::string address_;
};

}  // namespace tributary::http
