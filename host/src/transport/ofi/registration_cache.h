// Reference-counted cache of memory registrations, keyed by address range.
//
// libtributary asks the transport to register a buffer each time the
// application calls Communicator::Register. Registering with the NIC
// (fi_mr_reg) pins pages and costs microseconds to milliseconds, so the
// cache registers a range once: a later Register of the same range, or of a
// range inside one already registered, is a hit that only takes a reference.
// Deregister drops a reference and releases the registration (fi_close) when
// the last one goes. The progress thread looks up the registration covering
// a receive range to tell the aggregator where to write a result (FORMAT.md
// §12.3).
//
// The cache does not call libfabric itself: it is handed a pair of functions
// that register and release one range, so it can be tested without a NIC.
//
// Thread-safety: every method takes the cache's mutex; Register/Deregister
// come from application threads while the progress thread calls Find.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <utility>

#include "tributary/status.h"

namespace tributary::host {

// What the registrar returns for one registered range.
struct Registration {
  uint64_t key = 0;         // remote access key (fi_mr_key)
  void* handle = nullptr;   // the registrar's handle (struct fid_mr*)
};

struct RegistrationCounters {
  uint64_t hits = 0;          // Register calls served by an existing registration
  uint64_t misses = 0;        // Register calls that registered memory
  uint64_t releases = 0;      // registrations released (refcount reached 0)
  uint64_t live = 0;          // registrations held now
  uint64_t live_bytes = 0;    // bytes they cover
};

class RegistrationCache {
 public:
  using RegisterFn = std::function<Result<Registration>(void* base, size_t bytes)>;
  using ReleaseFn = std::function<void(const Registration&)>;

  RegistrationCache(RegisterFn do_register, ReleaseFn do_release);
  ~RegistrationCache();  // releases whatever is still registered

  // Takes a reference on a registration covering [data, data + bytes),
  // registering the range if none does. bytes == 0 registers nothing.
  Status Acquire(void* data, size_t bytes);
  // Drops the reference Acquire(data, bytes) took. Unknown ranges return
  // kNotFound (a caller bug, reported, never fatal).
  Status Release(void* data, size_t bytes);

  // The registration covering [data, data + bytes), if any: its base address
  // and key. Used on the progress thread for every contribution.
  bool Find(const void* data, size_t bytes, uintptr_t* base, uint64_t* key) const;

  RegistrationCounters counters() const;

 private:
  struct Entry {
    uint64_t refs = 0;
    Registration reg;
  };
  // The entry whose range contains [p, p + bytes), or end().
  using Key = std::pair<uintptr_t, size_t>;  // base, bytes
  std::map<Key, Entry>::iterator FindLocked(uintptr_t p, size_t bytes);

  RegisterFn register_;
  ReleaseFn release_;
  mutable std::mutex mu_;
  std::map<Key, Entry> entries_;  // by (base, bytes); guarded by mu_
  RegistrationCounters counters_;       // guarded by mu_
};

}  // namespace tributary::host
