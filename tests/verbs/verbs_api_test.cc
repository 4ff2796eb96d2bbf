// SPDX-License-Identifier: Apache-2.0
// Proves the libibverbs loader (common/verbs/verbs_api.h): a library that
// cannot be opened, or that lacks a symbol, gives kUnavailable naming the
// soname tried, what is missing and the Debian packages to install; the
// installed library resolves completely, at the versions the linker would
// pick for this build's headers (the pins are the library's defaults, so a
// header/library upgrade that moves a symbol to a new version fails here,
// not at run time); and concurrent first loads share one table.
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "common/verbs/verbs_api.h"

namespace tributary::ibverbs {
namespace {

void ExpectInstallHint(const std::string& message) {
  EXPECT_NE(message.find("libibverbs1"), std::string::npos) << message;
  EXPECT_NE(message.find("ibverbs-providers"), std::string::npos) << message;
}

// First in the file: the first load of the process happens here.
TEST(VerbsApi, ConcurrentFirstLoadsShareOneTable) {
  std::vector<const VerbsApi*> seen(8, nullptr);
  std::vector<std::thread> threads;
  for (size_t i = 0; i < seen.size(); ++i) {
    threads.emplace_back([&seen, i] {
      Result<const VerbsApi*> api = LoadLibibverbs();
      if (api.ok()) seen[i] = api.value();
    });
  }
  for (auto& t : threads) t.join();
  for (const VerbsApi* api : seen) EXPECT_EQ(api, seen[0]);
  EXPECT_NE(seen[0], nullptr);
}

TEST(VerbsApi, MissingLibraryNamesSonameAndPackages) {
  const char* soname = "libibverbs-not-installed.so.1";
  Result<VerbsApi> api = LoadLibibverbsFrom(soname);
  ASSERT_FALSE(api.ok());
  EXPECT_EQ(api.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(api.status().message().find(std::string("cannot load ") + soname),
            std::string::npos) << api.status().message();
  ExpectInstallHint(api.status().message());
}

TEST(VerbsApi, MissingSymbolNamesSymbolAndVersion) {
  // libc is there on every machine and has no verbs.
  Result<VerbsApi> api = LoadLibibverbsFrom("libc.so.6");
  ASSERT_FALSE(api.ok());
  EXPECT_EQ(api.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(api.status().message().find("has no ibv_get_device_list@IBVERBS_1.1"),
            std::string::npos) << api.status().message();
  EXPECT_NE(api.status().message().find("libc.so.6"), std::string::npos);
  ExpectInstallHint(api.status().message());
}

TEST(VerbsApi, InstalledLibraryResolvesAtItsDefaultVersions) {
  Result<const VerbsApi*> loaded = LoadLibibverbs();
  ASSERT_TRUE(loaded.ok()) << loaded.status().message();
  const VerbsApi& api = *loaded.value();
  void* handle = dlopen(kLibibverbsSoname, RTLD_NOW | RTLD_LOCAL);
  ASSERT_NE(handle, nullptr);
  // dlsym without a version returns the default (@@) one: what a link
  // against this library records.
  const std::pair<const char*, void*> entries[] = {
      {"ibv_get_device_list", reinterpret_cast<void*>(api.get_device_list)},
      {"ibv_free_device_list", reinterpret_cast<void*>(api.free_device_list)},
      {"ibv_get_device_name", reinterpret_cast<void*>(api.get_device_name)},
      {"ibv_open_device", reinterpret_cast<void*>(api.open_device)},
      {"ibv_close_device", reinterpret_cast<void*>(api.close_device)},
      {"ibv_query_device", reinterpret_cast<void*>(api.query_device)},
      {"ibv_query_port", reinterpret_cast<void*>(api.query_port)},
      {"_ibv_query_gid_ex", reinterpret_cast<void*>(api.query_gid_ex)},
      {"ibv_alloc_pd", reinterpret_cast<void*>(api.alloc_pd)},
      {"ibv_dealloc_pd", reinterpret_cast<void*>(api.dealloc_pd)},
      {"ibv_create_comp_channel", reinterpret_cast<void*>(api.create_comp_channel)},
      {"ibv_destroy_comp_channel", reinterpret_cast<void*>(api.destroy_comp_channel)},
      {"ibv_create_cq", reinterpret_cast<void*>(api.create_cq)},
      {"ibv_destroy_cq", reinterpret_cast<void*>(api.destroy_cq)},
      {"ibv_create_qp", reinterpret_cast<void*>(api.create_qp)},
      {"ibv_destroy_qp", reinterpret_cast<void*>(api.destroy_qp)},
      {"ibv_modify_qp", reinterpret_cast<void*>(api.modify_qp)},
      {"ibv_reg_mr", reinterpret_cast<void*>(api.reg_mr)},
      {"ibv_dereg_mr", reinterpret_cast<void*>(api.dereg_mr)},
      {"ibv_create_ah", reinterpret_cast<void*>(api.create_ah)},
      {"ibv_destroy_ah", reinterpret_cast<void*>(api.destroy_ah)},
      {"ibv_get_cq_event", reinterpret_cast<void*>(api.get_cq_event)},
      {"ibv_ack_cq_events", reinterpret_cast<void*>(api.ack_cq_events)},
  };
  for (const auto& [name, address] : entries) {
    ASSERT_NE(address, nullptr) << name;
    EXPECT_EQ(address, dlsym(handle, name)) << name << ": pinned version is not the default";
  }
  dlclose(handle);
  EXPECT_EQ(&Lib(), loaded.value());
}

}  // namespace
}  // namespace tributary::ibverbs
