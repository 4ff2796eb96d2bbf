// SPDX-License-Identifier: Apache-2.0
// NodeDevice; see node_device.h.
#include "host/src/node/node_device.h"

#include <unistd.h>

#include <cstring>

#include "common/log.h"

namespace tributary::internal {

const char* NodeModeName(uint32_t mode) {
  switch (mode) {
    case NodeOffer::kHost: return "host memory";
    case NodeOffer::kStaged: return "device memory, staged through host memory";
    case NodeOffer::kPeer: return "device memory, peer path (CUDA IPC)";
    default: return "nothing (no offer)";
  }
}

NodeDevice::~NodeDevice() {
  if (pinned_ != nullptr) api_->host_unregister(pinned_);
  for (const Mapping& m : mappings_) api_->ipc_close_mem_handle(m.base);
  for (const auto& [device, stream] : streams_) {
    api_->set_device(device);
    api_->stream_destroy(stream);
  }
}

std::string NodeDevice::PeerPathUnavailable(uint32_t local_size) const {
  if (api_->reduce == nullptr) return api_->kernels;
  if (api_->ipc_get_mem_handle == nullptr || api_->ipc_open_mem_handle == nullptr ||
      api_->ipc_close_mem_handle == nullptr || api_->mem_get_address_range == nullptr) {
    return std::string(api_->runtime) + " or libcuda.so.1 lacks CUDA IPC";
  }
  if (local_size > static_cast<uint32_t>(kernels::kMaxInputs)) {
    return std::to_string(local_size) + " local ranks (the kernel reduces at most " +
           std::to_string(kernels::kMaxInputs) + " inputs)";
  }
  return "";
}

Status NodeDevice::Handle(const uint8_t* p, CudaIpcHandle* handle, uint64_t* offset) {
  uint64_t base = 0;
  size_t bytes = 0;
  const auto addr = reinterpret_cast<uint64_t>(p);
  // Driver error codes: a CUresult, not a cudaError_t; named by number.
  if (int rc = api_->mem_get_address_range(&base, &bytes, addr); rc != 0) {
    return Status(StatusCode::kUnavailable, "cuMemGetAddressRange failed (CUresult " +
                                                std::to_string(rc) + ")");
  }
  Status s = CudaCall(*api_, api_->ipc_get_mem_handle(handle, reinterpret_cast<void*>(base)),
                      "cudaIpcGetMemHandle");
  if (!s.ok()) return Status(StatusCode::kUnavailable, s.message());
  *offset = addr - base;
  return Status::Ok();
}

Status NodeDevice::Prepare(const uint8_t* send, uint8_t* recv, bool send_on_device,
                           bool recv_on_device, uint32_t local_size, NodeOffer* offer) {
  *offer = NodeOffer{};
  offer->pid = static_cast<int32_t>(getpid());
  offer->send = reinterpret_cast<uint64_t>(send);
  offer->recv = reinterpret_cast<uint64_t>(recv);
  if (!send_on_device && !recv_on_device) {
    offer->mode = NodeOffer::kHost;
    return Status::Ok();
  }
  CudaPointerAttributes a;
  Status s = CudaCall(*api_, api_->pointer_get_attributes(&a, send_on_device ? send : recv),
                      "cudaPointerGetAttributes");
  if (!s.ok()) return s;
  offer->device = a.device;
  if (device_ != a.device) {
    s = CudaCall(*api_, api_->set_device(a.device), "cudaSetDevice");
    if (!s.ok()) return s;
    device_ = a.device;
  }
  std::string why = PeerPathUnavailable(local_size);
  if (why.empty() && !(send_on_device && recv_on_device)) {
    why = "one of the buffers is host memory";
  }
  if (why.empty() && send_on_device && recv_on_device) {
    CudaPointerAttributes b;
    s = CudaCall(*api_, api_->pointer_get_attributes(&b, recv), "cudaPointerGetAttributes");
    if (!s.ok()) return s;
    if (b.device != a.device) why = "send and recv are on different GPUs";
  }
  if (why.empty()) {
    Status h = Handle(send, &offer->send_handle, &offer->send_offset);
    if (h.ok()) h = Handle(recv, &offer->recv_handle, &offer->recv_offset);
    if (!h.ok()) why = "the buffers have no CUDA IPC handle (" + h.message() + ")";
  }
  if (!why.empty()) {
    offer->mode = NodeOffer::kStaged;
    if (!said_staged_) {
      said_staged_ = true;
      TRIB_LOG(kInfo, "node", "node level: device memory staged through shared host memory: %s",
               why.c_str());
    }
  } else {
    offer->mode = NodeOffer::kPeer;
    if (!said_peer_) {
      said_peer_ = true;
      TRIB_LOG(kInfo, "node", "node level: device memory on the peer path: the k-input reduce "
               "kernel (%s) over CUDA IPC peer pointers, GPU %d", api_->kernels, a.device);
    }
  }
  auto it = streams_.find(device_);
  if (it == streams_.end()) {
    CudaStream stream = nullptr;
    s = CudaCall(*api_, api_->stream_create(&stream, kCudaStreamNonBlocking), "cudaStreamCreate");
    if (!s.ok()) return s;
    streams_[device_] = stream;
  }
  return Status::Ok();
}

void NodeDevice::PinHost(void* p, size_t bytes) {
  if (pin_tried_) return;
  pin_tried_ = true;
  if (api_->host_register == nullptr || api_->host_unregister == nullptr) return;
  Status s = CudaCall(*api_, api_->host_register(p, bytes, kCudaHostRegisterPortable),
                      "cudaHostRegister");
  if (s.ok()) {
    pinned_ = p;
  } else {
    TRIB_LOG(kInfo, "node", "node level: the shared segment (%zu bytes) stays pageable: %s", bytes,
             s.message().c_str());
  }
}

Result<uint8_t*> NodeDevice::Open(int32_t pid, const CudaIpcHandle& handle) {
  std::string key(reinterpret_cast<const char*>(&pid), sizeof(pid));
  key.append(handle.bytes, sizeof(handle.bytes));
  for (auto it = mappings_.begin(); it != mappings_.end(); ++it) {
    if (it->key == key) {
      mappings_.splice(mappings_.begin(), mappings_, it);
      return mappings_.front().base;
    }
  }
  void* base = nullptr;
  Status s = CudaCall(*api_, api_->ipc_open_mem_handle(&base, handle, kCudaIpcMemLazyEnablePeerAccess),
                      "cudaIpcOpenMemHandle");
  if (!s.ok()) return s;
  if (mappings_.size() >= kMaxMappings) {
    api_->ipc_close_mem_handle(mappings_.back().base);
    mappings_.pop_back();
  }
  mappings_.push_front(Mapping{std::move(key), static_cast<uint8_t*>(base)});
  return static_cast<uint8_t*>(base);
}

Result<uint8_t*> NodeDevice::Map(const NodeOffer& peer, bool recv) {
  // A rank of this process (threads as ranks): its addresses are ours.
  if (peer.pid == static_cast<int32_t>(getpid())) {
    return reinterpret_cast<uint8_t*>(recv ? peer.recv : peer.send);
  }
  auto base = Open(peer.pid, recv ? peer.recv_handle : peer.send_handle);
  if (!base.ok()) return base.status();
  return base.value() + (recv ? peer.recv_offset : peer.send_offset);
}

Status NodeDevice::Copy(void* dst, const void* src, size_t bytes, const char* what) {
  if (bytes == 0) return Status::Ok();
  return CudaCall(*api_, api_->memcpy_async(dst, src, bytes, kCudaMemcpyDefault, streams_.at(device_)),
                  what);
}

Status NodeDevice::Reduce(const kernels::ReduceArgs& args) {
  kernels::ReduceArgs a = args;
  a.stream = streams_.at(device_);
  char error[256] = {};
  const int rc = api_->reduce(&a, error, sizeof(error));
  if (rc == 0) return Status::Ok();
  return Status(static_cast<StatusCode>(rc), std::string("reduce kernel: ") + error);
}

Status NodeDevice::Sync() {
  return CudaCall(*api_, api_->stream_synchronize(streams_.at(device_)), "cudaStreamSynchronize");
}

}  // namespace tributary::internal
