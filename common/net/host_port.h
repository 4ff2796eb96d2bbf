// SPDX-License-Identifier: Apache-2.0
// HOST:PORT, the one address syntax of the project, parsed without DNS.
//
// Every address a user writes (TRIBUTARY_AGGREGATOR and its lanes, the OFI
// and verbs transports' aggregator, tributaryd --manager and
// --advertise-address, a static job's parent, `tributary bench --daemon`,
// tributary-manager --listen and the CLI's --manager) goes through
// ParseHostPort, so all of them accept and refuse the same things:
//
//   HOST:PORT      HOST is an IPv4 literal (10.0.0.1) or a name (rack3-tor,
//                  agg.example.com: letters, digits, '-', '_' and '.')
//   [IPV6]:PORT    a bracketed IPv6 literal ([::1]:17820, [fe80::1]:4791)
//
// PORT is decimal, 1..65535 (0 only where the caller allows it: a listening
// address, where 0 asks the kernel for a free port). Anything else is refused
// with a message that quotes the input and says what was expected; nothing
// is silently truncated (99999 is not port 34463). Parsing never resolves a
// name: ResolveIpv4 is the separate, explicit step that may ask DNS, called
// only where a socket is about to be opened.
//
// Errors are Status (common/status.h); this library uses only its inline
// part, so it links nothing for it. Thread-safety: pure functions on their
// arguments.
#pragma once

#include <netinet/in.h>

#include <cstdint>
#include <string>
#include <string_view>

#include "common/status.h"

namespace tributary::net {

struct HostPort {
  enum class Kind { kIpv4, kIpv6, kName };
  std::string host;  // without brackets: "10.0.0.1", "::1", "agg-3"
  uint16_t port = 0;
  Kind kind = Kind::kName;

  // "10.0.0.1:17820", "[::1]:17820", "agg-3:17820": what ParseHostPort accepts.
  std::string ToString() const;
  // The same host with another port (lanes: port + k).
  HostPort WithPort(uint16_t p) const {
    HostPort h = *this;
    h.port = p;
    return h;
  }
  // Literal loopback (127.0.0.0/8, ::1) or the name "localhost"; no DNS.
  bool IsLoopback() const;
};

enum class PortRule {
  kNonZero,   // 1..65535: an address to send to
  kAllowZero  // 0..65535: an address to listen on, 0 = any free port
};

// Parses `text`. On failure kInvalidArgument with a sentence such as
// "'127.0.0.1:99999': port 99999 is out of range 1..65535" (no trailing
// period), for the caller to prefix with the setting's name.
Result<HostPort> ParseHostPort(std::string_view text, PortRule rule = PortRule::kNonZero);

// Parses a port number alone ("17820"): decimal digits, within the rule's range.
Result<uint16_t> ParsePort(std::string_view text, PortRule rule = PortRule::kNonZero);

// Resolves a parsed address to an IPv4 socket address: a literal directly, a
// name through getaddrinfo (DNS; may block). IPv6 literals are refused
// (kInvalidArgument), as only IPv4 sockets use this; a name that does not
// resolve is kUnavailable.
Result<sockaddr_in> ResolveIpv4(const HostPort& address);

}  // namespace tributary::net
