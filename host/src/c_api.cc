// C API (tributary.h) over the C++ API. Nothing throws across extern "C":
// every entry point catches std::exception (allocation failure) and reports
// it as TRIB_INTERNAL / TRIB_RESOURCE_EXHAUSTED with a thread-local message.
#include "tributary/tributary.h"

#include <algorithm>
#include <mutex>
#include <new>
#include <unordered_set>
#include <vector>
#include <string>

#include "tributary/communicator.h"

struct trib_buffer;
struct trib_comm {
  std::unique_ptr<tributary::Communicator> comm;
  std::vector<trib_buffer*> buffers;  // owned; freed with the communicator
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

namespace {

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

trib_status_t Report(const tributary::Status& s) {
  g_last_error = s.ok() ? std::string() : s.ToString();
  return static_cast<trib_status_t>(s.code());
}

trib_status_t Fail(trib_status_t code, const char* msg) {
  g_last_error = msg;
  return code;
}

template <typename F>
trib_status_t Guard(F&& f) {
  try {
    return f();
  } catch (const std::bad_alloc&) {
    return Fail(TRIB_RESOURCE_EXHAUSTED, "out of memory");
  } catch (const std::exception& e) {
    return Fail(TRIB_INTERNAL, e.what());
  }
}

trib_status_t NotLive(const char* what, const char* call) {
  g_last_error = std::string(call) + ": " + what +
                 " handle is not live (destroyed, freed, or never created)";
  return TRIB_FAILED_PRECONDITION;
}

}  // namespace

extern "C" {

const char* trib_last_error(void) { return g_last_error.c_str(); }
const char* trib_version(void) { return tributary::Version(); }

trib_status_t trib_comm_create(const trib_comm_config_t* config, trib_comm_t** out) {
  return Guard([&] {
    if (config == nullptr || out == nullptr) {
      return Fail(TRIB_INVALID_ARGUMENT, "trib_comm_create: null argument");
    }
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
    auto comm = tributary::Communicator::Create(c);
    if (!comm.ok()) return Report(comm.status());
    *out = new trib_comm{std::move(comm.value()), {}};
    MarkLive(*out);
    return Report(tributary::Status::Ok());
  });
}

trib_status_t trib_comm_destroy(trib_comm_t* comm) {
  return Guard([&] {
    if (comm == nullptr) return Report(tributary::Status::Ok());
    if (!Retire(comm)) return NotLive("communicator", "trib_comm_destroy");
    for (trib_buffer* b : comm->buffers) {
      Retire(b);
      delete b;
    }
    delete comm;
    return Report(tributary::Status::Ok());
  });
}

trib_status_t trib_register(trib_comm_t* comm, void* data, size_t bytes, trib_buffer_t** out) {
  return Guard([&] {
    if (comm == nullptr || out == nullptr) {
      return Fail(TRIB_INVALID_ARGUMENT, "trib_register: null argument");
    }
    if (!IsLive(comm)) return NotLive("communicator", "trib_register");
    auto b = comm->comm->Register(data, bytes);
    if (!b.ok()) return Report(b.status());
    *out = new trib_buffer{b.value(), comm};
    comm->buffers.push_back(*out);
    MarkLive(*out);
    return Report(tributary::Status::Ok());
  });
}

trib_status_t trib_deregister(trib_comm_t* comm, trib_buffer_t* buffer) {
  return Guard([&] {
    if (comm == nullptr || buffer == nullptr) {
      return Fail(TRIB_INVALID_ARGUMENT, "trib_deregister: null argument");
    }
    if (!IsLive(comm)) return NotLive("communicator", "trib_deregister");
    if (!IsLive(buffer)) return NotLive("buffer", "trib_deregister");
    if (buffer->owner != comm) {
      return Fail(TRIB_INVALID_ARGUMENT, "trib_deregister: buffer belongs to another communicator");
    }
    tributary::Status s = comm->comm->Deregister(buffer->buffer);
    if (s.ok()) {
      Retire(buffer);
      comm->buffers.erase(std::find(comm->buffers.begin(), comm->buffers.end(), buffer));
      delete buffer;
    }
    return Report(s);
  });
}

trib_status_t trib_allreduce(trib_comm_t* comm, trib_buffer_t* send, trib_buffer_t* recv,
                             size_t count, trib_dtype_t dtype, trib_op_t op,
                             trib_request_t** out) {
  return Guard([&] {
    if (comm == nullptr || send == nullptr || recv == nullptr || out == nullptr) {
      return Fail(TRIB_INVALID_ARGUMENT, "trib_allreduce: null argument");
    }
    if (!IsLive(comm)) return NotLive("communicator", "trib_allreduce");
    if (!IsLive(send) || !IsLive(recv)) return NotLive("buffer", "trib_allreduce");
    if (send->owner != comm || recv->owner != comm) {
      return Fail(TRIB_INVALID_ARGUMENT, "trib_allreduce: buffer belongs to another communicator");
    }
    auto r = comm->comm->AllReduce(send->buffer, recv->buffer, count,
                                   static_cast<tributary::DataType>(dtype),
                                   static_cast<tributary::ReduceOp>(op));
    if (!r.ok()) return Report(r.status());
    *out = new trib_request{r.value()};
    MarkLive(*out);
    return Report(tributary::Status::Ok());
  });
}

trib_status_t trib_test(trib_request_t* request, int* done) {
  return Guard([&] {
    if (request == nullptr || done == nullptr) {
      return Fail(TRIB_INVALID_ARGUMENT, "trib_test: null argument");
    }
    if (!IsLive(request)) return NotLive("request", "trib_test");
    tributary::Status s;
    *done = request->request.Test(&s) ? 1 : 0;
    return Report(s);
  });
}

trib_status_t trib_wait(trib_request_t* request) {
  return Guard([&] {
    if (request == nullptr) return Fail(TRIB_INVALID_ARGUMENT, "trib_wait: null argument");
    if (!IsLive(request)) return NotLive("request", "trib_wait");
    return Report(request->request.Wait());
  });
}

trib_status_t trib_request_free(trib_request_t* request) {
  return Guard([&] {
    if (request == nullptr) return Report(tributary::Status::Ok());
    if (!Retire(request)) return NotLive("request", "trib_request_free");
    delete request;
    return Report(tributary::Status::Ok());
  });
}

}  // extern "C"
