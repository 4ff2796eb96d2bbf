// SPDX-License-Identifier: Apache-2.0
// The contexts of NCCL communicators; see comm_context.h.
//
// Thread-safety: see comm_context.h.
#include "host/nccl/comm_context.h"

#include <map>
#include <mutex>

namespace tributary::nccl {
namespace {

struct Table {
  std::mutex mu;
  std::map<uint64_t, CommContext*> by_comm_id;  // guarded by mu
};

// Deliberately never destroyed: NCCL may finalize from its threads while
// the process exits.
Table& Contexts() {
  static Table* table = new Table;
  return *table;
}

}  // namespace

CommContext* CommContext::Acquire(uint64_t comm_id) {
  Table& t = Contexts();
  std::lock_guard<std::mutex> lock(t.mu);
  CommContext*& context = t.by_comm_id[comm_id];
  if (context == nullptr) context = new CommContext(comm_id);
  ++context->references_;
  return context;
}

CommContext* CommContext::Find(uint64_t comm_id) {
  Table& t = Contexts();
  std::lock_guard<std::mutex> lock(t.mu);
  auto it = t.by_comm_id.find(comm_id);
  return it == t.by_comm_id.end() ? nullptr : it->second;
}

void CommContext::Release(CommContext* context) {
  if (context == nullptr) return;
  Table& t = Contexts();
  std::lock_guard<std::mutex> lock(t.mu);
  if (--context->references_ > 0) return;
  t.by_comm_id.erase(context->comm_id_);
  delete context;
}

}  // namespace tributary::nccl
