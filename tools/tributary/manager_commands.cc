// SPDX-License-Identifier: Apache-2.0
// `tributary jobs`, `tributary tree JOB`, `tributary job create|keepalive|end`:
// the control-plane commands, talking to tributary-manager over gRPC.
//
// Each command makes one RPC with a 10 s deadline and prints the reply with
// manager_format.h; an RPC error prints "tributary: <code>: <message>" (the
// manager's message names what is missing) and exits 1. The manager address
// comes from --manager, else $TRIBUTARY_MANAGER, else 127.0.0.1:17900; it
// may list every replica of a highly available manager ("a:p,b:p,c:p"),
// and the call goes to whichever leads (proto/manager_endpoints.h). TLS
// (--manager-ca) and a bearer token (--token-file) when the manager wants
// them.
// Single-threaded (gRPC's own threads aside).
#include <grpcpp/grpcpp.h>

#include <pthread.h>
#include <signal.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <thread>
#include <memory>
#include <sstream>

#include "common/net/host_port.h"
#include "proto/manager.grpc.pb.h"
#include "proto/manager_endpoints.h"
#include "tools/tributary/commands.h"
#include "tools/tributary/manager_format.h"

namespace tributary::cli {
namespace {

namespace v1 = tributary::manager::v1;

constexpr const char* kDefaultManager = "127.0.0.1:17900";

const char* GrpcCodeName(grpc::StatusCode code) {
  switch (code) {
    case grpc::StatusCode::INVALID_ARGUMENT: return "INVALID_ARGUMENT";
    case grpc::StatusCode::NOT_FOUND: return "NOT_FOUND";
    case grpc::StatusCode::PERMISSION_DENIED: return "PERMISSION_DENIED";
    case grpc::StatusCode::UNAUTHENTICATED: return "UNAUTHENTICATED";
    case grpc::StatusCode::ABORTED: return "ABORTED";
    case grpc::StatusCode::RESOURCE_EXHAUSTED: return "RESOURCE_EXHAUSTED";
    case grpc::StatusCode::FAILED_PRECONDITION: return "FAILED_PRECONDITION";
    case grpc::StatusCode::UNAVAILABLE: return "UNAVAILABLE";
    case grpc::StatusCode::DEADLINE_EXCEEDED: return "DEADLINE_EXCEEDED";
    default: return "ERROR";
  }
}

// --manager (one or several replicas), --manager-ca, --token-file.
struct ManagerArgs {
  std::string address;
  std::string ca_file;
  std::string token_file;
};

int Fail(const std::string& address, const grpc::Status& s) {
  std::fprintf(stderr, "tributary: manager %s: %s: %s\n", address.c_str(),
               GrpcCodeName(s.error_code()), s.error_message().c_str());
  return 1;
}

void AddManagerOptions(CLI::App* cmd, ManagerArgs* args) {
  args->address = kDefaultManager;
  cmd->add_option("--manager", args->address,
                  "tributary-manager address HOST:PORT, or every replica's, comma-separated "
                  "(the call goes to the leader)")
      ->envname("TRIBUTARY_MANAGER")
      ->capture_default_str()
      ->check([](const std::string& text) {
        const std::vector<std::string> list = manager::SplitAddressList(text);
        if (list.empty()) return std::string("no address");
        for (const std::string& a : list) {
          Result<net::HostPort> parsed = net::ParseHostPort(a);
          if (!parsed.ok()) return parsed.status().message();
        }
        return std::string();
      });
  cmd->add_option("--manager-ca", args->ca_file,
                  "PEM CA certificate: talk TLS to a manager run with --tls-cert")
      ->envname("TRIBUTARY_MANAGER_CA");
  cmd->add_option("--token-file", args->token_file,
                  "file with the bearer token of a manager run with --token-file")
      ->envname("TRIBUTARY_MANAGER_TOKEN_FILE");
}

// The replicas of --manager, or nullptr after printing why (exit code 2).
std::unique_ptr<manager::ManagerEndpoints> Connect(const ManagerArgs& args, int* exit_code) {
  manager::ManagerConnectionOptions o;
  o.addresses = manager::SplitAddressList(args.address);
  o.ca_file = args.ca_file;
  std::string error;
  if (!args.token_file.empty() && !manager::ReadSecretFile(args.token_file, &o.token, &error)) {
    std::fprintf(stderr, "tributary: --token-file: %s\n", error.c_str());
    *exit_code = 2;
    return nullptr;
  }
  auto endpoints = std::make_unique<manager::ManagerEndpoints>(o);
  if (!endpoints->Init(&error)) {
    std::fprintf(stderr, "tributary: %s\n", error.c_str());
    *exit_code = 2;
    return nullptr;
  }
  return endpoints;
}

constexpr int kCallDeadlineMs = 10000;

std::vector<std::string> SplitHosts(const std::string& list) {
  std::vector<std::string> out;
  std::stringstream in(list);
  std::string item;
  while (std::getline(in, item, ',')) {
    if (!item.empty()) out.push_back(item);
  }
  return out;
}

}  // namespace

void RegisterJobsCommand(CLI::App& app, int* exit_code) {
  auto* cmd = app.add_subcommand("jobs", "list the manager's daemons and jobs");
  auto args = std::make_shared<ManagerArgs>();
  AddManagerOptions(cmd, args.get());
  cmd->callback([args, exit_code] {
    auto manager = Connect(*args, exit_code);
    if (manager == nullptr) return;
    v1::ListReply reply;
    const grpc::Status s = manager->Call(
        [&](v1::Manager::Stub* stub, grpc::ClientContext* ctx) {
          return stub->List(ctx, v1::ListRequest(), &reply);
        },
        kCallDeadlineMs);
    if (!s.ok()) {
      *exit_code = Fail(manager->current(), s);
      return;
    }
    std::fputs(FormatJobsTables(reply).c_str(), stdout);
  });
}

void RegisterTreeCommand(CLI::App& app, int* exit_code) {
  auto* cmd = app.add_subcommand("tree", "draw a job's aggregation tree");
  auto args = std::make_shared<ManagerArgs>();
  auto job_id = std::make_shared<uint32_t>(0);
  cmd->add_option("JOB", *job_id, "job id")->required();
  AddManagerOptions(cmd, args.get());
  cmd->callback([args, job_id, exit_code] {
    auto manager = Connect(*args, exit_code);
    if (manager == nullptr) return;
    v1::JobRef ref;
    ref.set_job_id(*job_id);
    v1::Job job;
    const grpc::Status s = manager->Call(
        [&](v1::Manager::Stub* stub, grpc::ClientContext* ctx) {
          return stub->GetJob(ctx, ref, &job);
        },
        kCallDeadlineMs);
    if (!s.ok()) {
      *exit_code = Fail(manager->current(), s);
      return;
    }
    std::fputs(FormatJobTree(job).c_str(), stdout);
  });
}

void RegisterJobCommand(CLI::App& app, int* exit_code) {
  auto* job = app.add_subcommand("job", "create or end a job on the manager");
  job->require_subcommand(1);

  struct CreateArgs {
    ManagerArgs manager;
    std::string hosts, name;
    uint32_t payload_bytes = 0, slots = 0, timeout_ms = 0;
  };
  auto create_args = std::make_shared<CreateArgs>();
  auto* create = job->add_subcommand("create", "place a job; prints its id, key and ranks");
  AddManagerOptions(create, &create_args->manager);
  create->add_option("--hosts", create_args->hosts, "rank hosts h0,h1,... (rank i on host i)")
      ->required();
  create->add_option("--name", create_args->name, "job name");
  create->add_option("--payload-bytes", create_args->payload_bytes, "0: manager default (8192)");
  create->add_option("--slots", create_args->slots, "0: manager default (64)");
  create->add_option("--heartbeat-timeout-ms", create_args->timeout_ms,
                     "0: manager default; the job ends when nobody heartbeats it");
  create->callback([create_args, exit_code] {
    v1::CreateJobRequest request;
    request.set_name(create_args->name);
    for (const auto& h : SplitHosts(create_args->hosts)) request.add_rank_hosts(h);
    request.set_payload_bytes(create_args->payload_bytes);
    request.set_slot_count(create_args->slots);
    request.set_heartbeat_timeout_ms(create_args->timeout_ms);
    auto manager = Connect(create_args->manager, exit_code);
    if (manager == nullptr) return;
    v1::Job reply;
    const grpc::Status s = manager->Call(
        [&](v1::Manager::Stub* stub, grpc::ClientContext* ctx) {
          return stub->CreateJob(ctx, request, &reply);
        },
        kCallDeadlineMs);
    if (!s.ok()) {
      *exit_code = Fail(manager->current(), s);
      return;
    }
    std::fputs(FormatCreatedJob(reply).c_str(), stdout);
  });

  // keepalive: what a launcher runs beside its ranks. The manager ends a
  // job whose heartbeats stop (a crashed launcher leaks nothing); this keeps
  // it alive and exits as soon as the manager says the job is no longer
  // running (a daemon of its tree went down, someone ended it), so the
  // launcher can tear the ranks down with the reason in hand.
  struct KeepaliveArgs {
    ManagerArgs manager;
    std::string key;
    uint32_t job_id = 0, every_ms = 1000, for_s = 0;
  };
  auto keep_args = std::make_shared<KeepaliveArgs>();
  auto* keep = job->add_subcommand(
      "keepalive", "heartbeat a job until SIGTERM/SIGINT (exit 0) or until it stops running (exit 3)");
  keep->add_option("JOB", keep_args->job_id, "job id")->required();
  keep->add_option("--key", keep_args->key, "the job key (hex, as `job create` printed it)")
      ->required();
  keep->add_option("--every-ms", keep_args->every_ms, "heartbeat interval")
      ->check(CLI::Range(10u, 600000u))
      ->capture_default_str();
  keep->add_option("--for-s", keep_args->for_s, "stop after this many seconds (0: until a signal)");
  AddManagerOptions(keep, &keep_args->manager);
  keep->callback([keep_args, exit_code] {
    // SIGTERM and SIGINT blocked before gRPC starts its threads (they
    // inherit the mask) and taken between heartbeats with sigtimedwait(): no
    // asynchronous handler (see manager/manager_main.cc).
    sigset_t stop_signals;
    sigemptyset(&stop_signals);
    sigaddset(&stop_signals, SIGTERM);
    sigaddset(&stop_signals, SIGINT);
    pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
    bool stop = false;
    uint64_t key = 0;
    try {
      size_t used = 0;
      key = std::stoull(keep_args->key, &used, 16);
      if (used != keep_args->key.size()) throw std::invalid_argument("trailing text");
    } catch (const std::exception&) {
      std::fprintf(stderr, "tributary: --key '%s' is not hexadecimal\n", keep_args->key.c_str());
      *exit_code = 2;
      return;
    }
    auto manager = Connect(keep_args->manager, exit_code);
    if (manager == nullptr) return;
    const auto until = keep_args->for_s == 0
                           ? std::chrono::steady_clock::time_point::max()
                           : std::chrono::steady_clock::now() + std::chrono::seconds(keep_args->for_s);
    bool unreachable = false;
    while (!stop && std::chrono::steady_clock::now() < until) {
      v1::JobHeartbeatRequest request;
      request.set_job_id(keep_args->job_id);
      request.set_job_key(key);
      v1::JobHeartbeatReply reply;
      const grpc::Status s = manager->Call(
          [&](v1::Manager::Stub* stub, grpc::ClientContext* ctx) {
            return stub->JobHeartbeat(ctx, request, &reply);
          },
          5000);
      if (s.ok() && reply.state() != "running") {
        std::fprintf(stderr, "tributary: job %u is no longer running: %s\n", keep_args->job_id,
                     reply.state().c_str());
        *exit_code = 3;
        return;
      }
      if (!s.ok() && s.error_code() != grpc::StatusCode::UNAVAILABLE &&
          s.error_code() != grpc::StatusCode::DEADLINE_EXCEEDED) {
        *exit_code = Fail(manager->current(), s) == 0 ? 0 : 3;  // NOT_FOUND, wrong key
        return;
      }
      if (!s.ok() && !unreachable) {
        // The manager restarting is no reason to stop: keep trying.
        std::fprintf(stderr, "tributary: manager %s unreachable (%s); still trying\n",
                     manager->Describe().c_str(), s.error_message().c_str());
      }
      unreachable = !s.ok();
      // The pause, cut short by SIGTERM or SIGINT (one that came during the
      // call above is pending and returns at once).
      const timespec pause{static_cast<time_t>(keep_args->every_ms / 1000),
                           static_cast<long>(keep_args->every_ms % 1000) * 1000000};
      int sig;
      while ((sig = sigtimedwait(&stop_signals, nullptr, &pause)) < 0 && errno == EINTR) {
      }
      stop = sig > 0;
    }
  });

  struct EndArgs {
    ManagerArgs manager;
    std::string reason;
    uint32_t job_id = 0;
  };
  auto end_args = std::make_shared<EndArgs>();
  auto* end = job->add_subcommand("end", "end a job and free its resources");
  end->add_option("JOB", end_args->job_id, "job id")->required();
  end->add_option("--reason", end_args->reason, "recorded in the job's state");
  AddManagerOptions(end, &end_args->manager);
  end->callback([end_args, exit_code] {
    v1::EndJobRequest request;
    request.set_job_id(end_args->job_id);
    request.set_reason(end_args->reason.empty() ? "ended by tributary job end" : end_args->reason);
    auto manager = Connect(end_args->manager, exit_code);
    if (manager == nullptr) return;
    v1::EndJobReply reply;
    const grpc::Status s = manager->Call(
        [&](v1::Manager::Stub* stub, grpc::ClientContext* ctx) {
          return stub->EndJob(ctx, request, &reply);
        },
        kCallDeadlineMs);
    if (!s.ok()) {
      *exit_code = Fail(manager->current(), s);
      return;
    }
    std::printf("job %u ended\n", end_args->job_id);
  });
}

}  // namespace tributary::cli
