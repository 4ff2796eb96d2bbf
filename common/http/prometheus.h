// SPDX-License-Identifier: Apache-2.0
// Writing the Prometheus text exposition format 0.0.4, one family at a time
// (HELP, TYPE, samples), for tributaryd's and tributary-manager's /metrics.
// Header-only; no state beyond the text being built.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>

namespace tributary::http {

// A label value with \, " and newlines escaped (the format's rule).
inline std::string PrometheusEscape(const std::string& v) {
  std::string s;
  for (char c : v) {
    if (c == '\\' || c == '"') s += '\\';
    if (c == '\n') {
      s += "\\n";
      continue;
    }
    s += c;
  }
  return s;
}

// key="value", the value escaped.
inline std::string PrometheusLabel(const std::string& key, const std::string& value) {
  return key + "=\"" + PrometheusEscape(value) + "\"";
}

class PrometheusWriter {
 public:
  void Family(const std::string& name, const char* type, const std::string& help) {
    out_ += "# HELP " + name + " " + help + "\n# TYPE " + name + " " + type + "\n";
  }
  // `labels`: "" or `a="x",b="y"` (PrometheusLabel).
  void Sample(const std::string& name, const std::string& labels, double value) {
    char v[64];
    std::snprintf(v, sizeof(v), "%.9g", value);
    out_ += name + (labels.empty() ? "" : "{" + labels + "}") + " " + v + "\n";
  }
  void Sample(const std::string& name, const std::string& labels, uint64_t value) {
    out_ += name + (labels.empty() ? "" : "{" + labels + "}") + " " + std::to_string(value) + "\n";
  }
  std::string Take() { return std::move(out_); }

 private:
  std::string out_;
};

}  // namespace tributary::http
