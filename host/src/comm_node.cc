// SPDX-License-Identifier: Apache-2.0
// CommImpl's set-up of the node level (host/src/node/node_level.h).
//
// Every rank takes the same decision from the same data, so that no rank
// goes hierarchical while another stays flat (they would wait for each
// other until their timeout):
//   1. an all-gather over the job of one record per rank: which host it is
//      on (Options::node_id, or the boot id and namespaces), whether it
//      wants the node level, its chunk size and a random nonce;
//   2. from the records alone: the hosts, their ranks (local rank = order
//      of global rank), this host's index (order of its lowest rank), and
//      whether the shape allows it (k >= 2 everywhere, the same k on every
//      host, the same settings);
//   3. each rank maps its host's segment (named after local rank 0's nonce)
//      and joins its stripe job;
//   4. an all-reduce (MIN) of "it worked" over the job: on only if every
//      rank succeeded, else every rank releases what it set up.
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "common/log.h"
#include "host/src/comm_impl.h"
#include "host/src/node/node_level.h"
#include "proto/auth.h"

namespace tributary::internal {
namespace {

// One rank's entry of the exchange (little-endian hosts only, like the
// reduction library).
struct NodeRecord {
  uint64_t host = 0;   // hash of the node id
  uint64_t nonce = 0;  // names the segment when this rank is its host's local rank 0
  uint32_t wants = 0;  // 1: node_level is auto or on
  uint32_t chunk_bytes = 0;
  uint32_t uid = 0;    // segments are private to a user (mode 0600)
  uint32_t reserved = 0;
};
static_assert(sizeof(NodeRecord) == 32);

uint64_t Fnv1a(const std::string& s) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return h;
}

std::string NamespaceInode(const char* path) {
  struct stat st;
  return stat(path, &st) == 0 ? std::to_string(st.st_ino) : "?";
}

// This boot of this machine, seen from this mount namespace (/dev/shm) and
// network namespace (an emulated host or a container is a host of its own).
std::string DefaultNodeId() {
  std::string boot;
  std::ifstream in("/proc/sys/kernel/random/boot_id");
  std::getline(in, boot);
  if (boot.empty()) {
    char name[256] = {};
    gethostname(name, sizeof(name) - 1);
    boot = name;
  }
  return boot + "/mnt:" + NamespaceInode("/proc/self/ns/mnt") +
         "/net:" + NamespaceInode("/proc/self/ns/net");
}

constexpr size_t kMaxSegmentBytes = size_t{256} << 20;

struct Plan {
  std::string why_not;  // empty: the node level can be used
  uint32_t local_rank = 0, local_size = 0, node = 0, nodes = 0;
  uint64_t segment_nonce = 0;
};

Plan PlanFrom(const std::vector<NodeRecord>& all, uint32_t rank) {
  Plan p;
  // Hosts, keyed by (host, uid), with their ranks in order.
  std::map<std::pair<uint64_t, uint32_t>, std::vector<uint32_t>> hosts;
  for (uint32_t r = 0; r < all.size(); ++r) hosts[{all[r].host, all[r].uid}].push_back(r);
  for (uint32_t r = 0; r < all.size(); ++r) {
    if (all[r].wants == 0) {
      p.why_not = "rank " + std::to_string(r) + " has node_level off";
      return p;
    }
    if (all[r].chunk_bytes != all[0].chunk_bytes) {
      p.why_not = "ranks 0 and " + std::to_string(r) + " use different node_chunk_bytes";
      return p;
    }
  }
  std::vector<const std::vector<uint32_t>*> order;
  for (const auto& [key, ranks] : hosts) order.push_back(&ranks);
  std::sort(order.begin(), order.end(),
            [](const auto* a, const auto* b) { return a->front() < b->front(); });
  const size_t k = order.front()->size();
  for (const auto* ranks : order) {
    if (ranks->size() != k) {
      p.why_not = "hosts run different numbers of this job's ranks (" + std::to_string(k) +
                  " with rank " + std::to_string(order.front()->front()) + ", " +
                  std::to_string(ranks->size()) + " with rank " + std::to_string(ranks->front()) +
                  ")";
      return p;
    }
  }
  if (k < 2) {
    p.why_not = "no two ranks share a host";
    return p;
  }
  if (k > host::NodeSegment::kMaxLocalRanks) {
    p.why_not = std::to_string(k) + " ranks share a host (at most " +
                std::to_string(host::NodeSegment::kMaxLocalRanks) + ")";
    return p;
  }
  p.local_size = static_cast<uint32_t>(k);
  p.nodes = static_cast<uint32_t>(order.size());
  for (uint32_t n = 0; n < order.size(); ++n) {
    const auto& ranks = *order[n];
    auto it = std::find(ranks.begin(), ranks.end(), rank);
    if (it == ranks.end()) continue;
    p.node = n;
    p.local_rank = static_cast<uint32_t>(it - ranks.begin());
    p.segment_nonce = all[ranks.front()].nonce;
  }
  return p;
}

}  // namespace

Status CommImpl::SetUpCollective(bool gather, const void* send, void* recv, size_t bytes) {
  const size_t recv_bytes = gather ? bytes * config_.world_size : bytes;
  std::vector<uint8_t> in(static_cast<const uint8_t*>(send), static_cast<const uint8_t*>(send) + bytes);
  std::vector<uint8_t> out(recv_bytes);
  auto sb = Register(MemoryDesc{in.data(), in.size(), MemoryKind::kHost});
  if (!sb.ok()) return sb.status();
  auto rb = Register(MemoryDesc{out.data(), out.size(), MemoryKind::kHost});
  if (!rb.ok()) {
    Deregister(sb.value());
    return rb.status();
  }
  auto req = gather ? AllGather(sb.value(), rb.value(), bytes, DataType::kUint8)
                    : AllReduce(sb.value(), rb.value(), bytes / 4, DataType::kUint32, ReduceOp::kMin);
  Status s = req.ok() ? req.value().Wait() : req.status();
  Deregister(sb.value());
  Deregister(rb.value());
  if (s.ok()) std::memcpy(recv, out.data(), recv_bytes);
  return s;
}

Status CommImpl::SetUpNodeLevel() {
  const Options& o = config_.options;
  const bool required = o.node_level == "on";
  if (o.node_level == "off") return Status::Ok();
  if (config_.world_size < 2) {
    if (required) {
      return Status(StatusCode::kFailedPrecondition,
                    "node_level=on: a job of one rank has no node level");
    }
    return Status::Ok();
  }
  // 1. The exchange.
  NodeRecord mine;
  mine.host = Fnv1a(o.node_id.empty() ? DefaultNodeId() : "id:" + o.node_id);
  mine.nonce = proto::RandomU64();
  mine.wants = 1;
  mine.chunk_bytes = o.node_chunk_bytes;
  mine.uid = static_cast<uint32_t>(geteuid());
  std::vector<NodeRecord> all(config_.world_size);
  Status s = SetUpCollective(true, &mine, all.data(), sizeof(NodeRecord));
  if (!s.ok()) return Status(s.code(), "node level: exchanging hosts: " + s.message());
  // 2. The plan, the same on every rank.
  const Plan plan = PlanFrom(all, config_.rank);
  if (!plan.why_not.empty()) {
    if (required) {
      return Status(StatusCode::kFailedPrecondition, "node_level=on, but " + plan.why_not);
    }
    if (config_.rank == 0) {
      TRIB_LOG(kInfo, "comm", "job %u: node level off (%s): every rank talks to the aggregator",
               config_.job_id, plan.why_not.c_str());
    }
    return Status::Ok();
  }
  // 3. The segment and the stripe job.
  // The segment holds (k + 1) x depth rounds of k chunks: many local ranks
  // get smaller chunks, so that it never needs more than kMaxSegmentBytes.
  const size_t k = plan.local_size;
  const size_t fit = kMaxSegmentBytes / ((k + 1) * host::NodeSegment::kDepth * k) / 64 * 64;
  const size_t chunk = std::max<size_t>(4096, std::min<size_t>(o.node_chunk_bytes, fit));
  const size_t round_bytes = chunk * k;
  char name[64];
  snprintf(name, sizeof(name), "/tributary-node-%u-%016" PRIx64, static_cast<unsigned>(geteuid()),
           plan.segment_nonce);
  std::unique_ptr<host::NodeSegment> segment;
  std::unique_ptr<CommImpl> stripe;
  proto::DerivedJob job;
  Status mine_ok = Status::Ok();
  auto seg = host::NodeSegment::Attach(name, plan.local_rank, plan.local_size, round_bytes,
                                       o.connect_timeout_ms);
  if (!seg.ok()) {
    mine_ok = seg.status();
  } else if (plan.nodes == 1) {
    segment = std::move(seg.value());  // one host: no stripe job
  } else {
    segment = std::move(seg.value());
    job = proto::DeriveStripeJob(config_.job_id, config_.job_key, plan.local_rank,
                                 plan.local_size, plan.nodes);
    CommConfig sc = config_;
    sc.job_id = job.job_id;
    sc.job_key = job.job_key;
    sc.rank = plan.node;
    sc.world_size = plan.nodes;
    sc.options.node_level = "off";
    auto opened = Open(sc, true);
    if (!opened.ok()) {
      mine_ok = Status(opened.status().code(),
                       "stripe job " + std::to_string(job.job_id) + ": " + opened.status().message());
    } else {
      stripe = std::move(opened.value());
      auto reg = stripe->Register(
          MemoryDesc{segment->results_base(), segment->results_bytes(), MemoryKind::kHost});
      if (!reg.ok()) mine_ok = reg.status();
    }
  }
  // 4. Everyone or no one.
  const uint32_t ok_flag = mine_ok.ok() ? 1 : 0;
  uint32_t all_ok = 0;
  s = SetUpCollective(false, &ok_flag, &all_ok, sizeof(ok_flag));
  if (!s.ok()) return Status(s.code(), "node level: agreeing: " + s.message());
  if (all_ok == 0) {
    stripe.reset();
    segment.reset();
    const std::string why =
        mine_ok.ok() ? std::string("another rank could not set it up") : mine_ok.message();
    if (required) {
      return Status(mine_ok.ok() ? StatusCode::kFailedPrecondition : mine_ok.code(),
                    "node_level=on, but " + why);
    }
    TRIB_LOG(kWarn, "comm", "job %u rank %u: node level off (%s): every rank talks to the "
             "aggregator", config_.job_id, config_.rank, why.c_str());
    return Status::Ok();
  }
  NodeShape shape;
  shape.local_rank = plan.local_rank;
  shape.local_size = plan.local_size;
  shape.node = plan.node;
  shape.nodes = plan.nodes;
  shape.world_size = config_.world_size;
  if (plan.nodes == 1) {
    TRIB_LOG(kInfo, "comm",
             "job %u rank %u: node level on: all %u ranks share this host (local rank %u); "
             "all-reduces complete in shared memory %s (rounds of %zu bytes) without network "
             "traffic; reduce-scatter and all-gather still go through the aggregator",
             config_.job_id, config_.rank, plan.local_size, plan.local_rank, name, round_bytes);
  } else {
    TRIB_LOG(kInfo, "comm",
             "job %u rank %u: node level on: %u hosts x %u local ranks; this rank is local rank "
             "%u of host %u and sends stripe %u as rank %u of job %u (shared memory %s, rounds of "
             "%zu bytes)",
             config_.job_id, config_.rank, plan.nodes, plan.local_size, plan.local_rank,
             plan.node, plan.local_rank, plan.node, job.job_id, name, round_bytes);
  }
  node_ = std::make_unique<NodeLevel>(shape, std::move(segment), std::move(stripe),
                                      chunk, o.op_timeout_ms);
  return Status::Ok();
}

}  // namespace tributary::internal
