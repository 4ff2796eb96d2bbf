// SPDX-License-Identifier: Apache-2.0
// The NCCL network-plugin ABI, declared from its documented layout: the
// tables NCCL finds by dlsym ("ncclNetPlugin_vN", "ncclCollNetPlugin_vN")
// and every struct they pass. NCCL's own headers are not used (they drag in
// nccl.h and CUDA); this file states the same layout in our own types and
// pins it with static_asserts, so a slip is a build error, not a crash
// inside NCCL's proxy thread. Versions and what changed (x86-64 sizes):
//
//   v8   Net 19 pointers (152 B), CollNet 17 (136 B), Properties 64 B;
//        isend/irecv sizes are int, the SGE size is uint32_t.
//   v9   sizes become size_t; Properties gain forceFlush, vProps (4
//        devices), maxP2pBytes, maxCollBytes (104 B); makeVDevice (20/18).
//   v10  Net init takes a profiler callback, connect a comm config, and
//        isend/irecv a profiler handle each (20/18 pointers).
//   v11  a per-communicator context: init(ctx*, commId, ...), listen and
//        connect take it, finalize(ctx) ends it; Net setNetAttr (22
//        pointers, 176 B), CollNet finalize (19, 152 B); Properties gain
//        maxMultiRequestSize (112 B).
//   v12  like v11 but vProps holds 8 devices, and Properties end with
//        railId and planeId (128 B).
//
// Thread-safety: declarations only.
#pragma once

#include <cstddef>
#include <cstdint>

namespace tributary::nccl {

// ncclResult_t.
enum NcclResult : int {
  kSuccess = 0,
  kUnhandledCudaError = 1,
  kSystemError = 2,
  kInternalError = 3,
  kInvalidArgument = 4,
  kInvalidUsage = 5,
  kRemoteError = 6,
  kInProgress = 7,
};

// ncclDataType_t: 12 types; fp8 from NCCL 2.24 on.
enum NcclDataType : int {
  kNcclInt8 = 0,
  kNcclUint8 = 1,
  kNcclInt32 = 2,
  kNcclUint32 = 3,
  kNcclInt64 = 4,
  kNcclUint64 = 5,
  kNcclFloat16 = 6,
  kNcclFloat32 = 7,
  kNcclFloat64 = 8,
  kNcclBfloat16 = 9,
  kNcclFloat8e4m3 = 10,
  kNcclFloat8e5m2 = 11,
  kNcclNumTypes = 12,
};

// ncclRedOp_t: the built-in operators. NCCL hands avg to a CollNet as sum
// (it scales itself); user-defined operators (>= 5) never reach a plugin.
enum NcclRedOp : int { kNcclSum = 0, kNcclProd = 1, kNcclMax = 2, kNcclMin = 3, kNcclAvg = 4 };

// ncclDebugLogLevel and the subsystem flag the plugin logs under.
enum NcclLogLevel : int {
  kLogNone = 0,
  kLogVersion = 1,
  kLogWarn = 2,
  kLogInfo = 3,
  kLogAbort = 4,
  kLogTrace = 5
};
inline constexpr unsigned long kLogSubsysInit = 0x1;
inline constexpr unsigned long kLogSubsysNet = 0x10;

using DebugLogger = void (*)(NcclLogLevel level, unsigned long flags, const char* file, int line,
                             const char* fmt, ...);
using ProfilerCallback = NcclResult (*)(void** event, int type, void* parent, int64_t plugin_id,
                                    void* ext_data);

inline constexpr size_t kHandleMaxBytes = 128;  // NCCL_NET_HANDLE_MAXSIZE
inline constexpr int kPtrHost = 0x1;            // NCCL_PTR_HOST
inline constexpr int kPtrCuda = 0x2;            // NCCL_PTR_CUDA
inline constexpr int kPtrDmabuf = 0x4;          // NCCL_PTR_DMABUF
inline constexpr int kNetDeviceHost = 0;        // ncclNetDeviceType: no device offload
inline constexpr int kMaxRequests = 32;         // NCCL_NET_MAX_REQUESTS per comm

// ncclNetDeviceHandle (the same from v7 to v12). Only for device offload,
// which this plugin does not offer: it leaves the pointers NCCL passes alone.
struct NetDeviceHandle {
  int net_device_type;
  int net_device_version;
  void* handle;
  size_t size;
  int needs_proxy_progress;
};

template <int kDevs>
struct VirtualDeviceProps {
  int ndevs;
  int devs[kDevs];
};
using VirtualDevicePropsV9 = VirtualDeviceProps<4>;  // v9, v10, v11
using VirtualDevicePropsV12 = VirtualDeviceProps<8>;

struct NetCommConfig {  // ncclNetCommConfig (v10..v12)
  int traffic_class;
};

struct NetAttr {  // ncclNetAttr (v11, v12): hints; the plugin may ignore them
  int32_t send_comm_attr[4];
  int32_t recv_comm_attr[4];
  uint32_t op;
  uint32_t algo;
  uint32_t proto;
};

struct PropertiesV8 {
  char* name;
  char* pci_path;
  uint64_t guid;
  int ptr_support;
  int reg_is_global;
  int speed;  // Mbit/s
  int port;
  float latency;  // microseconds
  int max_comms;
  int max_recvs;
  int net_device_type;
  int net_device_version;
};

// Properties from v9 on: one layout whose device list grew in v12 and
// whose tail grew in v11 and v12. The tail is a member without an address
// of its own when empty ([[no_unique_address]]), so v9 keeps its 104 bytes.
struct NoTail {};
struct TailV11 {
  int max_multi_request_size;
};
struct TailV12 {
  int max_multi_request_size;
  int16_t rail_id;   // -1: undefined
  int16_t plane_id;  // -1: undefined
};

template <typename VProps, typename Tail>
struct PropertiesFrom9 {
  char* name;
  char* pci_path;
  uint64_t guid;
  int ptr_support;
  int reg_is_global;
  int force_flush;
  int speed;
  int port;
  float latency;
  int max_comms;
  int max_recvs;
  int net_device_type;
  int net_device_version;
  VProps vprops;
  size_t max_p2p_bytes;
  size_t max_coll_bytes;
  [[no_unique_address]] Tail tail;
};
using PropertiesV9 = PropertiesFrom9<VirtualDevicePropsV9, NoTail>;  // and v10
using PropertiesV11 = PropertiesFrom9<VirtualDevicePropsV9, TailV11>;
using PropertiesV12 = PropertiesFrom9<VirtualDevicePropsV12, TailV12>;

template <typename SizeT>
struct Sge {  // ncclNetSGE: uint32_t size in v8, size_t from v9
  void* mhandle;
  void* address;
  SizeT size;
};

// The functions every version shares, with the argument lists that did not
// change; the tables below spell out the ones that did.
using DevicesFn = NcclResult (*)(int* ndev);
using ListenV8Fn = NcclResult (*)(int dev, void* handle, void** listen_comm);
using ListenV11Fn = NcclResult (*)(void* ctx, int dev, void* handle, void** listen_comm);
using AcceptFn = NcclResult (*)(void* listen_comm, void** recv_comm, NetDeviceHandle** recv_dev_comm);
using RegMrFn = NcclResult (*)(void* comm, void* data, size_t size, int type, void** mhandle);
using RegMrDmaBufFn = NcclResult (*)(void* comm, void* data, size_t size, int type, uint64_t offset,
                                 int fd, void** mhandle);
using DeregMrFn = NcclResult (*)(void* comm, void* mhandle);
using NetFlushFn = NcclResult (*)(void* recv_comm, int n, void** data, int* sizes, void** mhandles,
                              void** request);
using TestFn = NcclResult (*)(void* request, int* done, int* sizes);
using CloseFn = NcclResult (*)(void* comm);
using GetDeviceMrFn = NcclResult (*)(void* comm, void* mhandle, void** dptr_mhandle);
using IrecvConsumedFn = NcclResult (*)(void* recv_comm, int n, void* request);
using FinalizeFn = NcclResult (*)(void* ctx);
using CollConnectFn = NcclResult (*)(void* handles[], int nranks, int rank, void* listen_comm,
                                 void** coll_comm);
using ReduceSupportFn = NcclResult (*)(NcclDataType dtype, NcclRedOp op, int* supported);
using CollFlushFn = NcclResult (*)(void* coll_comm, void* data, int size, void* mhandle,
                               void** request);

template <typename Props, typename SgeT>
struct CollGatherFns {
  using AllGather = NcclResult (*)(void* coll_comm, void* send_data, int n_recv_parts, SgeT* recv_parts,
                               size_t bytes_per_rank, size_t window_offset, size_t window_bytes,
                               void* send_mhandle, void** request);
  using ReduceScatter = NcclResult (*)(void* coll_comm, int n_send_parts, SgeT* send_parts,
                                   void* recv_data, size_t bytes_per_rank, size_t window_offset,
                                   size_t window_bytes, NcclDataType dtype, NcclRedOp op,
                                   void* recv_mhandle, void** request);
};

struct NetV8 {
  const char* name;
  NcclResult (*init)(DebugLogger logger);
  DevicesFn devices;
  NcclResult (*get_properties)(int dev, PropertiesV8* props);
  ListenV8Fn listen;
  NcclResult (*connect)(int dev, void* handle, void** send_comm, NetDeviceHandle** send_dev_comm);
  AcceptFn accept;
  RegMrFn reg_mr;
  RegMrDmaBufFn reg_mr_dma_buf;
  DeregMrFn dereg_mr;
  NcclResult (*isend)(void* send_comm, void* data, int size, int tag, void* mhandle, void** request);
  NcclResult (*irecv)(void* recv_comm, int n, void** data, int* sizes, int* tags, void** mhandles,
                  void** request);
  NetFlushFn iflush;
  TestFn test;
  CloseFn close_send;
  CloseFn close_recv;
  CloseFn close_listen;
  GetDeviceMrFn get_device_mr;
  IrecvConsumedFn irecv_consumed;
};

struct NetV9 {
  const char* name;
  NcclResult (*init)(DebugLogger logger);
  DevicesFn devices;
  NcclResult (*get_properties)(int dev, PropertiesV9* props);
  ListenV8Fn listen;
  NcclResult (*connect)(int dev, void* handle, void** send_comm, NetDeviceHandle** send_dev_comm);
  AcceptFn accept;
  RegMrFn reg_mr;
  RegMrDmaBufFn reg_mr_dma_buf;
  DeregMrFn dereg_mr;
  NcclResult (*isend)(void* send_comm, void* data, size_t size, int tag, void* mhandle,
                  void** request);
  NcclResult (*irecv)(void* recv_comm, int n, void** data, size_t* sizes, int* tags, void** mhandles,
                  void** request);
  NetFlushFn iflush;
  TestFn test;
  CloseFn close_send;
  CloseFn close_recv;
  CloseFn close_listen;
  GetDeviceMrFn get_device_mr;
  IrecvConsumedFn irecv_consumed;
  NcclResult (*make_vdevice)(int* d, VirtualDevicePropsV9* props);
};

struct NetV10 {
  const char* name;
  NcclResult (*init)(DebugLogger logger, ProfilerCallback profiler);
  DevicesFn devices;
  NcclResult (*get_properties)(int dev, PropertiesV9* props);
  ListenV8Fn listen;
  NcclResult (*connect)(int dev, NetCommConfig* config, void* handle, void** send_comm,
                    NetDeviceHandle** send_dev_comm);
  AcceptFn accept;
  RegMrFn reg_mr;
  RegMrDmaBufFn reg_mr_dma_buf;
  DeregMrFn dereg_mr;
  NcclResult (*isend)(void* send_comm, void* data, size_t size, int tag, void* mhandle, void* phandle,
                  void** request);
  NcclResult (*irecv)(void* recv_comm, int n, void** data, size_t* sizes, int* tags, void** mhandles,
                  void** phandles, void** request);
  NetFlushFn iflush;
  TestFn test;
  CloseFn close_send;
  CloseFn close_recv;
  CloseFn close_listen;
  GetDeviceMrFn get_device_mr;
  IrecvConsumedFn irecv_consumed;
  NcclResult (*make_vdevice)(int* d, VirtualDevicePropsV9* props);
};

template <typename Props, typename VProps>
struct NetV11Like {  // v11 and v12 differ only in Props and VProps
  const char* name;
  NcclResult (*init)(void** ctx, uint64_t comm_id, NetCommConfig* config, DebugLogger logger,
                 ProfilerCallback profiler);
  DevicesFn devices;
  NcclResult (*get_properties)(int dev, Props* props);
  ListenV11Fn listen;
  NcclResult (*connect)(void* ctx, int dev, void* handle, void** send_comm,
                    NetDeviceHandle** send_dev_comm);
  AcceptFn accept;
  RegMrFn reg_mr;
  RegMrDmaBufFn reg_mr_dma_buf;
  DeregMrFn dereg_mr;
  NcclResult (*isend)(void* send_comm, void* data, size_t size, int tag, void* mhandle, void* phandle,
                  void** request);
  NcclResult (*irecv)(void* recv_comm, int n, void** data, size_t* sizes, int* tags, void** mhandles,
                  void** phandles, void** request);
  NetFlushFn iflush;
  TestFn test;
  CloseFn close_send;
  CloseFn close_recv;
  CloseFn close_listen;
  GetDeviceMrFn get_device_mr;
  IrecvConsumedFn irecv_consumed;
  NcclResult (*make_vdevice)(int* d, VProps* props);
  FinalizeFn finalize;
  NcclResult (*set_net_attr)(void* ctx, NetAttr* attr);
};
using NetV11 = NetV11Like<PropertiesV11, VirtualDevicePropsV9>;
using NetV12 = NetV11Like<PropertiesV12, VirtualDevicePropsV12>;

// CollNet v8..v10 share one shape apart from the count type, the SGE and
// makeVDevice; v11 and v12 add the context and finalize.
template <typename Props, typename CountT, typename SgeT>
struct CollNetV8Like {
  const char* name;
  NcclResult (*init)(DebugLogger logger);
  DevicesFn devices;
  NcclResult (*get_properties)(int dev, Props* props);
  ListenV8Fn listen;
  CollConnectFn connect;
  ReduceSupportFn reduce_support;
  RegMrFn reg_mr;
  RegMrDmaBufFn reg_mr_dma_buf;
  DeregMrFn dereg_mr;
  NcclResult (*iallreduce)(void* coll_comm, void* send_data, void* recv_data, CountT count,
                       NcclDataType dtype, NcclRedOp op, void* send_mhandle, void* recv_mhandle,
                       void** request);
  typename CollGatherFns<Props, SgeT>::AllGather iallgather;
  typename CollGatherFns<Props, SgeT>::ReduceScatter ireducescatter;
  CollFlushFn iflush;
  TestFn test;
  CloseFn close_coll;
  CloseFn close_listen;
};
using CollNetV8 = CollNetV8Like<PropertiesV8, int, Sge<uint32_t>>;

template <typename Props, typename VProps>
struct CollNetV9Like {  // v9 and v10
  const char* name;
  NcclResult (*init)(DebugLogger logger);
  DevicesFn devices;
  NcclResult (*get_properties)(int dev, Props* props);
  ListenV8Fn listen;
  CollConnectFn connect;
  ReduceSupportFn reduce_support;
  RegMrFn reg_mr;
  RegMrDmaBufFn reg_mr_dma_buf;
  DeregMrFn dereg_mr;
  NcclResult (*iallreduce)(void* coll_comm, void* send_data, void* recv_data, size_t count,
                       NcclDataType dtype, NcclRedOp op, void* send_mhandle, void* recv_mhandle,
                       void** request);
  typename CollGatherFns<Props, Sge<size_t>>::AllGather iallgather;
  typename CollGatherFns<Props, Sge<size_t>>::ReduceScatter ireducescatter;
  CollFlushFn iflush;
  TestFn test;
  CloseFn close_coll;
  CloseFn close_listen;
  NcclResult (*make_vdevice)(int* d, VProps* props);
};
using CollNetV9 = CollNetV9Like<PropertiesV9, VirtualDevicePropsV9>;
using CollNetV10 = CollNetV9;

template <typename Props, typename VProps>
struct CollNetV11Like {
  const char* name;
  NcclResult (*init)(void** ctx, uint64_t comm_id, DebugLogger logger);
  DevicesFn devices;
  NcclResult (*get_properties)(int dev, Props* props);
  ListenV11Fn listen;
  CollConnectFn connect;
  ReduceSupportFn reduce_support;
  RegMrFn reg_mr;
  RegMrDmaBufFn reg_mr_dma_buf;
  DeregMrFn dereg_mr;
  NcclResult (*iallreduce)(void* coll_comm, void* send_data, void* recv_data, size_t count,
                       NcclDataType dtype, NcclRedOp op, void* send_mhandle, void* recv_mhandle,
                       void** request);
  typename CollGatherFns<Props, Sge<size_t>>::AllGather iallgather;
  typename CollGatherFns<Props, Sge<size_t>>::ReduceScatter ireducescatter;
  CollFlushFn iflush;
  TestFn test;
  CloseFn close_coll;
  CloseFn close_listen;
  NcclResult (*make_vdevice)(int* d, VProps* props);
  FinalizeFn finalize;
};
using CollNetV11 = CollNetV11Like<PropertiesV11, VirtualDevicePropsV9>;
using CollNetV12 = CollNetV11Like<PropertiesV12, VirtualDevicePropsV12>;

// The layout NCCL expects, on the LP64 ABIs NCCL supports (x86-64, aarch64).
static_assert(sizeof(void*) == 8, "NCCL plugins are 64-bit only");
static_assert(sizeof(NetDeviceHandle) == 32);
static_assert(sizeof(PropertiesV8) == 64 && offsetof(PropertiesV8, speed) == 32 &&
              offsetof(PropertiesV8, net_device_version) == 56);
static_assert(sizeof(PropertiesV9) == 104 && offsetof(PropertiesV9, force_flush) == 32 &&
              offsetof(PropertiesV9, vprops) == 64 && offsetof(PropertiesV9, max_p2p_bytes) == 88 &&
              offsetof(PropertiesV9, max_coll_bytes) == 96);
static_assert(sizeof(PropertiesV11) == 112 && offsetof(PropertiesV11, vprops) == 64 &&
              offsetof(PropertiesV11, max_p2p_bytes) == 88 &&
              offsetof(PropertiesV11, tail.max_multi_request_size) == 104);
static_assert(sizeof(PropertiesV12) == 128 && offsetof(PropertiesV12, vprops) == 64 &&
              offsetof(PropertiesV12, max_p2p_bytes) == 104 &&
              offsetof(PropertiesV12, max_coll_bytes) == 112 &&
              offsetof(PropertiesV12, tail.max_multi_request_size) == 120 &&
              offsetof(PropertiesV12, tail.rail_id) == 124 &&
              offsetof(PropertiesV12, tail.plane_id) == 126);
static_assert(sizeof(Sge<uint32_t>) == 24 && sizeof(Sge<size_t>) == 24);
static_assert(sizeof(NetAttr) == 44 && sizeof(NetCommConfig) == 4);
static_assert(sizeof(NetV8) == 19 * 8 && offsetof(NetV8, irecv_consumed) == 18 * 8);
static_assert(sizeof(NetV9) == 20 * 8 && offsetof(NetV9, make_vdevice) == 19 * 8);
static_assert(sizeof(NetV10) == 20 * 8 && offsetof(NetV10, isend) == 10 * 8);
static_assert(sizeof(NetV11) == 22 * 8 && offsetof(NetV11, finalize) == 20 * 8 &&
              offsetof(NetV11, set_net_attr) == 21 * 8);
static_assert(sizeof(NetV12) == 22 * 8);
static_assert(sizeof(CollNetV8) == 17 * 8 && offsetof(CollNetV8, iallreduce) == 10 * 8 &&
              offsetof(CollNetV8, close_listen) == 16 * 8);
static_assert(sizeof(CollNetV9) == 18 * 8 && offsetof(CollNetV9, make_vdevice) == 17 * 8);
static_assert(sizeof(CollNetV11) == 19 * 8 && offsetof(CollNetV11, iflush) == 13 * 8 &&
              offsetof(CollNetV11, finalize) == 18 * 8);
static_assert(sizeof(CollNetV12) == 19 * 8);

}  // namespace tributary::nccl
