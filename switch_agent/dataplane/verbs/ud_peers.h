// The verbs dataplane's peer table: a rank's UD endpoint (RoCEv2 GID + queue
// pair number, from the GRH and the work completion of its packets) <->
// engine::PeerToken, with the address handle tributaryd answers it through.
//
// As in the other backends, only a JOIN adds a peer (bounded by max_peers),
// so unknown sources cannot fill the table; packets from unknown sources are
// answered through a transient address handle instead (verbs_dataplane.h).
// The address handle is opaque here (void*), so the table is unit-tested
// without a device; the dataplane creates and destroys the handles.
// Thread-safety: none; the dataplane's loop thread.
#pragma once

#include <cstdint>
#include <functional>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "common/verbs/roce.h"
#include "switch_agent/engine/engine.h"

namespace tributary::agent::verbs {

struct UdPeer {
  roce::Gid gid{};
  uint32_t qpn = 0;
  bool operator==(const UdPeer& o) const { return qpn == o.qpn && gid == o.gid; }
};

class UdPeerTable {
 public:
  struct Entry {
    UdPeer peer;
    void* ah = nullptr;  // ibv_ah*, owned by the dataplane
    uint64_t last_seen_ns = 0;
    bool used = false;
  };

  explicit UdPeerTable(uint32_t max_peers) : max_peers_(max_peers) {}

  bool Find(const UdPeer& peer, uint64_t now_ns, engine::PeerToken* token);
  // False when the table is full.
  bool Insert(const UdPeer& peer, void* ah, uint64_t now_ns, engine::PeerToken* token);
  // Frees the entry; returns its address handle for the caller to destroy.
  void* Remove(engine::PeerToken token);
  // Removes entries no live job references that were silent for idle_ns;
  // calls release(ah) for each. Returns how many.
  size_t Sweep(const std::unordered_set<engine::PeerToken>& referenced, uint64_t now_ns,
               uint64_t idle_ns, const std::function<void(void*)>& release);

  const Entry* Get(engine::PeerToken token) const {
    return token < entries_.size() && entries_[token].used ? &entries_[token] : nullptr;
  }
  size_t size() const { return index_.size(); }
  uint32_t capacity() const { return max_peers_; }
  // Every entry in use (for teardown).
  template <typename Fn>
  void ForEach(Fn&& fn) const {
    for (const Entry& e : entries_) {
      if (e.used) fn(e);
    }
  }

 private:
  struct Hash {
    size_t operator()(const UdPeer& p) const;
  };
  uint32_t max_peers_;
  std::vector<Entry> entries_;
  std::vector<engine::PeerToken> free_;
  std::unordered_map<UdPeer, engine::PeerToken, Hash> index_;
};

}  // namespace tributary::agent::verbs
