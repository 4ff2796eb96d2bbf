// SPDX-License-Identifier: Apache-2.0
// ncclNet over libfabric tagged messages; see p2p.h for the protocol and
// p2p_device.h for the requests and comms on a device.
//
// Thread-safety: the device's mutex guards its endpoint, its queues and all
// comms and requests on it (p2p.h).
#include "host/nccl/p2p.h"

#include <rdma/fi_tagged.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <mutex>
#include <sstream>
#include <thread>
#include <vector>

#include "common/log.h"
#include "common/ofi/ofi_api.h"
#include "common/ofi/ofi_fabric.h"
#include "host/nccl/p2p_device.h"
#include "host/src/env.h"

namespace tributary::nccl {
namespace {

using Clock = std::chrono::steady_clock;

constexpr const char* kLog = "nccl";
constexpr uint64_t kHelloTag = 1ull << 63;
// How long listen, and a grouped receive half posted, retry a receive queue
// that libfabric says is full before they fail.
constexpr auto kFullQueueRetry = std::chrono::seconds(10);
// How long closeRecv and closeSend wait for the operations they cancelled
// to complete before they park them, and deregMr for those using the
// memory before it returns.
constexpr auto kCloseWait = std::chrono::seconds(1);
// How long a waiting call leaves the device's lock to the other threads
// between two tries.
constexpr auto kPause = std::chrono::microseconds(100);

// What listen() writes into NCCL's handle; connect() reads it.
struct ListenHandle {
  uint32_t magic;
  uint32_t listen_id;
  uint16_t address_bytes;
  uint8_t address[kMaxAddressBytes];
};
static_assert(sizeof(ListenHandle) <= kHandleMaxBytes);

struct MemoryHandle {
  void* data;
  size_t size;
};

uint64_t DataTag(uint32_t send_id, int tag) {
  return (static_cast<uint64_t>(send_id) << 32) | static_cast<uint32_t>(tag);
}

std::string ReadLine(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  return line;
}

// realpath of the PCI device behind a network interface or an RDMA device.
std::string PciPath(const std::string& name) {
  for (const char* dir : {"/sys/class/net/", "/sys/class/infiniband/"}) {
    char resolved[PATH_MAX];
    std::string link = std::string(dir) + name + "/device";
    if (realpath(link.c_str(), resolved) != nullptr) return resolved;
  }
  return "";
}

NicInfo DescribeNic(const fi_info* info, const std::string& provider) {
  NicInfo nic;
  nic.name = info->domain_attr->name != nullptr ? info->domain_attr->name : "?";
  nic.provider = provider;
  nic.pci_path = PciPath(nic.name);
  if (info->nic != nullptr && info->nic->link_attr != nullptr && info->nic->link_attr->speed > 0) {
    nic.speed_mbps = static_cast<int>(info->nic->link_attr->speed / 1000000);
  }
  if (nic.speed_mbps <= 0) nic.speed_mbps = atoi(ReadLine("/sys/class/net/" + nic.name + "/speed").c_str());
  if (nic.speed_mbps <= 0) nic.speed_mbps = 10000;  // virtual interfaces report none
  // One NIC, one guid: NCCL merges devices that share it.
  nic.guid = std::hash<std::string>{}(nic.pci_path.empty() ? nic.name : nic.pci_path);
  return nic;
}

// The devices, found once. Deliberately never destroyed: NCCL may call
// into the plugin from its proxy threads while the process exits.
struct Devices {
  std::vector<Device*> list;
  Status status;
};

std::vector<std::string> SplitNames(const std::string& text) {
  std::vector<std::string> out;
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) {
    const size_t b = item.find_first_not_of(" \t");
    const size_t e = item.find_last_not_of(" \t");
    if (b != std::string::npos) out.push_back(item.substr(b, e - b + 1));
  }
  return out;
}

Devices* FindDevices() {
  auto* found = new Devices;
  const auto& env = host::ProcessEnvironment();
  if (!env.ok()) {
    found->status = env.status();
    return found;
  }
  const std::string& ifaces = env.value().nccl_ifaces;
  ofi::ProviderQuery query;
  query.wanted = env.value().options.ofi_provider;
  query.caps = FI_TAGGED | FI_MSG | FI_DIRECTED_RECV;
  query.msg_order = FI_ORDER_SAS;
  query.setting = "TRIBUTARY_OFI_PROVIDER";
  fi_info* list = nullptr;
  auto selected = ofi::SelectProvider(query, [&](const std::string&, fi_info* info) {
    list = info;
    return Status::Ok();
  });
  if (!selected.ok()) {
    found->status = selected.status();
    return found;
  }
  const std::vector<std::string> wanted = SplitNames(ifaces);
  std::vector<std::pair<fi_info*, NicInfo>> nics;
  for (fi_info* i = list; i != nullptr; i = i->next) {
    NicInfo nic = DescribeNic(i, selected.value().provider);
    bool seen = false;
    for (const auto& n : nics) seen = seen || n.second.name == nic.name;
    bool allowed = wanted.empty() ||
                   std::find(wanted.begin(), wanted.end(), nic.name) != wanted.end();
    if (!seen && allowed) nics.emplace_back(i, std::move(nic));
  }
  // A name that matches nothing is a typo or a NIC this node lacks: said,
  // since the job then runs on fewer NICs than its settings name.
  for (const std::string& name : wanted) {
    if (std::none_of(nics.begin(), nics.end(),
                     [&](const auto& n) { return n.second.name == name; })) {
      TRIB_LOG(kWarn, kLog, "TRIBUTARY_NCCL_IFACES: '%s' matches no NIC of provider %s",
               name.c_str(), selected.value().provider.c_str());
    }
  }
  // Loopback only when it is all there is, or asked for by name.
  if (wanted.empty() && nics.size() > 1) {
    std::erase_if(nics, [](const auto& n) { return n.second.name == "lo"; });
  }
  for (auto& [info, nic] : nics) {
    fi_info* one = ofi::Lib().dupinfo(info);
    one->next = nullptr;
    TRIB_LOG(kInfo, kLog, "NIC %zu: %s provider %s speed %d Mbit/s pci %s", found->list.size(),
             nic.name.c_str(), nic.provider.c_str(), nic.speed_mbps,
             nic.pci_path.empty() ? "(virtual)" : nic.pci_path.c_str());
    found->list.push_back(new Device(one, std::move(nic)));
  }
  ofi::Lib().freeinfo(list);
  if (found->list.empty()) {
    found->status = Status(StatusCode::kUnavailable,
                           "no NIC of provider " + selected.value().provider +
                               (wanted.empty() ? "" : " among TRIBUTARY_NCCL_IFACES=" + ifaces));
  }
  return found;
}

const Devices& AllDevices() {
  static const Devices* devices = FindDevices();
  return *devices;
}

NcclResult Fail(NcclResult code, const char* what, const std::string& why) {
  TRIB_LOG(kWarn, kLog, "%s: %s", what, why.c_str());
  return code;
}

Device* DeviceAt(int dev) {
  const Devices& d = AllDevices();
  if (dev < 0 || static_cast<size_t>(dev) >= d.list.size()) return nullptr;
  return d.list[static_cast<size_t>(dev)];
}

// A call that has to wait for libfabric (a full queue) reaps and retries;
// between two tries it pauses with the device's lock (held by `lock`)
// released, so that NCCL's other proxy threads, which test() and post on
// the device's other comms meanwhile, are not stopped behind it. Whatever
// the caller read under the lock may have changed when this returns; what
// it is building is not yet visible to other threads, and NCCL makes no
// other call on the same comm meanwhile.
void Pause(std::unique_lock<std::mutex>& lock) {
  lock.unlock();
  std::this_thread::sleep_for(kPause);
  lock.lock();
}

// The comms NCCL holds are Comm* (p2p_device.h).
Comm* AsComm(void* comm) { return static_cast<Comm*>(comm); }
SendComm* AsSend(void* comm) { return static_cast<SendComm*>(AsComm(comm)); }
RecvComm* AsRecv(void* comm) { return static_cast<RecvComm*>(AsComm(comm)); }

long long CloseWaitMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(kCloseWait).count();
}

// The operations of a comm NCCL closes that it has not seen complete (an
// abort, or a teardown that stopped testing): NCCL never tests a request
// of a closed comm, so they are the plugin's to free. Those still pending
// are cancelled, but one that libfabric already matched or started cannot
// be: libfabric goes on writing (a receive) or reading (a send) NCCL's
// memory until it completes. So this waits, pausing without the lock,
// until every one of them has completed; past kCloseWait (a peer that
// stopped mid-message) the rest are parked, with a WARN naming `call`,
// rather than the close hanging.
void AbandonOutstanding(Comm* comm, std::unique_lock<std::mutex>& lock, const char* call,
                        const char* ops, const char* parked_as) {
  Device* d = comm->device;
  std::vector<std::unique_ptr<Request>> abandoned;
  for (Request* r : comm->outstanding) {
    r->comm = nullptr;
    d->CancelPending(r);
    abandoned.emplace_back(r);
  }
  comm->outstanding.clear();
  // Those deregMr already gave its full wait are not waited for again:
  // NCCL's teardown of a job with many stuck connections would otherwise
  // take two waits per connection.
  const auto start = Clock::now();
  const auto end = start + kCloseWait;
  bool paused = false;
  for (;;) {
    d->Progress();
    std::erase_if(abandoned, [](const auto& r) { return Settled(*r); });
    const bool waited_for = std::all_of(abandoned.begin(), abandoned.end(),
                                        [](const auto& r) { return r->waited_for; });
    if (abandoned.empty() || waited_for || Clock::now() >= end) break;
    Pause(lock);
    paused = true;
  }
  if (paused) {
    TRIB_LOG(kDebug, kLog, "%s: waited %lld ms for the %s NCCL abandoned", call,
             static_cast<long long>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                        Clock::now() - start)
                                        .count()),
             ops);
  }
  if (abandoned.empty()) return;
  const bool waited_for = std::all_of(abandoned.begin(), abandoned.end(),
                                      [](const auto& r) { return r->waited_for; });
  TRIB_LOG(kWarn, kLog,
           "%s: %zu %s still in progress %lld ms after they were cancelled%s (a peer stopped "
           "mid-message?): kept until they complete; libfabric may use their buffers until then",
           call, abandoned.size(), ops, CloseWaitMs(), waited_for ? " (in deregMr)" : "");
  for (auto& r : abandoned) {
    Request* pending = r.get();
    d->Park(pending, std::move(r), parked_as);
  }
}

}  // namespace

NcclResult NetInit() {
  const Devices& d = AllDevices();
  if (!d.status.ok()) return Fail(kSystemError, "point-to-point transport unusable", d.status.message());
  return kSuccess;
}

NcclResult NetDevices(int* ndev) {
  const Devices& d = AllDevices();
  *ndev = static_cast<int>(d.list.size());
  return kSuccess;
}

NcclResult NetNic(int dev, const NicInfo** nic) {
  Device* d = DeviceAt(dev);
  if (d == nullptr) return Fail(kInvalidArgument, "getProperties", "no device " + std::to_string(dev));
  *nic = &d->nic();
  return kSuccess;
}

NcclResult NetListen(int dev, void* handle, void** listen_comm) {
  *listen_comm = nullptr;
  Device* d = DeviceAt(dev);
  if (d == nullptr) return Fail(kInvalidArgument, "listen", "no device " + std::to_string(dev));
  std::unique_lock<std::mutex> lock(d->mu());
  Status s = d->EnsureOpen();
  if (!s.ok()) return Fail(kSystemError, "listen", s.message());
  if (d->address().size() > kMaxAddressBytes) {
    return Fail(kInternalError, "listen", "endpoint address longer than a handle holds");
  }
  auto listen = std::make_unique<ListenComm>();
  listen->device = d;
  listen->listen_id = d->NextId();
  listen->request.device = d;
  listen->request.n = 1;
  // listen has no "try again": reap and retry for a while when the receive
  // queue is full (pausing without the lock), then fail.
  ssize_t rc;
  const auto end = Clock::now() + kFullQueueRetry;
  while ((rc = d->PostRecv(&listen->request, 0, &listen->hello, sizeof(Hello), FI_ADDR_UNSPEC,
                           kHelloTag | listen->listen_id)) == -FI_EAGAIN &&
         Clock::now() < end) {
    d->Progress();
    Pause(lock);
  }
  if (rc != 0) return Fail(kSystemError, "listen", "fi_trecv: " + ofi::FiError(static_cast<int>(rc)));
  ListenHandle h{};
  h.magic = kHandleMagic;
  h.listen_id = listen->listen_id;
  h.address_bytes = static_cast<uint16_t>(d->address().size());
  memcpy(h.address, d->address().data(), d->address().size());
  memcpy(handle, &h, sizeof(h));
  *listen_comm = listen.release();
  return kSuccess;
}

NcclResult NetConnect(int dev, const void* handle, void** send_comm) {
  *send_comm = nullptr;
  Device* d = DeviceAt(dev);
  if (d == nullptr) return Fail(kInvalidArgument, "connect", "no device " + std::to_string(dev));
  ListenHandle h;
  memcpy(&h, handle, sizeof(h));
  if (h.magic != kHandleMagic || h.address_bytes > kMaxAddressBytes) {
    return Fail(kInvalidArgument, "connect", "the handle is not a Tributary listen handle");
  }
  std::lock_guard<std::mutex> lock(d->mu());
  Status s = d->EnsureOpen();
  if (!s.ok()) return Fail(kSystemError, "connect", s.message());
  auto peer = d->Peer(h.address, h.address_bytes);
  if (!peer.ok()) return Fail(kSystemError, "connect", peer.status().message());
  auto comm = std::make_unique<SendComm>();
  comm->device = d;
  comm->peer = peer.value();
  comm->send_id = d->NextId();
  comm->hello = Hello{};
  comm->hello.magic = kHandleMagic;
  comm->hello.send_id = comm->send_id;
  comm->hello.address_bytes = static_cast<uint16_t>(d->address().size());
  memcpy(comm->hello.address, d->address().data(), d->address().size());
  comm->hello_request.device = d;
  comm->hello_request.n = 1;
  ssize_t rc = d->PostSend(&comm->hello_request, 0, &comm->hello, sizeof(Hello), comm->peer,
                           kHelloTag | h.listen_id);
  if (rc == -FI_EAGAIN) {
    d->Progress();
    return kSuccess;  // NCCL calls again
  }
  if (rc != 0) return Fail(kSystemError, "connect", "fi_tsend: " + ofi::FiError(static_cast<int>(rc)));
  *send_comm = static_cast<Comm*>(comm.release());
  return kSuccess;
}

NcclResult NetAccept(void* listen_comm, void** recv_comm) {
  *recv_comm = nullptr;
  auto* listen = static_cast<ListenComm*>(listen_comm);
  Device* d = listen->device;
  std::lock_guard<std::mutex> lock(d->mu());
  d->Progress();
  Request& r = listen->request;
  if (r.completed == 0) return kSuccess;  // no hello yet: NCCL calls again
  if (!r.error.empty()) return Fail(kSystemError, "accept", r.error);
  const Hello& hello = listen->hello;
  if (r.sizes[0] != sizeof(Hello) || hello.magic != kHandleMagic ||
      hello.address_bytes > kMaxAddressBytes || hello.send_id == 0 || hello.send_id > kMaxSendId) {
    return Fail(kRemoteError, "accept", "malformed hello from the connecting peer");
  }
  auto peer = d->Peer(hello.address, hello.address_bytes);
  if (!peer.ok()) return Fail(kSystemError, "accept", peer.status().message());
  auto* comm = new RecvComm;
  comm->device = d;
  comm->peer = peer.value();
  comm->send_id = hello.send_id;
  *recv_comm = static_cast<Comm*>(comm);
  return kSuccess;
}

NcclResult NetRegMr(void*, void* data, size_t size, int type, void** mhandle) {
  *mhandle = nullptr;
  if (type != kPtrHost) {
    return Fail(kInvalidArgument, "regMr", "only host memory (NCCL_PTR_HOST) is supported, got type " +
                                               std::to_string(type));
  }
  // The providers used here (ofi_rxm, efa) register what they send and
  // receive themselves: the endpoints ask for no FI_MR_LOCAL.
  *mhandle = new MemoryHandle{data, size};
  return kSuccess;
}

NcclResult NetDeregMr(void* comm_handle, void* mhandle) {
  std::unique_ptr<MemoryHandle> memory(static_cast<MemoryHandle*>(mhandle));
  if (comm_handle == nullptr || memory == nullptr) return kSuccess;
  // NCCL's teardown of a connection deregisters and frees its buffers
  // before it closes the comm. Operations it abandoned there (an abort)
  // may still be writing (receives) or reading (sends) this memory: they
  // are cancelled, and deregMr returns once libfabric is done with each,
  // or after kCloseWait with a WARN. They stay NCCL's requests (and the
  // comm's, which frees them when it closes).
  Comm* comm = AsComm(comm_handle);
  Device* d = comm->device;
  std::unique_lock<std::mutex> lock(d->mu());
  // Also what the device keeps parked (a grouped receive that failed half
  // posted, whose posted members libfabric may still be writing): NCCL
  // never held it, but it frees the memory all the same.
  auto using_memory = [&] {
    d->Progress();
    std::vector<Request*> busy = d->ParkedTouching(memory->data, memory->size);
    for (Request* r : comm->outstanding) {
      if (!Settled(*r) && Touches(*r, memory->data, memory->size)) busy.push_back(r);
    }
    // One a deregMr already gave its second (NCCL's shared buffer pools are
    // deregistered once per connection) is not waited for again.
    std::erase_if(busy, [](const Request* r) { return r->waited_for; });
    return busy;
  };
  std::vector<Request*> busy = using_memory();
  if (busy.empty()) return kSuccess;
  for (Request* r : busy) d->CancelPending(r);
  const auto end = Clock::now() + kCloseWait;
  while (!busy.empty() && Clock::now() < end) {
    Pause(lock);
    busy = using_memory();
  }
  if (!busy.empty()) {
    for (Request* r : busy) r->waited_for = true;
    TRIB_LOG(kWarn, kLog,
             "deregMr: %zu operation(s) on the memory still in progress %lld ms after they were "
             "cancelled (a peer stopped mid-message?): libfabric may use the memory after NCCL "
             "frees it",
             busy.size(), CloseWaitMs());
  }
  return kSuccess;
}

NcclResult NetIsend(void* send_comm, void* data, size_t size, int tag, void** request) {
  *request = nullptr;
  SendComm* comm = AsSend(send_comm);
  Device* d = comm->device;
  std::lock_guard<std::mutex> lock(d->mu());
  if (!comm->hello_request.error.empty()) {
    return Fail(kRemoteError, "isend", "the connection's hello failed: " + comm->hello_request.error);
  }
  auto r = std::make_unique<Request>();
  r->device = d;
  r->comm = comm;
  r->n = 1;
  ssize_t rc = d->PostSend(r.get(), 0, data, size, comm->peer, DataTag(comm->send_id, tag));
  if (rc == -FI_EAGAIN) {
    d->Progress();
    return kSuccess;  // a null request: NCCL tries again
  }
  if (rc != 0) return Fail(kSystemError, "isend", "fi_tsend: " + ofi::FiError(static_cast<int>(rc)));
  comm->outstanding.insert(r.get());
  *request = r.release();
  return kSuccess;
}

NcclResult NetIrecv(void* recv_comm, int n, void** data, const size_t* sizes, const int* tags,
                void** request) {
  *request = nullptr;
  if (n < 1 || n > kMaxGroupedRecvs) {
    return Fail(kInvalidArgument, "irecv", "grouped receive of " + std::to_string(n) +
                                               " buffers (1.." + std::to_string(kMaxGroupedRecvs) +
                                               ")");
  }
  RecvComm* comm = AsRecv(recv_comm);
  Device* d = comm->device;
  std::unique_lock<std::mutex> lock(d->mu());
  if (!d->RecvRoom(n)) {
    d->Progress();
    return kSuccess;  // the receive queue is full: a null request, NCCL tries again
  }
  auto r = std::make_unique<Request>();
  r->device = d;
  r->comm = comm;
  r->n = n;
  for (int i = 0; i < n; ++i) {
    ssize_t rc;
    // Once one receive of the group is posted the rest must follow: reap
    // and retry (bounded, pausing without the lock) rather than hand NCCL
    // half a group. The posted members may complete meanwhile, into `r`,
    // which only this call knows.
    const auto end = Clock::now() + kFullQueueRetry;
    for (;;) {
      rc = d->PostRecv(r.get(), i, data[i], sizes[i], comm->peer, DataTag(comm->send_id, tags[i]));
      if (rc != -FI_EAGAIN) break;
      if (i == 0) {
        d->Progress();
        return kSuccess;  // nothing posted: a null request, NCCL tries again
      }
      if (Clock::now() >= end) break;
      d->Progress();
      Pause(lock);
    }
    if (rc != 0) {
      // The members posted are cancelled; they still complete into `r`.
      d->CancelPending(r.get());
      r->comm = nullptr;
      Request* posted = r.get();
      d->Park(posted, std::move(r), "grouped receive posted in part");
      return Fail(kSystemError, "irecv", "fi_trecv: " + ofi::FiError(static_cast<int>(rc)));
    }
  }
  comm->outstanding.insert(r.get());
  *request = r.release();
  return kSuccess;
}

NcclResult NetIflush(void*, void** request) {
  // Host memory needs no flush; a request that is already complete keeps
  // NCCL from taking a null one as "try again".
  auto* r = new Request;
  r->n = 0;
  *request = r;
  return kSuccess;
}

NcclResult NetTest(void* request, int* done, int* sizes) {
  auto* r = static_cast<Request*>(request);
  *done = 0;
  if (r->device != nullptr) {
    std::lock_guard<std::mutex> lock(r->device->mu());
    r->device->Progress();
    // One failed member fails the group: the others are cancelled rather
    // than awaited (a peer that aborted would never send them).
    if (!r->error.empty() && r->completed < r->n) r->device->CancelPending(r);
    if (r->completed < r->n) return kSuccess;
    if (r->comm != nullptr) r->comm->outstanding.erase(r);
  }
  std::unique_ptr<Request> owned(r);
  if (!owned->error.empty()) return Fail(kSystemError, "test", owned->error);
  *done = 1;
  if (sizes != nullptr) {
    for (int i = 0; i < owned->n; ++i) sizes[i] = static_cast<int>(owned->sizes[i]);
  }
  return kSuccess;
}

NcclResult NetCloseSend(void* send_comm) {
  std::unique_ptr<SendComm> comm(AsSend(send_comm));
  Device* d = comm->device;
  std::unique_lock<std::mutex> lock(d->mu());
  AbandonOutstanding(comm.get(), lock, "closeSend", "send(s)", "send of a closed send comm");
  // A hello still in flight (a peer that has not progressed yet, or never
  // accepts) may yet complete into the comm: parked until it has.
  Request* hello = &comm->hello_request;
  d->Park(hello, std::move(comm), "send comm with its hello in flight");
  return kSuccess;
}

NcclResult NetCloseRecv(void* recv_comm) {
  std::unique_ptr<RecvComm> comm(AsRecv(recv_comm));
  std::unique_lock<std::mutex> lock(comm->device->mu());
  AbandonOutstanding(comm.get(), lock, "closeRecv", "receive(s)",
                     "receive of a closed receive comm");
  return kSuccess;
}

NcclResult NetCloseListen(void* listen_comm) {
  std::unique_ptr<ListenComm> listen(static_cast<ListenComm*>(listen_comm));
  Device* d = listen->device;
  std::lock_guard<std::mutex> lock(d->mu());
  d->Progress();
  // A hello receive still posted is cancelled (it usually completes at
  // once, and the comm goes now) and parked until it completed.
  Request* hello = &listen->request;
  if (!Settled(*hello)) {
    d->CancelPending(hello);
    d->Progress();
  }
  d->Park(hello, std::move(listen), "listen comm with its hello receive posted");
  return kSuccess;
}

}  // namespace tributary::nccl
