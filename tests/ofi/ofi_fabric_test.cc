// SPDX-License-Identifier: Apache-2.0
// Proves the provider selection both ofi sides share (common/ofi/ofi_fabric.h)
// on the providers every machine has (tcp;ofi_rxm, shm): a candidate counts
// only once the caller's open succeeds, and the caller owns the fi_info from
// the call on; a named provider whose open fails is refused with open's
// reason, the providers offered here and the caller's setting; a provider
// fi_getinfo does not offer never reaches open; "auto" on a machine without
// RDMA falls back to tcp;ofi_rxm and reports the fallback; the capabilities
// and message order a caller asks for are what the candidates offer.
#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

#include "common/ofi/ofi_api.h"
#include "common/ofi/ofi_fabric.h"

namespace tributary::ofi {
namespace {

ProviderQuery Query(const std::string& wanted) {
  ProviderQuery q;
  q.wanted = wanted;
  q.host = "127.0.0.1";
  q.port = 0;  // any free port: the endpoints below listen
  q.source = true;
  q.setting = "TEST_SETTING";
  return q;
}

// An open that accepts the providers in `accept`, records every call and
// frees the fi_info (as RdmEndpoint::OpenRdm does once it is done with it).
struct FakeOpen {
  std::vector<std::string> accept;
  std::vector<std::string> calls;
  Status operator()(const std::string& provider, fi_info* info) {
    calls.push_back(provider);
    EXPECT_NE(info, nullptr);
    Lib().freeinfo(info);
    for (const auto& a : accept) {
      if (a == provider) return Status::Ok();
    }
    return Status(StatusCode::kUnavailable, "fake open refused " + provider);
  }
};

TEST(SelectProvider, NamedProviderIsOpenedByTheCaller) {
  FakeOpen open{{"tcp;ofi_rxm"}, {}};
  auto sel = SelectProvider(Query("tcp;ofi_rxm"), std::ref(open));
  ASSERT_TRUE(sel.ok()) << sel.status().message();
  EXPECT_EQ(sel.value().provider, "tcp;ofi_rxm");
  EXPECT_FALSE(sel.value().fell_back);
  EXPECT_EQ(open.calls, std::vector<std::string>{"tcp;ofi_rxm"});
}

TEST(SelectProvider, NamedProviderThatFailsToOpenIsRefusedWithTheReason) {
  FakeOpen open{{}, {}};
  auto sel = SelectProvider(Query("tcp;ofi_rxm"), std::ref(open));
  ASSERT_FALSE(sel.ok());
  EXPECT_EQ(sel.status().code(), StatusCode::kUnavailable);
  const std::string& m = sel.status().message();
  EXPECT_NE(m.find("libfabric provider 'tcp;ofi_rxm' is not available here (tcp;ofi_rxm: fake "
                   "open refused tcp;ofi_rxm)"),
            std::string::npos) << m;
  EXPECT_NE(m.find("providers offering RDM endpoints: "), std::string::npos) << m;
  EXPECT_NE(m.find("shm"), std::string::npos) << m;
  EXPECT_NE(m.find("(choose one with TEST_SETTING)"), std::string::npos) << m;
}

TEST(SelectProvider, ProviderNotOfferedNeverReachesOpen) {
  FakeOpen open{{"efa"}, {}};
  auto sel = SelectProvider(Query("efa"), std::ref(open));
  if (sel.ok()) GTEST_SKIP() << "this machine has an efa NIC";
  EXPECT_TRUE(open.calls.empty());
  EXPECT_NE(sel.status().message().find("fi_getinfo(efa, 127.0.0.1:0)"), std::string::npos)
      << sel.status().message();
}

TEST(SelectProvider, AutoWithoutRdmaFallsBackToTcp) {
  FakeOpen open{{"tcp;ofi_rxm"}, {}};
  auto sel = SelectProvider(Query("auto"), std::ref(open));
  ASSERT_TRUE(sel.ok()) << sel.status().message();
  if (sel.value().provider != "tcp;ofi_rxm") GTEST_SKIP() << "this machine has RDMA";
  EXPECT_TRUE(sel.value().fell_back);
  EXPECT_EQ(open.calls.back(), "tcp;ofi_rxm");
}

// The NCCL plugin's query: tagged messages to chosen peers, kept in order,
// on any local address. open() gets the whole list fi_getinfo offers (one
// entry per interface and address family), each with what was asked.
TEST(SelectProvider, TaggedOrderedQueryOnAnyAddressListsTheInterfaces) {
  ProviderQuery q;
  q.wanted = "tcp;ofi_rxm";
  q.caps = FI_TAGGED | FI_MSG | FI_DIRECTED_RECV;
  q.msg_order = FI_ORDER_SAS;
  int entries = 0;
  bool loopback = false;
  auto sel = SelectProvider(q, [&](const std::string&, fi_info* list) {
    for (fi_info* i = list; i != nullptr; i = i->next) {
      ++entries;
      EXPECT_EQ(i->caps & (FI_TAGGED | FI_DIRECTED_RECV), FI_TAGGED | FI_DIRECTED_RECV);
      EXPECT_EQ(i->tx_attr->msg_order & FI_ORDER_SAS, FI_ORDER_SAS);
      EXPECT_EQ(i->rx_attr->msg_order & FI_ORDER_SAS, FI_ORDER_SAS);
      loopback = loopback || std::string(i->domain_attr->name) == "lo";
    }
    Lib().freeinfo(list);
    return Status::Ok();
  });
  ASSERT_TRUE(sel.ok()) << sel.status().message();
  EXPECT_GE(entries, 1);
  EXPECT_TRUE(loopback) << "the loopback interface is among them";
}

// A capability the named provider lacks (shm has no collectives here) is
// refused before open, naming the provider.
TEST(SelectProvider, CapabilityTheProviderLacksIsRefused) {
  ProviderQuery q = Query("shm");
  q.caps = FI_MSG | FI_COLLECTIVE;
  FakeOpen open{{"shm"}, {}};
  auto sel = SelectProvider(q, std::ref(open));
  ASSERT_FALSE(sel.ok());
  EXPECT_TRUE(open.calls.empty());
  EXPECT_NE(sel.status().message().find("'shm' is not available"), std::string::npos)
      << sel.status().message();
}

// Review of 2026-12-07: the aggregator binding packs 64-bit values into
// CQ data, which verbs;ofi_rxm and efa cut to 4 bytes (placed results of
// collectives from 32768 on then failed their check). A provider that
// carries fewer bytes than the query needs is refused before open, naming
// both counts; tcp;ofi_rxm carries the 8 the binding asks for.
TEST(SelectProvider, TooLittleCqDataIsRefusedNamingIt) {
  ProviderQuery q = Query("tcp;ofi_rxm");
  q.cq_data_bytes = 8;
  FakeOpen open{{"tcp;ofi_rxm"}, {}};
  ASSERT_TRUE(SelectProvider(q, std::ref(open)).ok());
  q.cq_data_bytes = 64;  // more than any provider
  open.calls.clear();
  auto sel = SelectProvider(q, std::ref(open));
  ASSERT_FALSE(sel.ok());
  EXPECT_TRUE(open.calls.empty());
  EXPECT_NE(sel.status().message().find("bytes of CQ data, and the aggregator binding needs 64"),
            std::string::npos)
      << sel.status().message();
}

}  // namespace
}  // namespace tributary::ofi
