// The steering program's decisions, one packet fixture at a time, through BPF_PROG_TEST_RUN:
// each fixture names the expected XDP action and the one reason counter that must move.
// Needs root (loading BPF); the AF_XDP socket that makes redirects possible is bound to lo,
// where no program is attached, so no traffic is affected.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <linux/bpf.h>
#include <net/if.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdio>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "os/clock.h"
#include "stack/xsk_port.h"
#include "tests/support/packet_builder.h"
#include "tests/support/steer_run.h"
#include "tests/support/tcp.h"
#include "xdp/steer.h"

namespace xdpfwd::test {
namespace {

class SteerFixtureTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (geteuid() != 0) GTEST_SKIP() << "loading BPF needs root";
    Load({});
  }

  void Load(SteerOptions options) {
    auto prog = SteerProgram::Load(options);
    ASSERT_TRUE(prog) << prog.error().message();
    prog_ = std::move(*prog);
    ASSERT_TRUE(prog_->AddListener(Ip(kListen), kListenPort, 7));
  }

  // Reloads the program with room for `capacity` client flows.
  void LoadWithCapacity(uint32_t capacity) {
    SteerOptions options;
    options.flow_capacity = capacity;
    Load(options);
  }

  void BindSocket() {
    auto port = XskPort::Open(SmallPortOnLo());
    ASSERT_TRUE(port) << port.error().message();
    xsk_ = std::move(*port);
    ASSERT_TRUE(prog_->BindQueue(0, xsk_->fd()));
  }

  // Runs one frame; checks the action and that exactly `reason` counted it.
  void Expect(const std::vector<uint8_t>& frame, int action, SteerReason reason) {
    ExpectDecision(*prog_, frame, action, reason);
  }

  static std::vector<uint8_t> Syn(uint16_t sport, const char* dst = kListen,
                                  uint16_t dport = kListenPort, const char* src = kClient) {
    return Packet().Eth().IPv4(src, dst).Tcp(sport, dport, kSyn).Build();
  }

  std::unique_ptr<SteerProgram> prog_;
  std::unique_ptr<XskPort> xsk_;
};

TEST_F(SteerFixtureTest, SynToListenerInsertsFlowAndRedirects) {
  BindSocket();
  Expect(Syn(40000), XDP_REDIRECT, SteerReason::kRedirectNewFlow);
  auto flow = prog_->LookupFlow({Ip(kClient), Ip(kListen), 40000, kListenPort});
  ASSERT_TRUE(flow.has_value());
  EXPECT_EQ(flow->origin, static_cast<uint32_t>(STEER_FLOW_FROM_SYN));
  EXPECT_EQ(flow->rule_id, 7u);
  EXPECT_EQ(flow->owner, 0u);
  // A retransmitted SYN finds the flow.
  Expect(Syn(40000), XDP_REDIRECT, SteerReason::kRedirectFlow);
}

// A client that reuses its 4-tuple finds the old connection's lingering entry (accepted, created
// long ago). Its bare SYN makes the entry the new connection's: created now, not accepted, so the
// old connection's delayed removal (entries created before its close) leaves it and the stray
// reaper can still take it. Data of a live flow changes nothing.
TEST_F(SteerFixtureTest, SynOnALingeringFlowMakesItNew) {
  BindSocket();
  const FlowTuple tuple{Ip(kClient), Ip(kListen), 40010, kListenPort};
  Expect(Syn(40010), XDP_REDIRECT, SteerReason::kRedirectNewFlow);
  ASSERT_TRUE(prog_->MarkAccepted(tuple, 0, 7, MonotonicNs()));
  const auto accepted = prog_->LookupFlow(tuple);
  ASSERT_TRUE(accepted.has_value());
  ASSERT_EQ(accepted->flags, STEER_FLOW_ACCEPTED);

  Expect(Packet().Eth().IPv4(kClient, kListen).Tcp(40010, kListenPort, kAck).Build(), XDP_REDIRECT,
         SteerReason::kRedirectFlow);
  const auto after_ack = prog_->LookupFlow(tuple);
  ASSERT_TRUE(after_ack.has_value());
  EXPECT_EQ(after_ack->created_ns, accepted->created_ns);
  EXPECT_EQ(after_ack->flags, STEER_FLOW_ACCEPTED);

  Expect(Syn(40010), XDP_REDIRECT, SteerReason::kRedirectFlow);
  const auto after_syn = prog_->LookupFlow(tuple);
  ASSERT_TRUE(after_syn.has_value());
  EXPECT_GT(after_syn->created_ns, accepted->created_ns);
  EXPECT_EQ(after_syn->flags, 0u);
  EXPECT_EQ(after_syn->origin, static_cast<uint32_t>(STEER_FLOW_FROM_SYN));
  EXPECT_EQ(prog_->ReapStrayFlows(after_syn->created_ns + 1), 1u);
}

// The reaper's walk in slices (the control thread's, a slice per 100 ms round): every stray is
// found within one pass however small the slices, an accepted flow and one created after the
// cut are left, and the pass ends at the map's end.
TEST_F(SteerFixtureTest, StraysAreReapedInSlices) {
  BindSocket();
  constexpr uint16_t kStrays = 20;
  for (uint16_t i = 0; i < kStrays; ++i) {
    Expect(Syn(static_cast<uint16_t>(41000 + i)), XDP_REDIRECT, SteerReason::kRedirectNewFlow);
  }
  const FlowTuple accepted{Ip(kClient), Ip(kListen), 41100, kListenPort};
  Expect(Syn(41100), XDP_REDIRECT, SteerReason::kRedirectNewFlow);
  ASSERT_TRUE(prog_->MarkAccepted(accepted, 0, 7, MonotonicNs()));
  const uint64_t cut = MonotonicNs();
  const FlowTuple young{Ip(kClient), Ip(kListen), 41101, kListenPort};
  Expect(Syn(41101), XDP_REDIRECT, SteerReason::kRedirectNewFlow);
  ASSERT_EQ(prog_->ClientFlowCount(), kStrays + 2u);

  size_t reaped = 0, slices = 0;
  for (bool done = false; !done && slices < 100; ++slices) {
    const auto slice = prog_->ReapStrayFlowsSlice(cut, 4);
    reaped += slice.reaped;
    done = slice.pass_done;
  }
  EXPECT_EQ(reaped, kStrays);
  EXPECT_GE(slices, 5u) << "22 entries in slices of 4 took fewer than 5 slices";
  EXPECT_LT(slices, 100u) << "the pass never ended";
  EXPECT_EQ(prog_->ClientFlowCount(), 2u);
  EXPECT_TRUE(prog_->LookupFlow(accepted).has_value());
  EXPECT_TRUE(prog_->LookupFlow(young).has_value());
  // The next pass starts over and finds nothing more.
  const auto again = prog_->ReapStrayFlowsSlice(cut, 4096);
  EXPECT_EQ(again.reaped, 0u);
  EXPECT_TRUE(again.pass_done);
}

// The reaper skips its walks while nothing could have become a stray: after a whole pass that
// left no unaccepted client entry, a pass reads nothing until a SYN writes one (a new entry, or
// a lingering accepted one stamped anew); then it walks, and reaps the stray once it is old. A
// young unaccepted entry left in place keeps the walks going.
TEST_F(SteerFixtureTest, ReaperWalksOnlyAfterAnUnacceptedEntryWasWritten) {
  BindSocket();
  const FlowTuple accepted{Ip(kClient), Ip(kListen), 41200, kListenPort};
  Expect(Syn(41200), XDP_REDIRECT, SteerReason::kRedirectNewFlow);
  ASSERT_TRUE(prog_->MarkAccepted(accepted, 0, 7, MonotonicNs()));
  auto pass = [&](uint64_t cut) {  // one whole pass in slices of 4: {visited, reaped}
    std::pair<size_t, size_t> total{0, 0};
    for (int slices = 0; slices < 100; ++slices) {
      const auto slice = prog_->ReapStrayFlowsSlice(cut, 4);
      total.first += slice.visited;
      total.second += slice.reaped;
      if (slice.pass_done) break;
    }
    return total;
  };
  EXPECT_EQ(pass(MonotonicNs()), std::make_pair(size_t{1}, size_t{0})) << "the first pass walks";
  EXPECT_EQ(pass(MonotonicNs()), std::make_pair(size_t{0}, size_t{0})) << "nothing was written";

  // A young stray: the pass that sees it (before its cut) leaves it, so the next walks too.
  const uint64_t before_syn = MonotonicNs();
  Expect(Syn(41201), XDP_REDIRECT, SteerReason::kRedirectNewFlow);
  EXPECT_EQ(pass(before_syn), std::make_pair(size_t{2}, size_t{0}));
  EXPECT_EQ(pass(MonotonicNs()), std::make_pair(size_t{2}, size_t{1}));
  EXPECT_EQ(pass(MonotonicNs()), std::make_pair(size_t{0}, size_t{0})) << "all clean again";
  EXPECT_EQ(prog_->ClientFlowCount(), 1u);

  // The accepted entry stamped anew by its client's next SYN is unaccepted again.
  Expect(Syn(41200), XDP_REDIRECT, SteerReason::kRedirectFlow);
  EXPECT_EQ(pass(MonotonicNs()), std::make_pair(size_t{1}, size_t{1}));
  EXPECT_EQ(prog_->ClientFlowCount(), 0u);
  EXPECT_EQ(pass(MonotonicNs()), std::make_pair(size_t{0}, size_t{0}));
}

// The ledger's removal at a connection's close: an entry stamped after the connection's accept
// (the client's next SYN on the 4-tuple) stays; one stamped no later goes, and gives its slot in
// the client budget back. (The race it also covers, a SYN between its lookup and its delete,
// cannot be arranged from a test: the entry would go back at once.)
TEST_F(SteerFixtureTest, RemovalAtCloseLeavesAnEntryANewSynStamped) {
  BindSocket();
  const FlowTuple tuple{Ip(kClient), Ip(kListen), 40011, kListenPort};
  Expect(Syn(40011), XDP_REDIRECT, SteerReason::kRedirectNewFlow);
  const uint64_t accepted_ns = MonotonicNs();
  ASSERT_TRUE(prog_->MarkAccepted(tuple, 0, 7, accepted_ns));
  EXPECT_EQ(prog_->ClientFlowCount(), 1u);
  Expect(Syn(40011), XDP_REDIRECT, SteerReason::kRedirectFlow);  // the client's next connection
  EXPECT_FALSE(prog_->RemoveFlowStampedBy(tuple, accepted_ns, FlowReuse::kPossible));
  ASSERT_TRUE(prog_->LookupFlow(tuple).has_value());
  EXPECT_EQ(prog_->ClientFlowCount(), 1u);
  const auto stamped = prog_->LookupFlow(tuple)->created_ns;
  EXPECT_TRUE(prog_->RemoveFlowStampedBy(tuple, stamped, FlowReuse::kPossible));
  EXPECT_FALSE(prog_->LookupFlow(tuple).has_value());
  EXPECT_EQ(prog_->ClientFlowCount(), 0u);
  EXPECT_FALSE(prog_->RemoveFlowStampedBy(tuple, stamped, FlowReuse::kPossible))
      << "nothing left to remove";
}

// Without the first look (FlowReuse::kNone: no newer connection has reached lwIP), the removal
// deletes and reads in one call; an entry a SYN stamped since the accept goes back at once, and
// the client budget still counts it once.
TEST_F(SteerFixtureTest, OneCallRemovalPutsBackAnEntryANewSynStamped) {
  BindSocket();
  const FlowTuple tuple{Ip(kClient), Ip(kListen), 40012, kListenPort};
  Expect(Syn(40012), XDP_REDIRECT, SteerReason::kRedirectNewFlow);
  const uint64_t accepted_ns = MonotonicNs();
  Expect(Syn(40012), XDP_REDIRECT, SteerReason::kRedirectFlow);  // the client's next connection
  const auto calls = prog_->map_calls().syscalls;
  EXPECT_FALSE(prog_->RemoveFlowStampedBy(tuple, accepted_ns, FlowReuse::kNone));
  EXPECT_EQ(prog_->map_calls().syscalls, calls + 2) << "delete-and-read, then put back";
  const auto entry = prog_->LookupFlow(tuple);
  ASSERT_TRUE(entry.has_value());
  EXPECT_GT(entry->created_ns, accepted_ns);
  EXPECT_EQ(prog_->ClientFlowCount(), 1u);
  const auto before = prog_->map_calls().syscalls;
  EXPECT_TRUE(prog_->RemoveFlowStampedBy(tuple, entry->created_ns, FlowReuse::kNone));
  EXPECT_EQ(prog_->map_calls().syscalls, before + 1) << "one call where nothing was reused";
  EXPECT_FALSE(prog_->LookupFlow(tuple).has_value());
  EXPECT_EQ(prog_->ClientFlowCount(), 0u);
}

// Backend legs' entries go in one BPF_MAP_DELETE_BATCH; one gone already (the kernel stops at
// it) costs a second call for the rest, and nothing else is touched.
TEST_F(SteerFixtureTest, BackendEntriesAreRemovedInOneBatch) {
  std::vector<FlowTuple> legs;
  for (uint16_t port = 61020; port < 61030; ++port) {
    legs.push_back(FlowTuple{Ip(kBackend), Ip(kLocal), 9001, port});
    ASSERT_TRUE(prog_->AddFlow(legs.back(), 0, 7));
  }
  const FlowTuple other{Ip(kBackend), Ip(kLocal), 9001, 61040};
  ASSERT_TRUE(prog_->AddFlow(other, 0, 7));
  const auto before = prog_->map_calls();
  EXPECT_EQ(prog_->RemoveFlows(std::span<const FlowTuple>(legs.data(), 5)), 5u);
  EXPECT_EQ(prog_->map_calls().batches, before.batches + 1);
  EXPECT_EQ(prog_->map_calls().syscalls, before.syscalls + 1);
  // The first five again (gone) with the last five: each gone one costs a call.
  EXPECT_EQ(prog_->RemoveFlows(legs), 5u);
  for (const FlowTuple& leg : legs) EXPECT_FALSE(prog_->LookupFlow(leg).has_value());
  EXPECT_TRUE(prog_->LookupFlow(other).has_value()) << "a batch removed an entry not in it";
  EXPECT_EQ(prog_->ClientFlowCount(), 0u);
}

// A backend leg's entry is the worker's: a SYN on its tuple (not something a backend sends)
// does not touch it.
TEST_F(SteerFixtureTest, SynDoesNotTouchABackendLegsEntry) {
  BindSocket();
  const FlowTuple leg{Ip(kBackend), Ip(kLocal), 9001, 61010};
  ASSERT_TRUE(prog_->AddFlow(leg, 0, 7));
  const auto before = prog_->LookupFlow(leg);
  ASSERT_TRUE(before.has_value());
  Expect(Syn(9001, kLocal, 61010, kBackend), XDP_REDIRECT, SteerReason::kRedirectFlow);
  const auto after = prog_->LookupFlow(leg);
  ASSERT_TRUE(after.has_value());
  EXPECT_EQ(after->created_ns, before->created_ns);
}

TEST_F(SteerFixtureTest, DataOfKnownFlowRedirects) {
  BindSocket();
  Expect(Syn(40001), XDP_REDIRECT, SteerReason::kRedirectNewFlow);
  Expect(Packet()
             .Eth()
             .IPv4(kClient, kListen)
             .Tcp(40001, kListenPort, kAck | kPsh)
             .Payload("GET / HTTP/1.0\r\n\r\n")
             .Build(),
         XDP_REDIRECT, SteerReason::kRedirectFlow);
}

// A packet longer than a page: BPF_PROG_TEST_RUN hands an xdp.frags program the rest in
// fragments, as veth and generic mode hand it a jumbo frame or a TSO segment. The lengths are
// checked against the whole packet, and the counter counts every byte of it.
TEST_F(SteerFixtureTest, MultiBufferPacketOfKnownFlowRedirects) {
  BindSocket();
  Expect(Syn(40002), XDP_REDIRECT, SteerReason::kRedirectNewFlow);
  const auto segment = Packet()
                           .Eth()
                           .IPv4(kClient, kListen)
                           .Tcp(40002, kListenPort, kAck)
                           .Payload(std::vector<uint8_t>(20000, 0x42))
                           .Build();
  Expect(segment, XDP_REDIRECT, SteerReason::kRedirectFlow);
  // An IP total length beyond the last fragment is malformed all the same.
  auto cut = segment;
  cut.resize(cut.size() - 1);
  Expect(cut, XDP_PASS, SteerReason::kPassMalformed);
}

TEST_F(SteerFixtureTest, ReturnTrafficOfBackendFlowRedirects) {
  BindSocket();
  // The worker inserts the backend leg (as the backend's packets arrive) before its SYN.
  ASSERT_TRUE(prog_->AddFlow({Ip(kBackend), Ip(kLocal), 9001, 61000}, 0, 7));
  Expect(Packet().Eth().IPv4(kBackend, kLocal).Tcp(9001, 61000, kSyn | kAck).Build(), XDP_REDIRECT,
         SteerReason::kRedirectFlow);
  ASSERT_TRUE(prog_->RemoveFlow({Ip(kBackend), Ip(kLocal), 9001, 61000}));
  Expect(Packet().Eth().IPv4(kBackend, kLocal).Tcp(9001, 61000, kAck).Build(), XDP_PASS,
         SteerReason::kPassUnknownFlow);
}

TEST_F(SteerFixtureTest, SynWithoutSocketPassesAndLeavesNoFlow) {
  Expect(Syn(40002), XDP_PASS, SteerReason::kPassNoSocket);
  EXPECT_FALSE(prog_->LookupFlow({Ip(kClient), Ip(kListen), 40002, kListenPort}).has_value());
  EXPECT_EQ(prog_->FlowCount(), 0u);
}

TEST_F(SteerFixtureTest, UnknownAckPasses) {
  BindSocket();
  Expect(Packet().Eth().IPv4(kClient, kListen).Tcp(40003, kListenPort, kAck).Build(), XDP_PASS,
         SteerReason::kPassUnknownFlow);
}

TEST_F(SteerFixtureTest, SynToOtherPortOrAddressPasses) {
  BindSocket();
  Expect(Syn(40004, kListen, 22), XDP_PASS, SteerReason::kPassNotListener);
  Expect(Syn(40004, "198.18.0.9"), XDP_PASS, SteerReason::kPassNotListener);
}

TEST_F(SteerFixtureTest, WildcardListenerTakesAnyAddress) {
  BindSocket();
  ASSERT_TRUE(prog_->AddListener(in_addr{}, 7000, 3));
  Expect(Syn(40005, "198.18.0.77", 7000), XDP_REDIRECT, SteerReason::kRedirectNewFlow);
  ASSERT_TRUE(prog_->RemoveListener(in_addr{}, 7000));
  Expect(Syn(40006, "198.18.0.77", 7000), XDP_PASS, SteerReason::kPassNotListener);
}

TEST_F(SteerFixtureTest, FullFlowTablePassesNewSyns) {
  LoadWithCapacity(2);
  BindSocket();
  Expect(Syn(41000), XDP_REDIRECT, SteerReason::kRedirectNewFlow);
  Expect(Syn(41001), XDP_REDIRECT, SteerReason::kRedirectNewFlow);
  Expect(Syn(41002), XDP_PASS, SteerReason::kPassFlowTableFull);
  // Known flows keep flowing while the table is full.
  Expect(Packet().Eth().IPv4(kClient, kListen).Tcp(41000, kListenPort, kAck).Build(), XDP_REDIRECT,
         SteerReason::kRedirectFlow);
  ASSERT_TRUE(prog_->RemoveFlow({Ip(kClient), Ip(kListen), 41000, kListenPort}));
  Expect(Syn(41002), XDP_REDIRECT, SteerReason::kRedirectNewFlow);
}

// The capacity counts client flows only: with the budget spent, the worker can still add the
// backend legs of the flows it accepted (one per client flow), and removing those gives no
// client slot back.
TEST_F(SteerFixtureTest, BackendLegsDoNotUseTheClientBudget) {
  LoadWithCapacity(2);
  BindSocket();
  Expect(Syn(41000), XDP_REDIRECT, SteerReason::kRedirectNewFlow);
  Expect(Syn(41001), XDP_REDIRECT, SteerReason::kRedirectNewFlow);
  EXPECT_EQ(prog_->ClientFlowCount(), 2u);
  const FlowTuple backend_a{Ip("198.19.0.2"), Ip("198.19.0.1"), 9001, 61000};
  const FlowTuple backend_b{Ip("198.19.0.2"), Ip("198.19.0.1"), 9001, 61001};
  ASSERT_TRUE(prog_->AddFlow(backend_a, 0, 1));
  ASSERT_TRUE(prog_->AddFlow(backend_b, 0, 1));
  EXPECT_EQ(prog_->FlowCount(), 4u);
  EXPECT_EQ(prog_->ClientFlowCount(), 2u);
  ASSERT_TRUE(prog_->RemoveFlow(backend_a));
  EXPECT_EQ(prog_->ClientFlowCount(), 2u);
  Expect(Syn(41002), XDP_PASS, SteerReason::kPassFlowTableFull);
  ASSERT_TRUE(prog_->RemoveFlow({Ip(kClient), Ip(kListen), 41001, kListenPort}));
  EXPECT_EQ(prog_->ClientFlowCount(), 1u);
  Expect(Syn(41002), XDP_REDIRECT, SteerReason::kRedirectNewFlow);
}

// A SYN that finds no socket on its queue leaves no entry and takes no slot.
TEST_F(SteerFixtureTest, SynWithoutSocketTakesNoSlot) {
  LoadWithCapacity(1);
  Expect(Syn(41000), XDP_PASS, SteerReason::kPassNoSocket);
  EXPECT_EQ(prog_->FlowCount(), 0u);
  EXPECT_EQ(prog_->ClientFlowCount(), 0u);
  BindSocket();
  Expect(Syn(41001), XDP_REDIRECT, SteerReason::kRedirectNewFlow);
}

TEST_F(SteerFixtureTest, NotOursPasses) {
  BindSocket();
  Expect(Packet().Eth(0x0806).Raw(std::vector<uint8_t>(28, 0)).Build(), XDP_PASS,
         SteerReason::kPassNotIp);  // ARP
  Expect(Packet().Eth(0x8100).Raw(std::vector<uint8_t>(60, 0)).Build(), XDP_PASS,
         SteerReason::kPassNotIp);  // VLAN-tagged (IPv6: steer_ipv6_test.cpp)
  Expect(Packet().Eth().IPv4(kClient, kListen, 1).Payload(std::vector<uint8_t>(16, 8)).Build(),
         XDP_PASS, SteerReason::kPassNotTcp);  // ICMP
  Expect(Packet().Eth().IPv4(kClient, kListen, 17).Payload(std::vector<uint8_t>(16, 0)).Build(),
         XDP_PASS, SteerReason::kPassNotTcp);  // UDP
}

TEST_F(SteerFixtureTest, FragmentsAndOptionsPass) {
  BindSocket();
  // Even a SYN to a listener goes to the kernel when it is a fragment or has IP options.
  Expect(
      Packet().Eth().IPv4(kClient, kListen).Fragment(0, true).Tcp(40010, kListenPort, kSyn).Build(),
      XDP_PASS, SteerReason::kPassFragment);
  Expect(Packet()
             .Eth()
             .IPv4(kClient, kListen)
             .Fragment(64, false)
             .Tcp(40010, kListenPort, kSyn)
             .Build(),
         XDP_PASS, SteerReason::kPassFragment);
  Expect(Packet()
             .Eth()
             .IPv4(kClient, kListen)
             .IpOptions({1, 1, 1, 0})
             .Tcp(40010, kListenPort, kSyn)
             .Build(),
         XDP_PASS, SteerReason::kPassIpOptions);
  EXPECT_EQ(prog_->FlowCount(), 0u);
}

TEST_F(SteerFixtureTest, TruncatedHeadersPass) {
  BindSocket();
  const auto syn = Syn(40020);
  // The kernel's test runner refuses frames shorter than an Ethernet header, and so does every
  // driver; the program's own check for that is covered by its 14-byte minimum below.
  Expect(Packet().Eth().Build(), XDP_PASS, SteerReason::kPassTruncated);  // no IP header at all
  Expect(std::vector<uint8_t>(syn.begin(), syn.begin() + 14 + 12), XDP_PASS,
         SteerReason::kPassTruncated);  // IP header cut
  Expect(std::vector<uint8_t>(syn.begin(), syn.begin() + 14 + 20 + 12), XDP_PASS,
         SteerReason::kPassTruncated);  // TCP header cut
}

TEST_F(SteerFixtureTest, MalformedHeadersPass) {
  BindSocket();
  // TCP data offset pointing past the end of the frame.
  Expect(Packet()
             .Eth()
             .IPv4(kClient, kListen)
             .Tcp(40030, kListenPort, kSyn)
             .TcpDataOffsetWords(15)
             .Build(),
         XDP_PASS, SteerReason::kPassMalformed);
  // TCP data offset below the minimum header.
  Expect(Packet()
             .Eth()
             .IPv4(kClient, kListen)
             .Tcp(40031, kListenPort, kSyn)
             .TcpDataOffsetWords(3)
             .Build(),
         XDP_PASS, SteerReason::kPassMalformed);
  // IHL below 5.
  auto bad_ihl = Syn(40032);
  bad_ihl[14] = 0x44;
  Expect(bad_ihl, XDP_PASS, SteerReason::kPassMalformed);
  // IP total length claiming more than the frame holds.
  auto long_total = Syn(40033);
  long_total[16] = 0x05;  // 0x05xx bytes
  Expect(long_total, XDP_PASS, SteerReason::kPassMalformed);
  EXPECT_EQ(prog_->FlowCount(), 0u);
}

TEST_F(SteerFixtureTest, EthernetPaddingIsAccepted) {
  BindSocket();
  auto padded = Syn(40040);
  padded.resize(padded.size() + 6, 0);  // minimum-size frames carry padding past IP's length
  Expect(padded, XDP_REDIRECT, SteerReason::kRedirectNewFlow);
}

// The trap from DESIGN.md: bpf_skc_lookup_tcp on a SYN finds the kernel's listening socket on
// the same address and port; that must not count as the kernel owning the flow, while an
// established kernel connection with the same 4-tuple must.
TEST_F(SteerFixtureTest, KernelOwnedTupleTakesPrecedenceButAListenerDoesNot) {
  BindSocket();
  in_addr lo{};
  lo.s_addr = htonl(INADDR_LOOPBACK);
  UniqueFd listener = TcpListen("", lo, 0);
  const uint16_t port = LocalPort(listener.get());
  UniqueFd client = TcpConnect("", lo, port);
  const uint16_t client_port = LocalPort(client.get());
  ASSERT_TRUE(prog_->AddListener(lo, port, 1));

  // Same 4-tuple as the established kernel connection.
  Expect(Syn(client_port, "127.0.0.1", port, "127.0.0.1"), XDP_PASS, SteerReason::kPassKernelOwns);
  // A new 4-tuple: only the kernel's listener matches, so the flow is ours.
  const uint16_t fresh = client_port == 65000 ? 65001 : 65000;
  Expect(Syn(fresh, "127.0.0.1", port, "127.0.0.1"), XDP_REDIRECT, SteerReason::kRedirectNewFlow);
}

TEST_F(SteerFixtureTest, KernelCheckCanBeTurnedOff) {
  SteerOptions no_check;
  no_check.check_kernel_sockets = false;
  Load(no_check);
  BindSocket();
  in_addr lo{};
  lo.s_addr = htonl(INADDR_LOOPBACK);
  UniqueFd listener = TcpListen("", lo, 0);
  const uint16_t port = LocalPort(listener.get());
  UniqueFd client = TcpConnect("", lo, port);
  ASSERT_TRUE(prog_->AddListener(lo, port, 1));
  Expect(Syn(LocalPort(client.get()), "127.0.0.1", port, "127.0.0.1"), XDP_REDIRECT,
         SteerReason::kRedirectNewFlow);
}

// The fixtures as a microbenchmark: each frame run kRuns times in one BPF_PROG_TEST_RUN call.
// Every run must take the same decision (its counter moves by kRuns); the kernel's mean time
// per run is printed, the number docs/xdp-steering.md quotes for the program's cost.
TEST_F(SteerFixtureTest, RepeatedRunsTakeTheSameDecision) {
  BindSocket();
  Expect(Syn(40050), XDP_REDIRECT, SteerReason::kRedirectNewFlow);
  in6_addr client6{}, listen6{};
  inet_pton(AF_INET6, "2001:db8::2", &client6);
  inet_pton(AF_INET6, "2001:db8::1", &listen6);
  ASSERT_TRUE(prog_->AddFlow(
      SteerTuple{SteerAddress::V6(client6), SteerAddress::V6(listen6), 40050, 80}, 0, 7));
  struct Timed {
    const char* name;
    std::vector<uint8_t> frame;
    int action;
    SteerReason reason;
  };
  const std::vector<Timed> table = {
      {"ipv4 data of a known flow",
       Packet().Eth().IPv4(kClient, kListen).Tcp(40050, kListenPort, kAck).Payload("x").Build(),
       XDP_REDIRECT, SteerReason::kRedirectFlow},
      {"ipv4 ack of no flow",
       Packet().Eth().IPv4(kClient, kListen).Tcp(40051, kListenPort, kAck).Build(), XDP_PASS,
       SteerReason::kPassUnknownFlow},
      {"ipv4 syn to no listener", Syn(40052, kListen, 22), XDP_PASS, SteerReason::kPassNotListener},
      {"arp", Packet().Eth(0x0806).Raw(std::vector<uint8_t>(28, 0)).Build(), XDP_PASS,
       SteerReason::kPassNotIp},
      {"ipv6 data of a known flow",
       Packet().Eth().IPv6("2001:db8::2", "2001:db8::1").Tcp(40050, 80, kAck).Payload("x").Build(),
       XDP_REDIRECT, SteerReason::kRedirectFlow},
      {"ipv6 ack of no flow",
       Packet().Eth().IPv6("2001:db8::2", "2001:db8::1").Tcp(40051, 80, kAck).Build(), XDP_PASS,
       SteerReason::kPassUnknownFlow},
  };
  constexpr uint32_t kRuns = 100000;
  for (const Timed& t : table) {
    const SteerCounters before = prog_->ReadCounters();
    const TimedRun run = RunFrameTimed(prog_->prog_fd(), t.frame, kRuns);
    ASSERT_GE(run.action, 0) << strerror(-run.action);
    EXPECT_EQ(run.action, t.action) << t.name;
    const SteerCounters after = prog_->ReadCounters();
    const auto r = static_cast<size_t>(t.reason);
    EXPECT_EQ(after[r].packets - before[r].packets, kRuns) << t.name;
    std::printf("steer run time: %-28s %u ns/run\n", t.name, run.ns_per_run);
  }
}

TEST(SteerNames, EveryReasonHasAStableName) {
  EXPECT_EQ(ReasonName(SteerReason::kRedirectNewFlow), "redirect_new_flow");
  EXPECT_EQ(ReasonName(SteerReason::kPassFlowTableFull), "pass_flow_table_full");
  for (size_t r = 0; r < kSteerReasonCount; ++r) {
    EXPECT_NE(ReasonName(static_cast<SteerReason>(r)), "unknown") << r;
  }
}

}  // namespace
}  // namespace xdpfwd::test
