// SPDX-License-Identifier: Apache-2.0
// The exported tables: ncclNetPlugin_v8 .. v12 and ncclCollNetPlugin_v8 ..
// v12, each a thin adapter from its version's argument lists onto the one
// implementation (p2p.h, collnet.h). NCCL takes the newest table it knows:
// 2.30 the v12 ones, 2.28 the v11 ones.
//
// CollNet is exported as v12 .. v8, each with iallgather and
// ireducescatter (the aggregator's all-gather and reduce-scatter, FORMAT.md
// §3.3.1).
//
// Device offload (getDeviceMr, irecvConsumed) and virtual NICs
// (makeVDevice) are not offered: null, as NCCL allows.
//
// The v11 and v12 inits hand NCCL the communicator's context
// (comm_context.h), which ncclNet's finalize releases.
//
// Thread-safety: the tables are immutable; the functions are those of
// p2p.h, collnet.h and comm_context.h.
#include <atomic>
#include <cstring>
#include <type_traits>

#include "common/log.h"
#include "host/nccl/collnet.h"
#include "host/nccl/comm_context.h"
#include "host/nccl/nccl_abi.h"
#include "host/nccl/p2p.h"
#include "host/nccl/plugin_log.h"

namespace tributary::nccl {
namespace {

constexpr size_t kMaxTransferBytes = 1ull << 30;  // per isend/irecv and per collective call

// Fills any version's properties from the NIC; fields a version lacks are skipped.
template <typename Props>
NcclResult FillProperties(const NicInfo& nic, const char* name, Props* p) {
  memset(p, 0, sizeof(*p));
  p->name = const_cast<char*>(name);
  p->pci_path = nic.pci_path.empty() ? nullptr : const_cast<char*>(nic.pci_path.c_str());
  p->guid = nic.guid;
  p->ptr_support = kPtrHost;
  p->reg_is_global = 0;
  p->speed = nic.speed_mbps;
  p->port = 1;
  p->latency = 0;
  p->max_comms = 65536;
  p->max_recvs = kMaxGroupedRecvs;
  p->net_device_type = kNetDeviceHost;
  p->net_device_version = 0;
  if constexpr (!std::is_same_v<Props, PropertiesV8>) {
    p->force_flush = 0;
    p->vprops.ndevs = 1;
    p->max_p2p_bytes = kMaxTransferBytes;
    p->max_coll_bytes = kMaxTransferBytes;
  }
  if constexpr (std::is_same_v<Props, PropertiesV11> || std::is_same_v<Props, PropertiesV12>) {
    p->tail.max_multi_request_size = 1;
  }
  if constexpr (std::is_same_v<Props, PropertiesV12>) {
    p->tail.rail_id = -1;
    p->tail.plane_id = -1;
  }
  return kSuccess;
}

template <typename Props>
NcclResult NetProperties(int dev, Props* props) {
  const NicInfo* nic = nullptr;
  NcclResult r = NetNic(dev, &nic);
  if (r != kSuccess) return r;
  r = FillProperties(*nic, nic->name.c_str(), props);
  if constexpr (!std::is_same_v<Props, PropertiesV8>) props->vprops.devs[0] = dev;
  return r;
}

// The CollNet device is the aggregator reached through the first NIC, and
// describes itself as that NIC: NCCL's topology keys network devices by
// name, so another name would count the NIC twice.
template <typename Props>
NcclResult CollProperties(int dev, Props* props) {
  if (dev != 0) return kInvalidArgument;
  return NetProperties(0, props);
}

// Says, once, when the plugin carries NCCL's traffic but CollNet is off.
void WarnIfCollNetOff() {
  static std::atomic<bool> warned{false};
  const char* enable = getenv("NCCL_COLLNET_ENABLE");
  if ((enable != nullptr && strcmp(enable, "1") == 0) || warned.exchange(true)) return;
  TRIB_LOG(kWarn, "nccl",
           "CollNet NOT IN USE: NCCL_COLLNET_ENABLE is not 1, so NCCL runs its own algorithms "
           "over this plugin's point-to-point transport and nothing is reduced in the network. "
           "Set NCCL_COLLNET_ENABLE=1 to all-reduce on the Tributary aggregator. (CollNet "
           "enabled through ncclConfig_t.collnetEnable instead is invisible to a plugin: then "
           "\"CollNet rank R of N joined job ...\" lines say it is in use.)");
}

NcclResult NetStart(DebugLogger logger, const char* which) {
  NcclResult r = Start(logger, which);
  if (r != kSuccess) return r;
  r = NetInit();
  if (r == kSuccess) WarnIfCollNetOff();
  return r;
}

// v11+: the context of the communicator (comm_context.h) NCCL inits the
// plugin for, or null when init failed (NCCL does not finalize then).
template <typename Start>
NcclResult InitWithContext(void** ctx, uint64_t comm_id, Start start) {
  *ctx = nullptr;
  NcclResult r = start();
  if (r == kSuccess) *ctx = CommContext::Acquire(comm_id);
  return r;
}

// The end of a communicator (v11+): says whether it used CollNet.
NcclResult NetFinalize(void* ctx) {
  auto* context = static_cast<CommContext*>(ctx);
  const char* enable = getenv("NCCL_COLLNET_ENABLE");
  if (enable != nullptr && strcmp(enable, "1") == 0 && context != nullptr &&
      !context->collnet_connected()) {
    TRIB_LOG(kWarn, "nccl",
             "CollNet NOT USED: NCCL_COLLNET_ENABLE=1 but NCCL never connected a CollNet "
             "communicator for this communicator (commId %#llx: one node only, fewer nodes "
             "than NCCL_COLLNET_NODE_THRESHOLD, or CollNet setup failed: see the warnings "
             "above); its all-reduces ran on NCCL's own algorithms.",
             static_cast<unsigned long long>(context->comm_id()));
  }
  CommContext::Release(context);
  return kSuccess;
}

NcclResult CollStart(DebugLogger logger, const char* which) {
  NcclResult r = Start(logger, which);
  return r == kSuccess ? CollInit() : r;
}

// The parts whose argument lists changed between versions.
NcclResult ListenV8(int dev, void* handle, void** listen) { return NetListen(dev, handle, listen); }
NcclResult ListenV11(void*, int dev, void* handle, void** listen) {
  return NetListen(dev, handle, listen);
}
NcclResult ConnectV8(int dev, void* handle, void** send, NetDeviceHandle**) {
  return NetConnect(dev, handle, send);
}
NcclResult ConnectV10(int dev, NetCommConfig*, void* handle, void** send, NetDeviceHandle**) {
  return NetConnect(dev, handle, send);
}
NcclResult ConnectV11(void*, int dev, void* handle, void** send, NetDeviceHandle**) {
  return NetConnect(dev, handle, send);
}
NcclResult Accept(void* listen, void** recv, NetDeviceHandle**) { return NetAccept(listen, recv); }
NcclResult RegMrDmaBuf(void* comm, void* data, size_t size, int type, uint64_t, int, void** mh) {
  return NetRegMr(comm, data, size, type, mh);  // refuses anything but host memory
}
NcclResult IsendV8(void* send, void* data, int size, int tag, void*, void** request) {
  if (size < 0) return kInvalidArgument;
  return NetIsend(send, data, static_cast<size_t>(size), tag, request);
}
NcclResult IsendV9(void* send, void* data, size_t size, int tag, void*, void** request) {
  return NetIsend(send, data, size, tag, request);
}
NcclResult IsendV10(void* send, void* data, size_t size, int tag, void*, void*, void** request) {
  return NetIsend(send, data, size, tag, request);
}
NcclResult IrecvV8(void* recv, int n, void** data, int* sizes, int* tags, void**, void** request) {
  size_t wide[kMaxGroupedRecvs];
  for (int i = 0; i < n && i < kMaxGroupedRecvs; ++i) wide[i] = static_cast<size_t>(sizes[i]);
  return NetIrecv(recv, n, data, wide, tags, request);
}
NcclResult IrecvV9(void* recv, int n, void** data, size_t* sizes, int* tags, void**, void** request) {
  return NetIrecv(recv, n, data, sizes, tags, request);
}
NcclResult IrecvV10(void* recv, int n, void** data, size_t* sizes, int* tags, void**, void**,
                void** request) {
  return NetIrecv(recv, n, data, sizes, tags, request);
}
NcclResult Iflush(void* recv, int, void**, int*, void**, void** request) {
  return NetIflush(recv, request);
}
NcclResult SetNetAttr(void*, NetAttr*) { return kSuccess; }  // hints only

// The pointers every version shares, and the five whose argument lists
// differ. What is not set stays null: getDeviceMr, irecvConsumed,
// makeVDevice.
template <typename Net, typename Props>
Net NetTable(decltype(Net::init) init, decltype(Net::listen) listen,
             decltype(Net::connect) connect, decltype(Net::isend) isend,
             decltype(Net::irecv) irecv) {
  Net t{};
  t.name = "Tributary";
  t.init = init;
  t.devices = NetDevices;
  t.get_properties = NetProperties<Props>;
  t.listen = listen;
  t.connect = connect;
  t.accept = Accept;
  t.reg_mr = NetRegMr;
  t.reg_mr_dma_buf = RegMrDmaBuf;
  t.dereg_mr = NetDeregMr;
  t.isend = isend;
  t.irecv = irecv;
  t.iflush = Iflush;
  t.test = NetTest;
  t.close_send = NetCloseSend;
  t.close_recv = NetCloseRecv;
  t.close_listen = NetCloseListen;
  return t;
}

NetV8 MakeNetV8() {
  return NetTable<NetV8, PropertiesV8>([](DebugLogger l) { return NetStart(l, "ncclNet v8"); },
                                       ListenV8, ConnectV8, IsendV8, IrecvV8);
}

NetV9 MakeNetV9() {
  return NetTable<NetV9, PropertiesV9>([](DebugLogger l) { return NetStart(l, "ncclNet v9"); },
                                       ListenV8, ConnectV8, IsendV9, IrecvV9);
}

NetV10 MakeNetV10() {
  return NetTable<NetV10, PropertiesV9>(
      [](DebugLogger l, ProfilerCallback) { return NetStart(l, "ncclNet v10"); }, ListenV8,
      ConnectV10, IsendV10, IrecvV10);
}

template <typename Net, typename Props, int kVersion>
Net MakeNetV11Like() {
  Net t = NetTable<Net, Props>(
      [](void** ctx, uint64_t comm_id, NetCommConfig*, DebugLogger l, ProfilerCallback) {
        return InitWithContext(ctx, comm_id, [l] {
          return NetStart(l, kVersion == 12 ? "ncclNet v12" : "ncclNet v11");
        });
      },
      ListenV11, ConnectV11, IsendV10, IrecvV10);
  t.finalize = NetFinalize;
  t.set_net_attr = SetNetAttr;
  return t;
}

// What every CollNet version shares: the table but its init, listen and
// finalize. Templates on the table's own types (the SGE's size type is
// uint32_t in v8, the iallreduce count int).
template <typename Coll, typename Props, typename CountT, typename SizeT>
Coll CollNetTable() {
  Coll t{};
  t.name = "Tributary";
  t.devices = CollDevices;
  t.get_properties = CollProperties<Props>;
  t.connect = CollConnect;
  t.reduce_support = CollReduceSupport;
  t.reg_mr = CollRegMr;
  t.reg_mr_dma_buf = CollRegMrDmaBuf;
  t.dereg_mr = CollDeregMr;
  t.iallreduce = [](void* comm, void* send, void* recv, CountT count, NcclDataType dtype,
                    NcclRedOp op, void*, void*, void** request) {
    // A negative v8 count becomes a huge one that the host library refuses
    // by name (it exceeds 2^48 elements).
    return CollIallreduce(comm, send, recv, static_cast<size_t>(count), dtype, op, request);
  };
  // NCCL passes one SGE: its address and size go on (collnet.cc checks n).
  t.iallgather = [](void* comm, void* send, int n, Sge<SizeT>* parts, size_t bytes_per_rank,
                    size_t window_offset, size_t window_bytes, void*, void** request) {
    return CollIallgather(comm, send, n, n > 0 ? parts[0].address : nullptr,
                          n > 0 ? parts[0].size : 0, bytes_per_rank, window_offset, window_bytes,
                          request);
  };
  t.ireducescatter = [](void* comm, int n, Sge<SizeT>* parts, void* recv, size_t bytes_per_rank,
                        size_t window_offset, size_t window_bytes, NcclDataType dtype,
                        NcclRedOp op, void*, void** request) {
    return CollIreducescatter(comm, n, n > 0 ? parts[0].address : nullptr,
                              n > 0 ? parts[0].size : 0, recv, bytes_per_rank, window_offset,
                              window_bytes, dtype, op, request);
  };
  // makeVDevice stays null (see the top).
  t.iflush = [](void* comm, void*, int, void*, void** request) {
    return CollIflush(comm, request);
  };
  t.test = CollTest;
  t.close_coll = CollClose;
  t.close_listen = CollCloseListen;
  return t;
}

template <typename Coll, typename Props, int kVersion>
Coll MakeCollNetV11Like() {
  Coll t = CollNetTable<Coll, Props, size_t, size_t>();
  // The context ncclNet's init acquired, without a reference of its own:
  // NCCL skips this finalize when its CollNet was disabled meanwhile
  // (comm_context.h).
  t.init = [](void** ctx, uint64_t comm_id, DebugLogger l) {
    *ctx = nullptr;
    NcclResult r = CollStart(l, kVersion == 12 ? "ncclCollNet v12" : "ncclCollNet v11");
    if (r == kSuccess) *ctx = CommContext::Find(comm_id);
    return r;
  };
  t.listen = [](void* ctx, int dev, void* handle, void** listen) {
    return CollListen(static_cast<CommContext*>(ctx), dev, handle, listen);
  };
  t.finalize = [](void*) { return kSuccess; };
  return t;
}

// v8..v10: init takes the logger alone, listen no context.
template <typename Coll, typename Props, typename CountT, typename SizeT, int kVersion>
Coll MakeCollNetV8Like() {
  Coll t = CollNetTable<Coll, Props, CountT, SizeT>();
  t.init = [](DebugLogger l) {
    return CollStart(l, kVersion == 10 ? "ncclCollNet v10"
                        : kVersion == 9 ? "ncclCollNet v9"
                                        : "ncclCollNet v8");
  };
  t.listen = [](int dev, void* handle, void** listen) {
    return CollListen(nullptr, dev, handle, listen);
  };
  return t;
}

}  // namespace
}  // namespace tributary::nccl

// The symbols NCCL looks up. Writable data, as NCCL declares them.
#define TRIB_PLUGIN_EXPORT __attribute__((visibility("default")))
namespace nccl = tributary::nccl;
extern "C" {
TRIB_PLUGIN_EXPORT nccl::NetV12 ncclNetPlugin_v12 =
    nccl::MakeNetV11Like<nccl::NetV12, nccl::PropertiesV12, 12>();
TRIB_PLUGIN_EXPORT nccl::NetV11 ncclNetPlugin_v11 =
    nccl::MakeNetV11Like<nccl::NetV11, nccl::PropertiesV11, 11>();
TRIB_PLUGIN_EXPORT nccl::NetV10 ncclNetPlugin_v10 = nccl::MakeNetV10();
TRIB_PLUGIN_EXPORT nccl::NetV9 ncclNetPlugin_v9 = nccl::MakeNetV9();
TRIB_PLUGIN_EXPORT nccl::NetV8 ncclNetPlugin_v8 = nccl::MakeNetV8();
TRIB_PLUGIN_EXPORT nccl::CollNetV12 ncclCollNetPlugin_v12 =
    nccl::MakeCollNetV11Like<nccl::CollNetV12, nccl::PropertiesV12, 12>();
TRIB_PLUGIN_EXPORT nccl::CollNetV11 ncclCollNetPlugin_v11 =
    nccl::MakeCollNetV11Like<nccl::CollNetV11, nccl::PropertiesV11, 11>();
TRIB_PLUGIN_EXPORT nccl::CollNetV10 ncclCollNetPlugin_v10 =
    nccl::MakeCollNetV8Like<nccl::CollNetV10, nccl::PropertiesV9, size_t, size_t, 10>();
TRIB_PLUGIN_EXPORT nccl::CollNetV9 ncclCollNetPlugin_v9 =
    nccl::MakeCollNetV8Like<nccl::CollNetV9, nccl::PropertiesV9, size_t, size_t, 9>();
TRIB_PLUGIN_EXPORT nccl::CollNetV8 ncclCollNetPlugin_v8 =
    nccl::MakeCollNetV8Like<nccl::CollNetV8, nccl::PropertiesV8, int, uint32_t, 8>();
}  // extern "C"
