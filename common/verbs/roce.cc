// SPDX-License-Identifier: Apache-2.0
// See roce.h. Thread-safety: free functions.
#include "common/verbs/roce.h"

#include <arpa/inet.h>
#include <errno.h>

#include <cstring>

#include "common/verbs/verbs_api.h"

namespace tributary::roce {

uint32_t MtuBytes(int ibv_mtu_enum) {
  switch (ibv_mtu_enum) {
    case IBV_MTU_256: return 256;
    case IBV_MTU_512: return 512;
    case IBV_MTU_1024: return 1024;
    case IBV_MTU_2048: return 2048;
    case IBV_MTU_4096: return 4096;
    default: return 0;
  }
}

std::string GidToString(const Gid& gid) {
  char buf[INET6_ADDRSTRLEN];
  inet_ntop(AF_INET6, gid.data(), buf, sizeof(buf));
  return buf;
}

bool IsIpv4Mapped(const Gid& gid) {
  static const uint8_t kPrefix[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
  return std::memcmp(gid.data(), kPrefix, sizeof(kPrefix)) == 0;
}

Gid Ipv4MappedGid(uint32_t ip_be) {
  Gid g{};
  g[10] = g[11] = 0xff;
  std::memcpy(g.data() + 12, &ip_be, 4);
  return g;
}

bool ParseGrhSource(const uint8_t* grh, Gid* source) {
  const uint8_t* ip4 = grh + 20;
  if ((ip4[0] >> 4) == 4 && (ip4[0] & 0x0f) == 5) {
    uint32_t src;
    std::memcpy(&src, ip4 + 12, 4);
    *source = Ipv4MappedGid(src);
    return true;
  }
  if ((grh[0] >> 4) == 6) {
    std::memcpy(source->data(), grh + 8, 16);
    return true;
  }
  return false;
}

int PickGidIndex(const std::vector<GidEntry>& table, bool ipv4, const Gid* exact) {
  int best = -1;
  for (const GidEntry& e : table) {
    if (!e.roce_v2) continue;
    bool zero = true;
    for (uint8_t b : e.gid) zero = zero && b == 0;
    if (zero || IsIpv4Mapped(e.gid) != ipv4) continue;
    if (exact != nullptr && e.gid != *exact) continue;
    if (best < 0 || e.index < static_cast<uint32_t>(best)) best = static_cast<int>(e.index);
  }
  return best;
}

int CountDevices(std::string* names) {
  if (names != nullptr) names->clear();
  if (!ibverbs::LoadLibibverbs().ok()) return 0;  // no rdma-core: no device either
  const ibverbs::VerbsApi& ibv = ibverbs::Lib();
  int n = 0;
  ibv_device** list = ibv.get_device_list(&n);
  if (list == nullptr) return 0;  // ENOSYS: no RDMA support in the kernel
  if (names != nullptr) {
    for (int i = 0; i < n; ++i) {
      if (!names->empty()) *names += ", ";
      *names += ibv.get_device_name(list[i]);
    }
  }
  ibv.free_device_list(list);
  return n;
}

Status OpenRocePort(bool ipv4, const Gid* exact, RocePort* out) {
  auto loaded = ibverbs::LoadLibibverbs();
  if (!loaded.ok()) return loaded.status();
  const ibverbs::VerbsApi& ibv = *loaded.value();
  int n = 0;
  ibv_device** list = ibv.get_device_list(&n);
  std::string tried;
  for (int d = 0; d < n && out->ctx == nullptr; ++d) {
    ibv_context* ctx = ibv.open_device(list[d]);
    if (ctx == nullptr) continue;
    ibv_device_attr dev{};
    if (ibv.query_device(ctx, &dev) == 0) {
      for (uint8_t p = 1; p <= dev.phys_port_cnt && out->ctx == nullptr; ++p) {
        ibv_port_attr pa{};
        if (ibverbs::QueryPort(ctx, p, &pa) != 0 || pa.state != IBV_PORT_ACTIVE ||
            pa.link_layer != IBV_LINK_LAYER_ETHERNET) {
          continue;
        }
        std::vector<GidEntry> table;
        for (int i = 0; i < pa.gid_tbl_len; ++i) {
          ibv_gid_entry e{};
          if (ibv.query_gid_ex(ctx, p, i, &e, 0, sizeof(e)) != 0) continue;
          GidEntry g;
          g.index = e.gid_index;
          std::memcpy(g.gid.data(), e.gid.raw, 16);
          g.roce_v2 = e.gid_type == IBV_GID_TYPE_ROCE_V2;
          table.push_back(g);
        }
        const int gid = PickGidIndex(table, ipv4, exact);
        if (gid < 0) continue;
        out->ctx = ctx;
        out->port_num = p;
        out->gid_index = gid;
        for (const GidEntry& g : table) {
          if (static_cast<int>(g.index) == gid) out->gid = g.gid;
        }
        out->mtu = MtuBytes(pa.active_mtu);
        out->device = ibv.get_device_name(list[d]);
      }
    }
    if (!tried.empty()) tried += ", ";
    tried += ibv.get_device_name(list[d]);
    if (out->ctx == nullptr) ibv.close_device(ctx);
  }
  ibv.free_device_list(list);
  if (out->ctx == nullptr) {
    return Unavailable("no active RoCE port with a RoCEv2 " +
                       (exact != nullptr ? "GID " + GidToString(*exact)
                                         : std::string(ipv4 ? "IPv4" : "IPv6") + " GID") +
                       " on devices " + (tried.empty() ? "(none could be opened)" : tried));
  }
  return Status::Ok();
}

void CloseRocePort(RocePort* port) {
  if (port->ctx != nullptr) ibverbs::Lib().close_device(port->ctx);
  port->ctx = nullptr;
}

Status ConnectUdQp(ibv_qp* qp, uint8_t port_num, uint32_t qkey) {
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_INIT;
  a.pkey_index = 0;
  a.port_num = port_num;
  a.qkey = qkey;
  const char* step = nullptr;
  const ibverbs::VerbsApi& ibv = ibverbs::Lib();
  if (ibv.modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY)) {
    step = "QP -> INIT";
  } else {
    a = {};
    a.qp_state = IBV_QPS_RTR;
    if (ibv.modify_qp(qp, &a, IBV_QP_STATE)) {
      step = "QP -> RTR";
    } else {
      a = {};
      a.qp_state = IBV_QPS_RTS;
      a.sq_psn = 0;
      if (ibv.modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN)) step = "QP -> RTS";
    }
  }
  if (step == nullptr) return Status::Ok();
  return Unavailable(std::string(step) + ": " + strerror(errno));
}

ibv_ah* CreateAh(ibv_pd* pd, const RocePort& port, const Gid& dgid) {
  ibv_ah_attr ah{};
  ah.is_global = 1;
  ah.port_num = port.port_num;
  std::memcpy(ah.grh.dgid.raw, dgid.data(), 16);
  ah.grh.sgid_index = static_cast<uint8_t>(port.gid_index);
  ah.grh.hop_limit = 64;
  return ibverbs::Lib().create_ah(pd, &ah);
}

}  // namespace tributary::roce
