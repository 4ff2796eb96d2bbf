// SPDX-License-Identifier: Apache-2.0
// Proves the libfabric loader (common/ofi/ofi_api.h): a library that cannot
// be opened, or that lacks a symbol, gives kUnavailable naming the soname
// tried, what is missing and the Debian package libfabric1; the installed
// library resolves completely at its default symbol versions (what a link
// against it records, so the pins match this build's headers); concurrent
// first loads share one table.
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "common/ofi/ofi_api.h"

namespace tributary::ofi {
namespace {

// First in the file: the first load of the process happens here.
TEST(OfiApi, ConcurrentFirstLoadsShareOneTable) {
  std::vector<const OfiApi*> seen(8, nullptr);
  std::vector<std::thread> threads;
  for (size_t i = 0; i < seen.size(); ++i) {
    threads.emplace_back([&seen, i] {
      Result<const OfiApi*> api = LoadLibfabric();
      if (api.ok()) seen[i] = api.value();
    });
  }
  for (auto& t : threads) t.join();
  ASSERT_NE(seen[0], nullptr);
  for (const OfiApi* api : seen) EXPECT_EQ(api, seen[0]);
  EXPECT_EQ(&Lib(), seen[0]);
}

TEST(OfiApi, MissingLibraryNamesSonameAndPackage) {
  Result<OfiApi> api = LoadLibfabricFrom("libfabric-not-installed.so.1");
  ASSERT_FALSE(api.ok());
  EXPECT_EQ(api.status().code(), StatusCode::kUnavailable);
  const std::string& m = api.status().message();
  EXPECT_NE(m.find("cannot load libfabric-not-installed.so.1"), std::string::npos) << m;
  EXPECT_NE(m.find("install the Debian package libfabric1"), std::string::npos) << m;
}

TEST(OfiApi, MissingSymbolNamesSymbolAndVersion) {
  Result<OfiApi> api = LoadLibfabricFrom("libc.so.6");  // everywhere, and no fi_*
  ASSERT_FALSE(api.ok());
  const std::string& m = api.status().message();
  EXPECT_NE(m.find("has no fi_getinfo@FABRIC_1.3"), std::string::npos) << m;
  EXPECT_NE(m.find("libfabric1"), std::string::npos) << m;
}

TEST(OfiApi, InstalledLibraryResolvesAtItsDefaultVersions) {
  Result<const OfiApi*> loaded = LoadLibfabric();
  ASSERT_TRUE(loaded.ok()) << loaded.status().message();
  const OfiApi& api = *loaded.value();
  void* handle = dlopen(kLibfabricSoname, RTLD_NOW | RTLD_LOCAL);
  ASSERT_NE(handle, nullptr);
  const std::pair<const char*, void*> entries[] = {
      {"fi_getinfo", reinterpret_cast<void*>(api.getinfo)},
      {"fi_freeinfo", reinterpret_cast<void*>(api.freeinfo)},
      {"fi_dupinfo", reinterpret_cast<void*>(api.dupinfo)},
      {"fi_fabric", reinterpret_cast<void*>(api.fabric)},
      {"fi_strerror", reinterpret_cast<void*>(api.strerror)},
  };
  for (const auto& [name, address] : entries) {
    ASSERT_NE(address, nullptr) << name;
    // dlsym without a version returns the default (@@) one.
    EXPECT_EQ(address, dlsym(handle, name)) << name << ": pinned version is not the default";
  }
  dlclose(handle);
}

}  // namespace
}  // namespace tributary::ofi
