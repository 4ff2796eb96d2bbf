// SPDX-License-Identifier: Apache-2.0
// CommImpl; see comm_impl.h.
#include "host/src/comm_impl.h"

#include <time.h>

#include <algorithm>
#include <cstring>
#include <random>

#include "common/check.h"
#include "common/log.h"
#include "common/net/host_port.h"
#include "host/src/control_messages.h"
#include "host/src/cuda/cuda_api.h"
#include "host/src/cuda/device_stager.h"
#include "host/src/join_handshake.h"
#include "host/src/node/node_level.h"
#include "proto/auth.h"
#include "host/src/env.h"
#include "host/src/init.h"
#include "host/src/transport/fault_transport.h"
#include "host/src/transport/transport.h"
#include "proto/codec.h"

namespace tributary::internal {
namespace {

uint64_t NowMs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000 + ts.tv_nsec / 1000000;
}

Status InvalidArg(const std::string& m) { return Status(StatusCode::kInvalidArgument, m); }

// Lane k's aggregator: HOST:PORT with PORT + k.
Result<std::string> LaneAddress(const std::string& aggregator, uint32_t k) {
  Result<net::HostPort> address = net::ParseHostPort(aggregator);
  if (!address.ok()) {
    return InvalidArg("lanes need the aggregator as HOST:PORT: " + address.status().message());
  }
  const uint32_t port = uint32_t{address->port} + k;
  if (port > 65535) {
    return InvalidArg("lane " + std::to_string(k) + " of aggregator " + aggregator +
                      " would be port " + std::to_string(port));
  }
  return address->WithPort(static_cast<uint16_t>(port)).ToString();
}

}  // namespace

Result<std::unique_ptr<CommImpl>> CommImpl::Create(const CommConfig& config) {
  auto impl = Open(config, false);
  if (!impl.ok()) return impl.status();
  base::ScopedLogRank log_rank(static_cast<int>(config.rank));
  Status s = impl.value()->SetUpNodeLevel();
  if (!s.ok()) return s;
  return impl;
}

Result<std::unique_ptr<CommImpl>> CommImpl::Open(const CommConfig& config, bool stripe_job) {
  // The environment's logging settings take effect here, once per process.
  Status s = host::InitProcess();
  if (!s.ok()) return s;
  base::ScopedLogRank log_rank(static_cast<int>(config.rank));
  if (config.world_size == 0 || config.world_size > proto::kMaxFanIn) {
    return InvalidArg("world_size=" + std::to_string(config.world_size) + " must be in [1, " +
                      std::to_string(proto::kMaxFanIn) + "]");
  }
  if (config.rank >= config.world_size) {
    return InvalidArg("rank=" + std::to_string(config.rank) + " must be < world_size=" +
                      std::to_string(config.world_size));
  }
  s = config.options.Validate();
  if (!s.ok()) return s;
  host::NoteCommunicatorRank(config.rank);
  for (uint32_t r : config.options.faults.ranks) {
    if (r >= config.world_size && config.rank == 0) {
      TRIB_LOG(kWarn, "fault", "fault injection names rank %u, but the job has %u ranks", r,
               config.world_size);
    }
  }
  const FaultOptions& f = config.options.faults;
  if (f.corrupt_sticky && (f.tx_corrupt > 0 || f.rx_corrupt > 0) && config.options.checksum &&
      config.rank == 0) {
    TRIB_LOG(kWarn, "fault", "sticky corruption with checksums on: every copy of a corrupted "
             "packet is refused, so the collective that carries one can only time out");
  }
  // The transport is chosen once, on lane 0 (transport.h SelectTransport,
  // which logs the choice); payload and window "auto" are resolved from that
  // choice, and further lanes open the same transport.
  const uint32_t lanes = config.options.lanes;
  // Creation gives up connect_timeout_ms from now, whatever part waits: a
  // transport's own greeting (ofi's hello), each lane's JOIN handshake.
  const uint64_t deadline_ms = NowMs() + config.options.connect_timeout_ms;
  std::vector<std::string> lane_address(lanes, config.options.aggregator);
  for (uint32_t k = 0; lanes > 1 && k < lanes; ++k) {  // every lane's port must fit
    auto addr = LaneAddress(config.options.aggregator, k);
    if (!addr.ok()) return addr.status();
    lane_address[k] = addr.value();
  }
  auto lane_options = [&](const Options& base, uint32_t k) {
    Options lo = base;
    lo.aggregator = lane_address[k];
    lo.faults = host::FaultsOfRank(config.options.faults, config.rank, k);
    return lo;
  };
  const Options first = lane_options(config.options, 0);
  const std::string lane0 = lanes > 1 ? "lane 0 (" + first.aggregator + "): " : "";
  auto selected = host::SelectTransport(first);
  if (!selected.ok()) {
    return Status(selected.status().code(), lane0 + selected.status().message());
  }
  const host::TransportChoice choice = selected.value().choice;
  CommConfig resolved = config;
  resolved.options.transport = choice.name;
  resolved.options.payload_bytes = choice.options.payload_bytes;
  resolved.options.window = choice.options.window;
  std::unique_ptr<CommImpl> impl(new CommImpl(resolved));
  impl->stripe_job_ = stripe_job;
  for (uint32_t k = 0; k < lanes; ++k) {
    const Options lo = lane_options(resolved.options, k);
    const std::string where =
        lanes > 1 ? "lane " + std::to_string(k) + " (" + lo.aggregator + "): " : "";
    Result<std::unique_ptr<host::Transport>> transport =
        k == 0 ? Result<std::unique_ptr<host::Transport>>(std::move(selected.value().transport))
               : host::OpenTransport(choice, lo);
    if (!transport.ok()) {
      return Status(transport.status().code(), where + transport.status().message());
    }
    if (lanes > 1 && std::string(transport.value()->name()) != "udp") {
      return InvalidArg("lanes=" + std::to_string(lanes) + " needs the udp transport, not " +
                        transport.value()->name());
    }
    // Lane k > 0 holds the job under a key of its own (derived from the
    // job's, proto::DeriveLaneKey): under one key a packet replayed from
    // one lane to another draws an authentic answer of the other lane.
    const uint64_t key =
        k == 0 ? config.job_key : proto::DeriveLaneKey(config.job_id, config.job_key, k, lanes);
    uint32_t epoch = 0;
    std::string trusted_key;
    s = impl->Join(transport.value().get(), lo, key, deadline_ms, &epoch, &trusted_key);
    if (!s.ok()) return Status(s.code(), where + s.message());
    Lane lane;
    lane.identity.job_id = config.job_id;
    lane.identity.job_key = key;
    lane.identity.epoch = epoch;
    lane.identity.rank = config.rank;
    lane.identity.lane = k;
    lane.identity.join = impl->JoinRequestFor(lo, key);
    // Later JOINs (the progress thread's probes) trust only the key this
    // one did: trust on first use, not on every use.
    lane.identity.join.aggregator_key = trusted_key;
    lane.identity.join.never_seal = trusted_key.empty();
    lane.aggregator = lo.aggregator;
    lane.progress = std::make_unique<host::ProgressEngine>(std::move(transport.value()),
                                                           lane.identity, lo);
    impl->lanes_.push_back(std::move(lane));
  }
  std::vector<host::Transport*> transports;
  for (Lane& lane : impl->lanes_) transports.push_back(lane.progress->transport());
  impl->registrations_ = std::make_unique<host::RegistrationTable>(std::move(transports));
  for (Lane& lane : impl->lanes_) {
    lane.progress->Start();
    TRIB_LOG(kInfo, "comm", "job %u rank %u/%u joined %s (epoch %u, transport %s): %s",
             config.job_id, config.rank, config.world_size, lane.aggregator.c_str(),
             lane.identity.epoch, lane.progress->transport()->name(),
             host::DescribeOptions(resolved.options).c_str());
  }
  return impl;
}

host::JoinRequest CommImpl::JoinRequestFor(const Options& o, uint64_t job_key) const {
  host::JoinRequest r;
  r.job_id = config_.job_id;
  r.job_key = job_key;
  r.rank = config_.rank;
  r.world_size = config_.world_size;
  r.window = o.window;
  r.payload_bytes = o.payload_bytes;
  r.payload_mac = o.payload_mac;
  r.incarnation = incarnation_;
  r.aggregator = o.aggregator;
  r.aggregator_key = o.aggregator_key;
  return r;
}

// FORMAT.md §3.1, §3.8 (host/src/join_handshake.h): JOIN, answer the
// CHALLENGE, until an authentic JOIN_ACK or NACK, resending with backoff.
Status CommImpl::Join(host::Transport* transport, const Options& o, uint64_t job_key,
                      uint64_t deadline, uint32_t* epoch, std::string* trusted_key) {
  host::JoinHandshake handshake(JoinRequestFor(o, job_key));
  uint64_t retry_ms = 50;
  uint32_t attempts = 0;
  bool unknown_job = false;
  while (true) {
    uint64_t now = NowMs();
    if (now >= deadline) break;
    host::TxPacket tx{handshake.packet(), handshake.packet_len(), nullptr, 0, nullptr};
    transport->Send(&tx, 1);
    ++attempts;
    // What the last attempt heard decides the final message: a managed
    // aggregator answers unknown_job until the placement reaches it, and
    // then a wrong key is met with silence.
    handshake.ClearHeard();
    uint64_t resend_at = std::min(deadline, now + retry_ms);
    retry_ms = std::min<uint64_t>(retry_ms * 2, 1000);
    while ((now = NowMs()) < resend_at) {
      transport->Wait(static_cast<int64_t>(resend_at - now) * 1000);
      host::RxEvent rx[16];
      int n = transport->Recv(rx, 16);
      for (int i = 0; i < n; ++i) {
        if (rx[i].kind != host::RxEvent::Kind::kPacket) continue;
        switch (handshake.OnPacket(rx[i].packet)) {
          case host::JoinHandshake::Step::kAccepted:
            *epoch = handshake.epoch();
            *trusted_key = handshake.trusted_key();
            return Status::Ok();
          case host::JoinHandshake::Step::kRefused:
            return handshake.refusal();
          case host::JoinHandshake::Step::kSendAgain:
            resend_at = NowMs();  // answer the challenge at once
            break;
          case host::JoinHandshake::Step::kIgnored:
            break;
        }
      }
      unknown_job = handshake.unknown_job();
    }
    if (unknown_job && stripe_job_) break;
  }
  if (!handshake.impostor().empty()) {
    const std::string pin = o.aggregator_key.empty()
                                ? "the key " + handshake.trusted_key() +
                                      " it presented first (trusted on first use)"
                                : "the pinned TRIBUTARY_AGGREGATOR_KEY " + o.aggregator_key;
    return Status(StatusCode::kPermissionDenied,
                  "aggregator " + o.aggregator + " presented public key " + handshake.impostor() +
                      ", not " + pin +
                      ": refusing to send it the job key (is this the right daemon, or was its "
                      "identity_file replaced?)");
  }
  if (unknown_job && stripe_job_) {
    return Status(StatusCode::kUnavailable,
                  "aggregator " + o.aggregator + " does not hold job " +
                      std::to_string(config_.job_id) +
                      " (refused at once): a daemon run by tributary-manager serves only the "
                      "jobs placed on it, and no manager places the node level's stripe jobs");
  }
  if (unknown_job) {
    return Status(StatusCode::kUnavailable,
                  "aggregator " + o.aggregator + " does not hold job " +
                      std::to_string(config_.job_id) + " (still unknown after " +
                      std::to_string(o.connect_timeout_ms) +
                      " ms): a daemon run by tributary-manager serves only the jobs placed on it; "
                      "check that `tributary job create` placed this job and that this rank uses "
                      "the aggregator it was given");
  }
  if (attempts == 0) {
    return Status(StatusCode::kUnavailable,
                  "aggregator " + o.aggregator + " took the transport's greeting but no time "
                  "was left of connect_timeout_ms " + std::to_string(o.connect_timeout_ms) +
                  " for the JOIN: raise it (TRIBUTARY_CONNECT_TIMEOUT_MS)");
  }
  std::string msg = "no answer from aggregator " + o.aggregator + " within " +
                    std::to_string(o.connect_timeout_ms) + " ms (" + std::to_string(attempts) +
                    " JOIN attempts for job " + std::to_string(config_.job_id) + ", " +
                    (handshake.challenged() ? "challenge answered" : "no challenge received") +
                    "): is tributaryd running there, and is the job key right?";
  if (!handshake.unauthenticated().empty()) {
    msg += " The last unauthenticated answer said: " + handshake.unauthenticated();
  }
  if (handshake.ignored_nacks() > 0) {
    msg += " " + std::to_string(handshake.ignored_nacks()) +
           " authentic NACK(s) that answered no JOIN of this handshake were ignored (replayed "
           "from an earlier communicator or the data phase).";
  }
  return Status(StatusCode::kUnavailable, msg);
}

namespace {
constexpr int kLeaveCopies = 4;
}  // namespace

void CommImpl::Leave(Lane& lane, uint32_t cause) {
  proto::Header h;
  h.type = proto::MsgType::kLeave;
  h.job_id = lane.identity.job_id;
  h.epoch = lane.identity.epoch;
  h.sender = lane.identity.rank;
  h.aux = cause;  // FORMAT.md §3.2
  uint8_t packet[proto::kHeaderSize];
  proto::EncodeHeader(h, packet);
  proto::SealPacket(proto::DeriveMacKey(h.job_id, lane.identity.job_key), packet, sizeof(packet),
                    nullptr, 0);
  host::TxPacket tx{packet, sizeof(packet), nullptr, 0, nullptr};
  // Best effort, four times: a job whose LEAVEs were all lost holds its
  // slots until the idle timeout, and its id until then too: a new job with
  // that id and another key is refused (silently: a wrong MAC) meanwhile.
  // At 10% loss twice left that to 1 rank in 100 (4 ranks: 1 job in 25,
  // bench/cluster/loss_bench.sh at 4 KiB); four times, to 1 in 10 000.
  for (int i = 0; i < kLeaveCopies; ++i) lane.progress->transport()->Send(&tx, 1);
}

CommImpl::CommImpl(const CommConfig& config) : config_(config) {}

CommImpl::~CommImpl() {
  DeviceStager* stager = stager_.load();
  if (stager) stager->Stop();  // no new staged work; in-flight work fails below
  {
    // The stager's worker may be handing the node level an all-reduce.
    std::lock_guard<std::mutex> lock(node_mu_);
    node_closing_ = true;
  }
  node_.reset();  // it leaves its stripe job and releases its segment
  // Every lane's LEAVE says why the communicator ends: the first failure of
  // any lane (a healthy lane of a failed communicator did not close by
  // itself), else closed by its owner. A lane with operations in flight
  // sends it as it stops (before they complete); the others here.
  const auto cause_now = [&] {
    for (Lane& lane : lanes_) {
      if (lane.progress->LeaveCause() != static_cast<uint32_t>(proto::LeaveCause::kClosed)) {
        return lane.progress->LeaveCause();
      }
    }
    return static_cast<uint32_t>(proto::LeaveCause::kClosed);
  };
  const uint32_t closing = cause_now();
  for (Lane& lane : lanes_) lane.progress->SetClosingCause(closing);
  for (Lane& lane : lanes_) lane.progress->Stop();
  const uint32_t cause = cause_now();
  for (Lane& lane : lanes_) Leave(lane, cause);
  // Its in-flight chunks completed (with errors) as the lanes stopped; it
  // releases its staging memory's CUDA resources, then the registrations go.
  delete stager;
  // Before the transports go with the lanes.
  if (registrations_) registrations_->Clear();
}

namespace {

// Adds one engine's counters to `total` (srtt, rto: the slowest; the window
// limit: the smallest).
void AddCounters(CommStats* total, const CommStats& s) {
  total->collectives_completed += s.collectives_completed;
  total->fragments_sent += s.fragments_sent;
  total->retransmissions += s.retransmissions;
  total->probes += s.probes;
  total->losses_detected += s.losses_detected;
  total->results_received += s.results_received;
  total->duplicate_results += s.duplicate_results;
  total->packets_rejected += s.packets_rejected;
  total->nacks_received += s.nacks_received;
  total->bytes_sent += s.bytes_sent;
  total->bytes_received += s.bytes_received;
  total->send_errors += s.send_errors;
  total->early_recoveries += s.early_recoveries;
  total->window_decreases += s.window_decreases;
  total->tail_probes += s.tail_probes;
  total->ecn_marks += s.ecn_marks;
  total->window_polls += s.window_polls;
  total->zero_fragments += s.zero_fragments;
  total->caller_sent += s.caller_sent;
  total->caller_completed += s.caller_completed;
  total->timer_recoveries += s.timer_recoveries;
  total->redundant_copies += s.redundant_copies;
  total->gap_resends += s.gap_resends;
  total->window_limit = std::min(total->window_limit, s.window_limit);
  total->srtt_us = std::max(total->srtt_us, s.srtt_us);
  total->rto_us = std::max(total->rto_us, s.rto_us);
}

}  // namespace

CommStats CommImpl::Stats() const {
  CommStats total = lanes_.front().progress->Stats();
  for (size_t k = 1; k < lanes_.size(); ++k) AddCounters(&total, lanes_[k].progress->Stats());
  // One collective of the caller is one per lane that had a part of it.
  if (lanes_.size() > 1) total.collectives_completed = collectives_striped_.load();
  if (node_) {
    // The stripe job carries the all-reduces' traffic; an all-reduce of the
    // caller is one collective of the node level.
    const CommStats n = node_->Stats();
    AddCounters(&total, n);
    total.local_ranks = n.local_ranks;
    total.nodes = n.nodes;
  }
  return total;
}

std::string CommImpl::LaneTag(size_t k) const {
  return "lane " + std::to_string(k) + " (" + lanes_[k].aggregator + "): ";
}

Status CommImpl::Health() const {
  if (DeviceStager* stager = stager_.load()) {
    Status s = stager->Failure();
    if (!s.ok()) return Status(StatusCode::kAborted, "device memory staging failed: " + s.message());
  }
  if (node_) {
    Status s = node_->Health();
    if (!s.ok()) return s;
  }
  for (size_t k = 0; k < lanes_.size(); ++k) {
    Status s = lanes_[k].progress->Health();
    if (!s.ok()) {
      if (lanes_.size() == 1) return s;
      return Status(s.code(), LaneTag(k) + s.message());
    }
  }
  return Status::Ok();
}

Result<DeviceStager*> CommImpl::Stager() {
  if (DeviceStager* s = stager_.load()) return s;
  std::lock_guard<std::mutex> lock(stager_mu_);
  if (DeviceStager* s = stager_.load()) return s;
  Result<const CudaApi*> api = LoadCudaApi();
  if (!api.ok()) return api.status();
  auto stager = DeviceStager::Create(
      api.value(), config_.options.staging_bytes, config_.world_size,
      [this](void* data, size_t bytes) {
        return Register(MemoryDesc{data, bytes, MemoryKind::kHostPinned}).status();
      },
      [this](host::Collective collective, const uint8_t* send, uint8_t* recv, size_t count,
             DataType dtype, ReduceOp op, std::function<void(const Status&)> then) -> Status {
        const Shape shape{collective, host::CollectiveName(collective)};
        const Extent extent = ExtentOf(shape, count, DataTypeSize(dtype));
        return Submit(shape, registrations_->FindContaining(send, extent.send_bytes),
                      registrations_->FindContaining(recv, extent.recv_bytes), send, recv, count,
                      dtype, op, std::move(then), /*in_order=*/true)
            .status();
      },
      node_ ? DeviceStager::NodeFn([this, api = api.value()](const StagedOp& op) {
        return RunDeviceAllReduceOnNode(api, op);
      })
            : DeviceStager::NodeFn());
  if (!stager.ok()) return stager.status();
  stager_.store(stager.value().release());
  return stager_.load();
}

Result<Buffer> CommImpl::Register(const MemoryDesc& memory) {
  const bool device = memory.kind == MemoryKind::kCudaDevice;
  if (device && memory.bytes > 0) {
    // Staged through pinned host memory: checked to be device memory, not
    // registered with the transports.
    Status v = host::ValidateMemory(memory);
    if (!v.ok()) return v;
    Result<DeviceStager*> stager = Stager();
    if (!stager.ok()) {
      return Status(stager.status().code(),
                    "Register: cuda_device memory: " + stager.status().message());
    }
    const CudaApi& api = stager.value()->api();
    for (const uint8_t* p : {static_cast<const uint8_t*>(memory.data),
                             static_cast<const uint8_t*>(memory.data) + memory.bytes - 1}) {
      CudaPointerAttributes a;
      Status s = CudaCall(api, api.pointer_get_attributes(&a, p), "Register: cudaPointerGetAttributes");
      if (!s.ok()) return Status(StatusCode::kInvalidArgument, s.message());
      if (a.type != kCudaMemoryDevice && a.type != kCudaMemoryManaged) {
        return Status(StatusCode::kInvalidArgument,
                      "Register: cuda_device memory at " + std::to_string(reinterpret_cast<uintptr_t>(p)) +
                          " is not CUDA device memory (cudaPointerGetAttributes type " +
                          std::to_string(a.type) + "); register it as host memory instead");
      }
    }
  }
  auto reg = registrations_->Register(memory, /*staged=*/device);
  if (!reg.ok()) return reg.status();
  Buffer b;
  b.data_ = memory.data;
  b.size_ = memory.bytes;
  b.kind_ = memory.kind;
  b.id_ = reg.value()->id;
  return b;
}

Status CommImpl::Deregister(const Buffer& buffer) { return registrations_->Deregister(buffer.id()); }

Status CommImpl::CheckHostRange(const std::string& what, const void* p, size_t bytes) const {
  if (bytes == 0) return Status::Ok();
  const std::shared_ptr<host::Registration> r = registrations_->FindContaining(p, bytes);
  if (!r) {
    return Status(StatusCode::kNotFound, what + " range of " + std::to_string(bytes) +
                                             " bytes is not inside a registered buffer");
  }
  if (r->memory.kind != MemoryKind::kHost && r->memory.kind != MemoryKind::kHostPinned) {
    return Status(StatusCode::kUnimplemented,
                  what + " is " + MemoryKindName(r->memory.kind) +
                      " memory: reproducible all-reduces (Options::reproducible) take host "
                      "memory only");
  }
  return Status::Ok();
}

}  // namespace tributary::internal
