// SPDX-License-Identifier: Apache-2.0
// NodeSegment; see node_segment.h.
#include "host/src/node/node_segment.h"

#include <fcntl.h>
#include <linux/futex.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstring>

namespace tributary::host {
namespace {

constexpr uint64_t kMagic = 0x54524942'4e4f4445ull;  // "TRIBNODE"
constexpr uint32_t kVersion = 2;
constexpr size_t kHeaderBytes = 8192;
constexpr size_t kCountersBytes = 4 * NodeSegment::kMaxLocalRanks * 64;
constexpr size_t kMailboxesBytes = NodeSegment::kMaxLocalRanks * NodeSegment::kMailboxBytes;
constexpr size_t kMailboxOffset = kHeaderBytes + kCountersBytes;
constexpr size_t kDataOffset = kMailboxOffset + kMailboxesBytes;

void FutexWake(std::atomic<uint32_t>* word) {
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAKE, INT_MAX, nullptr, nullptr, 0);
}

// Sleeps while *word == expected, at most `ms` (spurious wake-ups are fine:
// callers re-check).
void FutexWait(std::atomic<uint32_t>* word, uint32_t expected, uint32_t ms) {
  timespec ts{static_cast<time_t>(ms / 1000), static_cast<long>(ms % 1000) * 1000000};
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAIT, expected, &ts, nullptr, 0);
}

inline void CpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

uint64_t PidNamespace() {
  struct stat st;
  return stat("/proc/self/ns/pid", &st) == 0 ? static_cast<uint64_t>(st.st_ino) : 0;
}

Status SysError(const std::string& what) {
  return Status(StatusCode::kUnavailable, what + ": " + strerror(errno));
}

}  // namespace

uint64_t NodeNowMs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000 + static_cast<uint64_t>(ts.tv_nsec) / 1000000;
}

struct NodeSegment::Header {
  std::atomic<uint64_t> magic;  // written last by the creator
  uint32_t version;
  uint32_t local_size;
  uint64_t round_bytes;
  std::atomic<uint32_t> attached;  // futex word: ranks attached so far
  std::atomic<uint32_t> abort_state;  // 0 none, 1 being written, 2 reason valid
  int32_t pids[kMaxLocalRanks];
  uint64_t pid_ns[kMaxLocalRanks];
  std::atomic<uint32_t> detached[kMaxLocalRanks];  // closed its communicator
  char reason[1024];
};
static_assert(sizeof(NodeSegment::Header) <= kHeaderBytes);
static_assert(std::atomic<uint32_t>::is_always_lock_free && std::atomic<uint64_t>::is_always_lock_free,
              "the segment's counters are shared between processes: they must be lock-free");

Result<std::unique_ptr<NodeSegment>> NodeSegment::Attach(const std::string& name,
                                                         uint32_t local_rank, uint32_t local_size,
                                                         size_t round_bytes, uint32_t timeout_ms) {
  if (local_size < 2 || local_size > kMaxLocalRanks || local_rank >= local_size) {
    return Status(StatusCode::kInvalidArgument,
                  "node level: " + std::to_string(local_size) + " local ranks (2-" +
                      std::to_string(kMaxLocalRanks) + " supported)");
  }
  const uint64_t deadline = NodeNowMs() + timeout_ms;
  const size_t bytes = kDataOffset + round_bytes * kDepth * (local_size + 1);
  std::unique_ptr<NodeSegment> seg(new NodeSegment());
  seg->local_rank_ = local_rank;
  seg->local_size_ = local_size;
  seg->round_bytes_ = round_bytes;
  const bool creator = local_rank == 0;
  int fd = -1;
  if (creator) {
    fd = shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
    if (fd < 0) return SysError("node level: cannot create shared memory " + name);
    // Reserved, not only sized: ftruncate on tmpfs reserves nothing, and a
    // segment larger than what /dev/shm has left would map, then kill a
    // rank with SIGBUS at the first write past the limit. The size is set
    // once every page is there, so the other ranks wait for it as before.
    int rc;
    do {
      rc = posix_fallocate(fd, 0, static_cast<off_t>(bytes));
    } while (rc == EINTR);
    if (rc != 0) {
      Status s(StatusCode::kResourceExhausted,
               "node level: cannot reserve " + std::to_string(bytes) + " bytes of shared memory " +
                   name + ": " + strerror(rc) +
                   " (is /dev/shm large enough? a container's --shm-size; or use a smaller "
                   "node_chunk_bytes, or node_level off)");
      close(fd);
      shm_unlink(name.c_str());
      return s;
    }
  } else {
    // The creator may not have made it yet, or not sized it yet.
    bool seen_unsized = false;
    while (true) {
      fd = shm_open(name.c_str(), O_RDWR, 0);
      if (fd >= 0) {
        // One look at the size: local rank 0 may size it between two.
        struct stat st;
        const off_t size = fstat(fd, &st) == 0 ? st.st_size : 0;
        if (static_cast<size_t>(size) == bytes) break;
        close(fd);
        fd = -1;
        if (size != 0) {  // 0: not sized yet
          return Status(StatusCode::kFailedPrecondition,
                        "node level: shared memory " + name + " has " + std::to_string(st.st_size) +
                            " bytes, this rank expects " + std::to_string(bytes) +
                            " (local ranks of one host with different libtributary versions?)");
        }
        seen_unsized = true;
      } else if (errno != ENOENT) {
        return SysError("node level: cannot open shared memory " + name);
      }
      if (NodeNowMs() >= deadline) {
        // Created and never sized: local rank 0 died (or gave up) on the
        // way; the name must not outlive it.
        if (seen_unsized) shm_unlink(name.c_str());
        return Status(StatusCode::kTimedOut,
                      "node level: local rank 0 did not create shared memory " + name + " within " +
                          std::to_string(timeout_ms) + " ms");
      }
      usleep(2000);
    }
  }
  void* map = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (map == MAP_FAILED) {
    Status s = SysError("node level: cannot map " + std::to_string(bytes) + " bytes of " + name);
    if (creator) shm_unlink(name.c_str());
    return s;
  }
  seg->map_ = map;
  seg->map_bytes_ = bytes;
  seg->header_ = static_cast<Header*>(map);
  seg->data_ = static_cast<uint8_t*>(map) + kDataOffset;
  Header* h = seg->header_;
  if (creator) {
    // ftruncate zeroed everything: counters, pids, abort state.
    h->version = kVersion;
    h->local_size = local_size;
    h->round_bytes = round_bytes;
    h->attached.store(0, std::memory_order_relaxed);
    h->magic.store(kMagic, std::memory_order_release);
  } else {
    while (h->magic.load(std::memory_order_acquire) != kMagic) {
      if (NodeNowMs() >= deadline) {
        shm_unlink(name.c_str());  // local rank 0 died after creating it
        return Status(StatusCode::kTimedOut, "node level: shared memory " + name +
                                                 " was never initialized by local rank 0");
      }
      usleep(1000);
    }
    if (h->version != kVersion || h->local_size != local_size || h->round_bytes != round_bytes) {
      Status s(StatusCode::kFailedPrecondition,
               "node level: shared memory " + name + " is for " + std::to_string(h->local_size) +
                   " ranks and rounds of " + std::to_string(h->round_bytes) + " bytes (version " +
                   std::to_string(h->version) + "), this rank expects " +
                   std::to_string(local_size) + " and " + std::to_string(round_bytes));
      // The others stop waiting for this rank now, with the reason (the
      // same layout: only the version check says the header is ours).
      if (h->version == kVersion) seg->Abort(s.message());
      return s;
    }
  }
  __atomic_store_n(&h->pids[local_rank], static_cast<int32_t>(getpid()), __ATOMIC_RELAXED);
  h->pid_ns[local_rank] = PidNamespace();
  h->attached.fetch_add(1, std::memory_order_acq_rel);
  FutexWake(&h->attached);
  Status all = Status::Ok();
  while (true) {
    const uint32_t n = h->attached.load(std::memory_order_acquire);
    if (n >= local_size) break;
    // A local rank that could not attach (its layout differs) says so.
    if (Status failed = seg->Failure(); !failed.ok()) {
      shm_unlink(name.c_str());
      return failed;
    }
    if (NodeNowMs() >= deadline) {
      std::string missing;
      for (uint32_t r = 0; r < local_size; ++r) {
        if (__atomic_load_n(&h->pids[r], __ATOMIC_RELAXED) != 0) continue;
        missing += (missing.empty() ? "" : ", ") + std::to_string(r);
      }
      all =
          Status(StatusCode::kTimedOut,
                 "node level: " + std::to_string(n) + " of " + std::to_string(local_size) +
                     " local ranks attached to " + name + " within " + std::to_string(timeout_ms) +
                     " ms" + (missing.empty() ? "" : "; missing: local rank " + missing));
      break;
    }
    FutexWait(&h->attached, n, 20);
  }
  // Every rank unlinks the name (all but the first find it gone): once all
  // have attached nobody needs it, and after a timeout it must not outlive
  // local rank 0 if that is the rank that died.
  shm_unlink(name.c_str());
  if (!all.ok()) {
    seg->Abort(all.message());
    return all;
  }
  return seg;
}

NodeSegment::~NodeSegment() {
  if (map_ == nullptr) return;
  header_->detached[local_rank_].store(1, std::memory_order_release);
  for (uint32_t r = 0; r < local_size_; ++r) {
    for (uint32_t c = 0; c < 4; ++c) FutexWake(CounterWord(r, static_cast<Counter>(c)));
  }
  munmap(map_, map_bytes_);
}

std::atomic<uint32_t>* NodeSegment::CounterWord(uint32_t rank, Counter c) const {
  uint8_t* base = static_cast<uint8_t*>(map_) + kHeaderBytes;
  return reinterpret_cast<std::atomic<uint32_t>*>(base + (c * kMaxLocalRanks + rank) * 64);
}

uint8_t* NodeSegment::input(uint32_t rank, uint64_t g) const {
  return data_ + (static_cast<size_t>(rank) * kDepth + g % kDepth) * round_bytes_;
}

uint8_t* NodeSegment::results_base() const {
  return data_ + static_cast<size_t>(local_size_) * kDepth * round_bytes_;
}

uint8_t* NodeSegment::mailbox(uint32_t rank) const {
  return static_cast<uint8_t*>(map_) + kMailboxOffset + rank * kMailboxBytes;
}

uint8_t* NodeSegment::result(uint64_t g) const { return results_base() + (g % kDepth) * round_bytes_; }

void NodeSegment::Publish(Counter c, uint32_t value) {
  std::atomic<uint32_t>* w = CounterWord(local_rank_, c);
  w->store(value, std::memory_order_release);
  FutexWake(w);
}

Status NodeSegment::CheckPeer(uint32_t r, const char* what) const {
  const int32_t pid = __atomic_load_n(&header_->pids[r], __ATOMIC_RELAXED);
  if (header_->detached[r].load(std::memory_order_acquire) != 0) {
    return Status(StatusCode::kUnavailable,
                  "node level: local rank " + std::to_string(r) + " (pid " + std::to_string(pid) +
                      ") closed its communicator while this rank waited for it (" + what + ")");
  }
  // A pid is only meaningful in the namespace it was read in.
  if (header_->pid_ns[r] != header_->pid_ns[local_rank_] || pid <= 0) return Status::Ok();
  if (!ProcessAlive(pid)) {
    return Status(StatusCode::kUnavailable,
                  "node level: local rank " + std::to_string(r) + " (pid " + std::to_string(pid) +
                      ") exited while this rank waited for it (" + what + ")");
  }
  return Status::Ok();
}

bool ProcessAlive(pid_t pid) {
  if (kill(pid, 0) != 0 && errno == ESRCH) return false;
  // kill() succeeds on a zombie (exited, not yet reaped by its parent, e.g.
  // a launcher that waits for all its children at the end): its state in
  // /proc/PID/stat, the field after the command's closing parenthesis, is
  // Z (or X while it is being reaped).
  char path[64];
  std::snprintf(path, sizeof(path), "/proc/%d/stat", static_cast<int>(pid));
  const int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return errno != ENOENT;  // unreadable (hidepid): assume alive
  char buf[512];
  const ssize_t n = read(fd, buf, sizeof(buf) - 1);
  close(fd);
  if (n <= 0) return true;
  buf[n] = '\0';
  const char* close_paren = std::strrchr(buf, ')');
  if (close_paren == nullptr || close_paren[1] != ' ') return true;
  const char state = close_paren[2];
  return state != 'Z' && state != 'X';
}

Status NodeSegment::WaitAll(Counter c, uint32_t value, uint64_t deadline_ms, const char* what) {
  uint64_t next_check = 0;
  for (uint32_t r = 0; r < local_size_; ++r) {
    std::atomic<uint32_t>* w = CounterWord(r, c);
    uint32_t spins = 0;
    while (true) {
      const uint32_t v = w->load(std::memory_order_acquire);
      if (static_cast<int32_t>(v - value) >= 0) break;
      if (header_->abort_state.load(std::memory_order_acquire) != 0) return Failure();
      if (spins < 256) {
        ++spins;
        CpuRelax();
        continue;
      }
      const uint64_t now = NodeNowMs();
      if (now >= next_check) {
        // Only the rank waited for: another one may be done with every
        // round and have closed its communicator already (an 8-rank run
        // under ASan failed that way when all peers were checked). A dead
        // rank is found by those that wait for it, which abort the segment.
        Status peer = CheckPeer(r, what);
        if (!peer.ok()) {
          // It may have published this round and then closed: its word
          // decides.
          if (static_cast<int32_t>(w->load(std::memory_order_acquire) - value) >= 0) break;
          Abort(peer.message());
          return Failure();
        }
        next_check = now + 50;
      }
      if (now >= deadline_ms) {
        Status s(StatusCode::kTimedOut,
                 "node level: local rank " + std::to_string(r) + " (pid " +
                     std::to_string(__atomic_load_n(&header_->pids[r], __ATOMIC_RELAXED)) +
                     ") did not get to round " + std::to_string(value) + " of " + what +
                     " in time (op_timeout_ms)");
        Abort(s.message());
        return s;
      }
      FutexWait(w, v, 20);
    }
  }
  return Status::Ok();
}

void NodeSegment::Abort(const std::string& reason) {
  uint32_t expected = 0;
  if (header_->abort_state.compare_exchange_strong(expected, 1, std::memory_order_acq_rel)) {
    const std::string text = "local rank " + std::to_string(local_rank_) + ": " + reason;
    const size_t n = std::min(text.size(), sizeof(header_->reason) - 1);
    std::memcpy(header_->reason, text.data(), n);
    header_->reason[n] = '\0';
    header_->abort_state.store(2, std::memory_order_release);
  }
  for (uint32_t r = 0; r < local_size_; ++r) {
    for (uint32_t c = 0; c < 4; ++c) FutexWake(CounterWord(r, static_cast<Counter>(c)));
  }
}

Status NodeSegment::Failure() const {
  const uint32_t state = header_->abort_state.load(std::memory_order_acquire);
  if (state == 0) return Status::Ok();
  for (int i = 0; i < 1000 && header_->abort_state.load(std::memory_order_acquire) != 2; ++i) {
    usleep(100);
  }
  if (header_->abort_state.load(std::memory_order_acquire) != 2) {
    return Status(StatusCode::kAborted, "node level: the host's segment was aborted");
  }
  return Status(StatusCode::kAborted,
                std::string("node level: the host's segment was aborted: ") + header_->reason);
}

}  // namespace tributary::host
