// SPDX-License-Identifier: Apache-2.0
// DynamicLibrary; see dynamic_library.h. Thread-safety: as the header says.
#include "common/dynamic_library.h"

#include <dlfcn.h>
#include <link.h>

#include <utility>

namespace tributary::base {

DynamicLibrary::DynamicLibrary(std::string soname, std::string install_hint)
    : soname_(std::move(soname)), install_hint_(std::move(install_hint)) {}

DynamicLibrary::~DynamicLibrary() {
  if (handle_ != nullptr) dlclose(handle_);
}

bool DynamicLibrary::Open() {
  handle_ = dlopen(soname_.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle_ == nullptr) {
    const char* raw = dlerror();
    const std::string why = raw != nullptr ? raw : "unknown error";
    status_ = Status(StatusCode::kUnavailable,
                     "cannot load " + soname_ + " (" + why +
                         "): " + install_hint_);
    return false;
  }
  return true;
}

void* DynamicLibrary::Lookup(const char* name, const char* version) {
  if (!status_.ok() || handle_ == nullptr) {
    if (status_.ok()) {
      status_ = Status(StatusCode::kInternal, "symbol " + std::string(name) + " of " + soname_ +
                                                  " resolved before the library was opened");
    }
    return nullptr;
  }
  dlerror();  // clear
  void* address = dlvsym(handle_, name, version);
  if (address == nullptr) {
    // dlerror's string belongs to libc and the next dl* call frees it (path() calls dlinfo),
    // so it is copied before anything else runs.
    const char* raw = dlerror();
    const std::string why = raw != nullptr ? raw : "null symbol";
    status_ = Status(StatusCode::kUnavailable,
                     soname_ + " (" + path() + ") has no " + name + "@" + version + " (" + why +
                         "): it is older than the one Tributary was built against; " +
                         install_hint_);
  }
  return address;
}

std::string DynamicLibrary::path() const {
  link_map* map = nullptr;
  if (handle_ == nullptr || dlinfo(handle_, RTLD_DI_LINKMAP, &map) != 0 || map == nullptr) {
    return "";
  }
  return map->l_name;
}

}  // namespace tributary::base
