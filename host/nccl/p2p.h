// SPDX-License-Identifier: Apache-2.0
// The plugin's point-to-point transport (NCCL's ncclNet): tagged messages
// over libfabric RDM endpoints, in the newest ABI's shape; the per-version
// tables (adapters.cc) call these.
//
// Devices are the NICs of the chosen provider (TRIBUTARY_OFI_PROVIDER,
// "auto": verbs;ofi_rxm, efa, else tcp;ofi_rxm with a WARN), one per
// libfabric domain, loopback only when nothing else is offered or
// TRIBUTARY_NCCL_IFACES names it. Each device opens one endpoint, on first
// use, shared by every comm on it.
//
// Connection protocol (docs/NCCL.md): listen() posts a receive for a hello
// (tag bit 63 | listen id) and puts the endpoint's address and the listen id
// in NCCL's handle; connect() sends the hello (its own address and a send id
// of its device) and returns the send comm at once; accept() returns the
// receive comm once the hello arrived. Data then travels with tag
// (send id << 32 | NCCL tag), received only from that peer's address
// (FI_DIRECTED_RECV), so ids and tags of different peers never mix.
//
// Nothing blocks: connect, isend and irecv return a null comm or request
// when libfabric says "try again", and NCCL calls again. test() reaps the
// device's completion queues (manual progress) and never waits. The calls
// that cannot say "try again" (listen, and a grouped receive whose first
// members are posted) retry a full receive queue for up to 10 s; closeRecv
// waits up to 1 s for the receives it cancels to complete (p2p_device.h).
//
// Thread-safety: every call may come from any thread; each device's
// endpoint, queues and comms are guarded by the device's mutex, which a
// call that waits releases between its tries (NCCL's other proxy threads
// test() other comms of the same device meanwhile).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "host/nccl/nccl_abi.h"

namespace tributary::nccl {

struct NicInfo {
  std::string name;      // the libfabric domain: "eth0", "mlx5_0", "shm"
  std::string pci_path;  // realpath of the PCI device in /sys; "" when virtual
  uint64_t guid = 0;
  int speed_mbps = 0;
  std::string provider;  // "tcp;ofi_rxm", "verbs;ofi_rxm" ...
};

inline constexpr int kMaxGroupedRecvs = 8;  // maxRecvs the plugin reports

NcclResult NetInit();
NcclResult NetDevices(int* ndev);
NcclResult NetNic(int dev, const NicInfo** nic);
NcclResult NetListen(int dev, void* handle, void** listen_comm);
NcclResult NetConnect(int dev, const void* handle, void** send_comm);
NcclResult NetAccept(void* listen_comm, void** recv_comm);
NcclResult NetRegMr(void* comm, void* data, size_t size, int type, void** mhandle);
NcclResult NetDeregMr(void* comm, void* mhandle);
NcclResult NetIsend(void* send_comm, void* data, size_t size, int tag, void** request);
NcclResult NetIrecv(void* recv_comm, int n, void** data, const size_t* sizes, const int* tags,
                void** request);
NcclResult NetIflush(void* recv_comm, void** request);
NcclResult NetTest(void* request, int* done, int* sizes);
NcclResult NetCloseSend(void* send_comm);
NcclResult NetCloseRecv(void* recv_comm);
NcclResult NetCloseListen(void* listen_comm);

}  // namespace tributary::nccl
