// SPDX-License-Identifier: Apache-2.0
// tributary_sim: all-reduce at scale in a SimGrid simulation, with the real
// engine in the aggregators and the real progress engine in the ranks
// (tributary_nodes.h), trees placed by the manager's real placement code,
// and ring / double-binary-tree baselines in the same fabric (baselines.h).
// One process simulates one system on one fabric for a list of sizes and
// appends a CSV line per (job, size); bench/sim/run_sim.sh sweeps.
//
//   tributary_sim --system tributary --hosts 1024 --sizes 8,64M
//   tributary_sim --system ring --hosts 8 --fabric star --gbps 0.2 --sizes 64M
//
// Thread-safety: single-threaded (SimGrid runs the actors one at a time).
#include <CLI/CLI.hpp>
#include <simgrid/s4u.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <map>
#include <memory>
#include <numeric>
#include <string>
#include <vector>

#include "bench/sim/baselines.h"
#include "bench/sim/fabric.h"
#include "bench/sim/sim_world.h"
#include "bench/sim/tributary_nodes.h"
#include "common/check.h"
#include "common/log.h"
#include "manager/placement.h"

namespace sg4 = simgrid::s4u;

namespace tributary::sim {
namespace {

struct Config {
  std::string system = "tributary";
  std::string scenario = "base";
  int hosts = 64;
  FabricParams fabric;
  WorldParams world;
  AggregatorParams agg;
  std::vector<std::string> sizes = {"64M"};
  uint32_t warmup = 1;
  uint32_t iterations = 1;
  uint32_t payload = 65024;      // nominal fragment payload (bytes on the wire)
  uint32_t real_payload = 64;    // bytes of it the code under test reduces
  uint32_t window = 32;
  uint32_t congestion_target_us = 1000;
  bool window_poll = true;
  uint32_t rto_min_us = 200;
  uint64_t pipeline_bytes = 512 * 1024;
  int jobs = 1;
  double straggler_us = 0;
  double fail_at_us = -1;
  double fail_for_us = 1000;
  std::string csv;
  bool csv_header = false;
};

Result<uint64_t> ParseSize(const std::string& s) {
  char* end = nullptr;
  const double v = std::strtod(s.c_str(), &end);
  if (end == s.c_str() || v <= 0) return InvalidArgument("bad size '" + s + "'");
  double m = 1;
  const std::string unit(end);
  if (unit == "K" || unit == "k") m = 1024;
  else if (unit == "M") m = 1024.0 * 1024;
  else if (unit == "G") m = 1024.0 * 1024 * 1024;
  else if (!unit.empty()) return InvalidArgument("bad size unit in '" + s + "' (K, M, G)");
  return static_cast<uint64_t>(v * m);
}

// The coarsening of one size: fragments of `payload` wire bytes, each
// reducing real_payload bytes; a size under one fragment is one fragment
// of up to real_payload bytes standing for the whole size.
Collective Coarsen(const Config& c, uint64_t bytes) {
  Collective col;
  col.bytes = bytes;
  col.warmup = c.warmup;
  col.iterations = c.iterations;
  const uint64_t frags = (bytes + c.payload - 1) / c.payload;
  const uint64_t per_frag = c.real_payload / 4;
  if (frags <= 1) {
    col.real_count = std::clamp<uint64_t>((bytes + 3) / 4, 1, per_frag);
    col.scale = static_cast<double>(bytes) / (col.real_count * 4.0);
  } else {
    col.real_count = frags * per_frag;
    col.scale = static_cast<double>(c.payload) / c.real_payload;
  }
  return col;
}

struct Job {
  uint32_t id = 0;
  std::vector<int> hosts;  // fabric hosts of its ranks, rank order
  manager::Placement placement;
  JobResults results;
};

std::string LevelsText(const std::vector<Fabric::LevelLoad>& load) {
  char buf[160];
  std::snprintf(buf, sizeof(buf), "%.3f,%.3f,%.3f,%llu,%llu,%llu", load[0].utilisation,
                load[1].utilisation, load[2].utilisation,
                static_cast<unsigned long long>(load[1].bytes),
                static_cast<unsigned long long>(load[2].bytes),
                static_cast<unsigned long long>(load[0].drops + load[1].drops + load[2].drops));
  return buf;
}

int Run(const Config& c, int argc, char** argv) {
  std::vector<Collective> collectives;
  for (const std::string& s : c.sizes) {
    Result<uint64_t> b = ParseSize(s);
    if (!b.ok()) {
      std::fprintf(stderr, "tributary_sim: %s\n", b.status().message().c_str());
      return 2;
    }
    collectives.push_back(Coarsen(c, *b));
  }
  Result<Fabric> built = Fabric::Build(c.fabric, c.hosts);
  if (!built.ok()) {
    std::fprintf(stderr, "tributary_sim: %s\n", built.status().message().c_str());
    return 2;
  }
  sg4::Engine engine(&argc, argv);
  engine.set_config("contexts/stack-size:256");
  engine.set_config("contexts/guard-size:0");
  World world(std::move(built).value(), c.world);
  Fabric& fabric = world.fabric();
  std::fprintf(stderr, "tributary_sim: %s; %s\n", c.system.c_str(), fabric.Describe().c_str());

  // Jobs: one on every host, or (two jobs) the even and the odd hosts.
  std::vector<Job> jobs(c.jobs);
  for (int h = 0; h < c.hosts; ++h) jobs[h % c.jobs].hosts.push_back(h);
  std::vector<int> rank_entity(c.hosts);
  for (int h = 0; h < c.hosts; ++h) rank_entity[h] = world.AddEntity(h)->id();
  Entity* network = world.AddNetwork();

  std::vector<std::unique_ptr<Aggregator>> aggregators;  // per daemon used
  std::map<int, Aggregator*> by_daemon;
  std::vector<manager::DaemonView> daemons;
  const manager::Topology topology = [&] {
    manager::Topology t = fabric.ToTopology();
    const Status st = t.Finalize();
    TRIB_CHECK_MSG(st.ok(), st.message().c_str());
    return t;
  }();
  if (c.system == "tributary") {
    for (const manager::TopologyNode& n : topology.nodes()) {
      manager::DaemonView d;
      d.name = n.name;
      d.endpoint = "sim";
      d.position = topology.FindNode(n.name);
      d.up = true;
      d.capacity_slots = 1 << 20;
      d.capacity_bytes = 64ull << 30;
      daemons.push_back(d);
    }
    for (size_t j = 0; j < jobs.size(); ++j) {
      Job& job = jobs[j];
      job.id = kJobIdBase + static_cast<uint32_t>(j);
      manager::PlacementRequest req;
      for (int h : job.hosts) req.rank_hosts.push_back(fabric.name(h));
      req.payload_bytes = c.real_payload;
      req.slot_count = c.window;
      const Status st = manager::Place(topology, daemons, req, &job.placement);
      if (!st.ok()) {
        std::fprintf(stderr, "tributary_sim: placement: %s\n", st.ToString().c_str());
        return 1;
      }
      for (const manager::PlacedNode& n : job.placement.nodes) {
        daemons[n.daemon].used_slots += n.slots;
        daemons[n.daemon].used_bytes += n.bytes;
        if (!by_daemon.count(n.daemon)) {
          const int node = fabric.NodeByName(daemons[n.daemon].name);
          aggregators.push_back(std::make_unique<Aggregator>(
              &world, world.AddEntity(node), c.agg, 7919u * static_cast<uint32_t>(n.daemon + 1)));
          by_daemon[n.daemon] = aggregators.back().get();
        }
      }
      for (const manager::PlacedNode& n : job.placement.nodes) {
        engine::JobSpec spec;
        spec.job_id = job.id;
        spec.job_key = kJobKey;
        spec.params = {n.fan_in, c.window, c.real_payload};
        if (n.parent >= 0) {
          const manager::PlacedNode& parent = job.placement.nodes[n.parent];
          spec.has_parent = true;
          spec.parent = static_cast<engine::PeerToken>(by_daemon[parent.daemon]->self()->id());
          spec.child_index = n.child_index;
          spec.parent_fan_in = parent.fan_in;
        }
        by_daemon[n.daemon]->Provision(spec);
      }
      uint32_t depth = 0;
      for (const manager::PlacedNode& n : job.placement.nodes) depth = std::max(depth, n.level + 1);
      std::fprintf(stderr, "tributary_sim: job %u: %zu ranks, %zu aggregators, %u levels\n",
                   job.id, job.hosts.size(), job.placement.nodes.size(), depth);
    }
  }

  auto* zone = sg4::create_star_zone("world");
  for (int e = 0; e < world.entities(); ++e) zone->create_host("e" + std::to_string(e), 1e9);
  zone->seal();
  sg4::Actor::create("network", sg4::Host::by_name("e" + std::to_string(network->id())),
                     [&world] { world.RunNetwork(); })
      ->daemonize();

  // The inner aggregator that fails (scenario), or none.
  Aggregator* failing = nullptr;
  if (c.fail_at_us >= 0 && c.system == "tributary") {
    const manager::Placement& p = jobs[0].placement;
    int pick = p.root;
    for (size_t i = 0; i < p.nodes.size(); ++i) {
      if (p.nodes[i].parent >= 0 && p.nodes[i].level >= 1) pick = static_cast<int>(i);
    }
    failing = by_daemon[p.nodes[pick].daemon];
    std::fprintf(stderr, "tributary_sim: aggregator %s (level %u) fails %.0f us into the first "
                 "measured iteration for %.0f us\n",
                 fabric.name(failing->self()->node()).c_str(), p.nodes[pick].level, c.fail_at_us,
                 c.fail_for_us);
  }

  std::vector<std::vector<Fabric::LevelLoad>> load(collectives.size());
  const auto wall_start = std::chrono::steady_clock::now();
  std::unique_ptr<Baseline> baseline;
  if (c.system == "tributary") {
    for (auto& a : aggregators) {
      Aggregator* agg = a.get();
      sg4::ActorPtr actor = sg4::Actor::create(
          "agg" + std::to_string(agg->self()->id()),
          sg4::Host::by_name("e" + std::to_string(agg->self()->id())), [agg] { agg->Run(); });
      actor->daemonize();
    }
    Options options;
    options.aggregator = "sim:1";
    options.op_timeout_ms = 600000;
    options.congestion_target_us = c.congestion_target_us;
    options.window_poll = c.window_poll;
    options.rto_min_us = c.rto_min_us;
    options.rto_initial_us = std::max(options.rto_initial_us, c.rto_min_us);
    // Resend-or-probe follows the fragment's wire size, as on a real host.
    options.resend_max_bytes = c.payload <= options.resend_max_bytes ? proto::kMaxPayloadBytes : 0;
    sg4::BarrierPtr barrier = sg4::Barrier::create(c.hosts);
    for (Job& job : jobs) {
      const size_t n = job.hosts.size();
      job.results.seconds.assign(collectives.size(), {});
      job.results.start.assign(collectives.size(), 0);
      job.results.finish.assign(collectives.size(), 0);
      const bool first_job = &job == &jobs[0];
      IterationHook hook = [&, first_job](size_t col, uint32_t it, bool end) {
        if (!first_job) return;
        if (!end) {
          world.scale = collectives[col].scale;
          fabric.ResetCounters();
          if (failing != nullptr && col == 0 && it == collectives[0].warmup) {
            failing->ScheduleFailure(Now() + c.fail_at_us * 1e-6, c.fail_for_us * 1e-6);
          }
        } else {
          load[col] = fabric.Load(jobs[0].results.finish[col] - jobs[0].results.start[col]);
        }
      };
      for (size_t r = 0; r < n; ++r) {
        const manager::PlacedRank& pr = job.placement.ranks[r];
        RankSetup s;
        s.job_id = job.id;
        s.rank = static_cast<uint32_t>(r);
        s.ranks = static_cast<uint32_t>(n);
        s.child_index = pr.child_index;
        s.leaf_fan_in = pr.leaf_fan_in;
        s.leaf = by_daemon[job.placement.nodes[pr.node].daemon];
        s.straggle_s = (c.straggler_us > 0 && r == n / 2) ? c.straggler_us * 1e-6 : 0;
        s.payload_bytes = c.real_payload;
        s.window = c.window;
        s.options = options;
        Entity* self = world.entity(rank_entity[job.hosts[r]]);
        JobResults* results = &job.results;
        sg4::Actor::create("rank" + std::to_string(self->id()),
                           sg4::Host::by_name("e" + std::to_string(self->id())),
                           [&world, self, s, &collectives, barrier, results, hook] {
                             RunRank(&world, self, s, collectives, barrier, results, hook);
                           });
      }
    }
    engine.run();
  } else {
    if (collectives.size() != 1) {
      std::fprintf(stderr, "tributary_sim: baselines take one size per run\n");
      return 2;
    }
    BaselineRun run;
    run.algorithm = c.system;
    run.bytes = collectives[0].bytes;
    run.pipeline_bytes = c.pipeline_bytes;
    run.warmup = c.warmup;
    run.iterations = c.iterations;
    std::vector<int> ranks;
    for (int h : jobs[0].hosts) ranks.push_back(rank_entity[h]);
    baseline = std::make_unique<Baseline>(&world, ranks, run);
    baseline->Start();
    engine.run();
    jobs[0].results.seconds = {baseline->seconds()};
    load[0] = fabric.Load(Now());  // every iteration, warm-up included
  }
  const double wall =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - wall_start).count();

  FILE* out = c.csv.empty() ? stdout : std::fopen(c.csv.c_str(), "a");
  if (out == nullptr) {
    std::fprintf(stderr, "tributary_sim: cannot open %s\n", c.csv.c_str());
    return 1;
  }
  if (c.csv_header) {
    std::fprintf(out, "scenario,system,fabric,levels,hosts,ranks,job,bytes,time_us,algbw_GBps,"
                      "busbw_GBps,busbw_of_link,l0_util,l1_util,l2_util,l1_bytes,l2_bytes,drops,"
                      "retransmissions,wrong,failed,tree_levels,sim_s,wall_s\n");
  }
  int rc = 0;
  for (const Job& job : jobs) {
    const JobResults& r = job.results;
    if (r.wrong_elements || r.failed) {
      std::fprintf(stderr, "tributary_sim: job %u: %llu wrong elements, %llu ranks failed %s\n",
                   job.id, static_cast<unsigned long long>(r.wrong_elements),
                   static_cast<unsigned long long>(r.failed), r.first_error.c_str());
      rc = 1;
    }
    uint32_t depth = 0;
    for (const manager::PlacedNode& n : job.placement.nodes) depth = std::max(depth, n.level + 1);
    const double n = static_cast<double>(job.hosts.size());
    for (size_t col = 0; col < collectives.size(); ++col) {
      const std::vector<double>& t = r.seconds[col];
      if (t.empty()) continue;
      const double mean = std::accumulate(t.begin(), t.end(), 0.0) / t.size();
      const double algbw = collectives[col].bytes / mean / 1e9;
      const double busbw = algbw * 2 * (n - 1) / n;
      std::fprintf(out, "%s,%s,%s,%d,%d,%zu,%u,%llu,%.3f,%.6g,%.6g,%.6g,%s,%llu,%llu,%llu,%u,%.6f,%.1f\n",
                   c.scenario.c_str(), c.system.c_str(), c.fabric.kind.c_str(), fabric.levels(),
                   c.hosts, job.hosts.size(), job.id,
                   static_cast<unsigned long long>(collectives[col].bytes), mean * 1e6, algbw,
                   busbw, busbw / (c.fabric.link_gbps / 8), LevelsText(load[col]).c_str(),
                   static_cast<unsigned long long>(r.totals.retransmissions),
                   static_cast<unsigned long long>(r.wrong_elements),
                   static_cast<unsigned long long>(r.failed), depth, Now(), wall);
    }
  }
  if (out != stdout) std::fclose(out);
  std::fprintf(stderr, "tributary_sim: %.1f s simulated in %.1f s, %llu packets (%llu dropped)\n",
               Now(), wall, static_cast<unsigned long long>(world.packets_sent),
               static_cast<unsigned long long>(world.packets_dropped));
  return rc;
}

}  // namespace
}  // namespace tributary::sim

int main(int argc, char** argv) {
  tributary::sim::Config c;
  CLI::App app{"Tributary at scale: the real engine and ranks in a SimGrid fat tree"};
  app.add_option("--system", c.system, "tributary, ring or tree")
      ->check(CLI::IsMember({"tributary", "ring", "tree"}));
  app.add_option("--scenario", c.scenario, "label for the CSV");
  app.add_option("--hosts", c.hosts, "hosts (one rank each)")->check(CLI::Range(2, 65536));
  app.add_option("--fabric", c.fabric.kind, "fat-tree, rail or star");
  app.add_option("--radix", c.fabric.radix, "switch radix");
  app.add_option("--levels", c.fabric.levels, "fat-tree levels (2, 3; 0: fewest)");
  app.add_option("--gbps", c.fabric.link_gbps, "link rate, Gb/s");
  app.add_option("--latency-us", c.fabric.latency_us, "per hop");
  app.add_option("--oversub", c.fabric.oversub, "uplink oversubscription (leaf and spine)");
  app.add_option("--buffer-mb", c.fabric.buffer_bytes, "per port, bytes")->default_val(64 << 20);
  app.add_option("--loss", c.fabric.loss, "random loss per port crossing");
  app.add_option("--seed", c.fabric.seed, "loss and ECMP seed");
  app.add_option("--host-us", c.world.host_overhead_us, "software per message and host end");
  app.add_option("--frame-bytes", c.world.frame_bytes, "per packet beyond header and payload");
  app.add_option("--agg-ns", c.agg.packet_ns, "aggregator time per packet");
  app.add_option("--agg-gbps", c.agg.gbps, "aggregator reduce rate (0: free)");
  app.add_option("--uplink-poll-us", c.agg.uplink_poll_us, "aggregator uplink timer period");
  app.add_option("--sizes", c.sizes, "all-reduce sizes (8, 64K, 64M, 1G)")->delimiter(',');
  app.add_option("--warmup", c.warmup);
  app.add_option("--iterations", c.iterations)->check(CLI::Range(1, 1000));
  app.add_option("--payload", c.payload, "fragment payload on the wire")
      ->check(CLI::Range(64u, 1u << 24));
  app.add_option("--real-payload", c.real_payload, "of it, bytes really reduced (multiple of 64)")
      ->check(CLI::Range(64u, 65024u));
  app.add_option("--window", c.window, "fragments in flight per rank (slots)");
  app.add_option("--congestion-target-us", c.congestion_target_us, "0: off");
  app.add_option("--window-poll", c.window_poll);
  app.add_option("--rto-min-us", c.rto_min_us);
  app.add_option("--pipeline-bytes", c.pipeline_bytes, "baselines' message size");
  app.add_option("--jobs", c.jobs, "1, or 2 (even and odd hosts)")->check(CLI::Range(1, 2));
  app.add_option("--straggler-us", c.straggler_us, "one rank starts each iteration this late");
  app.add_option("--fail-at-us", c.fail_at_us, "an inner aggregator fails this far into the "
                 "first measured iteration");
  app.add_option("--fail-for-us", c.fail_for_us, "and is back (new engine, re-provisioned) after");
  app.add_option("--csv", c.csv, "append results here (default stdout)");
  app.add_flag("--csv-header", c.csv_header);
  CLI11_PARSE(app, argc, argv);
  if (c.real_payload % 64 != 0 || c.real_payload > c.payload) {
    std::fprintf(stderr, "tributary_sim: --real-payload must be a multiple of 64, <= --payload\n");
    return 2;
  }
  tributary::base::SetLogLevel(tributary::base::LogLevel::kError);
  // SimGrid reads its own --cfg options; hand it only the program name.
  int sg_argc = 1;
  return tributary::sim::Run(c, sg_argc, argv);
}
