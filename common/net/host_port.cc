// HOST:PORT parsing and explicit resolution; see host_port.h.
#include "common/net/host_port.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <sys/socket.h>

#include <strings.h>

#include <cstring>

namespace tributary::net {
namespace {

bool Fail(std::string_view text, const std::string& why, std::string* error) {
  if (error != nullptr) *error = "'" + std::string(text) + "': " + why;
  return false;
}

// A DNS-style name: labels of letters, digits, '-' and '_' separated by
// single dots, each label 1..63 characters and not starting or ending with
// '-'; at most 253 characters. Names made only of digits and dots are
// malformed IPv4 literals, not names.
bool ValidName(std::string_view host, std::string* why) {
  if (host.size() > 253) {
    *why = "host name longer than 253 characters";
    return false;
  }
  bool all_numeric = true;
  size_t label_start = 0;
  for (size_t i = 0; i <= host.size(); ++i) {
    if (i == host.size() || host[i] == '.') {
      const std::string_view label = host.substr(label_start, i - label_start);
      if (label.empty()) {
        *why = "empty label in host '" + std::string(host) + "'";
        return false;
      }
      if (label.size() > 63) {
        *why = "label longer than 63 characters in host '" + std::string(host) + "'";
        return false;
      }
      if (label.front() == '-' || label.back() == '-') {
        *why = "host '" + std::string(host) + "' has a label that starts or ends with '-'";
        return false;
      }
      label_start = i + 1;
      continue;
    }
    const char c = host[i];
    const bool digit = c >= '0' && c <= '9';
    const bool alpha = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
    if (!digit) all_numeric = false;
    if (!digit && !alpha && c != '-' && c != '_') {
      *why = "character '" + std::string(1, c) + "' is not allowed in host '" +
             std::string(host) + "' (IPv4 address, name, or [IPv6])";
      return false;
    }
  }
  if (all_numeric) {
    *why = "'" + std::string(host) + "' is not a valid IPv4 address";
    return false;
  }
  return true;
}

}  // namespace

bool ParsePort(std::string_view text, uint16_t* out, std::string* error, PortRule rule) {
  const char* range = rule == PortRule::kAllowZero ? "0..65535" : "1..65535";
  if (text.empty()) {
    if (error) *error = std::string("missing port (expected a number in ") + range + ")";
    return false;
  }
  uint32_t v = 0;
  for (char c : text) {
    if (c < '0' || c > '9') {
      if (error) {
        *error = "port '" + std::string(text) + "' is not a number in " + range;
      }
      return false;
    }
    v = v * 10 + static_cast<uint32_t>(c - '0');
    if (v > 65535) break;  // no overflow, however long the input
  }
  if (v > 65535 || (v == 0 && rule == PortRule::kNonZero)) {
    if (error) *error = "port " + std::string(text) + " is out of range " + range;
    return false;
  }
  *out = static_cast<uint16_t>(v);
  return true;
}

bool ParseHostPort(std::string_view text, HostPort* out, std::string* error, PortRule rule) {
  HostPort hp;
  std::string_view port_text;
  if (text.empty()) return Fail(text, "empty address (expected HOST:PORT)", error);
  if (text.front() == '[') {
    const size_t close = text.find(']');
    if (close == std::string_view::npos) {
      return Fail(text, "missing ']' (expected [IPV6]:PORT)", error);
    }
    if (close + 1 >= text.size() || text[close + 1] != ':') {
      return Fail(text, "missing ':PORT' after ']' (expected [IPV6]:PORT)", error);
    }
    hp.host = std::string(text.substr(1, close - 1));
    port_text = text.substr(close + 2);
    in6_addr v6{};
    if (hp.host.empty() || inet_pton(AF_INET6, hp.host.c_str(), &v6) != 1) {
      return Fail(text, "'" + hp.host + "' is not an IPv6 address", error);
    }
    hp.kind = HostPort::Kind::kIpv6;
  } else {
    const size_t colon = text.rfind(':');
    if (colon == std::string_view::npos) {
      return Fail(text, "missing ':PORT' (expected HOST:PORT, e.g. 127.0.0.1:17820)", error);
    }
    const std::string_view host = text.substr(0, colon);
    if (host.find(':') != std::string_view::npos) {
      return Fail(text, "an IPv6 address must be bracketed, e.g. [::1]:17820", error);
    }
    if (host.empty()) return Fail(text, "missing host before ':' (expected HOST:PORT)", error);
    hp.host = std::string(host);
    port_text = text.substr(colon + 1);
    in_addr v4{};
    if (inet_pton(AF_INET, hp.host.c_str(), &v4) == 1) {
      hp.kind = HostPort::Kind::kIpv4;
    } else {
      std::string why;
      if (!ValidName(host, &why)) return Fail(text, why, error);
      hp.kind = HostPort::Kind::kName;
    }
  }
  std::string why;
  if (!ParsePort(port_text, &hp.port, &why, rule)) return Fail(text, why, error);
  *out = std::move(hp);
  return true;
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

bool ResolveIpv4(const HostPort& address, sockaddr_in* out, std::string* error) {
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(address.port);
  switch (address.kind) {
    case HostPort::Kind::kIpv4:
      inet_pton(AF_INET, address.host.c_str(), &addr.sin_addr);  // validated by the parser
      break;
    case HostPort::Kind::kIpv6:
      if (error) *error = "'" + address.ToString() + "': IPv6 is not supported here; use IPv4";
      return false;
    case HostPort::Kind::kName: {
      addrinfo hints{};
      hints.ai_family = AF_INET;
      hints.ai_socktype = SOCK_DGRAM;
      addrinfo* res = nullptr;
      const int rc = getaddrinfo(address.host.c_str(), nullptr, &hints, &res);
      if (rc != 0 || res == nullptr) {
        if (error) {
          *error = "cannot resolve '" + address.host + "': " + gai_strerror(rc);
        }
        return false;
      }
      addr.sin_addr = reinterpret_cast<const sockaddr_in*>(res->ai_addr)->sin_addr;
      freeaddrinfo(res);
      break;
    }
  }
  *out = addr;
  return true;
}

}  // namespace tributary::net
