// SPDX-License-Identifier: Apache-2.0
// See etcd_store.h.
#include "manager/etcd_store.h"

#include <sodium.h>

#include <algorithm>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <vector>

#include "common/check.h"
#include "common/log.h"
#include "common/secret_file.h"

namespace tributary::manager {
namespace {

namespace pb = etcdserverpb;
constexpr const char* kLog = "manager";
constexpr uint8_t kSealVersion = 1;

int64_t SteadyMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

bool StartsWith(const std::string& s, const std::string& prefix) {
  return s.compare(0, prefix.size(), prefix) == 0;
}

pb::Compare* AddCompare(pb::TxnRequest* txn, const std::string& key,
                        pb::Compare::CompareTarget target) {
  pb::Compare* c = txn->add_compare();
  c->set_key(key);
  c->set_target(target);
  c->set_result(pb::Compare::EQUAL);
  return c;
}

int64_t JobTtlS(const v1::Job& job, int64_t allowance_s) {
  return (static_cast<int64_t>(job.heartbeat_timeout_ms()) + 999) / 1000 + allowance_s;
}

// Save's batches: etcd may have applied one whose answer was lost (a
// member's timeout); the client then sends the same request to another
// member, where its compares fail against its own writes. So a batch's
// failure branch reads the leader key and then every key it writes, in
// order, and the batch was applied iff the leader key is still the one
// this manager created and every put's key holds exactly the bytes it
// sent (sealed under a random nonce: nobody else writes them) under its
// lease, and every deleted key is gone. Returns the revision of the puts
// (0 if the batch only deletes), or -1 if it was not applied.
int64_t AppliedBefore(const pb::TxnRequest& txn, const pb::TxnResponse& resp,
                      int64_t leader_revision) {
  if (resp.responses_size() != txn.success_size() + 1) return -1;
  const pb::RangeResponse& leader = resp.responses(0).response_range();
  if (leader.kvs_size() != 1 || leader.kvs(0).create_revision() != leader_revision) return -1;
  int64_t revision = 0;
  for (int i = 0; i < txn.success_size(); ++i) {
    const pb::RangeResponse& now = resp.responses(i + 1).response_range();
    if (!txn.success(i).has_request_put()) {
      if (now.kvs_size() != 0) return -1;
      continue;
    }
    const pb::PutRequest& put = txn.success(i).request_put();
    if (now.kvs_size() != 1 || now.kvs(0).value() != put.value() ||
        now.kvs(0).lease() != put.lease()) {
      return -1;
    }
    revision = now.kvs(0).mod_revision();
  }
  return revision;
}

}  // namespace

Status ReadStateKeyFile(const std::string& path, std::array<uint8_t, 32>* key) {
  std::string text;
  std::string error;
  // 64 hex digits and a line end fit; a longer file is refused below.
  if (!base::ReadPrivateFile(path, 4 * key->size(), &text, &error)) {
    return InvalidArgument("state key file " + error);
  }
  bool ok = false;
  if (text.size() == key->size()) {
    std::copy(text.begin(), text.end(), key->begin());
    ok = true;
  } else {
    while (!text.empty() && (text.back() == '\n' || text.back() == '\r' || text.back() == ' ')) {
      text.pop_back();
    }
    size_t len = 0;
    ok = text.size() == 2 * key->size() &&
         sodium_hex2bin(key->data(), key->size(), text.data(), text.size(), nullptr, &len,
                        nullptr) == 0 &&
         len == key->size();
  }
  base::ZeroString(&text);
  if (ok) return Status::Ok();
  return InvalidArgument("state key file " + path +
                         " must hold 32 bytes or 64 hex digits (e.g. `openssl rand -hex 32`)");
}

EtcdStateStore::EtcdStateStore(EtcdStoreOptions options)
    : options_(std::move(options)),
      client_(options_.url.endpoints, options_.rpc_timeout_ms, options_.tls),
      leader_key_(options_.url.prefix + "/leader"),
      state_prefix_(options_.url.prefix + "/state/") {
  TRIB_CHECK(sodium_init() >= 0);
}

std::string EtcdStateStore::Describe() const {
  return client_.Describe() + " prefix " + options_.url.prefix;
}

std::string EtcdStateStore::DaemonKey(const std::string& name) const {
  return state_prefix_ + "daemons/" + name;
}

std::string EtcdStateStore::JobKey(uint32_t job_id) const {
  char id[16];
  std::snprintf(id, sizeof(id), "%010u", job_id);
  return state_prefix_ + "jobs/" + id;
}

std::string EtcdStateStore::Seal(const std::string& key, const std::string& plain) const {
  std::string out(1 + crypto_aead_xchacha20poly1305_ietf_NPUBBYTES + plain.size() +
                      crypto_aead_xchacha20poly1305_ietf_ABYTES,
                  '\0');
  auto* p = reinterpret_cast<unsigned char*>(out.data());
  p[0] = kSealVersion;
  unsigned char* nonce = p + 1;
  randombytes_buf(nonce, crypto_aead_xchacha20poly1305_ietf_NPUBBYTES);
  unsigned long long clen = 0;
  crypto_aead_xchacha20poly1305_ietf_encrypt(
      nonce + crypto_aead_xchacha20poly1305_ietf_NPUBBYTES, &clen,
      reinterpret_cast<const unsigned char*>(plain.data()), plain.size(),
      reinterpret_cast<const unsigned char*>(key.data()), key.size(), nullptr, nonce,
      options_.key.data());
  out.resize(1 + crypto_aead_xchacha20poly1305_ietf_NPUBBYTES + clen);
  return out;
}

Status EtcdStateStore::Open(const std::string& key, const std::string& sealed,
                            std::string* plain) const {
  constexpr size_t kOverhead =
      1 + crypto_aead_xchacha20poly1305_ietf_NPUBBYTES + crypto_aead_xchacha20poly1305_ietf_ABYTES;
  if (sealed.size() < kOverhead || static_cast<uint8_t>(sealed[0]) != kSealVersion) {
    return Internal("etcd record " + key + " is not a sealed tributary-manager record");
  }
  const auto* p = reinterpret_cast<const unsigned char*>(sealed.data());
  const unsigned char* nonce = p + 1;
  const unsigned char* c = nonce + crypto_aead_xchacha20poly1305_ietf_NPUBBYTES;
  const size_t clen = sealed.size() - 1 - crypto_aead_xchacha20poly1305_ietf_NPUBBYTES;
  plain->resize(clen);
  unsigned long long mlen = 0;
  if (crypto_aead_xchacha20poly1305_ietf_decrypt(
          reinterpret_cast<unsigned char*>(plain->data()), &mlen, nullptr, c, clen,
          reinterpret_cast<const unsigned char*>(key.data()), key.size(), nonce,
          options_.key.data()) != 0) {
    return PermissionDenied("etcd record " + key +
                            " does not open with this manager's --state-key-file (another "
                            "key, or the record was altered or moved)");
  }
  plain->resize(mlen);
  return Status::Ok();
}

Status EtcdStateStore::ReadRecords(v1::ListReply* state, std::map<std::string, Record>* records) {
  pb::RangeResponse resp;
  Status s = client_.Range(state_prefix_, PrefixRangeEnd(state_prefix_), &resp);
  if (!s.ok()) return s;
  state->Clear();
  for (const pb::KeyValue& kv : resp.kvs()) {
    std::string plain;
    s = Open(kv.key(), kv.value(), &plain);
    if (!s.ok()) return s;
    Record r{plain, kv.mod_revision(), kv.lease(), 0};
    if (StartsWith(kv.key(), state_prefix_ + "daemons/")) {
      v1::DaemonStatus* d = state->add_daemons();
      if (!d->ParseFromString(plain)) return Internal("etcd record " + kv.key() + " is corrupt");
      r.ttl_s = d->up() ? options_.daemon_ttl_s : 0;
    } else if (StartsWith(kv.key(), state_prefix_ + "jobs/")) {
      v1::Job* j = state->add_jobs();
      if (!j->ParseFromString(plain)) return Internal("etcd record " + kv.key() + " is corrupt");
      r.ttl_s = JobTtlS(*j, options_.takeover_allowance_s);
    } else {
      TRIB_LOG(kWarn, kLog, "etcd: unknown key %s under the state prefix; ignored",
               kv.key().c_str());
      continue;
    }
    if (records != nullptr) (*records)[kv.key()] = std::move(r);
  }
  return Status::Ok();
}

Status EtcdStateStore::Read(v1::ListReply* state) { return ReadRecords(state, nullptr); }

Status EtcdStateStore::Load(v1::ListReply* state, bool* exists) {
  std::map<std::string, Record> records;
  Status s = ReadRecords(state, &records);
  if (!s.ok()) return s;
  saved_ = std::move(records);
  *exists = !saved_.empty();
  std::unique_lock<std::mutex> lock(lease_mu_);
  leases_.clear();
  lost_.clear();
  // A takeover renews every record's lease once: the new leader gives
  // daemons and jobs a full grace period to find it (ManagerCore::Restore),
  // and the leases must outlast that grace, counted from now, not from
  // the dead leader's last renewal. After that, heartbeats renew them.
  // (A record that wants a lease and has none gets one at its next write.)
  for (const auto& [key, r] : saved_) {
    if (r.lease != 0) leases_[key] = LeaseState{r.lease, r.ttl_s, true, 0};
  }
  lock.unlock();
  RefreshLeases();
  return Status::Ok();
}

Status EtcdStateStore::Save(const v1::ListReply& state) {
  if (leader_revision_ == 0) return FailedPrecondition("not the leader: cannot write to etcd");
  struct Want {
    std::string plain;
    int64_t ttl_s;
  };
  std::map<std::string, Want> want;
  for (const v1::DaemonStatus& d : state.daemons()) {
    v1::DaemonStatus copy = d;
    copy.set_last_heartbeat_unix_ms(0);  // liveness is the lease's, not a write per heartbeat
    want[DaemonKey(d.info().name())] =
        Want{copy.SerializeAsString(), d.up() ? options_.daemon_ttl_s : 0};
  }
  for (const v1::Job& j : state.jobs()) {
    v1::Job copy = j;
    copy.set_last_heartbeat_unix_ms(0);
    want[JobKey(j.job_id())] =
        Want{copy.SerializeAsString(), JobTtlS(j, options_.takeover_allowance_s)};
  }
  std::set<std::string> lost;
  {
    std::lock_guard<std::mutex> lock(lease_mu_);
    lost = lost_;
  }

  struct Op {
    std::string key;
    bool put;
    std::string plain;
    int64_t lease;
    int64_t ttl_s;
  };
  std::vector<Op> ops;
  std::vector<int64_t> granted;  // new leases, revoked again if the write fails
  for (const auto& [key, w] : want) {
    auto it = saved_.find(key);
    const bool known = it != saved_.end() && lost.count(key) == 0;
    if (known && it->second.plain == w.plain && (it->second.lease != 0) == (w.ttl_s > 0)) {
      continue;
    }
    int64_t lease = 0;
    if (w.ttl_s > 0) {
      if (known && it->second.lease != 0 && it->second.ttl_s == w.ttl_s) {
        lease = it->second.lease;
      } else {
        Result<int64_t> g = client_.LeaseGrant(w.ttl_s);
        if (!g.ok()) {
          for (int64_t id : granted) client_.LeaseRevoke(id);
          return g.status();
        }
        lease = *g;
        granted.push_back(lease);
      }
    }
    ops.push_back(Op{key, true, w.plain, lease, w.ttl_s});
  }
  for (const auto& [key, r] : saved_) {
    if (want.count(key) == 0 && lost.count(key) == 0) ops.push_back(Op{key, false, "", 0, 0});
  }

  std::vector<int64_t> unused;  // leases of records deleted or written without one
  const size_t per_txn = options_.max_txn_ops > 1 ? options_.max_txn_ops - 1 : 1;
  for (size_t first = 0, last = 0; first < ops.size(); first = last) {
    pb::TxnRequest txn;
    // Fencing: still the leader this manager became.
    AddCompare(&txn, leader_key_, pb::Compare::CREATE)->set_create_revision(leader_revision_);
    // At most per_txn records and max_txn_bytes of them (at least one).
    size_t bytes = 0;
    for (last = first; last < ops.size() && last - first < per_txn; ++last) {
      const size_t op_bytes = ops[last].key.size() + ops[last].plain.size() + 64;
      if (last > first && bytes + op_bytes > options_.max_txn_bytes) break;
      bytes += op_bytes;
    }
    for (size_t i = first; i < last; ++i) {
      const Op& op = ops[i];
      auto it = saved_.find(op.key);
      if (it != saved_.end() && lost.count(op.key) == 0) {
        AddCompare(&txn, op.key, pb::Compare::MOD)->set_mod_revision(it->second.mod_revision);
      } else {
        AddCompare(&txn, op.key, pb::Compare::CREATE)->set_create_revision(0);  // absent
      }
      if (op.put) {
        pb::PutRequest* put = txn.add_success()->mutable_request_put();
        put->set_key(op.key);
        put->set_value(Seal(op.key, op.plain));
        put->set_lease(op.lease);
      } else {
        txn.add_success()->mutable_request_delete_range()->set_key(op.key);
      }
    }
    txn.add_failure()->mutable_request_range()->set_key(leader_key_);
    for (size_t i = first; i < last; ++i) {
      txn.add_failure()->mutable_request_range()->set_key(ops[i].key);
    }
    pb::TxnResponse resp;
    Status s = client_.Txn(txn, &resp);
    int64_t rev = s.ok() ? resp.header().revision() : 0;
    if (s.ok() && !resp.succeeded()) {
      rev = AppliedBefore(txn, resp, leader_revision_);
      if (rev < 0) {
        s = Aborted("the state in etcd changed under this manager (another leader wrote, or a "
                    "record's lease expired); the change was not made");
      } else {
        TRIB_LOG(kInfo, kLog, "etcd: a state write was applied though its answer was lost");
      }
    }
    if (!s.ok()) {
      if (first == 0) {
        for (int64_t id : granted) client_.LeaseRevoke(id);
      }
      return s;
    }
    std::lock_guard<std::mutex> lock(lease_mu_);
    for (size_t i = first; i < last; ++i) {
      const Op& op = ops[i];
      auto it = saved_.find(op.key);
      const int64_t old_lease = it != saved_.end() ? it->second.lease : 0;
      if (old_lease != 0 && old_lease != op.lease) unused.push_back(old_lease);
      lost_.erase(op.key);
      if (op.put) {
        saved_[op.key] = Record{op.plain, rev, op.lease, op.ttl_s};
        if (op.lease == 0) {
          leases_.erase(op.key);
        } else if (leases_[op.key].lease != op.lease) {
          leases_[op.key] = LeaseState{op.lease, op.ttl_s, false, SteadyMs()};
        }
      } else {
        saved_.erase(op.key);
        leases_.erase(op.key);
      }
    }
  }
  {
    // Lost records that are no longer wanted are simply forgotten.
    std::lock_guard<std::mutex> lock(lease_mu_);
    for (const std::string& key : lost) {
      if (want.count(key) == 0) {
        lost_.erase(key);
        saved_.erase(key);
      }
    }
  }
  for (int64_t id : unused) {
    Status s = client_.LeaseRevoke(id);
    if (!s.ok()) TRIB_LOG(kDebug, kLog, "etcd lease revoke: %s", s.ToString().c_str());
  }
  return Status::Ok();
}

Status EtcdStateStore::Campaign(bool* leader) {
  if (leader_revision_ != 0) {
    *leader = true;
    return Status::Ok();
  }
  *leader = false;
  // When the lease was last granted or renewed: taken before the call, so
  // that the lease is known to live at least a TTL after it.
  if (leader_lease_ == 0) {
    const int64_t asked = SteadyMs();
    Result<int64_t> g = client_.LeaseGrant(options_.leader_ttl_s);
    if (!g.ok()) return g.status();
    leader_lease_ = *g;
    lease_kept_ms_ = asked;
  }
  pb::TxnRequest txn;
  AddCompare(&txn, leader_key_, pb::Compare::CREATE)->set_create_revision(0);
  pb::PutRequest* put = txn.add_success()->mutable_request_put();
  put->set_key(leader_key_);
  put->set_value(options_.advertise);
  put->set_lease(leader_lease_);
  txn.add_failure()->mutable_request_range()->set_key(leader_key_);
  pb::TxnResponse resp;
  Status s = client_.Txn(txn, &resp);
  if (!s.ok()) {
    // Most likely our lease expired while etcd was unreachable: a new one next time.
    if (s.message().find("lease not found") != std::string::npos) leader_lease_ = 0;
    return s;
  }
  if (!resp.succeeded()) {
    // Someone leads: perhaps this replica. A bid that etcd applied but whose
    // answer was lost (a member's timeout; the client then asks another
    // member, where the key exists) finds the key it wrote, under its own
    // lease: it leads. Otherwise keep the lease alive meanwhile so it is
    // valid when we try again.
    int64_t ttl = 0;
    const int64_t asked = SteadyMs();
    const bool alive = client_.LeaseKeepAlive(leader_lease_, &ttl).ok();
    if (alive && ttl == 0) leader_lease_ = 0;
    if (alive && ttl > 0) lease_kept_ms_ = asked;
    const pb::RangeResponse* held =
        resp.responses_size() == 1 ? &resp.responses(0).response_range() : nullptr;
    if (alive && ttl > 0 && held != nullptr && held->kvs_size() == 1 &&
        held->kvs(0).lease() == leader_lease_) {
      TRIB_LOG(kInfo, kLog, "etcd: the leader key is this replica's (its bid was applied "
               "though its answer was lost): leading");
      leader_revision_ = held->kvs(0).create_revision();
      leader_renewed_ms_ = lease_kept_ms_;
      *leader = true;
    }
    return Status::Ok();
  }
  leader_revision_ = resp.header().revision();
  // Putting the key under the lease renews nothing: the lease lives a TTL
  // from its last grant or renewal.
  leader_renewed_ms_ = lease_kept_ms_;
  *leader = true;
  return Status::Ok();
}

Status EtcdStateStore::KeepLeadership(bool* leader) {
  *leader = leader_revision_ != 0;
  if (!*leader) return Status::Ok();
  int64_t ttl = 0;
  const int64_t asked = SteadyMs();
  Status s = client_.LeaseKeepAlive(leader_lease_, &ttl);
  pb::RangeResponse resp;
  if (s.ok() && ttl > 0) s = client_.Range(leader_key_, "", &resp);
  const bool ours = s.ok() && ttl > 0 && resp.kvs_size() == 1 &&
                    resp.kvs(0).create_revision() == leader_revision_;
  if (ours) {
    // Taken before the renewal was asked: etcd renewed it no earlier, so
    // the "still leading while etcd is unreachable" window never outlives
    // the lease by the calls' own duration.
    leader_renewed_ms_ = asked;
    return Status::Ok();
  }
  // Unreachable etcd: still the leader until the lease could have expired
  // (minus a margin for clock rates): then a follower may lead, so stop.
  if (!s.ok() && SteadyMs() - leader_renewed_ms_ < options_.leader_ttl_s * 1000 - 500) {
    return s;
  }
  TRIB_LOG(kWarn, kLog, "etcd: leadership lost (%s)",
           !s.ok() ? s.ToString().c_str()
                   : (ttl == 0 ? "the leader lease expired" : "the leader key is not ours"));
  leader_revision_ = 0;
  leader_lease_ = 0;
  *leader = false;
  return s;
}

bool EtcdStateStore::LeaseFresh() const {
  return leader_revision_ != 0 &&
         SteadyMs() - leader_renewed_ms_.load() < options_.leader_ttl_s * 1000 - 500;
}

void EtcdStateStore::Resign() {
  if (leader_revision_ == 0) return;
  Status s = client_.LeaseRevoke(leader_lease_);
  if (!s.ok()) TRIB_LOG(kWarn, kLog, "etcd: resigning leadership: %s", s.ToString().c_str());
  leader_revision_ = 0;
  leader_lease_ = 0;
}

Status EtcdStateStore::Leader(std::string* address) {
  address->clear();
  if (leader_revision_ != 0) {
    *address = options_.advertise;
    return Status::Ok();
  }
  pb::RangeResponse resp;
  Status s = client_.Range(leader_key_, "", &resp);
  if (s.ok() && resp.kvs_size() == 1) *address = resp.kvs(0).value();
  return s;
}

void EtcdStateStore::Touch(const std::string& key) {
  std::lock_guard<std::mutex> lock(lease_mu_);
  auto it = leases_.find(key);
  if (it != leases_.end()) it->second.touched = true;
}

void EtcdStateStore::TouchDaemon(const std::string& name) { Touch(DaemonKey(name)); }
void EtcdStateStore::TouchJob(uint32_t job_id) { Touch(JobKey(job_id)); }

// The leases due are renewed on one keepalive stream, the longest-unrenewed
// first, for at most a sixth of the leader TTL (the leader loop's period):
// one call per lease took a round trip each, and with thousands of records
// the loop came back to the leader's own lease too late. What is left is
// renewed on the next pass (records are renewed at a third of their TTL:
// two passes may fail before one expires).
void EtcdStateStore::RefreshLeases() {
  struct Due {
    std::string key;
    int64_t lease;
    int64_t renewed_ms;
  };
  std::vector<Due> due;
  const int64_t now = SteadyMs();
  {
    std::lock_guard<std::mutex> lock(lease_mu_);
    for (const auto& [key, l] : leases_) {
      if (l.touched && now - l.renewed_ms >= l.ttl_s * 1000 / 3) {
        due.push_back(Due{key, l.lease, l.renewed_ms});
      }
    }
  }
  std::sort(due.begin(), due.end(),
            [](const Due& a, const Due& b) { return a.renewed_ms < b.renewed_ms; });
  const int64_t budget_ms = std::max<int64_t>(100, options_.leader_ttl_s * 1000 / 6);
  for (size_t first = 0; first < due.size(); first += EtcdClient::kKeepAliveBatch) {
    if (first > 0 && SteadyMs() - now >= budget_ms) {
      TRIB_LOG(kDebug, kLog, "etcd: %zu lease renewals left for the next pass", due.size() - first);
      break;
    }
    const size_t last = std::min(due.size(), first + EtcdClient::kKeepAliveBatch);
    std::vector<int64_t> ids;
    for (size_t i = first; i < last; ++i) ids.push_back(due[i].lease);
    std::map<int64_t, int64_t> ttls;
    Status s = client_.LeaseKeepAliveMany(ids, &ttls);
    if (!s.ok()) {
      TRIB_LOG(kDebug, kLog, "etcd lease keepalive: %s", s.ToString().c_str());
      break;
    }
    for (size_t i = first; i < last; ++i) RenewedLease(due[i].key, due[i].lease, ttls, now);
  }
}

void EtcdStateStore::RenewedLease(const std::string& key, int64_t lease,
                                  const std::map<int64_t, int64_t>& ttls, int64_t now) {
  const auto answered = ttls.find(lease);
  if (answered == ttls.end()) return;
  const int64_t ttl = answered->second;
  std::lock_guard<std::mutex> lock(lease_mu_);
  auto it = leases_.find(key);
  if (it == leases_.end() || it->second.lease != lease) return;
  if (ttl <= 0) {
    TRIB_LOG(kWarn, kLog, "etcd: the lease of %s expired; writing the record again", key.c_str());
    leases_.erase(it);
    lost_.insert(key);
    return;
  }
  it->second.touched = false;
  it->second.renewed_ms = now;
}

bool EtcdStateStore::NeedsSave() {
  std::lock_guard<std::mutex> lock(lease_mu_);
  return !lost_.empty();
}

Status EtcdStateStore::ReadTopology(std::string* yaml) {
  pb::RangeResponse resp;
  Status s = client_.Range(options_.url.prefix + "/topology", "", &resp);
  if (!s.ok()) return s;
  yaml->clear();
  if (resp.kvs_size() == 1) *yaml = resp.kvs(0).value();
  return Status::Ok();
}

Status EtcdStateStore::PublishTopology(const std::string& yaml) {
  if (leader_revision_ == 0) return FailedPrecondition("not the leader: cannot write to etcd");
  pb::TxnRequest txn;
  AddCompare(&txn, leader_key_, pb::Compare::CREATE)->set_create_revision(leader_revision_);
  pb::PutRequest* put = txn.add_success()->mutable_request_put();
  put->set_key(options_.url.prefix + "/topology");
  put->set_value(yaml);
  pb::TxnResponse resp;
  Status s = client_.Txn(txn, &resp);
  if (s.ok() && !resp.succeeded()) return Aborted("leadership lost while publishing the topology");
  return s;
}

Status EtcdStateStore::RawValue(const std::string& key, std::string* value) {
  pb::RangeResponse resp;
  Status s = client_.Range(key, "", &resp);
  if (!s.ok()) return s;
  value->clear();
  if (resp.kvs_size() == 1) *value = resp.kvs(0).value();
  return Status::Ok();
}

}  // namespace tributary::manager
