// SPDX-License-Identifier: Apache-2.0
// udp_flood: hostile traffic at a tributaryd, for the flood benchmark and the
// flood test. Sends as fast as it can for --seconds (bounded), to loopback or
// a test namespace address only (the caller's responsibility, as with every
// tool here), one of:
//   garbage    random bytes of random length (decode errors)
//   wrong-key  well-formed contributions for --job with a guessed MAC
//   unknown    well-formed contributions for random job ids
//   join       JOINs for --job with a guessed cookie and MAC, each from a new source
//              port (tries to fill the daemon's peer table)
// Prints the number of packets sent. Single-threaded; exits 0 unless it
// could not open a socket.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "proto/codec.h"

namespace proto = tributary::proto;

namespace {

using Clock = std::chrono::steady_clock;

int OpenSocket() { return socket(AF_INET, SOCK_DGRAM | SOCK_NONBLOCK, 0); }

}  // namespace

int main(int argc, char** argv) {
  std::string address = "127.0.0.1:17820";
  std::string mode = "wrong-key";
  uint32_t job = 1;
  double seconds = 5;
  uint32_t payload = 8192;
  CLI::App app{"Hostile UDP traffic at a tributaryd (benchmarks and tests only)"};
  app.add_option("--daemon", address, "HOST:PORT of the daemon")->capture_default_str();
  app.add_option("--mode", mode, "garbage, wrong-key, unknown or join")
      ->check(CLI::IsMember({"garbage", "wrong-key", "unknown", "join"}))
      ->capture_default_str();
  app.add_option("--job", job, "job id to attack (wrong-key, join)")->capture_default_str();
  app.add_option("--seconds", seconds, "how long (at most 600)")
      ->check(CLI::Range(0.0, 600.0))
      ->capture_default_str();
  app.add_option("--payload", payload, "payload bytes of contributions")
      ->check(CLI::Range(4u, 65024u))
      ->capture_default_str();
  CLI11_PARSE(app, argc, argv);

  sockaddr_in to{};
  to.sin_family = AF_INET;
  const size_t colon = address.rfind(':');
  if (colon == std::string::npos ||
      inet_pton(AF_INET, address.substr(0, colon).c_str(), &to.sin_addr) != 1) {
    std::fprintf(stderr, "udp_flood: --daemon must be IPv4:PORT\n");
    return 2;
  }
  to.sin_port = htons(static_cast<uint16_t>(std::stoi(address.substr(colon + 1))));
  int fd = OpenSocket();
  if (fd < 0) {
    std::perror("udp_flood: socket");
    return 1;
  }
  std::mt19937_64 rng(12345);
  std::vector<uint8_t> packet(proto::kHeaderSize + 65024);
  std::vector<uint8_t> body(payload);
  for (auto& b : body) b = static_cast<uint8_t>(rng());
  uint64_t sent = 0;
  const auto end = Clock::now() + std::chrono::duration<double>(seconds);
  while (Clock::now() < end) {
    for (int burst = 0; burst < 256; ++burst) {
      size_t len = 0;
      proto::Header h;
      h.job_id = mode == "unknown" ? static_cast<uint32_t>(rng()) : job;
      h.mac = rng();  // a guess of the MAC (the key never goes on the wire)
      h.epoch = static_cast<uint32_t>(rng());
      h.slot = static_cast<uint32_t>(rng() % 128);
      h.shadow = static_cast<uint8_t>(rng() & 1);
      h.collective_id = rng() % 1000;
      h.sender = static_cast<uint32_t>(rng() % 8);
      if (mode == "garbage") {
        len = rng() % 2048;
        for (size_t i = 0; i < len; ++i) packet[i] = static_cast<uint8_t>(rng());
      } else if (mode == "join") {
        h.type = proto::MsgType::kJoin;
        uint8_t jb[proto::kJoinBodySize];
        proto::EncodeJoinBody({4, 32, 65024, 0, rng(), rng(), rng()}, jb);  // a guessed cookie
        len = proto::Encode(h, jb, sizeof(jb), packet.data(), packet.size());
      } else {
        h.type = proto::MsgType::kContribution;
        h.dtype = proto::DataType::kFloat32;
        h.elem_count = payload / 4;
        len = proto::Encode(h, body.data(), h.elem_count * 4, packet.data(), packet.size());
      }
      if (sendto(fd, packet.data(), len, 0, reinterpret_cast<sockaddr*>(&to), sizeof(to)) >= 0) {
        ++sent;
      }
      if (mode == "join") {  // every JOIN from a fresh source port
        close(fd);
        fd = OpenSocket();
        if (fd < 0) return 1;
      }
    }
  }
  std::printf("udp_flood: mode %s sent %llu packets in %.1f s\n", mode.c_str(),
              static_cast<unsigned long long>(sent), seconds);
  close(fd);
  return 0;
}
