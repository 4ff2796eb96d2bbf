// SPDX-License-Identifier: Apache-2.0
// libfabric 1.17's shm provider keeps every address an endpoint was given
// (tributaryd cannot remove one: shm crashes on a message from a peer
// removed from its address vector) and holds at most 256. A daemon on shm
// that met that many rank processes takes no new one. Proves that it says
// so, once and in words (the limit, how many it met, what to do), instead
// of a bare "unusable address": 300 hellos naming distinct endpoints, sent
// from one endpoint of this test as a rank's transport sends its hello
// (FORMAT.md §12.2).
#include <gtest/gtest.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>

#include <chrono>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "common/ofi/ofi_fabric.h"
#include "common/ofi/rdm_endpoint.h"
#include "tests/common/daemon_process.h"

namespace tributary {
namespace {

// One shm endpoint that sends raw hellos to a daemon.
class HelloSender : public ofi::RdmEndpoint {
 public:
  Status Open(const std::string& daemon_host, uint16_t daemon_port) {
    ofi::ProviderQuery query;
    query.wanted = "shm";
    query.host = daemon_host;
    query.port = daemon_port;
    query.setting = "test";
    auto sel = ofi::SelectProvider(
        query, [this](const std::string&, fi_info* info) { return OpenRdm(info, 64, 64); });
    if (!sel.ok()) return sel.status();
    if (info_->dest_addr == nullptr ||
        fi_av_insert(av_, info_->dest_addr, 1, &daemon_, 0, nullptr) != 1) {
      return Status(StatusCode::kUnavailable, "cannot insert the daemon's address");
    }
    return Status::Ok();
  }
  // A hello from connection `conn_id` naming the shm endpoint `name`.
  bool SendHello(uint64_t conn_id, const std::string& name) {
    std::vector<uint8_t> hello(ofi::kHelloHeaderBytes + name.size() + 1);
    std::memcpy(hello.data(), ofi::kHelloMagic, sizeof(ofi::kHelloMagic));
    const uint32_t n = static_cast<uint32_t>(name.size() + 1);  // with its NUL
    for (int i = 0; i < 4; ++i) hello[8 + i] = static_cast<uint8_t>(n >> (8 * i));
    std::memcpy(hello.data() + ofi::kHelloHeaderBytes, name.c_str(), name.size() + 1);
    for (int tries = 0; tries < 10000; ++tries) {
      const ssize_t rc = fi_senddata(ep_, hello.data(), hello.size(), nullptr,
                                     conn_id | ofi::kHelloFlag, daemon_, nullptr);
      Reap();
      if (rc == 0) return true;
      if (rc != -FI_EAGAIN) return false;
      std::this_thread::sleep_for(std::chrono::microseconds(100));
    }
    return false;
  }
  void Reap() {
    fi_cq_data_entry e[16];
    while (fi_cq_read(tx_cq_, e, 16) > 0) {
    }
  }

 private:
  fi_addr_t daemon_ = FI_ADDR_UNSPEC;
};

TEST(OfiShmLimit, AFullAddressVectorIsReportedNamingTheLimit) {
  testing::DaemonProcess daemon;
  const Status started = daemon.Start({"--dataplane", "ofi", "--ofi-provider", "shm"});
  ASSERT_TRUE(started.ok()) << started.ToString();
  HelloSender sender;
  const Status opened = sender.Open("127.0.0.1", static_cast<uint16_t>(daemon.port()));
  ASSERT_TRUE(opened.ok()) << opened.ToString();
  const std::string pid = std::to_string(getpid());
  for (uint64_t i = 1; i <= 300; ++i) {
    ASSERT_TRUE(sender.SendHello(0x1000 + i, "fi_shm://tribtest" + pid + "_" + std::to_string(i)))
        << i;
  }
  const std::string want = "address vector is full (256 rank processes connected";
  std::string out;
  for (int i = 0; i < 100 && out.find(want) == std::string::npos; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    sender.Reap();
    out = daemon.Output();
  }
  EXPECT_NE(out.find(want), std::string::npos) << out;
  EXPECT_NE(out.find("at most 256"), std::string::npos) << out;
  EXPECT_NE(out.find("until this daemon restarts"), std::string::npos) << out;
  EXPECT_EQ(out.find("hello with an unusable address"), std::string::npos) << out;
}

}  // namespace
}  // namespace tributary
