// SPDX-License-Identifier: Apache-2.0
// The NVLS path (reduce_kernels.h): a multicast object over the GPUs of one
// process, one physical buffer per GPU bound to it, and a kernel per GPU
// that reduces its share through the multicast address with
// multimem.ld_reduce and writes the result to every GPU with multimem.st.
#include <cuda.h>
#include <cuda_runtime.h>

#include <string>
#include <vector>

#include "common/log.h"
#include "proto/codec.h"
#include "kernels/reduce_kernels.h"
#include "kernels/src/cuda_status.h"

namespace tributary::kernels {
namespace {

// The multimem forms, one per (dtype, op) that MulticastHandles accepts.
// Unit: the bytes one instruction reduces.
enum class Form { kF32x4, kF16x8, kBf16x8, kF64, kU32Add, kS32Min, kS32Max, kU32Min, kU32Max,
                  kU64Add, kS64Min, kS64Max, kU64Min, kU64Max };

Result<Form> FormOf(proto::DataType d, proto::ReduceOp op) {
  using D = proto::DataType;
  using O = proto::ReduceOp;
  if (!MulticastHandles(d, op)) {
    return Status(StatusCode::kInvalidArgument, "multicast all-reduce: unsupported dtype/op pair");
  }
  switch (d) {
    case D::kFloat32: return Form::kF32x4;
    case D::kFloat16: return Form::kF16x8;
    case D::kBfloat16: return Form::kBf16x8;
    case D::kFloat64: return Form::kF64;
    case D::kInt32: return op == O::kSum ? Form::kU32Add : op == O::kMin ? Form::kS32Min : Form::kS32Max;
    case D::kUint32: return op == O::kSum ? Form::kU32Add : op == O::kMin ? Form::kU32Min : Form::kU32Max;
    case D::kInt64: return op == O::kSum ? Form::kU64Add : op == O::kMin ? Form::kS64Min : Form::kS64Max;
    default: return op == O::kSum ? Form::kU64Add : op == O::kMin ? Form::kU64Min : Form::kU64Max;
  }
}

size_t UnitOf(Form f) {
  switch (f) {
    case Form::kF32x4: case Form::kF16x8: case Form::kBf16x8: return 16;
    case Form::kU32Add: case Form::kS32Min: case Form::kS32Max: case Form::kU32Min:
    case Form::kU32Max: return 4;
    default: return 8;
  }
}

#define TRIB_MM_V4(LD, ST)                                                                  \
  {                                                                                         \
    uint32_t a, b, c, d;                                                                    \
    asm volatile(LD " {%0,%1,%2,%3}, [%4];"                                                 \
                 : "=r"(a), "=r"(b), "=r"(c), "=r"(d) : "l"(p) : "memory");                 \
    asm volatile(ST " [%0], {%1,%2,%3,%4};" ::"l"(p),                                        \
                 "r"(a), "r"(b), "r"(c), "r"(d) : "memory");                                 \
  }
#define TRIB_MM_32(LD)                                                                      \
  {                                                                                         \
    uint32_t a;                                                                             \
    asm volatile(LD " %0, [%1];" : "=r"(a) : "l"(p) : "memory");                            \
    asm volatile("multimem.st.relaxed.sys.global.b32 [%0], %1;" ::"l"(p), "r"(a) : "memory"); \
  }
#define TRIB_MM_64(LD)                                                                      \
  {                                                                                         \
    unsigned long long a;                                                                   \
    asm volatile(LD " %0, [%1];" : "=l"(a) : "l"(p) : "memory");                            \
    asm volatile("multimem.st.relaxed.sys.global.b64 [%0], %1;" ::"l"(p), "l"(a) : "memory"); \
  }

template <Form kForm>
__device__ __forceinline__ void MultimemUnit(char* p) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  if constexpr (kForm == Form::kF32x4) TRIB_MM_V4("multimem.ld_reduce.relaxed.sys.global.add.v4.f32", "multimem.st.relaxed.sys.global.v4.f32")
  else if constexpr (kForm == Form::kF16x8) TRIB_MM_V4("multimem.ld_reduce.relaxed.sys.global.add.acc::f32.v4.f16x2", "multimem.st.relaxed.sys.global.v4.f16x2")
  else if constexpr (kForm == Form::kBf16x8) TRIB_MM_V4("multimem.ld_reduce.relaxed.sys.global.add.acc::f32.v4.bf16x2", "multimem.st.relaxed.sys.global.v4.bf16x2")
  else if constexpr (kForm == Form::kF64) TRIB_MM_64("multimem.ld_reduce.relaxed.sys.global.add.f64")
  else if constexpr (kForm == Form::kU32Add) TRIB_MM_32("multimem.ld_reduce.relaxed.sys.global.add.u32")
  else if constexpr (kForm == Form::kS32Min) TRIB_MM_32("multimem.ld_reduce.relaxed.sys.global.min.s32")
  else if constexpr (kForm == Form::kS32Max) TRIB_MM_32("multimem.ld_reduce.relaxed.sys.global.max.s32")
  else if constexpr (kForm == Form::kU32Min) TRIB_MM_32("multimem.ld_reduce.relaxed.sys.global.min.u32")
  else if constexpr (kForm == Form::kU32Max) TRIB_MM_32("multimem.ld_reduce.relaxed.sys.global.max.u32")
  else if constexpr (kForm == Form::kU64Add) TRIB_MM_64("multimem.ld_reduce.relaxed.sys.global.add.u64")
  else if constexpr (kForm == Form::kS64Min) TRIB_MM_64("multimem.ld_reduce.relaxed.sys.global.min.s64")
  else if constexpr (kForm == Form::kS64Max) TRIB_MM_64("multimem.ld_reduce.relaxed.sys.global.max.s64")
  else if constexpr (kForm == Form::kU64Min) TRIB_MM_64("multimem.ld_reduce.relaxed.sys.global.min.u64")
  else if constexpr (kForm == Form::kU64Max) TRIB_MM_64("multimem.ld_reduce.relaxed.sys.global.max.u64")
#else
  __trap();  // multimem needs sm_90; Create() refuses older devices
#endif
}

template <Form kForm>
__global__ void __launch_bounds__(512) MultimemKernel(char* mc, size_t units, size_t unit) {
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  for (size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < units; i += stride) {
    MultimemUnit<kForm>(mc + i * unit);
  }
}

Status LaunchMultimem(Form f, char* mc, size_t units, size_t unit, int sms, cudaStream_t stream) {
  if (units == 0) return Status::Ok();
  size_t blocks = (units + 511) / 512;
  if (blocks > static_cast<size_t>(sms) * 4) blocks = static_cast<size_t>(sms) * 4;
  const dim3 grid(static_cast<unsigned>(blocks)), block(512);
  switch (f) {
#define TRIB_MM_CASE(F) case Form::F: MultimemKernel<Form::F><<<grid, block, 0, stream>>>(mc, units, unit); break;
    TRIB_MM_CASE(kF32x4) TRIB_MM_CASE(kF16x8) TRIB_MM_CASE(kBf16x8) TRIB_MM_CASE(kF64)
    TRIB_MM_CASE(kU32Add) TRIB_MM_CASE(kS32Min) TRIB_MM_CASE(kS32Max) TRIB_MM_CASE(kU32Min)
    TRIB_MM_CASE(kU32Max) TRIB_MM_CASE(kU64Add) TRIB_MM_CASE(kS64Min) TRIB_MM_CASE(kS64Max)
    TRIB_MM_CASE(kU64Min) TRIB_MM_CASE(kU64Max)
#undef TRIB_MM_CASE
  }
  return CudaStatus(cudaGetLastError(), "multimem kernel launch");
}

}  // namespace

bool MulticastSupported(int device, std::string* why) {
  Status s = CuStatus(cuInit(0), "cuInit");
  CUdevice dev = 0;
  if (s.ok()) s = CuStatus(cuDeviceGet(&dev, device), "cuDeviceGet");
  int mc = 0, major = 0;
  if (s.ok()) {
    s = CuStatus(cuDeviceGetAttribute(&mc, CU_DEVICE_ATTRIBUTE_MULTICAST_SUPPORTED, dev),
                 "cuDeviceGetAttribute(MULTICAST_SUPPORTED)");
  }
  if (s.ok()) {
    s = CuStatus(cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev),
                 "cuDeviceGetAttribute(COMPUTE_CAPABILITY_MAJOR)");
  }
  if (!s.ok()) {
    if (why) *why = s.message();
    return false;
  }
  if (major < 9 || mc == 0) {
    if (why) {
      *why = "device " + std::to_string(device) +
             (major < 9 ? " is older than sm_90 (no multimem instructions)"
                        : " reports no multicast support (no NVSwitch, or the fabric manager "
                          "is not running)");
    }
    return false;
  }
  return true;
}

struct MulticastGroup::State {
  std::vector<int> devices;
  size_t bytes = 0;
  CUmemGenericAllocationHandle mc = 0;
  std::vector<CUmemGenericAllocationHandle> mem;
  std::vector<CUdeviceptr> unicast, multicast;
  std::vector<cudaEvent_t> in_ready, done;
  std::vector<int> sms;
  bool bound = false;

  ~State() {
    for (size_t i = 0; i < devices.size(); ++i) {
      cudaSetDevice(devices[i]);
      if (i < in_ready.size() && in_ready[i]) cudaEventDestroy(in_ready[i]);
      if (i < done.size() && done[i]) cudaEventDestroy(done[i]);
      if (i < multicast.size() && multicast[i]) {
        cuMemUnmap(multicast[i], bytes);
        cuMemAddressFree(multicast[i], bytes);
      }
      if (i < unicast.size() && unicast[i]) {
        cuMemUnmap(unicast[i], bytes);
        cuMemAddressFree(unicast[i], bytes);
      }
      if (bound) cuMulticastUnbind(mc, static_cast<CUdevice>(devices[i]), 0, bytes);
      if (i < mem.size() && mem[i]) cuMemRelease(mem[i]);
    }
    if (mc) cuMemRelease(mc);
  }
};

MulticastGroup::MulticastGroup(std::unique_ptr<State> state) : state_(std::move(state)) {}
MulticastGroup::~MulticastGroup() = default;
size_t MulticastGroup::size() const { return state_->devices.size(); }
size_t MulticastGroup::bytes() const { return state_->bytes; }
void* MulticastGroup::buffer(size_t i) const {
  return reinterpret_cast<void*>(static_cast<uintptr_t>(state_->unicast[i]));
}

Result<std::unique_ptr<MulticastGroup>> MulticastGroup::Create(const std::vector<int>& devices,
                                                               size_t bytes) {
  if (devices.size() < 2) {
    return Status(StatusCode::kUnavailable,
                  "multicast needs at least 2 GPUs (cuMulticastCreate refuses one device); the "
                  "peer-pointer kernel serves a single GPU");
  }
  for (int d : devices) {
    std::string why;
    if (!MulticastSupported(d, &why)) return Status(StatusCode::kUnavailable, why);
  }
  auto st = std::make_unique<State>();
  st->devices = devices;
  const size_t n = devices.size();
  CUmulticastObjectProp prop{};
  prop.numDevices = static_cast<unsigned>(n);
  prop.handleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
  prop.size = bytes == 0 ? 1 : bytes;
  size_t gran = 0;
  Status s = CuStatus(cuMulticastGetGranularity(&gran, &prop, CU_MULTICAST_GRANULARITY_RECOMMENDED),
                      "cuMulticastGetGranularity");
  if (!s.ok()) return s;
  st->bytes = (prop.size + gran - 1) / gran * gran;
  prop.size = st->bytes;
  s = CuStatus(cuMulticastCreate(&st->mc, &prop), "cuMulticastCreate");
  if (!s.ok()) return s;
  for (int d : devices) {
    // The runtime's primary context of each device must exist for the
    // driver calls below.
    s = CudaStatus(cudaSetDevice(d), "cudaSetDevice");
    if (s.ok()) s = CudaStatus(cudaFree(nullptr), "cudaFree(0) (context creation)");
    if (s.ok()) s = CuStatus(cuMulticastAddDevice(st->mc, static_cast<CUdevice>(d)), "cuMulticastAddDevice");
    if (!s.ok()) return s;
  }
  st->mem.assign(n, 0);
  st->unicast.assign(n, 0);
  st->multicast.assign(n, 0);
  st->in_ready.assign(n, nullptr);
  st->done.assign(n, nullptr);
  st->sms.assign(n, 0);
  for (size_t i = 0; i < n; ++i) {
    const int d = devices[i];
    cudaSetDevice(d);
    CUmemAllocationProp mp{};
    mp.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    mp.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
    mp.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    mp.location.id = d;
    CUmemAccessDesc access{};
    access.location = mp.location;
    access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    s = CuStatus(cuMemCreate(&st->mem[i], st->bytes, &mp, 0), "cuMemCreate");
    if (s.ok()) s = CuStatus(cuMulticastBindMem(st->mc, 0, st->mem[i], 0, st->bytes, 0), "cuMulticastBindMem");
    if (s.ok()) st->bound = true;
    if (s.ok()) s = CuStatus(cuMemAddressReserve(&st->unicast[i], st->bytes, gran, 0, 0), "cuMemAddressReserve");
    if (s.ok()) s = CuStatus(cuMemMap(st->unicast[i], st->bytes, 0, st->mem[i], 0), "cuMemMap (unicast)");
    if (s.ok()) s = CuStatus(cuMemSetAccess(st->unicast[i], st->bytes, &access, 1), "cuMemSetAccess (unicast)");
    if (s.ok()) s = CuStatus(cuMemAddressReserve(&st->multicast[i], st->bytes, gran, 0, 0), "cuMemAddressReserve");
    if (s.ok()) s = CuStatus(cuMemMap(st->multicast[i], st->bytes, 0, st->mc, 0), "cuMemMap (multicast)");
    if (s.ok()) s = CuStatus(cuMemSetAccess(st->multicast[i], st->bytes, &access, 1), "cuMemSetAccess (multicast)");
    if (s.ok()) s = CudaStatus(cudaEventCreateWithFlags(&st->in_ready[i], cudaEventDisableTiming), "cudaEventCreate");
    if (s.ok()) s = CudaStatus(cudaEventCreateWithFlags(&st->done[i], cudaEventDisableTiming), "cudaEventCreate");
    if (s.ok()) s = CudaStatus(cudaDeviceGetAttribute(&st->sms[i], cudaDevAttrMultiProcessorCount, d), "cudaDeviceGetAttribute");
    if (!s.ok()) return s;
  }
  TRIB_LOG(kInfo, "kernels",
           "NVLS path: multicast object over %zu GPUs, %zu bytes per GPU "
           "(multimem.ld_reduce + multimem.st through the NVSwitch)",
           n, st->bytes);
  return std::unique_ptr<MulticastGroup>(new MulticastGroup(std::move(st)));
}

Status MulticastGroup::AllReduce(const std::vector<void*>& streams, size_t count,
                                 proto::DataType dtype, proto::ReduceOp op) {
  State& st = *state_;
  const size_t n = st.devices.size();
  if (streams.size() != n) {
    return Status(StatusCode::kInvalidArgument, "multicast all-reduce: " + std::to_string(streams.size()) +
                                                    " streams for " + std::to_string(n) + " GPUs");
  }
  Result<Form> form = FormOf(dtype, op);
  if (!form.ok()) return form.status();
  const size_t esize = proto::DataTypeSize(dtype);
  const size_t unit = UnitOf(form.value());
  if (count > (st.bytes - unit) / esize) {
    return Status(StatusCode::kInvalidArgument, "multicast all-reduce: " + std::to_string(count) +
                                                    " elements exceed the " + std::to_string(st.bytes) +
                                                    "-byte buffers");
  }
  const size_t units = (count * esize + unit - 1) / unit;
  const size_t per = (units + n - 1) / n;
  auto stream = [&](size_t i) { return static_cast<cudaStream_t>(streams[i]); };
  Status s;
  // Every GPU's input is complete before any GPU reads through the switch...
  for (size_t i = 0; i < n && s.ok(); ++i) {
    s = CudaStatus(cudaSetDevice(st.devices[i]), "cudaSetDevice");
    if (s.ok()) s = CudaStatus(cudaEventRecord(st.in_ready[i], stream(i)), "cudaEventRecord");
  }
  for (size_t i = 0; i < n && s.ok(); ++i) {
    s = CudaStatus(cudaSetDevice(st.devices[i]), "cudaSetDevice");
    for (size_t j = 0; j < n && s.ok(); ++j) {
      if (j != i) s = CudaStatus(cudaStreamWaitEvent(stream(i), st.in_ready[j], 0), "cudaStreamWaitEvent");
    }
    const size_t first = std::min(units, i * per);
    const size_t mine = std::min(units - first, per);
    char* mc = reinterpret_cast<char*>(static_cast<uintptr_t>(st.multicast[i])) + first * unit;
    if (s.ok()) s = LaunchMultimem(form.value(), mc, mine, unit, st.sms[i], stream(i));
    if (s.ok()) s = CudaStatus(cudaEventRecord(st.done[i], stream(i)), "cudaEventRecord");
  }
  // ... and every GPU's later work sees every share.
  for (size_t i = 0; i < n && s.ok(); ++i) {
    s = CudaStatus(cudaSetDevice(st.devices[i]), "cudaSetDevice");
    for (size_t j = 0; j < n && s.ok(); ++j) {
      if (j != i) s = CudaStatus(cudaStreamWaitEvent(stream(i), st.done[j], 0), "cudaStreamWaitEvent");
    }
  }
  return s;
}

}  // namespace tributary::kernels
