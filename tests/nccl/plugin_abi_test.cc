// SPDX-License-Identifier: Apache-2.0
// The NCCL plugin as NCCL sees it: dlopen libnccl-net-tributary.so, look up
// every table NCCL may look for, and call through each one the way NCCL's
// loader does (init, devices, getProperties; reduceSupport for CollNet).
// Proves that every exported version has its name and every pointer NCCL
// calls without checking, iallgather and ireducescatter included (the
// v8..v10 CollNet adapters of NCCL call them unchecked); that properties describe
// the NIC the settings chose (TRIBUTARY_NCCL_IFACES=" lo, nosuchnic",
// the second said at WARN) in each version's
// layout; that reduceSupport says yes to exactly the 12 types x
// sum/prod/min/max; and that the plugin's lines reach NCCL's logger, with
// the version it was loaded as and the loud warning when CollNet is off.
// The plugin's path comes from $NCCL_PLUGIN_UNDER_TEST (CMake sets it).
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <cstdarg>
#include <cstdlib>
#include <mutex>
#include <string>
#include <vector>

#include "host/nccl/nccl_abi.h"
#include "tests/nccl/log_line.h"

namespace tributary::nccl {
namespace {

std::mutex g_mu;
std::vector<std::string> g_lines;  // guarded by g_mu

void Logger(NcclLogLevel level, unsigned long, const char*, int, const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  std::string line = FormatLogLine(level, fmt, ap);
  va_end(ap);
  std::lock_guard<std::mutex> lock(g_mu);
  g_lines.push_back(line);
}

bool Logged(const std::string& needle) {
  std::lock_guard<std::mutex> lock(g_mu);
  for (const auto& l : g_lines) {
    if (l.find(needle) != std::string::npos) return true;
  }
  return false;
}

class PluginAbi : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    // Blanks around a name are dropped; a name no NIC has is said at WARN.
    setenv("TRIBUTARY_NCCL_IFACES", " lo, nosuchnic", 1);
    setenv("TRIBUTARY_OFI_PROVIDER", "tcp;ofi_rxm", 1);
    setenv("NCCL_DEBUG", "INFO", 1);
    unsetenv("NCCL_COLLNET_ENABLE");
    const char* path = getenv("NCCL_PLUGIN_UNDER_TEST");
    ASSERT_NE(path, nullptr) << "NCCL_PLUGIN_UNDER_TEST is not set";
    lib_ = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    ASSERT_NE(lib_, nullptr) << dlerror();
  }
  template <typename T>
  static T* Table(const char* name) {
    return static_cast<T*>(dlsym(lib_, name));
  }
  static void* lib_;
};
void* PluginAbi::lib_ = nullptr;

template <typename Net>
void ExpectNetPointers(const Net* t) {
  ASSERT_NE(t, nullptr);
  EXPECT_STREQ(t->name, "Tributary");
  for (const void* p :
       {(const void*)t->init, (const void*)t->devices, (const void*)t->get_properties,
        (const void*)t->listen, (const void*)t->connect, (const void*)t->accept,
        (const void*)t->reg_mr, (const void*)t->reg_mr_dma_buf, (const void*)t->dereg_mr,
        (const void*)t->isend, (const void*)t->irecv, (const void*)t->iflush, (const void*)t->test,
        (const void*)t->close_send, (const void*)t->close_recv, (const void*)t->close_listen}) {
    EXPECT_NE(p, nullptr);
  }
}

template <typename Props>
void ExpectLoopbackProperties(const Props& p) {
  EXPECT_STREQ(p.name, "lo");
  EXPECT_EQ(p.ptr_support, kPtrHost);
  EXPECT_EQ(p.max_recvs, 8);
  EXPECT_GT(p.speed, 0);
  EXPECT_GT(p.max_comms, 0);
  EXPECT_EQ(p.net_device_type, kNetDeviceHost);
}

// An older table: its pointers, init through its own signature, and the
// NIC in its own properties layout.
template <typename Net, typename Props, typename Init>
void CheckNetVersion(Net* t, Init&& init) {
  ExpectNetPointers(t);
  ASSERT_EQ(init(t), kSuccess);
  Props p;
  ASSERT_EQ(t->get_properties(0, &p), kSuccess);
  ExpectLoopbackProperties(p);
}

TEST_F(PluginAbi, OnlyTheTablesNcclLooksForAreExported) {
  for (const char* name : {"ncclNetPlugin_v8", "ncclNetPlugin_v9", "ncclNetPlugin_v10",
                           "ncclNetPlugin_v11", "ncclNetPlugin_v12", "ncclCollNetPlugin_v8",
                           "ncclCollNetPlugin_v9", "ncclCollNetPlugin_v10",
                           "ncclCollNetPlugin_v11", "ncclCollNetPlugin_v12"}) {
    EXPECT_NE(dlsym(lib_, name), nullptr) << name;
  }
  for (const char* name : {"ncclNetPlugin_v13", "ncclCollNetPlugin_v13", "trib_comm_create",
                           "ncclGinPlugin_v11"}) {
    EXPECT_EQ(dlsym(lib_, name), nullptr) << name;
  }
}

TEST_F(PluginAbi, EveryNetVersionInitsAndDescribesTheChosenNic) {
  auto* v12 = Table<NetV12>("ncclNetPlugin_v12");
  ExpectNetPointers(v12);
  ASSERT_NE(v12->finalize, nullptr);
  void* ctx = nullptr;
  NetCommConfig config{-1};
  ASSERT_EQ(v12->init(&ctx, 42, &config, Logger, nullptr), kSuccess);
  EXPECT_NE(ctx, nullptr);
  int n = 0;
  ASSERT_EQ(v12->devices(&n), kSuccess);
  ASSERT_EQ(n, 1) << "TRIBUTARY_NCCL_IFACES=lo leaves one NIC";
  EXPECT_TRUE(Logged("TRIBUTARY_NCCL_IFACES: 'nosuchnic' matches no NIC"));
  PropertiesV12 p12;
  ASSERT_EQ(v12->get_properties(0, &p12), kSuccess);
  ExpectLoopbackProperties(p12);
  EXPECT_EQ(p12.vprops.ndevs, 1);
  EXPECT_EQ(p12.vprops.devs[0], 0);
  EXPECT_EQ(p12.tail.rail_id, -1);
  EXPECT_EQ(p12.tail.plane_id, -1);
  EXPECT_GE(p12.max_p2p_bytes, size_t{1} << 30);
  EXPECT_NE(v12->get_properties(1, &p12), kSuccess);
  EXPECT_EQ(v12->finalize(ctx), kSuccess);

  void* ctx11 = nullptr;
  CheckNetVersion<NetV11, PropertiesV11>(Table<NetV11>("ncclNetPlugin_v11"), [&](NetV11* t) {
    return t->init(&ctx11, 43, &config, Logger, nullptr);
  });
  CheckNetVersion<NetV10, PropertiesV9>(Table<NetV10>("ncclNetPlugin_v10"),
                                        [](NetV10* t) { return t->init(Logger, nullptr); });
  CheckNetVersion<NetV9, PropertiesV9>(Table<NetV9>("ncclNetPlugin_v9"),
                                       [](NetV9* t) { return t->init(Logger); });
  CheckNetVersion<NetV8, PropertiesV8>(Table<NetV8>("ncclNetPlugin_v8"),
                                       [](NetV8* t) { return t->init(Logger); });

  EXPECT_TRUE(Logged("Tributary/nccl: Tributary")) << "the version line reaches NCCL's logger";
  for (const char* which : {"ncclNet v12", "ncclNet v11", "ncclNet v10", "ncclNet v9", "ncclNet v8"}) {
    EXPECT_TRUE(Logged(std::string("loaded as ") + which)) << which;
  }
  EXPECT_TRUE(Logged(std::to_string(kLogWarn) + " Tributary/nccl: CollNet NOT IN USE"))
      << "NCCL_COLLNET_ENABLE unset: a WARN says nothing is reduced in the network";
}

template <typename Coll, typename Props>
void CheckCollNet(Coll* t, const char* which) {
  ASSERT_NE(t, nullptr);
  EXPECT_STREQ(t->name, "Tributary");
  EXPECT_NE(t->iallgather, nullptr) << "the aggregator does all-gather (FORMAT.md 3.3.1)";
  EXPECT_NE(t->ireducescatter, nullptr);
  constexpr bool kContext = requires { t->finalize; };  // v11 and later
  void* ctx = nullptr;
  if constexpr (kContext) {
    ASSERT_EQ(t->init(&ctx, 7, Logger), kSuccess);
  } else {
    ASSERT_EQ(t->init(Logger), kSuccess);
  }
  EXPECT_TRUE(Logged(std::string("loaded as ") + which));
  int n = 0;
  ASSERT_EQ(t->devices(&n), kSuccess);
  EXPECT_EQ(n, 1);
  Props p;
  ASSERT_EQ(t->get_properties(0, &p), kSuccess);
  EXPECT_STREQ(p.name, "lo") << "the CollNet device is the NIC it reaches the aggregator through";
  EXPECT_EQ(p.ptr_support, kPtrHost);
  for (int type = 0; type <= kNcclNumTypes; ++type) {
    for (int op = 0; op <= kNcclAvg; ++op) {
      int supported = -1;
      ASSERT_EQ(t->reduce_support(static_cast<NcclDataType>(type), static_cast<NcclRedOp>(op),
                                  &supported),
                kSuccess);
      EXPECT_EQ(supported, type < kNcclNumTypes && op != kNcclAvg ? 1 : 0)
          << "type " << type << " op " << op;
    }
  }
  for (const void* ptr : {(const void*)t->listen, (const void*)t->connect, (const void*)t->reg_mr,
                          (const void*)t->reg_mr_dma_buf, (const void*)t->dereg_mr,
                          (const void*)t->iallreduce, (const void*)t->iflush, (const void*)t->test,
                          (const void*)t->close_coll, (const void*)t->close_listen}) {
    EXPECT_NE(ptr, nullptr);
  }
  if constexpr (kContext) {
    EXPECT_EQ(t->finalize(ctx), kSuccess);
  }
}

TEST_F(PluginAbi, CollNetTablesInitAndOfferEveryTypeWithSumProdMinMax) {
  CheckCollNet<CollNetV12, PropertiesV12>(Table<CollNetV12>("ncclCollNetPlugin_v12"),
                                          "ncclCollNet v12");
  CheckCollNet<CollNetV11, PropertiesV11>(Table<CollNetV11>("ncclCollNetPlugin_v11"),
                                          "ncclCollNet v11");
  CheckCollNet<CollNetV10, PropertiesV9>(Table<CollNetV10>("ncclCollNetPlugin_v10"),
                                         "ncclCollNet v10");
  CheckCollNet<CollNetV9, PropertiesV9>(Table<CollNetV9>("ncclCollNetPlugin_v9"),
                                        "ncclCollNet v9");
  CheckCollNet<CollNetV8, PropertiesV8>(Table<CollNetV8>("ncclCollNetPlugin_v8"),
                                        "ncclCollNet v8");
}

}  // namespace
}  // namespace tributary::nccl
