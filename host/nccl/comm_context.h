// SPDX-License-Identifier: Apache-2.0
// What the plugin keeps per NCCL communicator: whether a CollNet comm of it
// connected, so that its finalize can say when NCCL_COLLNET_ENABLE=1 and
// CollNet was not used (adapters.cc). A process may hold many
// communicators (several jobs' groups, ncclCommSplit), each with its own
// answer.
//
// ABI v11 and later give each communicator a context: init(ctx*, commId)
// and finalize(ctx), for ncclNet and for ncclCollNet, which NCCL calls with
// the same commId (comm->commHash), ncclNet's first. ncclNet's init
// acquires the one context of that commId and its finalize releases it.
// ncclCollNet's init only finds it (taking no reference) and its finalize
// does nothing: NCCL calls ncclCollNet's finalize only while its CollNet
// is enabled (ncclNetPluginFinalize, NCCL's src/plugin/net.cc), and
// another communicator whose CollNet init failed meanwhile disables it, so
// a reference of CollNet's would leak; ncclNet's finalize always comes,
// before ncclCollNet's. CollNet's listen gets the context and hands it to
// connect through the listen comm, both within the communicator's life.
// The ranks of one communicator that one process drives share its commId,
// and so its context, as they share the answer. v8..v10 have neither
// contexts nor finalize: their comms belong to no context.
//
// Thread-safety: the table of contexts is guarded by its mutex; a
// context's flag is atomic.
#pragma once

#include <atomic>
#include <cstdint>

namespace tributary::nccl {

class CommContext {
 public:
  // The context of communicator `comm_id`, made by its first Acquire; each
  // Acquire is matched by one Release, the last of which frees it.
  static CommContext* Acquire(uint64_t comm_id);
  static void Release(CommContext* context);
  // The context of communicator `comm_id` without a reference (valid until
  // its last Release), or null when none was acquired.
  static CommContext* Find(uint64_t comm_id);

  uint64_t comm_id() const { return comm_id_; }
  void MarkCollNetConnected() { collnet_connected_ = true; }
  bool collnet_connected() const { return collnet_connected_.load(); }

 private:
  explicit CommContext(uint64_t comm_id) : comm_id_(comm_id) {}

  const uint64_t comm_id_;
  int references_ = 0;  // guarded by the table's mutex
  std::atomic<bool> collnet_connected_{false};
};

}  // namespace tributary::nccl
