// SPDX-License-Identifier: Apache-2.0
// HOST:PORT parsing and explicit resolution; see host_port.h.
#include "common/net/host_port.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <sys/socket.h>

#include <strings.h>

#include <cstring>

namespace tributary::net {
namespace {

Status Fail(std::string_view text, const std::string& why) {
  return InvalidArgument("'" + std::string(text) + "': " + why);
}

// A DNS-style name: labels of letters, digits, '-' and '_' separated by
// single dots, each label 1..63 characters and not starting or ending with
// '-'; at most 253 characters. Names made only of digits and dots are
// malformed IPv4 literals, not names.
Status ValidName(std::string_view host) {
  if (host.size() > 253) return InvalidArgument("host name longer than 253 characters");
  bool all_numeric = true;
  size_t label_start = 0;
  for (size_t i = 0; i <= host.size(); ++i) {
    if (i == host.size() || host[i] == '.') {
      const std::string_view label = host.substr(label_start, i - label_start);
      if (label.empty()) {
        return InvalidArgument("empty label in host '" + std::string(host) + "'");
      }
      if (label.size() > 63) {
        return InvalidArgument("label longer than 63 characters in host '" + std::string(host) +
                               "'");
      }
      if (label.front() == '-' || label.back() == '-') {
        return InvalidArgument("host '" + std::string(host) +
                               "' has a label that starts or ends with '-'");
      }
      label_start = i + 1;
      continue;
    }
    const char c = host[i];
    const bool digit = c >= '0' && c <= '9';
    const bool alpha = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
    if (!digit) all_numeric = false;
    if (!digit && !alpha && c != '-' && c != '_') {
      return InvalidArgument("character '" + std::string(1, c) + "' is not allowed in host '" +
                             std::string(host) + "' (IPv4 address, name, or [IPv6])");
    }
  }
  if (all_numeric) {
    return InvalidArgument("'" + std::string(host) + "' is not a valid IPv4 address");
  }
  return Status::Ok();
}

}  // namespace

Result<uint16_t> ParsePort(std::string_view text, PortRule rule) {
  const char* range = rule == PortRule::kAllowZero ? "0..65535" : "1..65535";
  if (text.empty()) {
    return InvalidArgument(std::string("missing port (expected a number in ") + range + ")");
  }
  uint32_t v = 0;
  for (char c : text) {
    if (c < '0' || c > '9') {
      return InvalidArgument("port '" + std::string(text) + "' is not a number in " + range);
    }
    v = v * 10 + static_cast<uint32_t>(c - '0');
    if (v > 65535) break;  // no overflow, however long the input
  }
  if (v > 65535 || (v == 0 && rule == PortRule::kNonZero)) {
    return InvalidArgument("port " + std::string(text) + " is out of range " + range);
  }
  return static_cast<uint16_t>(v);
}

Result<HostPort> ParseHostPort(std::string_view text, PortRule rule) {
  HostPort hp;
  std::string_view port_text;
  if (text.empty()) return Fail(text, "empty address (expected HOST:PORT)");
  if (text.front() == '[') {
    const size_t close = text.find(']');
    if (close == std::string_view::npos) {
      return Fail(text, "missing ']' (expected [IPV6]:PORT)");
    }
    if (close + 1 >= text.size() || text[close + 1] != ':') {
      return Fail(text, "missing ':PORT' after ']' (expected [IPV6]:PORT)");
    }
    hp.host = std::string(text.substr(1, close - 1));
    port_text = text.substr(close + 2);
    in6_addr v6{};
    if (hp.host.empty() || inet_pton(AF_INET6, hp.host.c_str(), &v6) != 1) {
      return Fail(text, "'" + hp.host + "' is not an IPv6 address");
    }
    hp.kind = HostPort::Kind::kIpv6;
  } else {
    const size_t colon = text.rfind(':');
    if (colon == std::string_view::npos) {
      return Fail(text, "missing ':PORT' (expected HOST:PORT, e.g. 127.0.0.1:17820)");
    }
    const std::string_view host = text.substr(0, colon);
    if (host.find(':') != std::string_view::npos) {
      return Fail(text, "an IPv6 address must be bracketed, e.g. [::1]:17820");
    }
    if (host.empty()) return Fail(text, "missing host before ':' (expected HOST:PORT)");
    hp.host = std::string(host);
    port_text = text.substr(colon + 1);
    in_addr v4{};
    if (inet_pton(AF_INET, hp.host.c_str(), &v4) == 1) {
      hp.kind = HostPort::Kind::kIpv4;
    } else {
      if (Status s = ValidName(host); !s.ok()) return Fail(text, s.message());
      hp.kind = HostPort::Kind::kName;
    }
  }
  Result<uint16_t> port = ParsePort(port_text, rule);
  if (!port.ok()) return Fail(text, port.status().message());
  hp.port = port.value();
  return hp;
}

std::string HostPort::ToString() const {
  const std::string p = std::to_string(port);
  return kind == Kind::kIpv6 ? "[" + host + "]:" + p : host + ":" + p;
}

bool HostPort::IsLoopback() const {
  switch (kind) {
    case Kind::kIpv4: {
      in_addr a{};
      return inet_pton(AF_INET, host.c_str(), &a) == 1 && (ntohl(a.s_addr) >> 24) == 127;
    }
    case Kind::kIpv6: {
      in6_addr a{};
      return inet_pton(AF_INET6, host.c_str(), &a) == 1 && IN6_IS_ADDR_LOOPBACK(&a);
    }
    case Kind::kName:
      return strcasecmp(host.c_str(), "localhost") == 0;
  }
  return false;
}

Result<sockaddr_in> ResolveIpv4(const HostPort& address) {
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(address.port);
  switch (address.kind) {
    case HostPort::Kind::kIpv4:
      inet_pton(AF_INET, address.host.c_str(), &addr.sin_addr);  // validated by the parser
      break;
    case HostPort::Kind::kIpv6:
      return InvalidArgument("'" + address.ToString() + "': IPv6 is not supported here; use IPv4");
    case HostPort::Kind::kName: {
      addrinfo hints{};
      hints.ai_family = AF_INET;
      hints.ai_socktype = SOCK_DGRAM;
      addrinfo* res = nullptr;
      const int rc = getaddrinfo(address.host.c_str(), nullptr, &hints, &res);
      if (rc != 0 || res == nullptr) {
        return Unavailable("cannot resolve '" + address.host + "': " + gai_strerror(rc));
      }
      addr.sin_addr = reinterpret_cast<const sockaddr_in*>(res->ai_addr)->sin_addr;
      freeaddrinfo(res);
      break;
    }
  }
  return addr;
}

}  // namespace tributary::net
