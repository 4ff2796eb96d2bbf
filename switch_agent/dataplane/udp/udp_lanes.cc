// SPDX-License-Identifier: Apache-2.0
// Share-nothing kernel-UDP lanes; the design is in udp_lanes.h.
#include "switch_agent/dataplane/udp/udp_lanes.h"

#include <pthread.h>

#include <random>
#include <thread>

#include "common/check.h"
#include "common/log.h"

namespace tributary::agent {
namespace {

uint64_t RandomSeed() {
  std::random_device rd;
  return (uint64_t{rd()} << 32) | rd();
}

}  // namespace

UdpLanes::UdpLanes(const DataplaneOptions& options, engine::Engine* engine)
    : options_(options), engine_(engine) {
  TRIB_CHECK(engine_ != nullptr);
  TRIB_CHECK(options_.udp_lanes >= 1);
}

UdpLanes::~UdpLanes() { Cleanup(); }

Status UdpLanes::Bind(uint16_t port) {
  Cleanup();
  lanes_.clear();
  own_engines_.clear();
  const uint32_t n = options_.udp_lanes;
  for (uint32_t k = 0; k < n; ++k) {
    DataplaneOptions o = options_;
    if (k > 0) {
      const uint32_t first = lanes_[0]->port();
      if (first + k > 65535) {
        return Status(StatusCode::kUnavailable, "lane ports " + std::to_string(first) + ".." +
                                                    std::to_string(first + n - 1) + " do not fit");
      }
      o.port = static_cast<uint16_t>(first + k);
    } else {
      o.port = port;
    }
    engine::Engine* e = engine_;
    if (k > 0) {
      own_engines_.push_back(engine_->NewLane(static_cast<uint32_t>(RandomSeed())));
      e = own_engines_.back().get();
    }
    e->SetLane(k, n);
    lanes_.push_back(std::make_unique<UdpDataplane>(o, e));
    if (Status s = lanes_.back()->Init(); !s.ok()) {
      return Status(s.code(), "lane " + std::to_string(k) + ": " + s.message());
    }
  }
  return Status::Ok();
}

Status UdpLanes::Init() {
  Status s;
  // A fixed port either has its run of ports free or fails; with port 0 a
  // lane's port taken by someone else means another try.
  const int attempts = options_.port == 0 ? kPortAttempts : 1;
  for (int attempt = 0; attempt < attempts; ++attempt) {
    s = Bind(options_.port);
    if (s.ok()) break;
  }
  if (!s.ok()) {
    Cleanup();
    return s;
  }
  published_.assign(lanes_.size(), Published{});
  TRIB_LOG(kInfo, "udp", "%zu lanes on ports %u..%zu, one thread and engine each",
           lanes_.size(), lanes_[0]->port(), lanes_[0]->port() + lanes_.size() - 1);
  return Status::Ok();
}

std::string UdpLanes::LocalAddress() const { return lanes_.at(0)->LocalAddress(); }

bool UdpLanes::AttachProvisioner(Provisioner* provisioner) {
  return lanes_.at(0)->AttachProvisioner(provisioner);
}

void UdpLanes::Publish(size_t k) {
  Published p{lanes_[k]->stats(), own_engines_[k - 1]->Snapshot(3)};
  std::lock_guard<std::mutex> lock(published_mu_);
  published_[k] = std::move(p);
}

void UdpLanes::Run(const std::atomic<bool>& stop, const TickFn& tick) {
  std::vector<std::thread> threads;
  turned_ns_ = std::make_unique<std::atomic<uint64_t>[]>(lanes_.size());
  for (size_t k = 1; k < lanes_.size(); ++k) turned_ns_[k].store(MonotonicNowNs());
  for (size_t k = 1; k < lanes_.size(); ++k) {
    threads.emplace_back([this, k, &stop] {
      // `top -H` and a debugger name the lanes.
      const std::string name = "trib-udp-lane" + std::to_string(k);
      pthread_setname_np(pthread_self(), name.substr(0, 15).c_str());
      uint64_t next_publish_ns = 0;
      lanes_[k]->Run(stop, [&](uint64_t now_ns) {
        turned_ns_[k].store(now_ns, std::memory_order_relaxed);
        if (now_ns < next_publish_ns) return;
        Publish(k);
        next_publish_ns = now_ns + kPublishNs;
      });
      Publish(k);  // exact at exit
    });
  }
  lanes_[0]->Run(stop, tick);
  for (std::thread& t : threads) t.join();
}

void UdpLanes::ReadPublished() const {
  // Without waiting: a lane stuck while it holds the lock (a debugger, a
  // bug) must not stop the loop that says it is stuck. The last copy then
  // stands.
  std::unique_lock<std::mutex> lock(published_mu_, std::try_to_lock);
  if (lock.owns_lock()) read_ = published_;
}

void UdpLanes::AddLanes(DataplaneStats* stats, engine::EngineSnapshot* snapshot) const {
  ReadPublished();
  for (size_t k = 1; k < read_.size(); ++k) {
    *stats += read_[k].stats;
    snapshot->Add(read_[k].engine);
  }
}

bool UdpLanes::StuckLane(uint64_t now_ns, uint64_t max_age_ns, size_t* lane,
                         uint64_t* age_ns) const {
  if (turned_ns_ == nullptr) return false;  // not running yet
  return OldestTurn(
      lanes_.size(), [&](size_t k) { return turned_ns_[k].load(std::memory_order_relaxed); },
      now_ns, max_age_ns, lane, age_ns);
}

std::vector<Dataplane::LaneFigures> UdpLanes::Lanes() const {
  ReadPublished();
  std::vector<LaneFigures> out;
  for (size_t k = 1; k < read_.size(); ++k) {
    out.push_back({read_[k].stats, read_[k].engine.counters,
                   static_cast<uint32_t>(read_[k].engine.jobs.size())});
  }
  return out;
}

void UdpLanes::Cleanup() {
  // Sockets and buffers go; the lanes and their counters stay for the
  // exit report.
  for (auto& lane : lanes_) lane->Cleanup();
}

}  // namespace tributary::agent
