// SPDX-License-Identifier: Apache-2.0
// A JSON string literal (RFC 8259): quotes, backslashes and control
// characters escaped, other bytes as they are (UTF-8 passes through). For
// the few places that write JSON by hand: JSON log lines (log.cc) and
// `tributary doctor --json`. Header-only so that programs linking
// libtributary.so can use it without a second copy of any state.
// Thread-safe (pure).
#pragma once

#include <cstdio>
#include <string>
#include <string_view>

namespace tributary::base {

inline void AppendJsonString(std::string* out, std::string_view s) {
  *out += '"';
  for (const char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    if (c == '"' || c == '\\') {
      *out += '\\';
      *out += ch;
    } else if (c == '\n') {
      *out += "\\n";
    } else if (c == '\t') {
      *out += "\\t";
    } else if (c < 0x20) {
      char u[8];
      std::snprintf(u, sizeof(u), "\\u%04x", c);
      *out += u;
    } else {
      *out += ch;
    }
  }
  *out += '"';
}

inline std::string JsonString(std::string_view s) {
  std::string out;
  AppendJsonString(&out, s);
  return out;
}

}  // namespace tributary::base
