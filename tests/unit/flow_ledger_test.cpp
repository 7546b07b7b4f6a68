// The relay's flow and backend-port books alone, over in-memory flow tables and a clock the
// test moves: what is entered when, and which lingering removal may delete what.
#include "forwarder/flow_ledger.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>

#include <set>
#include <tuple>

#include "tests/support/memory_flow_table.h"

namespace xdpfwd::test {
namespace {

uint64_t g_now_ns = 0;  // the flow tables' clock, as the test sets it
uint64_t FakeClockNs() { return g_now_ns; }

in_addr Ip(const char* dotted) {
  in_addr a{};
  inet_pton(AF_INET, dotted, &a);
  return a;
}

constexpr uint32_t kWorker = 3;
constexpr uint64_t kLingerMs = 1000;

class FlowLedgerTest : public ::testing::Test {
 protected:
  FlowLedgerTest() { g_now_ns = 1'000'000; }

  FlowRoute Route(uint32_t id, const char* backend, uint16_t port,
                  std::vector<IpAddress> sources = {Ip("10.1.0.1")}) {
    FlowRoute r;
    r.id = id;
    r.backend = IpEndpoint{Ip(backend), port};
    r.backend_sources = std::move(sources);
    r.client_side = &clients_;
    r.backend_side = &backends_;
    return r;
  }

  FlowLedgerConfig Config(std::vector<PortRange> ports = {{2000, 2009}}) {
    return FlowLedgerConfig{std::move(ports), kWorker, {}, kLingerMs, FakeClockNs, {}};
  }

  static FlowTuple Client(uint16_t port) {
    return FlowTuple{Ip("192.0.2.7"), Ip("10.0.0.1"), port, 80};
  }

  // A client SYN (the program's entry), the accept, and a backend leg with its flow entered;
  // `mark`: the connection lived long enough for its client entry to be marked accepted.
  FlowBooking Open(FlowLedger& ledger, const FlowRoute& route, uint16_t client_port,
                   bool mark = true) {
    clients_.InsertFromSyn(Client(client_port), route.id);
    g_now_ns += 10;
    FlowBooking b = ledger.Accept(route, Client(client_port));
    if (mark) ledger.MarkAccepted(b);
    EXPECT_TRUE(ledger.LeaseBackendPort(b));
    EXPECT_TRUE(ledger.AddBackendFlow(b));
    g_now_ns += 10;
    return b;
  }

  MemoryFlowTable clients_{FakeClockNs};
  MemoryFlowTable backends_{FakeClockNs};
};

// The accept itself writes nothing (a map syscall saved per connection: most end before the
// relay marks them); the mark, later, stamps the entry with the accept's time.
TEST_F(FlowLedgerTest, MarkAcceptedMarksTheClientEntryOrPutsItBack) {
  FlowLedger ledger(Config());
  const FlowRoute route = Route(7, "10.2.0.9", 9000);
  clients_.InsertFromSyn(Client(40000), 7);
  const uint64_t syn_ns = g_now_ns;
  g_now_ns += 10;
  FlowBooking b = ledger.Accept(route, Client(40000));
  EXPECT_EQ(b.route, &route);
  EXPECT_EQ(b.accepted_ns, syn_ns + 10);
  auto entry = clients_.Find(Client(40000));
  ASSERT_TRUE(entry);
  EXPECT_FALSE(entry->accepted) << "the accept wrote to the flow table";
  EXPECT_EQ(entry->created_ns, syn_ns);
  g_now_ns += 250'000'000;
  ledger.MarkAccepted(b);
  entry = clients_.Find(Client(40000));
  ASSERT_TRUE(entry);
  EXPECT_TRUE(entry->accepted);
  EXPECT_EQ(entry->created_ns, b.accepted_ns) << "stamped with the accept's time, not the mark's";
  EXPECT_EQ(entry->owner, kWorker);
  EXPECT_EQ(entry->rule_id, 7u);

  // Reaped before the mark (a slow handshake): entered again, or the client's next packets
  // would reach the kernel.
  FlowBooking gone = ledger.Accept(route, Client(40001));
  ledger.MarkAccepted(gone);
  entry = clients_.Find(Client(40001));
  ASSERT_TRUE(entry);
  EXPECT_EQ(entry->owner, kWorker);
}

TEST_F(FlowLedgerTest, BackendLegGetsItsPortAndFlowBeforeItStarts) {
  FlowLedger ledger(Config());
  const FlowRoute route = Route(1, "10.2.0.9", 9000);
  FlowBooking b = ledger.Accept(route, Client(40000));
  ASSERT_TRUE(ledger.LeaseBackendPort(b));
  EXPECT_EQ(b.backend_flow.saddr, IpAddress(Ip("10.2.0.9")));
  EXPECT_EQ(b.backend_flow.sport, 9000);
  EXPECT_EQ(b.backend_flow.daddr, IpAddress(Ip("10.1.0.1")));
  EXPECT_EQ(b.backend_flow.dport, 2000) << "the first port of the range, FIFO";
  EXPECT_FALSE(backends_.Find(b.backend_flow)) << "leasing enters nothing yet";
  EXPECT_EQ(ledger.backend_ports_in_use(), 1u);
  ASSERT_TRUE(ledger.AddBackendFlow(b));
  const auto entry = backends_.Find(b.backend_flow);
  ASSERT_TRUE(entry);
  EXPECT_EQ(entry->owner, kWorker) << "return traffic belongs to the worker that owns the client";
  EXPECT_EQ(entry->rule_id, 1u);
}

TEST_F(FlowLedgerTest, AFullFlowTableGivesThePortBack) {
  FlowLedger ledger(Config({{2000, 2000}}));
  const FlowRoute route = Route(1, "10.2.0.9", 9000);
  FlowBooking b = ledger.Accept(route, Client(40000));
  ASSERT_TRUE(ledger.LeaseBackendPort(b));
  backends_.set_full(true);
  EXPECT_FALSE(ledger.AddBackendFlow(b));
  EXPECT_EQ(ledger.backend_ports_in_use(), 0u);
  EXPECT_EQ(b.ports, nullptr);
  backends_.set_full(false);
  ledger.Close(b, 0);
  EXPECT_EQ(ledger.lingering(), 1u) << "only the client entry: the backend leg never had one";
}

TEST_F(FlowLedgerTest, SourcesTakenInTurnAndSkippedWhenFull) {
  FlowLedger ledger(Config({{2000, 2000}}));  // one port per (source, backend)
  const FlowRoute route = Route(1, "10.2.0.9", 9000, {Ip("10.1.0.1"), Ip("10.1.0.2")});
  FlowBooking a = ledger.Accept(route, Client(1));
  FlowBooking b = ledger.Accept(route, Client(2));
  FlowBooking c = ledger.Accept(route, Client(3));
  ASSERT_TRUE(ledger.LeaseBackendPort(a));
  ASSERT_TRUE(ledger.LeaseBackendPort(b));
  EXPECT_NE(a.backend_flow.daddr, b.backend_flow.daddr);
  EXPECT_FALSE(ledger.LeaseBackendPort(c)) << "both sources' only port is held";
  ledger.ReleaseBackendPort(a);
  ASSERT_TRUE(ledger.LeaseBackendPort(c)) << "a source with a free port is found whatever its turn";
  EXPECT_EQ(c.backend_flow.daddr, IpAddress(Ip("10.1.0.1")));
  EXPECT_EQ(ledger.backend_ports_in_use(), 2u);
}

// Each route takes its sources in turn by itself: connections of two rules that alternate still
// spread over each rule's sources (one turn shared by both gave each rule one source only).
TEST_F(FlowLedgerTest, EachRouteTakesItsSourcesInItsOwnTurn) {
  FlowLedger ledger(Config());
  const FlowRoute two = Route(1, "10.2.0.9", 9000, {Ip("10.1.0.1"), Ip("10.1.0.2")});
  const FlowRoute one = Route(2, "10.2.0.8", 9000, {Ip("10.1.0.3")});
  std::vector<IpAddress> seen;
  for (uint16_t i = 0; i < 4; ++i) {
    FlowBooking a = ledger.Accept(two, Client(static_cast<uint16_t>(100 + i)));
    FlowBooking b = ledger.Accept(one, Client(static_cast<uint16_t>(200 + i)));
    ASSERT_TRUE(ledger.LeaseBackendPort(a));
    ASSERT_TRUE(ledger.LeaseBackendPort(b));
    seen.push_back(a.backend_flow.daddr);
    EXPECT_EQ(b.backend_flow.daddr, IpAddress(Ip("10.1.0.3")));
  }
  EXPECT_EQ(seen, (std::vector<IpAddress>{Ip("10.1.0.1"), Ip("10.1.0.2"), Ip("10.1.0.1"),
                                          Ip("10.1.0.2")}));
}

// A rule's backends of both families: each leg takes the route's sources of its backend's
// family, in that family's own turn, whatever the order of the list and of the connections.
// Without the family (one turn over every source) an IPv6 leg took an IPv4 source.
TEST_F(FlowLedgerTest, ALegTakesTheSourcesOfItsBackendsFamilyInTheirOwnTurn) {
  FlowLedger ledger(Config());
  in6_addr s6a{}, s6b{}, backend6{};
  inet_pton(AF_INET6, "fd00:1::1", &s6a);
  inet_pton(AF_INET6, "fd00:1::2", &s6b);
  inet_pton(AF_INET6, "fd00:2::9", &backend6);
  const FlowRoute route = Route(
      1, "10.2.0.9", 9000,
      {Ip("10.1.0.1"), Ip("10.1.0.2"), IpAddress::V6(s6a), IpAddress::V6(s6b), Ip("10.1.0.3")});
  std::vector<IpAddress> seen4, seen6;
  for (uint16_t i = 0; i < 6; ++i) {
    FlowBooking a = ledger.Accept(route, Client(static_cast<uint16_t>(100 + i)));
    FlowBooking b = ledger.Accept(route, Client(static_cast<uint16_t>(200 + i)));
    b.backend = IpEndpoint{IpAddress::V6(backend6), 9000};
    ASSERT_TRUE(ledger.LeaseBackendPort(a));
    ASSERT_TRUE(ledger.LeaseBackendPort(b));
    seen4.push_back(a.backend_flow.daddr);
    seen6.push_back(b.backend_flow.daddr);
    EXPECT_EQ(b.backend_flow.saddr, IpAddress::V6(backend6));
  }
  EXPECT_EQ(seen4, (std::vector<IpAddress>{Ip("10.1.0.1"), Ip("10.1.0.2"), Ip("10.1.0.3"),
                                           Ip("10.1.0.1"), Ip("10.1.0.2"), Ip("10.1.0.3")}));
  EXPECT_EQ(seen6,
            (std::vector<IpAddress>{IpAddress::V6(s6a), IpAddress::V6(s6b), IpAddress::V6(s6a),
                                    IpAddress::V6(s6b), IpAddress::V6(s6a), IpAddress::V6(s6b)}));
  // A backend of a family the route has no source of gets no port.
  const FlowRoute only4 = Route(2, "10.2.0.9", 9000, {Ip("10.1.0.1")});
  FlowBooking c = ledger.Accept(only4, Client(300));
  c.backend = IpEndpoint{IpAddress::V6(backend6), 9000};
  EXPECT_FALSE(ledger.LeaseBackendPort(c));
}

TEST_F(FlowLedgerTest, EntriesLingerThenGo) {
  FlowLedger ledger(Config());
  const FlowRoute route = Route(1, "10.2.0.9", 9000);
  FlowBooking b = Open(ledger, route, 40000);
  const FlowTuple backend_flow = b.backend_flow;
  ledger.Close(b, 5000);
  EXPECT_EQ(ledger.backend_ports_in_use(), 0u) << "the port goes back at the close";
  EXPECT_EQ(ledger.lingering(), 2u);
  EXPECT_FALSE(ledger.RemoveDue(5000 + kLingerMs - 1));
  EXPECT_TRUE(clients_.Find(Client(40000)));
  EXPECT_TRUE(backends_.Find(backend_flow));
  EXPECT_TRUE(ledger.RemoveDue(5000 + kLingerMs));
  EXPECT_FALSE(clients_.Find(Client(40000)));
  EXPECT_TRUE(backends_.Find(backend_flow)) << "a lone backend removal waits for its batch";
  EXPECT_FALSE(ledger.RemoveDue(5000 + kLingerMs + FlowLedger::kBatchWaitMs - 1));
  EXPECT_TRUE(ledger.RemoveDue(5000 + kLingerMs + FlowLedger::kBatchWaitMs));
  EXPECT_FALSE(backends_.Find(backend_flow));
  EXPECT_EQ(backends_.removal_batches(), 1u);
  EXPECT_EQ(ledger.lingering(), 0u);
}

// Backend legs' entries go in batches (one BPF_MAP_DELETE_BATCH each on a steering map): a
// batch as soon as kRemovalBatch are due, the rest once the first of them has waited
// kBatchWaitMs. Client entries still go one call each (their removal reads the stamp).
TEST_F(FlowLedgerTest, BackendEntriesGoInBatches) {
  FlowLedger ledger(Config({{2000, 2999}}));
  const FlowRoute route = Route(1, "10.2.0.9", 9000);
  constexpr uint16_t kConnections = FlowLedger::kRemovalBatch + 44;
  for (uint16_t i = 0; i < kConnections; ++i) {
    FlowBooking b = Open(ledger, route, static_cast<uint16_t>(40000 + i));
    ledger.Close(b, 100);
  }
  ASSERT_EQ(backends_.size(), kConnections);
  EXPECT_TRUE(ledger.RemoveDue(100 + kLingerMs));
  EXPECT_EQ(clients_.size(), 0u);
  EXPECT_EQ(backends_.size(), 44u) << "a full batch is not held back";
  EXPECT_EQ(backends_.removal_batches(), 1u);
  EXPECT_FALSE(ledger.RemoveDue(100 + kLingerMs + 1)) << "44 due wait for company";
  EXPECT_TRUE(ledger.RemoveDue(100 + kLingerMs + FlowLedger::kBatchWaitMs));
  EXPECT_EQ(backends_.size(), 0u);
  EXPECT_EQ(backends_.removal_batches(), 2u);
  EXPECT_EQ(backends_.removes(), kConnections);
  EXPECT_EQ(ledger.lingering(), 0u);
}

// The client entry's removal reads the stamp and deletes in one call where no newer connection
// has reached lwIP on the tuple, and looks first only where one may have (a pcb on it).
TEST_F(FlowLedgerTest, ClientRemovalLooksFirstOnlyWhereTheTupleIsInUse) {
  std::set<uint16_t> in_use;
  FlowLedgerConfig config = Config();
  config.client_tuple_in_use = [&](const FlowTuple& t) { return in_use.count(t.sport) > 0; };
  FlowLedger ledger(config);
  const FlowRoute route = Route(1, "10.2.0.9", 9000);
  FlowBooking quiet = Open(ledger, route, 40000, /*mark=*/false);
  FlowBooking reused = Open(ledger, route, 40001, /*mark=*/false);
  ledger.Close(quiet, 0);
  ledger.Close(reused, 0);
  in_use.insert(40001);
  clients_.InsertFromSyn(Client(40001), 1);  // the client's next SYN on the same tuple
  EXPECT_TRUE(ledger.RemoveDue(kLingerMs));
  EXPECT_EQ(clients_.removals_reuse_possible(), 1u);
  EXPECT_FALSE(clients_.Find(Client(40000)));
  EXPECT_TRUE(clients_.Find(Client(40001))) << "the newer connection's entry was removed";
}

// A budget bounds the work of one call; what is left goes at the next, oldest first.
TEST_F(FlowLedgerTest, RemovalsKeepToTheirBudget) {
  FlowLedger ledger(Config());
  const FlowRoute route = Route(1, "10.2.0.9", 9000);
  for (uint16_t port = 40000; port < 40005; ++port) {
    FlowBooking b = Open(ledger, route, port);
    ledger.Close(b, 100 + port - 40000);
  }
  ASSERT_EQ(ledger.lingering(), 10u);  // a client and a backend entry each
  // The budget counts client entries (a call each); the five backend ones go as one batch.
  EXPECT_TRUE(ledger.RemoveDue(1000 + kLingerMs, 4));
  EXPECT_EQ(ledger.lingering(), 1u);
  EXPECT_FALSE(clients_.Find(Client(40003)));
  EXPECT_TRUE(clients_.Find(Client(40004)));
  EXPECT_EQ(backends_.size(), 0u);
  EXPECT_TRUE(ledger.RemoveDue(1000 + kLingerMs, 100));
  EXPECT_EQ(ledger.lingering(), 0u);
  EXPECT_FALSE(ledger.RemoveDue(1000 + kLingerMs, 100));
}

TEST_F(FlowLedgerTest, RefusedClientEntryLingersThenGoes) {
  FlowLedger ledger(Config());
  const FlowRoute route = Route(1, "10.2.0.9", 9000);
  clients_.InsertFromSyn(Client(40000), 1);
  g_now_ns += 10;
  ledger.Refuse(route, Client(40000), 100);
  EXPECT_FALSE(ledger.RemoveDue(100 + kLingerMs - 1));
  EXPECT_TRUE(clients_.Find(Client(40000)));
  EXPECT_TRUE(ledger.RemoveDue(100 + kLingerMs));
  EXPECT_FALSE(clients_.Find(Client(40000)));
}

TEST_F(FlowLedgerTest, ClientReusingItsTupleAfterTheCloseKeepsItsNewerEntry) {
  FlowLedger ledger(Config());
  const FlowRoute route = Route(1, "10.2.0.9", 9000);
  FlowBooking first = Open(ledger, route, 40000);
  ledger.Close(first, 0);
  g_now_ns += 10;
  FlowBooking second = Open(ledger, route, 40000);  // same client 4-tuple, a new SYN
  EXPECT_NE(second.backend_flow.dport, first.backend_flow.dport) << "FIFO: a fresh port";
  ASSERT_TRUE(ledger.RemoveDue(kLingerMs + FlowLedger::kBatchWaitMs));
  const auto entry = clients_.Find(Client(40000));
  ASSERT_TRUE(entry) << "the first connection's removal deleted the second's client entry";
  EXPECT_TRUE(entry->accepted);
  EXPECT_FALSE(backends_.Find(first.backend_flow)) << "the first leg's own entry goes";
  EXPECT_TRUE(backends_.Find(second.backend_flow));
}

// A client whose socket closed before ours (its FIN acknowledged, TIME_WAIT overflowed or not
// needed) may reuse its port while this side still waits for the backend: the next
// connection's SYN and accept come before the first connection's close, and the first one's
// removal must still leave the entry to the second (the clock says nothing here; the stamp the
// accept wrote does).
TEST_F(FlowLedgerTest, ClientReusingItsTupleBeforeTheCloseKeepsItsNewerEntry) {
  FlowLedger ledger(Config());
  const FlowRoute route = Route(1, "10.2.0.9", 9000);
  FlowBooking first = Open(ledger, route, 40000);
  FlowBooking second = Open(ledger, route, 40000);
  ledger.Close(first, 0);
  ASSERT_TRUE(ledger.RemoveDue(kLingerMs));
  const auto entry = clients_.Find(Client(40000));
  ASSERT_TRUE(entry) << "the first connection's removal deleted the second's client entry";
  EXPECT_TRUE(entry->accepted);
  ledger.Close(second, kLingerMs);
  ASSERT_TRUE(ledger.RemoveDue(2 * kLingerMs));
  EXPECT_FALSE(clients_.Find(Client(40000))) << "the second connection's own removal";
}

TEST_F(FlowLedgerTest, ReusedBackendPortKeepsItsEntry) {
  FlowLedger ledger(Config({{2000, 2000}}));  // one port: the next leg reuses it at once
  const FlowRoute route = Route(1, "10.2.0.9", 9000);
  FlowBooking first = Open(ledger, route, 40000);
  ledger.Close(first, 0);
  FlowBooking second = Open(ledger, route, 40001);
  ASSERT_EQ(second.backend_flow.dport, first.backend_flow.dport);
  ASSERT_TRUE(ledger.RemoveDue(kLingerMs + FlowLedger::kBatchWaitMs));
  EXPECT_TRUE(backends_.Find(second.backend_flow))
      << "the first leg's removal deleted the entry its port's new leg depends on";
  EXPECT_FALSE(clients_.Find(Client(40000)));
  // Once the second leg is over and its linger too, the entry goes.
  ledger.Close(second, kLingerMs);
  ASSERT_TRUE(ledger.RemoveDue(2 * kLingerMs + FlowLedger::kBatchWaitMs));
  EXPECT_FALSE(backends_.Find(second.backend_flow));
  EXPECT_EQ(backends_.size(), 0u);
  EXPECT_EQ(clients_.size(), 0u);
}

TEST_F(FlowLedgerTest, PortReusedTowardAnotherBackendLeavesEachItsEntry) {
  FlowLedger ledger(Config({{2000, 2000}}));
  const FlowRoute to_a = Route(1, "10.2.0.9", 9000);
  const FlowRoute to_b = Route(2, "10.2.0.10", 9000);
  FlowBooking a = Open(ledger, to_a, 40000);
  FlowBooking b = Open(ledger, to_b, 40001);
  EXPECT_EQ(a.backend_flow.dport, b.backend_flow.dport) << "one port space per backend";
  EXPECT_EQ(a.backend_flow.daddr, b.backend_flow.daddr);
  EXPECT_EQ(backends_.size(), 2u) << "the 4-tuples differ by backend";
  ledger.Close(a, 0);
  ASSERT_TRUE(ledger.RemoveDue(kLingerMs + FlowLedger::kBatchWaitMs));
  EXPECT_FALSE(backends_.Find(a.backend_flow));
  EXPECT_TRUE(backends_.Find(b.backend_flow)) << "closing the leg to A removed B's entry";
  EXPECT_EQ(ledger.backend_ports_in_use(), 1u);
  // The port is free toward A again, still held toward B.
  FlowBooking again = ledger.Accept(to_a, Client(40002));
  EXPECT_TRUE(ledger.LeaseBackendPort(again));
  FlowBooking refused = ledger.Accept(to_b, Client(40003));
  EXPECT_FALSE(ledger.LeaseBackendPort(refused));
  ledger.ReleaseBackendPort(again);
  ledger.Close(b, 0);
}

TEST_F(FlowLedgerTest, DestructionRemovesWhatStillLingers) {
  {
    FlowLedger ledger(Config());
    const FlowRoute route = Route(1, "10.2.0.9", 9000);
    FlowBooking b = Open(ledger, route, 40000);
    FlowBooking c = Open(ledger, route, 40001);
    ledger.Close(b, 0);
    ledger.Close(c, 0);
    EXPECT_EQ(clients_.size(), 2u);
    EXPECT_EQ(backends_.size(), 2u);
  }
  EXPECT_EQ(clients_.size(), 0u);
  EXPECT_EQ(backends_.size(), 0u);
}

}  // namespace
}  // namespace xdpfwd::test
