// SPDX-License-Identifier: Apache-2.0
// The plugin's collective network (NCCL's ncclCollNet): all-reduce on a
// Tributary aggregator, in the newest ABI's shape; adapters.cc calls these.
//
// listen() writes a fresh random job id and key into NCCL's handle; NCCL
// hands every rank every rank's handle and connect() takes rank 0's, so all
// ranks of the collective join one job (NetCommConfig from the TRIBUTARY_*
// settings: aggregator, transport ...). A job that cannot be joined fails
// connect at once with a WARN naming the reason, so that NCCL's fallback to
// its own algorithms is loud. iallreduce maps onto Communicator::AllReduce
// with the registered buffers; test() polls its Request and never blocks,
// and frees it once done. Requests NCCL never tests again (an abort) are
// freed by closeColl.
//
// Thread-safety: a Communicator guards itself; NCCL serialises the calls on
// one collComm's handles, and nothing else here is shared but the
// communicators' contexts (comm_context.h).
#pragma once

#include <cstddef>
#include <cstdint>

#include "host/nccl/comm_context.h"
#include "host/nccl/nccl_abi.h"

namespace tributary::nccl {

NcclResult CollInit();
NcclResult CollDevices(int* ndev);
// `context`: the communicator's (ABI v11 and later), told when connect
// succeeds; null for v8..v10, and when ncclNet's init made none.
NcclResult CollListen(CommContext* context, int dev, void* handle, void** listen_comm);
// On failure (an error code) `listen_comm` is freed: NCCL forgets it then.
NcclResult CollConnect(void* handles[], int nranks, int rank, void* listen_comm, void** coll_comm);
NcclResult CollReduceSupport(NcclDataType dtype, NcclRedOp op, int* supported);
NcclResult CollRegMr(void* coll_comm, void* data, size_t size, int type, void** mhandle);
NcclResult CollRegMrDmaBuf(void* coll_comm, void* data, size_t size, int type, uint64_t offset, int fd,
                       void** mhandle);
NcclResult CollDeregMr(void* coll_comm, void* mhandle);
NcclResult CollIallreduce(void* coll_comm, void* send_data, void* recv_data, size_t count,
                      NcclDataType dtype, NcclRedOp op, void** request);
NcclResult CollIallgather(void* coll_comm, void* send_data, int n_recv_parts, void* recv_address,
                          size_t recv_size, size_t bytes_per_rank, size_t window_offset,
                          size_t window_bytes, void** request);
NcclResult CollIreducescatter(void* coll_comm, int n_send_parts, void* send_address,
                              size_t send_size, void* recv_data, size_t bytes_per_rank,
                              size_t window_offset, size_t window_bytes, NcclDataType dtype,
                              NcclRedOp op, void** request);
NcclResult CollIflush(void* coll_comm, void** request);
NcclResult CollTest(void* request, int* done, int* size);
NcclResult CollClose(void* coll_comm);
NcclResult CollCloseListen(void* listen_comm);

}  // namespace tributary::nccl
