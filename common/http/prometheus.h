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
  // A histogram's samples (after its Family(..., "histogram", ...)): one
  // NAME_bucket per bound with `cumulative[i]` values <= bounds[i], the
  // +Inf bucket (`count`), NAME_sum and NAME_count. `labels` ("" or
  // `job="7"`) go before `le` on each.
  void Histogram(const std::string& name, const std::string& labels, const double* bounds,
                 const uint64_t* cumulative, size_t n, double sum, uint64_t count) {
    const std::string prefix = labels.empty() ? "" : labels + ",";
    for (size_t i = 0; i < n; ++i) {
      char le[32];
      std::snprintf(le, sizeof(le), "%.9g", bounds[i]);
      Sample(name + "_bucket", prefix + PrometheusLabel("le", le), cumulative[i]);
    }
    Sample(name + "_bucket", prefix + "le=\"+Inf\"", count);
    Sample(name + "_sum", labels, sum);
    Sample(name + "_count", labels, count);
  }
  std::string Take() { return std::move(out_); }

 private:
  std::string out_;
};

}  // namespace tributary::http
