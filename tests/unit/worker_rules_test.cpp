// The workers' rule table: what the control process writes a worker reads back whole, a set that
// does not fit is refused without touching the table, a read during a write gets nothing, and
// Decode refuses what Encode never makes.
#include "forwarder/worker_rules.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

namespace xdpfwd {
namespace {

in_addr Addr(const char* text) {
  in_addr a{};
  EXPECT_EQ(inet_pton(AF_INET, text, &a), 1);
  return a;
}

IpAddress Addr6(const char* text) {
  in6_addr a{};
  EXPECT_EQ(inet_pton(AF_INET6, text, &a), 1);
  return IpAddress::V6(a);
}

WorkerRuleSet Sample() {
  WorkerRuleSet set;
  set.global_access = {{true, "10.*", 1}, {false, "10.0.0.?", 2}};
  WorkerRule a;
  a.id = 7;
  a.client_iface = 0;
  a.backend_iface = 1;
  a.listen = {Addr("10.0.1.1"), 9000};
  a.backend = {Addr("10.0.0.2"), 9001};
  a.sources = {Addr("10.0.0.1"), Addr("10.0.0.9")};
  a.access = {{false, "192.168.*", 5}};
  a.proxy = ProxyVersion::kV2;
  a.accept_proxy = {true, 750, {{true, "10.0.2.*", 9}}};
  a.retry_empty_response = true;
  a.backend_weight = 3;
  a.balance = BalanceMethod::kSourceHash;
  a.more_backends = {RelayBackend{{Addr("10.0.0.4"), 9001}, 2, false},
                     RelayBackend{{Addr("10.0.0.5"), 9002}, 1, true}};
  WorkerRule b;
  b.id = 8;
  b.listen = {Addr("10.0.1.1"), 9002};
  b.backend = {Addr("10.0.0.3"), 80};
  // Either family at each end, and a 6-to-4 backend among IPv6 ones: each address keeps its own.
  WorkerRule c;
  c.id = 9;
  c.listen = {Addr6("2001:db8:1::1"), 9000};
  c.backend = {Addr6("2001:db8::2"), 9001};
  c.sources = {Addr6("2001:db8::1")};
  c.more_backends = {RelayBackend{{Addr("10.0.0.4"), 9001}, 1, false}};
  set.rules = {a, b, c};
  // Two interfaces: one with no IPv6 address, one with an address, prefix and gateway.
  Ipv6Interface with;
  with.addr = Addr6("2001:db8::1").v6();
  with.prefix_len = 64;
  with.gateway = Addr6("fe80::1").v6();
  set.ipv6 = {Ipv6Interface{}, with};
  return set;
}

void ExpectSame(const WorkerRuleSet& got, const WorkerRuleSet& want) {
  ASSERT_EQ(got.rules.size(), want.rules.size());
  auto same_patterns = [](const std::vector<AccessPattern>& x,
                          const std::vector<AccessPattern>& y) {
    ASSERT_EQ(x.size(), y.size());
    for (size_t i = 0; i < x.size(); ++i) {
      EXPECT_EQ(x[i].allow, y[i].allow);
      EXPECT_EQ(x[i].pattern, y[i].pattern);
      EXPECT_EQ(x[i].line, y[i].line);
    }
  };
  same_patterns(got.global_access, want.global_access);
  ASSERT_EQ(got.ipv6.size(), want.ipv6.size());
  for (size_t k = 0; k < want.ipv6.size(); ++k) {
    EXPECT_EQ(IpAddress::V6(got.ipv6[k].addr), IpAddress::V6(want.ipv6[k].addr));
    EXPECT_EQ(got.ipv6[k].prefix_len, want.ipv6[k].prefix_len);
    EXPECT_EQ(IpAddress::V6(got.ipv6[k].gateway), IpAddress::V6(want.ipv6[k].gateway));
  }
  for (size_t i = 0; i < want.rules.size(); ++i) {
    const WorkerRule &g = got.rules[i], &w = want.rules[i];
    EXPECT_EQ(g.id, w.id);
    EXPECT_EQ(g.client_iface, w.client_iface);
    EXPECT_EQ(g.backend_iface, w.backend_iface);
    EXPECT_EQ(g.listen.addr, w.listen.addr);
    EXPECT_EQ(g.listen.port, w.listen.port);
    EXPECT_EQ(g.backend.addr, w.backend.addr);
    EXPECT_EQ(g.backend.port, w.backend.port);
    ASSERT_EQ(g.sources.size(), w.sources.size());
    for (size_t s = 0; s < w.sources.size(); ++s) {
      EXPECT_EQ(g.sources[s], w.sources[s]);
    }
    same_patterns(g.access, w.access);
    EXPECT_EQ(g.proxy, w.proxy);
    EXPECT_EQ(g.accept_proxy.enabled, w.accept_proxy.enabled);
    EXPECT_EQ(g.retry_empty_response, w.retry_empty_response);
    EXPECT_EQ(g.accept_proxy.timeout_ms, w.accept_proxy.timeout_ms);
    same_patterns(g.accept_proxy.from, w.accept_proxy.from);
    EXPECT_EQ(g.backend_weight, w.backend_weight);
    EXPECT_EQ(g.balance, w.balance);
    ASSERT_EQ(g.more_backends.size(), w.more_backends.size());
    for (size_t b = 0; b < w.more_backends.size(); ++b) {
      EXPECT_EQ(g.more_backends[b].address.addr, w.more_backends[b].address.addr);
      EXPECT_EQ(g.more_backends[b].address.port, w.more_backends[b].address.port);
      EXPECT_EQ(g.more_backends[b].weight, w.more_backends[b].weight);
      EXPECT_EQ(g.more_backends[b].backup, w.more_backends[b].backup);
    }
  }
}

struct TableMemory {
  TableMemory() : bytes(WorkerRuleTable::kMemoryBytes, 0xa5) {
    WorkerRuleTable::Format(bytes.data());
  }
  std::vector<uint8_t> bytes;
};

TEST(WorkerRuleTable, AFormattedTableHoldsNothingToRead) {
  TableMemory m;
  WorkerRuleTable t(m.bytes.data());
  EXPECT_EQ(t.generation(), 0u);
  EXPECT_FALSE(t.Read());  // a worker never starts on rules nobody wrote
}

TEST(WorkerRuleTable, WhatIsWrittenIsReadWholeUnderANewGeneration) {
  TableMemory m;
  WorkerRuleTable t(m.bytes.data());
  auto first = t.Write(Sample());
  ASSERT_TRUE(first) << first.error().message();
  EXPECT_EQ(*first, 2u);
  EXPECT_EQ(t.generation(), 2u);
  auto copy = t.Read();
  ASSERT_TRUE(copy);
  EXPECT_EQ(copy->generation, 2u);
  ExpectSame(copy->set, Sample());

  WorkerRuleSet fewer = Sample();
  fewer.rules.pop_back();
  fewer.global_access.clear();
  auto second = t.Write(fewer);
  ASSERT_TRUE(second);
  EXPECT_EQ(*second, 4u);
  copy = t.Read();
  ASSERT_TRUE(copy);
  ExpectSame(copy->set, fewer);

  auto none = t.Write(WorkerRuleSet{});  // no rules at all is a set too (every rule removed)
  ASSERT_TRUE(none);
  copy = t.Read();
  ASSERT_TRUE(copy);
  EXPECT_TRUE(copy->set.rules.empty());
}

TEST(WorkerRuleTable, ASetThatDoesNotFitIsRefusedAndTheTableKept) {
  TableMemory m;
  WorkerRuleTable t(m.bytes.data());
  ASSERT_TRUE(t.Write(Sample()));
  WorkerRuleSet huge = Sample();
  huge.global_access.push_back({true, std::string(WorkerRuleTable::kMemoryBytes, '*'), 3});
  auto r = t.Write(huge);
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message().find("rule table"), std::string::npos) << r.error().message();
  EXPECT_EQ(t.generation(), 2u);
  auto copy = t.Read();
  ASSERT_TRUE(copy);
  ExpectSame(copy->set, Sample());
}

TEST(WorkerRuleTable, AReadDuringAWriteGetsNothing) {
  TableMemory m;
  WorkerRuleTable t(m.bytes.data());
  ASSERT_TRUE(t.Write(Sample()));
  // The generation is the table's first word; odd is what a writer leaves while it writes.
  uint64_t odd = 3;
  std::memcpy(m.bytes.data(), &odd, sizeof odd);
  EXPECT_FALSE(t.Read());
  uint64_t even = 4;
  std::memcpy(m.bytes.data(), &even, sizeof even);
  auto copy = t.Read();
  ASSERT_TRUE(copy);
  EXPECT_EQ(copy->generation, 4u);
}

TEST(WorkerRuleTable, DecodeRefusesWhatEncodeNeverMakes) {
  std::vector<uint8_t> buffer(4096);
  size_t used = 0;
  ASSERT_TRUE(WorkerRuleTable::Encode(Sample(), buffer.data(), buffer.size(), used));
  ASSERT_TRUE(WorkerRuleTable::Decode(buffer.data(), used));
  // Every shorter prefix is refused (a count that promises more than is there, a cut field).
  for (size_t n = 0; n < used; ++n) {
    EXPECT_FALSE(WorkerRuleTable::Decode(buffer.data(), n)) << "prefix of " << n;
  }
  // Trailing bytes are refused too.
  EXPECT_FALSE(WorkerRuleTable::Decode(buffer.data(), used + 1));
  // A rule count far beyond the bytes is refused before anything is allocated for it.
  std::vector<uint8_t> lying(buffer.begin(), buffer.begin() + static_cast<long>(used));
  const uint32_t no_patterns = 0, many = 0x40000000;
  std::memcpy(lying.data(), &no_patterns, 4);
  lying.resize(8);
  std::memcpy(lying.data() + 4, &many, 4);
  EXPECT_FALSE(WorkerRuleTable::Decode(lying.data(), lying.size()));
  // Encode says when the room is too small.
  EXPECT_FALSE(WorkerRuleTable::Encode(Sample(), buffer.data(), used - 1, used));
}

}  // namespace
}  // namespace xdpfwd
