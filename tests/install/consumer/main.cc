// SPDX-License-Identifier: Apache-2.0
// Uses only the installed public headers: prints the version, calls the
// value-type helpers and options of the API, and checks that a communicator
// to an address nobody serves fails cleanly and quickly. Exits 0 on success.
#include <cstdio>
#include <cstring>

#include "tributary/communicator.h"
#include "tributary/log.h"

int main() {
  tributary::DataType dtype;
  if (!tributary::ParseDataType("float", &dtype) || tributary::DataTypeSize(dtype) != 4 ||
      std::strcmp(tributary::DataTypeName(dtype), "float32") != 0 ||
      std::strcmp(tributary::MemoryKindName(tributary::MemoryKind::kHost), "host") != 0) {
    std::printf("type helpers gave unexpected answers\n");
    return 1;
  }
  tributary::SetLogLevel(tributary::LogLevel::kError);

  auto options = tributary::Options::FromEnvironment();
  if (!options.ok() || !options->Validate().ok()) {
    std::printf("options: %s\n", options.status().ToString().c_str());
    return 1;
  }
  tributary::CommConfig c;
  c.job_id = 1;
  c.job_key = 1;
  c.world_size = 1;
  c.options = options.value();
  c.options.aggregator = "127.0.0.1:9";
  c.options.connect_timeout_ms = 200;
  auto comm = tributary::Communicator::Create(c);
  std::printf("tributary %s: %s (%s)\n", tributary::Version(), comm.status().ToString().c_str(),
              tributary::StatusCodeName(comm.status().code()));
  return comm.status().code() == tributary::StatusCode::kUnavailable ? 0 : 1;
}
