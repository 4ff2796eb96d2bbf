// SPDX-License-Identifier: Apache-2.0
// Opening a shared library at run time and resolving its symbols into a
// table of function pointers: what the libfabric and libibverbs loaders
// (common/ofi/ofi_api.h, common/verbs/verbs_api.h) have in common.
//
// Why at run time: libtributary.so and tributaryd are built with the ofi and
// verbs parts, but a user of the udp transport must not need libfabric or
// libibverbs installed, so neither is a NEEDED entry of any binary. The code
// compiles against their headers only and calls the few real exported
// functions through a table this class fills (the many static inline
// wrappers of the headers dispatch through operation tables inside the
// library's objects and need no symbol).
//
// Symbols are looked up with dlvsym at the version the build's headers
// describe (the version the linker would have recorded), so that a newer
// library with a newer ABI of the same function still hands out the one the
// code was compiled for.
//
// Usage: Open, then Resolve every symbol, then status(); the first failure
// is kept and names the soname, the symbol and what to install. A library
// that resolved completely stays loaded for the life of the process.
//
// LoadOnce<Api> holds the process-wide table of one library: loaded by the
// first Load() (std::call_once), the same table or the same error after.
//
// Thread-safety: one DynamicLibrary per loading thread. LoadOnce is
// thread-safe; its table is immutable once loaded.
#pragma once

#include <atomic>
#include <mutex>
#include <string>

#include "common/check.h"
#include "tributary/status.h"

namespace tributary::base {

class DynamicLibrary {
 public:
  // `install_hint` ends every error message: what to install to get the
  // library (e.g. "install the Debian package libfabric1").
  DynamicLibrary(std::string soname, std::string install_hint);
  ~DynamicLibrary();  // closes the library unless Release() kept it
  DynamicLibrary(const DynamicLibrary&) = delete;
  DynamicLibrary& operator=(const DynamicLibrary&) = delete;

  // dlopen(soname, RTLD_NOW | RTLD_LOCAL). False (and status() set) when it
  // cannot be loaded.
  bool Open();

  // Stores the address of `name` at `version` in *slot, or records the
  // failure and stores null. After a failure it only stores null.
  template <typename Fn>
  void Resolve(const char* name, const char* version, Fn* slot) {
    *slot = reinterpret_cast<Fn>(Lookup(name, version));
  }

  const Status& status() const { return status_; }

  // Keeps the library loaded for the rest of the process (the table's
  // pointers point into it). Call once every symbol resolved.
  void Release() { handle_ = nullptr; }

  // Where the dynamic loader found the library ("" before Open).
  std::string path() const;

 private:
  void* Lookup(const char* name, const char* version);

  std::string soname_;
  std::string install_hint_;
  void* handle_ = nullptr;
  Status status_;
};

// The table of function pointers `Api` of one library, loaded once per
// process by `load(soname)`. Constant-initialized, so it can be a global.
template <typename Api>
class LoadOnce {
 public:
  using LoadFn = Result<Api> (*)(const char* soname);
  constexpr LoadOnce(LoadFn load, const char* soname) : load_(load), soname_(soname) {}

  // Loads on the first call; every call returns the same table or error.
  Result<const Api*> Load() {
    std::call_once(once_, [this] {
      auto* loaded = new Loaded{Api{}, Status::Ok()};  // kept for the process
      Result<Api> api = load_(soname_);
      if (api.ok()) {
        loaded->api = api.value();
      } else {
        loaded->status = api.status();
      }
      loaded_.store(loaded, std::memory_order_release);
    });
    const Loaded* loaded = loaded_.load(std::memory_order_acquire);
    if (!loaded->status.ok()) return loaded->status;
    return &loaded->api;
  }

  // The table, on any thread, once some Load() has succeeded (TRIB_CHECK):
  // code that uses a library object loaded the library to create it.
  const Api& Get() const {
    const Loaded* loaded = loaded_.load(std::memory_order_acquire);
    TRIB_CHECK_MSG(loaded != nullptr && loaded->status.ok(),
                   "a run-time loaded library was used before it loaded");
    return loaded->api;
  }

 private:
  struct Loaded {
    Api api;
    Status status;
  };
  LoadFn load_;
  const char* soname_;
  std::once_flag once_;
  std::atomic<const Loaded*> loaded_{nullptr};
};

}  // namespace tributary::base
