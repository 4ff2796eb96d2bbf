// Uses only the installed public headers: prints the version and checks that
// a communicator to an address nobody serves fails cleanly and quickly.
#include <cstdio>

#include "tributary/communicator.h"

int main() {
  tributary::CommConfig c;
  c.job_id = 1;
  c.job_key = 1;
  c.world_size = 1;
  c.options.aggregator = "127.0.0.1:9";
  c.options.connect_timeout_ms = 200;
  auto comm = tributary::Communicator::Create(c);
  std::printf("tributary %s: %s\n", tributary::Version(), comm.status().ToString().c_str());
  return comm.status().code() == tributary::StatusCode::kUnavailable ? 0 : 1;
}
