// SPDX-License-Identifier: Apache-2.0
// `tributary._tributary`: the public C++ API (host/include/tributary/) for
// Python, through pybind11. Thin on purpose: the Python package
// (tributary/__init__.py) turns NumPy arrays, torch tensors and anything
// with the buffer protocol into the addresses and sizes bound here, and
// keeps the objects alive while the library uses their memory.
//
// Errors: every failed Status raises tributary.Error, whose `code` is the
// status name ("UNAVAILABLE") and whose message is Status::ToString().
// Blocking calls (create, wait, register_memory, deregister, the reproducible
// all-reduce) release the GIL.
#include <pybind11/chrono.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <chrono>
#include <cmath>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "tributary/communicator.h"
#include "tributary/log.h"
#include "tributary/reproducible.h"

namespace py = pybind11;

namespace tributary::python {
namespace {

// A failed Status on its way to Python (translated below).
struct StatusError {
  Status status;
};

[[noreturn]] void Raise(const Status& s) { throw StatusError{s}; }

template <typename T>
T Take(Result<T> r) {
  if (!r.ok()) Raise(r.status());
  return std::move(r.value());
}

void Check(const Status& s) {
  if (!s.ok()) Raise(s);
}

void* Pointer(uintptr_t address) { return reinterpret_cast<void*>(address); }

// A communicator for Python; requests and buffers are plain values. Every
// call holds a reference for its duration (Use(), taken with the GIL): a
// close() from another thread while a call runs without the GIL (a
// reproducible all-reduce, a blocking set-up) leaves the job once that call
// has returned, instead of destroying the communicator under it.
class PyCommunicator {
 public:
  explicit PyCommunicator(std::unique_ptr<Communicator> comm) : comm_(std::move(comm)) {}

  std::shared_ptr<Communicator> Use() {
    std::lock_guard<std::mutex> lock(mu_);
    if (!comm_) Raise(Status(StatusCode::kFailedPrecondition, "the communicator is closed"));
    return comm_;
  }
  void Close() {
    std::shared_ptr<Communicator> last;
    {
      std::lock_guard<std::mutex> lock(mu_);
      last = std::move(comm_);
    }
    py::gil_scoped_release release;
    last.reset();  // or the last call running drops it
  }

 private:
  std::mutex mu_;
  std::shared_ptr<Communicator> comm_;
};

// A reproducible all-reduce and the communicator it uses (a raw pointer in
// the C++ API), kept alive together; the reducer goes first.
struct PyReducer {
  std::shared_ptr<Communicator> comm;
  std::unique_ptr<ReproducibleAllReducer> reducer;
};

py::dict StatsDict(const CommStats& s) {
  py::dict d;
  d["collectives_completed"] = s.collectives_completed;
  d["fragments_sent"] = s.fragments_sent;
  d["retransmissions"] = s.retransmissions;
  d["probes"] = s.probes;
  d["losses_detected"] = s.losses_detected;
  d["results_received"] = s.results_received;
  d["duplicate_results"] = s.duplicate_results;
  d["packets_rejected"] = s.packets_rejected;
  d["nacks_received"] = s.nacks_received;
  d["bytes_sent"] = s.bytes_sent;
  d["bytes_received"] = s.bytes_received;
  d["srtt_us"] = s.srtt_us;
  d["rto_us"] = s.rto_us;
  d["transport"] = s.transport;
  d["local_ranks"] = s.local_ranks;
  d["nodes"] = s.nodes;
  d["zero_fragments"] = s.zero_fragments;
  return d;
}

}  // namespace
}  // namespace tributary::python

PYBIND11_MODULE(_tributary, m) {
  using namespace tributary;
  using namespace tributary::python;
  m.doc() = "Tributary's C++ API (libtributary); use the `tributary` package.";

  // Never destroyed: a static's destructor would drop its reference after
  // the interpreter is gone (a crash at exit on some Pythons).
  static py::exception<StatusError>* const error =
      new py::exception<StatusError>(m, "Error", PyExc_RuntimeError);
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const StatusError& e) {
      py::object instance = py::handle(error->ptr())(py::str(e.status.ToString()));
      instance.attr("code") = StatusCodeName(e.status.code());
      instance.attr("message") = e.status.message();
      PyErr_SetObject(error->ptr(), instance.ptr());
    }
  });

  m.def("version", &Version, "libtributary's version, MAJOR.MINOR.PATCH");

  py::enum_<DataType>(m, "DataType")
      .value("int8", DataType::kInt8)
      .value("uint8", DataType::kUint8)
      .value("int32", DataType::kInt32)
      .value("uint32", DataType::kUint32)
      .value("int64", DataType::kInt64)
      .value("uint64", DataType::kUint64)
      .value("float16", DataType::kFloat16)
      .value("float32", DataType::kFloat32)
      .value("float64", DataType::kFloat64)
      .value("bfloat16", DataType::kBfloat16)
      .value("float8_e4m3", DataType::kFloat8E4m3)
      .value("float8_e5m2", DataType::kFloat8E5m2);
  m.def("dtype_size", &DataTypeSize, "bytes per element");

  py::enum_<ReduceOp>(m, "ReduceOp")
      .value("sum", ReduceOp::kSum)
      .value("prod", ReduceOp::kProd)
      .value("min", ReduceOp::kMin)
      .value("max", ReduceOp::kMax)
      .value("avg", ReduceOp::kAvg);

  py::class_<Options>(m, "Options", "tributary::Options (docs/CONFIGURATION.md)")
      .def(py::init<>())
      .def_static(
          "from_environment", [] { return Take(Options::FromEnvironment()); },
          "Defaults overridden by the TRIBUTARY_* environment variables")
      .def("validate", [](const Options& o) { Check(o.Validate()); })
      .def_readwrite("aggregator", &Options::aggregator)
      .def_readwrite("aggregator_key", &Options::aggregator_key)
      .def_readwrite("transport", &Options::transport)
      .def_readwrite("ofi_provider", &Options::ofi_provider)
      .def_readwrite("payload_bytes", &Options::payload_bytes)
      .def_readwrite("window", &Options::window)
      .def_readwrite("lanes", &Options::lanes)
      .def_readwrite("op_timeout_ms", &Options::op_timeout_ms)
      .def_readwrite("connect_timeout_ms", &Options::connect_timeout_ms)
      .def_readwrite("node_level", &Options::node_level)
      .def_readwrite("node_id", &Options::node_id)
      .def_readwrite("socket_buffer_bytes", &Options::socket_buffer_bytes)
      .def_readwrite("checksum", &Options::checksum)
      .def_readwrite("payload_mac", &Options::payload_mac)
      .def_readwrite("block_sparse", &Options::block_sparse)
      .def_readwrite("reproducible", &Options::reproducible)
      .def_readwrite("keepalive_ms", &Options::keepalive_ms);

  py::class_<CommConfig>(m, "CommConfig")
      .def(py::init<>())
      .def_static("from_environment", [] { return Take(CommConfig::FromEnvironment()); },
                  "Options, job, rank and size from TRIBUTARY_* or the launcher")
      .def_readwrite("job_id", &CommConfig::job_id)
      .def_readwrite("job_key", &CommConfig::job_key)
      .def_readwrite("rank", &CommConfig::rank)
      .def_readwrite("world_size", &CommConfig::world_size)
      .def_readwrite("options", &CommConfig::options);

  py::class_<Request>(m, "Request", "An asynchronous operation")
      .def(
          "test",
          [](const Request& r) {
            Status s;
            const bool done = r.Test(&s);
            if (done) Check(s);
            return done;
          },
          "True once done; raises tributary.Error if it failed")
      .def(
          "wait",
          [](const Request& r, std::optional<double> timeout_s) {
            if (timeout_s && std::isnan(*timeout_s)) {
              Check(Status(StatusCode::kInvalidArgument, "wait: timeout_s is NaN"));
            }
            // Beyond a year (inf included) is no limit: the conversion to
            // milliseconds would overflow. Negative: a test, no wait.
            const bool bounded = timeout_s && *timeout_s < 365.0 * 86400;
            const int64_t ms = bounded ? static_cast<int64_t>(std::max(0.0, *timeout_s) * 1000) : 0;
            Status s;
            {
              py::gil_scoped_release release;
              s = bounded ? r.WaitFor(std::chrono::milliseconds(ms)) : r.Wait();
            }
            Check(s);
          },
          py::arg("timeout_s") = py::none(),
          "Blocks (GIL released) until done; raises tributary.Error on failure or timeout");

  py::class_<Buffer>(m, "Buffer", "A registered memory region")
      .def_property_readonly("address", [](const Buffer& b) {
        return reinterpret_cast<uintptr_t>(b.data());
      })
      .def_property_readonly("nbytes", &Buffer::size)
      .def_property_readonly("id", &Buffer::id);

  py::class_<PyCommunicator>(m, "Communicator")
      .def_static(
          "create",
          [](const CommConfig& config) {
            std::unique_ptr<Communicator> comm;
            Status s;
            {
              py::gil_scoped_release release;
              Result<std::unique_ptr<Communicator>> r = Communicator::Create(config);
              if (r.ok())
                comm = std::move(r.value());
              else
                s = r.status();
            }
            Check(s);
            return std::make_unique<PyCommunicator>(std::move(comm));
          },
          "Joins the job (collective with the node level on); GIL released while it waits")
      .def(
          "register_memory",
          [](PyCommunicator& c, uintptr_t address, size_t nbytes) {
            // Without the GIL: registering may pin the memory (verbs, ofi),
            // which takes time on a large buffer.
            const std::shared_ptr<Communicator> comm = c.Use();
            Result<Buffer> r = [&] {
              py::gil_scoped_release release;
              return comm->Register(Pointer(address), nbytes);
            }();
            return Take(std::move(r));
          },
          py::arg("address"), py::arg("nbytes"))
      .def("deregister",
           [](PyCommunicator& c, const Buffer& b) {
             const std::shared_ptr<Communicator> comm = c.Use();
             Status s;
             {
               py::gil_scoped_release release;
               s = comm->Deregister(b);
             }
             Check(s);
           })
      .def(
          "all_reduce",
          [](PyCommunicator& c, uintptr_t send, uintptr_t recv, size_t count, DataType dtype,
             ReduceOp op) {
            // Without the GIL: with Options::reproducible a float sum runs to
            // completion in this call.
            const std::shared_ptr<Communicator> comm = c.Use();
            Result<Request> r = [&] {
              py::gil_scoped_release release;
              return comm->AllReduce(static_cast<const void*>(Pointer(send)), Pointer(recv), count,
                                     dtype, op);
            }();
            return Take(std::move(r));
          },
          py::arg("send"), py::arg("recv"), py::arg("count"), py::arg("dtype"), py::arg("op"),
          "All-reduce between addresses inside registered buffers (same address: in place)")
      .def("reduce_scatter",
           [](PyCommunicator& c, uintptr_t send, uintptr_t recv, size_t count, DataType dtype,
              ReduceOp op) {
             return Take(c.Use()->ReduceScatter(static_cast<const void*>(Pointer(send)),
                                                Pointer(recv), count, dtype, op));
           })
      .def("all_gather",
           [](PyCommunicator& c, uintptr_t send, uintptr_t recv, size_t count, DataType dtype) {
             return Take(c.Use()->AllGather(static_cast<const void*>(Pointer(send)), Pointer(recv),
                                            count, dtype));
           })
      .def_property_readonly("rank", [](PyCommunicator& c) { return c.Use()->rank(); })
      .def_property_readonly("world_size", [](PyCommunicator& c) { return c.Use()->world_size(); })
      .def_property_readonly("options", [](PyCommunicator& c) { return c.Use()->options(); })
      .def("stats", [](PyCommunicator& c) { return StatsDict(c.Use()->Stats()); })
      .def(
          "health", [](PyCommunicator& c) { Check(c.Use()->Health()); },
          "Raises tributary.Error with what aborted the communicator, if anything did")
      .def("close", &PyCommunicator::Close, "Leaves the job; later calls raise");

  py::class_<PyReducer>(m, "ReproducibleAllReducer",
                        "Bit-reproducible float all-reduce (tributary/reproducible.h)")
      .def_static(
          "create",
          [](PyCommunicator& c, size_t max_count, uint32_t block) {
            auto out = std::make_unique<PyReducer>();
            out->comm = c.Use();
            // Collective (an all-reduce of the ranks' scales): without the GIL,
            // or ranks that are threads of one process could never meet.
            Result<std::unique_ptr<ReproducibleAllReducer>> r = [&] {
              py::gil_scoped_release release;
              return ReproducibleAllReducer::Create(out->comm.get(), max_count, block);
            }();
            out->reducer = Take(std::move(r));
            return out;
          },
          py::arg("comm"), py::arg("max_count"), py::arg("block") = 256)
      .def(
          "all_reduce",
          [](PyReducer& r, uintptr_t send, uintptr_t recv, size_t count, DataType dtype,
             ReduceOp op) {
            Status s;
            {
              py::gil_scoped_release release;
              s = r.reducer->AllReduce(static_cast<const void*>(Pointer(send)), Pointer(recv),
                                       count, dtype, op);
            }
            Check(s);
          },
          "Blocking (GIL released): float32/float64 SUM and AVG bitwise reproducible");
}
