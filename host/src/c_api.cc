// SPDX-License-Identifier: Apache-2.0
// C API (tributary.h) over the C++ API.
//
// Nothing throws across extern "C": every entry point runs inside Guard(),
// which turns any exception (allocation failure above all) into
// TRIB_RESOURCE_EXHAUSTED or TRIB_INTERNAL. Every trib_status_t entry point
// sets the thread-local message, to the failure's text or to "" on success.
// Handles are checked against a table of live ones before use, so a
// destroyed or foreign handle is an error, not a use-after-free. The
// versioned structs are converted in c_config.cc.
//
// Thread-safety: the live-handle table and each communicator's list of
// buffer handles are guarded by mutexes; the C++ objects guard themselves.
#include "tributary/tributary.h"

#include <algorithm>
#include <cstring>
#include <mutex>
#include <new>
#include <string>
#include <unordered_set>
#include <vector>

#include "host/src/c_config.h"
#include "tributary/communicator.h"
#include "tributary/log.h"
#include "tributary/types.h"

struct trib_buffer;
struct trib_comm {
  std::unique_ptr<tributary::Communicator> comm;
  std::mutex mu;
  std::vector<trib_buffer*> buffers;  // owned; freed with the communicator; guarded by mu
};
struct trib_buffer {
  tributary::Buffer buffer;
  trib_comm* owner;
};
struct trib_request {
  tributary::Request request;
};

// The C enums are the C++ ones (and so the wire's codes).
static_assert(TRIB_INT8 == static_cast<int>(tributary::DataType::kInt8) &&
              TRIB_UINT8 == static_cast<int>(tributary::DataType::kUint8) &&
              TRIB_INT32 == static_cast<int>(tributary::DataType::kInt32) &&
              TRIB_UINT32 == static_cast<int>(tributary::DataType::kUint32) &&
              TRIB_INT64 == static_cast<int>(tributary::DataType::kInt64) &&
              TRIB_UINT64 == static_cast<int>(tributary::DataType::kUint64) &&
              TRIB_FLOAT16 == static_cast<int>(tributary::DataType::kFloat16) &&
              TRIB_FLOAT32 == static_cast<int>(tributary::DataType::kFloat32) &&
              TRIB_FLOAT64 == static_cast<int>(tributary::DataType::kFloat64) &&
              TRIB_BFLOAT16 == static_cast<int>(tributary::DataType::kBfloat16) &&
              TRIB_FLOAT8E4M3 == static_cast<int>(tributary::DataType::kFloat8E4m3) &&
              TRIB_FLOAT8E5M2 == static_cast<int>(tributary::DataType::kFloat8E5m2),
              "trib_dtype_t must match tributary::DataType");
static_assert(TRIB_SUM == static_cast<int>(tributary::ReduceOp::kSum) &&
              TRIB_PROD == static_cast<int>(tributary::ReduceOp::kProd) &&
              TRIB_MIN == static_cast<int>(tributary::ReduceOp::kMin) &&
              TRIB_MAX == static_cast<int>(tributary::ReduceOp::kMax) &&
              TRIB_AVG == static_cast<int>(tributary::ReduceOp::kAvg),
              "trib_op_t must match tributary::ReduceOp");
static_assert(TRIB_UNIMPLEMENTED == static_cast<int>(tributary::StatusCode::kUnimplemented) &&
              TRIB_MISMATCH == static_cast<int>(tributary::StatusCode::kMismatch) &&
              TRIB_PERMISSION_DENIED ==
                  static_cast<int>(tributary::StatusCode::kPermissionDenied),
              "trib_status_t must match tributary::StatusCode");
static_assert(TRIB_LOG_TRACE == static_cast<int>(tributary::LogLevel::kTrace) &&
              TRIB_LOG_OFF == static_cast<int>(tributary::LogLevel::kOff),
              "trib_log_level_t must match tributary::LogLevel");

namespace {

using tributary::Status;
using tributary::internal::CheckStructSize;
using tributary::internal::RawEnum;

thread_local std::string g_last_error;

// Live handles. Every entry point checks its handles here first, so a
// destroyed or foreign handle is an error message, not a use-after-free.
std::mutex g_handles_mu;
std::unordered_set<const void*> g_live;  // guarded by g_handles_mu

bool IsLive(const void* h) {
  std::lock_guard<std::mutex> lock(g_handles_mu);
  return g_live.count(h) != 0;
}
void MarkLive(const void* h) {
  std::lock_guard<std::mutex> lock(g_handles_mu);
  g_live.insert(h);
}
bool Retire(const void* h) {
  std::lock_guard<std::mutex> lock(g_handles_mu);
  return g_live.erase(h) != 0;
}

trib_status_t Report(const Status& s) {
  g_last_error = s.ok() ? std::string() : s.ToString();
  return static_cast<trib_status_t>(s.code());
}
trib_status_t Ok() { return Report(Status::Ok()); }

trib_status_t Fail(trib_status_t code, const std::string& msg) {
  g_last_error = tributary::StatusCodeName(static_cast<tributary::StatusCode>(code));
  g_last_error += ": " + msg;
  return code;
}
trib_status_t NullArgument(const char* call) {
  return Fail(TRIB_INVALID_ARGUMENT, std::string(call) + ": null argument");
}

template <typename F>
trib_status_t Guard(F&& f) {
  try {
    return f();
  } catch (const std::bad_alloc&) {
    return Fail(TRIB_RESOURCE_EXHAUSTED, "out of memory");
  } catch (const std::exception& e) {
    return Fail(TRIB_INTERNAL, e.what());
  } catch (...) {
    return Fail(TRIB_INTERNAL, "unknown exception");
  }
}

trib_status_t NotLive(const char* what, const char* call) {
  return Fail(TRIB_FAILED_PRECONDITION, std::string(call) + ": " + what +
                                            " handle is not live (destroyed, freed, or never "
                                            "created)");
}

// Checks a communicator argument: NULL or not live is an error.
bool CheckComm(trib_comm_t* comm, const char* call, trib_status_t* error) {
  if (comm == nullptr) {
    *error = NullArgument(call);
    return false;
  }
  if (!IsLive(comm)) {
    *error = NotLive("communicator", call);
    return false;
  }
  return true;
}

trib_status_t Wrap(tributary::Result<std::unique_ptr<tributary::Communicator>> comm,
                   trib_comm_t** out) {
  if (!comm.ok()) return Report(comm.status());
  *out = new trib_comm{std::move(comm.value()), {}, {}};
  MarkLive(*out);
  return Ok();
}

trib_status_t NewRequest(tributary::Result<tributary::Request> r, trib_request_t** out) {
  if (!r.ok()) return Report(r.status());
  *out = new trib_request{r.value()};
  MarkLive(*out);
  return Ok();
}

trib_status_t NewBuffer(trib_comm_t* comm, tributary::Result<tributary::Buffer> b,
                        trib_buffer_t** out) {
  if (!b.ok()) return Report(b.status());
  auto* handle = new trib_buffer{b.value(), comm};
  {
    std::lock_guard<std::mutex> lock(comm->mu);
    comm->buffers.push_back(handle);
  }
  MarkLive(handle);
  *out = handle;
  return Ok();
}

// The C++ enums are one byte: a C value outside 0..255 would wrap into a
// valid code when cast, so it is refused here; the C++ API checks the rest
// (which codes exist is its business, not this file's).
bool FitsWireCode(int value) { return value >= 0 && value <= 255; }

// Both codes as ints, or a failure naming the one out of range.
// Takes the enums by reference: a copy would load them as their type.
trib_status_t CheckDtypeOp(const trib_dtype_t& dtype_arg, const trib_op_t& op_arg,
                           const char* call, tributary::DataType* dtype_out,
                           tributary::ReduceOp* op_out) {
  const int dtype = RawEnum(dtype_arg);
  const int op = RawEnum(op_arg);
  if (!FitsWireCode(dtype)) {
    return Fail(TRIB_INVALID_ARGUMENT, std::string(call) + ": dtype " + std::to_string(dtype) +
                                           " is not a trib_dtype_t");
  }
  if (!FitsWireCode(op)) {
    return Fail(TRIB_INVALID_ARGUMENT,
                std::string(call) + ": op " + std::to_string(op) + " is not a trib_op_t");
  }
  *dtype_out = static_cast<tributary::DataType>(dtype);
  *op_out = static_cast<tributary::ReduceOp>(op);
  return TRIB_OK;
}

// The raw-pointer collectives: comm, out and dtype/op checked, then
// `submit(dtype, op)` and a new request in *out.
template <typename Submit>
trib_status_t SubmitPointerCall(trib_comm_t* comm, const char* call, trib_dtype_t dtype,
                                trib_op_t op, trib_request_t** out, Submit submit) {
  return Guard([&] {
    trib_status_t error;
    if (!CheckComm(comm, call, &error)) return error;
    if (out == nullptr) return NullArgument(call);
    tributary::DataType t;
    tributary::ReduceOp o;
    if (trib_status_t e = CheckDtypeOp(dtype, op, call, &t, &o); e != TRIB_OK) return e;
    return NewRequest(submit(t, o), out);
  });
}

// The C log sink behind the C++ one. The C++ sink is called under the log
// mutex, which SetLogSink also takes, so once SetLogSink returns no call to
// the previous CSink can be running and it may be freed.
struct CSink {
  trib_log_sink_t fn;
  void* user;
};
std::mutex g_sink_mu;  // serializes trib_set_log_sink
CSink* g_sink = nullptr;  // guarded by g_sink_mu

void CallCSink(tributary::LogLevel level, const char* subsystem, const char* message,
               void* user) {
  const CSink* s = static_cast<const CSink*>(user);
  s->fn(static_cast<trib_log_level_t>(level), subsystem, message, s->user);
}

}  // namespace

extern "C" {

const char* trib_last_error(void) { return g_last_error.c_str(); }
const char* trib_version(void) { return tributary::Version(); }
const char* trib_status_name(trib_status_t status) {
  return tributary::StatusCodeName(static_cast<tributary::StatusCode>(RawEnum(status)));
}
const char* trib_dtype_name(trib_dtype_t dtype_arg) {
  const int dtype = RawEnum(dtype_arg);
  if (!FitsWireCode(dtype)) return nullptr;
  const auto t = static_cast<tributary::DataType>(dtype);
  return tributary::DataTypeSize(t) != 0 ? tributary::DataTypeName(t) : nullptr;
}
size_t trib_dtype_size(trib_dtype_t dtype_arg) {
  const int dtype = RawEnum(dtype_arg);
  return FitsWireCode(dtype) ? tributary::DataTypeSize(static_cast<tributary::DataType>(dtype))
                             : 0;
}
const char* trib_op_name(trib_op_t op_arg) {
  const int op = RawEnum(op_arg);
  if (!FitsWireCode(op)) return nullptr;
  const char* name = tributary::ReduceOpName(static_cast<tributary::ReduceOp>(op));
  return strcmp(name, "invalid") == 0 ? nullptr : name;
}
const char* trib_memory_kind_name(trib_memory_kind_t kind_arg) {
  const int kind = RawEnum(kind_arg);
  if (kind < TRIB_MEMORY_HOST || kind > TRIB_MEMORY_DMABUF) return nullptr;
  return tributary::MemoryKindName(static_cast<tributary::MemoryKind>(kind));
}

trib_status_t trib_config_init(trib_config_t* config) {
  return Guard([&] {
    if (config == nullptr) return NullArgument("trib_config_init");
    Status s = CheckStructSize(config->struct_size, tributary::internal::ConfigMinSize(),
                               sizeof(trib_config_t), "trib_config_t");
    if (!s.ok()) return Report(s);
    auto options = tributary::Options::FromEnvironment();
    if (!options.ok()) return Report(options.status());
    tributary::CommConfig c;
    c.options = options.value();
    tributary::internal::CommConfigToC(c, config);
    return Ok();
  });
}

trib_status_t trib_config_init_from_env(trib_config_t* config) {
  return Guard([&] {
    if (config == nullptr) return NullArgument("trib_config_init_from_env");
    Status s = CheckStructSize(config->struct_size, tributary::internal::ConfigMinSize(),
                               sizeof(trib_config_t), "trib_config_t");
    if (!s.ok()) return Report(s);
    auto c = tributary::CommConfig::FromEnvironment();
    if (!c.ok()) return Report(c.status());
    tributary::internal::CommConfigToC(c.value(), config);
    return Ok();
  });
}

trib_status_t trib_comm_create(const trib_comm_config_t* config, trib_comm_t** out) {
  return Guard([&] {
    if (config == nullptr || out == nullptr) return NullArgument("trib_comm_create");
    *out = nullptr;
    auto options = tributary::Options::FromEnvironment();
    if (!options.ok()) return Report(options.status());
    tributary::CommConfig c;
    c.job_id = config->job_id;
    c.job_key = config->job_key;
    c.rank = config->rank;
    c.world_size = config->world_size;
    c.options = options.value();
    if (config->aggregator != nullptr) c.options.aggregator = config->aggregator;
    return Wrap(tributary::Communicator::Create(c), out);
  });
}

trib_status_t trib_comm_create_with_config(const trib_config_t* config, trib_comm_t** out) {
  return Guard([&] {
    if (config == nullptr || out == nullptr) return NullArgument("trib_comm_create_with_config");
    *out = nullptr;
    Status s = CheckStructSize(config->struct_size, tributary::internal::ConfigMinSize(),
                               sizeof(trib_config_t), "trib_config_t");
    if (!s.ok()) return Report(s);
    // Fields beyond a smaller struct_size take what trib_config_init would
    // have set: the environment's defaults.
    tributary::CommConfig defaults;
    if (config->struct_size < sizeof(trib_config_t)) {
      auto options = tributary::Options::FromEnvironment();
      if (!options.ok()) return Report(options.status());
      defaults.options = options.value();
    }
    tributary::CommConfig c;
    s = tributary::internal::CommConfigFromC(*config, defaults, &c);
    if (!s.ok()) return Report(s);
    return Wrap(tributary::Communicator::Create(c), out);
  });
}

trib_status_t trib_comm_create_from_env(trib_comm_t** out) {
  return Guard([&] {
    if (out == nullptr) return NullArgument("trib_comm_create_from_env");
    *out = nullptr;
    return Wrap(tributary::Communicator::CreateFromEnvironment(), out);
  });
}

trib_status_t trib_comm_destroy(trib_comm_t* comm) {
  return Guard([&] {
    if (comm == nullptr) return Ok();
    if (!Retire(comm)) return NotLive("communicator", "trib_comm_destroy");
    for (trib_buffer* b : comm->buffers) {
      Retire(b);
      delete b;
    }
    delete comm;
    return Ok();
  });
}

trib_status_t trib_comm_rank(trib_comm_t* comm, uint32_t* rank) {
  return Guard([&] {
    trib_status_t error;
    if (!CheckComm(comm, "trib_comm_rank", &error)) return error;
    if (rank == nullptr) return NullArgument("trib_comm_rank");
    *rank = comm->comm->rank();
    return Ok();
  });
}

trib_status_t trib_comm_world_size(trib_comm_t* comm, uint32_t* world_size) {
  return Guard([&] {
    trib_status_t error;
    if (!CheckComm(comm, "trib_comm_world_size", &error)) return error;
    if (world_size == nullptr) return NullArgument("trib_comm_world_size");
    *world_size = comm->comm->world_size();
    return Ok();
  });
}

trib_status_t trib_comm_health(trib_comm_t* comm, trib_status_t* status, char* message,
                               size_t capacity) {
  return Guard([&] {
    trib_status_t error;
    if (!CheckComm(comm, "trib_comm_health", &error)) return error;
    if (status == nullptr || (message == nullptr && capacity != 0)) {
      return NullArgument("trib_comm_health");
    }
    const Status health = comm->comm->Health();
    *status = static_cast<trib_status_t>(health.code());
    if (capacity != 0) snprintf(message, capacity, "%s", health.message().c_str());
    return Ok();
  });
}

trib_status_t trib_comm_stats(trib_comm_t* comm, trib_stats_t* stats) {
  return Guard([&] {
    trib_status_t error;
    if (!CheckComm(comm, "trib_comm_stats", &error)) return error;
    if (stats == nullptr) return NullArgument("trib_comm_stats");
    Status s = CheckStructSize(stats->struct_size, tributary::internal::StatsMinSize(),
                               sizeof(trib_stats_t), "trib_stats_t");
    if (!s.ok()) return Report(s);
    tributary::internal::StatsToC(comm->comm->Stats(), stats);
    return Ok();
  });
}

trib_status_t trib_comm_straggler_report(trib_comm_t* comm, uint32_t timeout_ms,
                                         trib_straggler_report_t* report) {
  return Guard([&] {
    trib_status_t error;
    if (!CheckComm(comm, "trib_comm_straggler_report", &error)) return error;
    if (report == nullptr) return NullArgument("trib_comm_straggler_report");
    Status s = CheckStructSize(report->struct_size, tributary::internal::StragglerReportMinSize(),
                               sizeof(trib_straggler_report_t), "trib_straggler_report_t");
    if (!s.ok()) return Report(s);
    auto r = comm->comm->FetchStragglerReport(std::chrono::milliseconds(timeout_ms));
    if (!r.ok()) return Report(r.status());
    tributary::internal::StragglerReportToC(r.value(), report);
    return Ok();
  });
}

trib_status_t trib_register(trib_comm_t* comm, void* data, size_t bytes, trib_buffer_t** out) {
  return Guard([&] {
    trib_status_t error;
    if (!CheckComm(comm, "trib_register", &error)) return error;
    if (out == nullptr) return NullArgument("trib_register");
    return NewBuffer(comm, comm->comm->Register(data, bytes), out);
  });
}

trib_status_t trib_register_memory(trib_comm_t* comm, const trib_memory_desc_t* memory,
                                   trib_buffer_t** out) {
  return Guard([&] {
    trib_status_t error;
    if (!CheckComm(comm, "trib_register_memory", &error)) return error;
    if (memory == nullptr || out == nullptr) return NullArgument("trib_register_memory");
    Status s = CheckStructSize(memory->struct_size, tributary::internal::MemoryDescMinSize(),
                               sizeof(trib_memory_desc_t), "trib_memory_desc_t");
    if (!s.ok()) return Report(s);
    tributary::MemoryDesc m;
    s = tributary::internal::MemoryDescFromC(*memory, &m);
    if (!s.ok()) return Report(s);
    return NewBuffer(comm, comm->comm->Register(m), out);
  });
}

trib_status_t trib_deregister(trib_comm_t* comm, trib_buffer_t* buffer) {
  return Guard([&] {
    trib_status_t error;
    if (!CheckComm(comm, "trib_deregister", &error)) return error;
    if (buffer == nullptr) return NullArgument("trib_deregister");
    // Taken out of the live set first: of two racing calls, the one that
    // took it reads and frees it; the other never touches it.
    if (!Retire(buffer)) return NotLive("buffer", "trib_deregister");
    if (buffer->owner != comm) {
      MarkLive(buffer);
      return Fail(TRIB_INVALID_ARGUMENT, "trib_deregister: buffer belongs to another communicator");
    }
    Status s = comm->comm->Deregister(buffer->buffer);
    if (!s.ok()) {
      MarkLive(buffer);  // still registered (e.g. in use): the caller may try again
      return Report(s);
    }
    {
      std::lock_guard<std::mutex> lock(comm->mu);
      comm->buffers.erase(std::find(comm->buffers.begin(), comm->buffers.end(), buffer));
    }
    delete buffer;
    return Report(s);
  });
}

trib_status_t trib_buffer_info(trib_buffer_t* buffer, void** data, size_t* bytes,
                               trib_memory_kind_t* kind) {
  return Guard([&] {
    if (buffer == nullptr) return NullArgument("trib_buffer_info");
    if (!IsLive(buffer)) return NotLive("buffer", "trib_buffer_info");
    if (data != nullptr) *data = buffer->buffer.data();
    if (bytes != nullptr) *bytes = buffer->buffer.size();
    if (kind != nullptr) *kind = static_cast<trib_memory_kind_t>(buffer->buffer.kind());
    return Ok();
  });
}

trib_status_t trib_allreduce(trib_comm_t* comm, trib_buffer_t* send, trib_buffer_t* recv,
                             size_t count, trib_dtype_t dtype, trib_op_t op,
                             trib_request_t** out) {
  return Guard([&] {
    trib_status_t error;
    if (!CheckComm(comm, "trib_allreduce", &error)) return error;
    if (send == nullptr || recv == nullptr || out == nullptr) return NullArgument("trib_allreduce");
    if (!IsLive(send) || !IsLive(recv)) return NotLive("buffer", "trib_allreduce");
    if (send->owner != comm || recv->owner != comm) {
      return Fail(TRIB_INVALID_ARGUMENT, "trib_allreduce: buffer belongs to another communicator");
    }
    tributary::DataType t;
    tributary::ReduceOp o;
    if (trib_status_t e = CheckDtypeOp(dtype, op, "trib_allreduce", &t, &o); e != TRIB_OK) {
      return e;
    }
    return NewRequest(comm->comm->AllReduce(send->buffer, recv->buffer, count, t, o), out);
  });
}

trib_status_t trib_allreduce_ptr(trib_comm_t* comm, const void* send, void* recv, size_t count,
                                 trib_dtype_t dtype, trib_op_t op, trib_request_t** out) {
  return SubmitPointerCall(comm, "trib_allreduce_ptr", dtype, op, out, [&](auto t, auto o) {
    return comm->comm->AllReduce(send, recv, count, t, o);
  });
}

trib_status_t trib_allreduce_stream(trib_comm_t* comm, const void* send, void* recv,
                                    size_t count, trib_dtype_t dtype, trib_op_t op,
                                    void* cuda_stream, trib_request_t** out) {
  return SubmitPointerCall(comm, "trib_allreduce_stream", dtype, op, out, [&](auto t, auto o) {
    return comm->comm->AllReduce(send, recv, count, t, o, cuda_stream);
  });
}

trib_status_t trib_reduce_scatter_ptr(trib_comm_t* comm, const void* send, void* recv,
                                      size_t count, trib_dtype_t dtype, trib_op_t op,
                                      trib_request_t** out) {
  return SubmitPointerCall(comm, "trib_reduce_scatter_ptr", dtype, op, out, [&](auto t, auto o) {
    return comm->comm->ReduceScatter(send, recv, count, t, o);
  });
}

trib_status_t trib_allgather_ptr(trib_comm_t* comm, const void* send, void* recv, size_t count,
                                 trib_dtype_t dtype, trib_request_t** out) {
  return SubmitPointerCall(comm, "trib_allgather_ptr", dtype, TRIB_SUM, out, [&](auto t, auto) {
    return comm->comm->AllGather(send, recv, count, t);
  });
}

trib_status_t trib_reduce_scatter_stream(trib_comm_t* comm, const void* send, void* recv,
                                         size_t count, trib_dtype_t dtype, trib_op_t op,
                                         void* cuda_stream, trib_request_t** out) {
  return SubmitPointerCall(comm, "trib_reduce_scatter_stream", dtype, op, out, [&](auto t, auto o) {
    return comm->comm->ReduceScatter(send, recv, count, t, o, cuda_stream);
  });
}

trib_status_t trib_allgather_stream(trib_comm_t* comm, const void* send, void* recv, size_t count,
                                    trib_dtype_t dtype, void* cuda_stream, trib_request_t** out) {
  return SubmitPointerCall(comm, "trib_allgather_stream", dtype, TRIB_SUM, out, [&](auto t, auto) {
    return comm->comm->AllGather(send, recv, count, t, cuda_stream);
  });
}

trib_status_t trib_test(trib_request_t* request, int* done) {
  return Guard([&] {
    if (request == nullptr || done == nullptr) return NullArgument("trib_test");
    if (!IsLive(request)) return NotLive("request", "trib_test");
    Status s;
    *done = request->request.Test(&s) ? 1 : 0;
    return Report(s);
  });
}

trib_status_t trib_wait(trib_request_t* request) {
  return Guard([&] {
    if (request == nullptr) return NullArgument("trib_wait");
    if (!IsLive(request)) return NotLive("request", "trib_wait");
    return Report(request->request.Wait());
  });
}

trib_status_t trib_wait_timeout(trib_request_t* request, uint32_t timeout_ms, int* done) {
  return Guard([&] {
    if (request == nullptr || done == nullptr) return NullArgument("trib_wait_timeout");
    if (!IsLive(request)) return NotLive("request", "trib_wait_timeout");
    // WaitFor's kTimedOut is ambiguous (the operation's own timeout has the
    // same code), so ask Test() afterwards whether it finished.
    (void)request->request.WaitFor(std::chrono::milliseconds(timeout_ms));
    Status s;
    *done = request->request.Test(&s) ? 1 : 0;
    return Report(s);
  });
}

trib_status_t trib_request_free(trib_request_t* request) {
  return Guard([&] {
    if (request == nullptr) return Ok();
    if (!Retire(request)) return NotLive("request", "trib_request_free");
    delete request;
    return Ok();
  });
}

trib_status_t trib_set_log_sink(trib_log_sink_t sink, void* user) {
  return Guard([&] {
    std::lock_guard<std::mutex> lock(g_sink_mu);
    CSink* next = sink != nullptr ? new CSink{sink, user} : nullptr;
    if (next != nullptr) {
      tributary::SetLogSink(&CallCSink, next);
    } else {
      tributary::SetLogSink(nullptr, nullptr);
    }
    delete g_sink;  // no longer called (see CSink)
    g_sink = next;
    return Ok();
  });
}

trib_status_t trib_set_log_level(trib_log_level_t level_arg) {
  return Guard([&] {
    const int level = RawEnum(level_arg);
    if (level < TRIB_LOG_TRACE || level > TRIB_LOG_OFF) {
      return Fail(TRIB_INVALID_ARGUMENT, "trib_set_log_level: level " +
                                             std::to_string(level) +
                                             " is not a trib_log_level_t (0 trace .. 5 off)");
    }
    tributary::SetLogLevel(static_cast<tributary::LogLevel>(level));
    return Ok();
  });
}

}  // extern "C"
