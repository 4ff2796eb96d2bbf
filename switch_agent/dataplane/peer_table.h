// SPDX-License-Identifier: Apache-2.0
// The peer table every dataplane backend keeps: a peer's address (whatever
// identifies a sender on that I/O technology) <-> the engine's PeerToken.
//
// Policy, the same for every backend:
// - Only a JOIN from an unknown source inserts an entry, and the backend
//   removes it again at once if the engine refused the JOIN. Any other
//   packet from an unknown source is answered (if at all) through
//   kTransientPeer ("the source of the packet being processed"), so a flood
//   from spoofed or random sources cannot fill the table.
// - Entries that no live job references and that have been idle for a while
//   are swept and their slots reused, so a long-running daemon does not run
//   out of entries as jobs come and go. Only authenticated packets count as
//   activity (Touch): anyone can send from a peer's address.
// - The table is bounded: when it is full a new peer is refused rather than
//   evicting one a live job may still use.
// A token is an index into a vector, so the transmit path turns it back into
// what it needs (the Value: a sockaddr, a MAC/IP/port, an address handle)
// with one bounds-checked load. With kCacheBits > 0, Find first tries a
// direct-mapped cache (hash -> index, verified against the entry), which
// holds the few peers of the jobs in flight and spares the hash-map lookup
// (about 10% of a 1 KiB packet's cycles on the DPDK lane).
//
// Key: what identifies a peer; KeyOps: static Hash(key) (good top bits: the
// cache uses them) and Equal(a, b); Value: what the backend stores per peer.
// Thread-safety: none; owned by one dataplane loop (one per lcore).
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <type_traits>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "switch_agent/engine/engine.h"

namespace tributary::agent {

template <typename Key, typename KeyOps, typename Value = Key, unsigned kCacheBits = 0>
class PeerTable {
 public:
  struct Entry {
    Key key{};
    Value value{};
    uint64_t last_seen_ns = 0;
    bool used = false;
  };

  explicit PeerTable(uint32_t max_peers) : max_peers_(max_peers) {
    // What a typical deployment needs, without committing memory for the
    // whole bound (which may be a million peers).
    const uint32_t reserve = std::min<uint32_t>(max_peers_, 4096);
    entries_.reserve(reserve);
    index_.reserve(reserve);
  }

  // Finds a known peer (and notes activity). False if unknown.
  bool Find(const Key& key, uint64_t now_ns, engine::PeerToken* token) {
    Entry* e = Locate(key, token);
    if (e == nullptr) return false;
    e->last_seen_ns = now_ns;
    return true;
  }
  // Finds a known peer without noting activity (a packet not yet served,
  // or not yet authenticated).
  bool Peek(const Key& key, engine::PeerToken* token) { return Locate(key, token) != nullptr; }
  // Notes activity of a known peer: call only for a packet the engine
  // authenticated, so that packets spoofed from a departed peer's address
  // cannot keep its entry from the sweep.
  void Touch(engine::PeerToken token, uint64_t now_ns) {
    if (token < entries_.size() && entries_[token].used) entries_[token].last_seen_ns = now_ns;
  }

  // Adds a peer. False only when the table is full.
  bool Insert(const Key& key, const Value& value, uint64_t now_ns, engine::PeerToken* token) {
    if (index_.size() >= max_peers_) return false;
    uint32_t index;
    if (!free_.empty()) {
      index = free_.back();
      free_.pop_back();
    } else {
      index = static_cast<uint32_t>(entries_.size());
      entries_.emplace_back();
    }
    entries_[index] = Entry{key, value, now_ns, true};
    index_.emplace(key, index);
    *token = index;
    return true;
  }
  // When the key is all a backend stores.
  bool Insert(const Key& key, uint64_t now_ns, engine::PeerToken* token)
    requires std::is_same_v<Key, Value>
  {
    return Insert(key, key, now_ns, token);
  }

  // Frees an entry (its token may be reused by a later Insert); returns its
  // value, for a backend that must release what it holds (an address handle).
  Value Remove(engine::PeerToken token) {
    if (token >= entries_.size() || !entries_[token].used) return Value{};
    Entry& e = entries_[token];
    index_.erase(e.key);
    e.used = false;
    free_.push_back(static_cast<uint32_t>(token));
    return std::exchange(e.value, Value{});
  }

  // Frees every entry not in `referenced` that was last active before
  // `now_ns - idle_ns`, passing each one's value to release(). Returns how
  // many were freed.
  template <typename Release>
  size_t Sweep(const std::unordered_set<engine::PeerToken>& referenced, uint64_t now_ns,
               uint64_t idle_ns, Release&& release) {
    return SweepIf(
        [&](engine::PeerToken token, const Entry& e) {
          return referenced.count(token) == 0 && e.last_seen_ns + idle_ns <= now_ns;
        },
        release);
  }
  // Frees every entry for which pred(token, entry) holds, passing each
  // one's value to release(). Returns how many were freed.
  template <typename Pred, typename Release>
  size_t SweepIf(Pred&& pred, Release&& release) {
    size_t freed = 0;
    for (uint32_t i = 0; i < entries_.size(); ++i) {
      if (!entries_[i].used || !pred(engine::PeerToken{i}, std::as_const(entries_[i]))) continue;
      release(Remove(i));
      ++freed;
    }
    return freed;
  }
  size_t Sweep(const std::unordered_set<engine::PeerToken>& referenced, uint64_t now_ns,
               uint64_t idle_ns) {
    return Sweep(referenced, now_ns, idle_ns, [](const Value&) {});
  }

  // The value of `token`, or nullptr for a token not in use.
  const Value* Get(engine::PeerToken token) const {
    return token < entries_.size() && entries_[token].used ? &entries_[token].value : nullptr;
  }
  Value* GetMutable(engine::PeerToken token) {
    return token < entries_.size() && entries_[token].used ? &entries_[token].value : nullptr;
  }
  const Entry* GetEntry(engine::PeerToken token) const {
    return token < entries_.size() && entries_[token].used ? &entries_[token] : nullptr;
  }
  template <typename Fn>
  void ForEach(Fn&& fn) const {
    for (const Entry& e : entries_) {
      if (e.used) fn(e);
    }
  }

  size_t size() const { return index_.size(); }
  uint32_t capacity() const { return max_peers_; }

 private:
  // The entry of `key` (its token in *token), through the direct-mapped
  // cache; null if unknown.
  Entry* Locate(const Key& key, engine::PeerToken* token) {
    uint32_t* cached = nullptr;
    if constexpr (kCacheBits > 0) {
      cached = &cache_[CacheSlot(key)];
      // Trusted only if the entry is in use and holds this key (entries are
      // removed and reused without touching the cache).
      if (*cached != 0) {
        Entry& e = entries_[*cached - 1];
        if (e.used && KeyOps::Equal(e.key, key)) {
          *token = *cached - 1;
          return &e;
        }
      }
    }
    auto it = index_.find(key);
    if (it == index_.end()) return nullptr;
    if (cached != nullptr) *cached = it->second + 1;
    *token = it->second;
    return &entries_[it->second];
  }

  struct Hasher {
    size_t operator()(const Key& k) const { return KeyOps::Hash(k); }
  };
  struct Equals {
    bool operator()(const Key& a, const Key& b) const { return KeyOps::Equal(a, b); }
  };
  static size_t CacheSlot(const Key& key) {
    // The top bits of a multiplicative hash depend on every key bit.
    return static_cast<size_t>(static_cast<uint64_t>(KeyOps::Hash(key)) >> (64 - kCacheBits));
  }

  uint32_t max_peers_;
  std::array<uint32_t, (kCacheBits > 0 ? (size_t{1} << kCacheBits) : 1)> cache_{};  // index + 1
  std::vector<Entry> entries_;
  std::vector<uint32_t> free_;
  std::unordered_map<Key, uint32_t, Hasher, Equals> index_;
};

}  // namespace tributary::agent
