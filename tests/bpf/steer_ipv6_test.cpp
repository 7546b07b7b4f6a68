// The steering program's IPv6 decisions through BPF_PROG_TEST_RUN, as steer_fixtures_test.cpp
// has the IPv4 ones: each fixture names the expected XDP action and the one reason counter that
// must move. The stack takes no IPv6 yet (#31 items 2-5), so these listeners and flows are
// written by the test alone. Needs root; the AF_XDP socket is bound to lo, as there.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <linux/bpf.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "os/clock.h"
#include "os/unique_fd.h"
#include "stack/xsk_port.h"
#include "tests/support/packet_builder.h"
#include "tests/support/steer_run.h"
#include "xdp/steer.h"

namespace xdpfwd::test {
namespace {

constexpr const char* kClient6 = "2001:db8::2";
constexpr const char* kListen6 = "2001:db8::1";
constexpr const char* kBackend6 = "2001:db8:1::2";
constexpr const char* kLocal6 = "2001:db8:1::1";
constexpr uint32_t kRule = 7;

in6_addr Ip6(const char* text) {
  in6_addr a{};
  inet_pton(AF_INET6, text, &a);
  return a;
}

SteerTuple Tuple6(const char* src, const char* dst, uint16_t sport, uint16_t dport) {
  return {SteerAddress::V6(Ip6(src)), SteerAddress::V6(Ip6(dst)), sport, dport};
}

SteerTuple Client6(uint16_t sport) { return Tuple6(kClient6, kListen6, sport, kListenPort); }

std::vector<uint8_t> Syn6(uint16_t sport, const char* dst = kListen6, uint16_t dport = kListenPort,
                          const char* src = kClient6) {
  return Packet().Eth().IPv6(src, dst).Tcp(sport, dport, kSyn).Build();
}

std::vector<uint8_t> Ack6(uint16_t sport, const char* dst = kListen6, uint16_t dport = kListenPort,
                          const char* src = kClient6) {
  return Packet().Eth().IPv6(src, dst).Tcp(sport, dport, kAck).Build();
}

class SteerIpv6Test : public ::testing::Test {
 protected:
  void SetUp() override {
    if (geteuid() != 0) GTEST_SKIP() << "loading BPF needs root";
    Load({});
  }

  void Load(SteerOptions options) {
    auto prog = SteerProgram::Load(options);
    ASSERT_TRUE(prog) << prog.error().message();
    prog_ = std::move(*prog);
    ASSERT_TRUE(prog_->AddListener(SteerAddress::V6(Ip6(kListen6)), kListenPort, kRule));
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

  std::unique_ptr<SteerProgram> prog_;
  std::unique_ptr<XskPort> xsk_;
};

TEST_F(SteerIpv6Test, SynToListenerInsertsFlowAndRedirects) {
  BindSocket();
  Expect(Syn6(40000), XDP_REDIRECT, SteerReason::kRedirectNewFlow);
  const auto flow = prog_->LookupFlow(Client6(40000));
  ASSERT_TRUE(flow.has_value());
  EXPECT_EQ(flow->origin, static_cast<uint32_t>(STEER_FLOW_FROM_SYN));
  EXPECT_EQ(flow->rule_id, kRule);
  EXPECT_EQ(flow->owner, 0u);
  EXPECT_EQ(prog_->ClientFlowCount(), 1u);
  // A retransmitted SYN and the data find the flow.
  Expect(Syn6(40000), XDP_REDIRECT, SteerReason::kRedirectFlow);
  Expect(Packet()
             .Eth()
             .IPv6(kClient6, kListen6)
             .Tcp(40000, kListenPort, kAck | kPsh)
             .Payload("GET / HTTP/1.0\r\n\r\n")
             .Build(),
         XDP_REDIRECT, SteerReason::kRedirectFlow);
}

// An IPv6 flow's entry, written by userspace as the worker will write a backend leg, steers
// its packets; removed, they go to the kernel.
TEST_F(SteerIpv6Test, FlowEntryFromUserspaceSteersItsPackets) {
  BindSocket();
  const SteerTuple leg = Tuple6(kBackend6, kLocal6, 9001, 61000);
  ASSERT_TRUE(prog_->AddFlow(leg, 0, kRule));
  Expect(Packet().Eth().IPv6(kBackend6, kLocal6).Tcp(9001, 61000, kSyn | kAck).Build(),
         XDP_REDIRECT, SteerReason::kRedirectFlow);
  EXPECT_EQ(prog_->ClientFlowCount(), 0u) << "a backend leg takes no client slot";
  ASSERT_TRUE(prog_->RemoveFlow(leg));
  Expect(Ack6(9001, kLocal6, 61000, kBackend6), XDP_PASS, SteerReason::kPassUnknownFlow);
}

TEST_F(SteerIpv6Test, UnknownAckPasses) {
  BindSocket();
  Expect(Ack6(40003), XDP_PASS, SteerReason::kPassUnknownFlow);
}

TEST_F(SteerIpv6Test, SynToOtherPortOrAddressPasses) {
  BindSocket();
  Expect(Syn6(40004, kListen6, 22), XDP_PASS, SteerReason::kPassNotListener);
  Expect(Syn6(40004, "2001:db8::9"), XDP_PASS, SteerReason::kPassNotListener);
  EXPECT_EQ(prog_->FlowCount(), 0u);
}

TEST_F(SteerIpv6Test, SynWithoutSocketPassesAndLeavesNoFlow) {
  Expect(Syn6(40002), XDP_PASS, SteerReason::kPassNoSocket);
  EXPECT_FALSE(prog_->LookupFlow(Client6(40002)).has_value());
  EXPECT_EQ(prog_->ClientFlowCount(), 0u);
}

// A wildcard listener is per family: "::" takes any IPv6 address and no IPv4 one, 0.0.0.0 the
// reverse.
TEST_F(SteerIpv6Test, WildcardListenerTakesAnyAddressOfItsFamily) {
  BindSocket();
  ASSERT_TRUE(prog_->AddListener(SteerAddress::V6(in6_addr{}), 7000, 3));
  ASSERT_TRUE(prog_->AddListener(in_addr{}, 7001, 4));
  Expect(Syn6(40005, "2001:db8::77", 7000), XDP_REDIRECT, SteerReason::kRedirectNewFlow);
  Expect(Packet().Eth().IPv4(kClient, "198.18.0.77").Tcp(40005, 7000, kSyn).Build(), XDP_PASS,
         SteerReason::kPassNotListener);
  Expect(Syn6(40006, "2001:db8::77", 7001), XDP_PASS, SteerReason::kPassNotListener);
  ASSERT_TRUE(prog_->RemoveListener(SteerAddress::V6(in6_addr{}), 7000));
  Expect(Syn6(40007, "2001:db8::77", 7000), XDP_PASS, SteerReason::kPassNotListener);
}

// An IPv4 key and an IPv6 key with the same words (2001:db8::2 is not 198.18.0.2, but
// c612:2:: has 198.18.0.2's bytes in its first word and zeros after, as an IPv4 key does) are
// told apart by the family.
TEST_F(SteerIpv6Test, AnIpv4EntryDoesNotSteerAnIpv6AddressWithItsBytes) {
  BindSocket();
  ASSERT_TRUE(prog_->AddFlow(FlowTuple{Ip(kClient), Ip(kListen), 40008, kListenPort}, 0, kRule));
  Expect(Ack6(40008, "c612:1::", kListenPort, "c612:2::"), XDP_PASS, SteerReason::kPassUnknownFlow);
  Expect(Packet().Eth().IPv4(kClient, kListen).Tcp(40008, kListenPort, kAck).Build(), XDP_REDIRECT,
         SteerReason::kRedirectFlow);
}

// Every extension header sends the packet to the kernel, even a SYN to a listener or a packet
// of a known flow: the program reads no header chain (as it reads no IPv4 options).
TEST_F(SteerIpv6Test, ExtensionHeadersPass) {
  BindSocket();
  ASSERT_TRUE(prog_->AddFlow(Client6(40011), 0, kRule));
  // hop-by-hop, routing, ESP, AH, destination options, mobility, HIP, shim6, experimental.
  for (const uint8_t type : {0, 43, 50, 51, 60, 135, 139, 140, 253, 254}) {
    SCOPED_TRACE(static_cast<int>(type));
    Expect(
        Packet().Eth().IPv6(kClient6, kListen6).Ipv6Ext(type).Tcp(40010, kListenPort, kSyn).Build(),
        XDP_PASS, SteerReason::kPassIpv6ExtHeader);
    Expect(
        Packet().Eth().IPv6(kClient6, kListen6).Ipv6Ext(type).Tcp(40011, kListenPort, kAck).Build(),
        XDP_PASS, SteerReason::kPassIpv6ExtHeader);
  }
  // A longer one, and two in a row (the first decides).
  Expect(
      Packet().Eth().IPv6(kClient6, kListen6).Ipv6Ext(60, 24).Tcp(40010, kListenPort, kSyn).Build(),
      XDP_PASS, SteerReason::kPassIpv6ExtHeader);
  Expect(Packet()
             .Eth()
             .IPv6(kClient6, kListen6)
             .Ipv6Ext(0)
             .Ipv6Fragment(0, true)
             .Tcp(40010, kListenPort, kSyn)
             .Build(),
         XDP_PASS, SteerReason::kPassIpv6ExtHeader);
  EXPECT_FALSE(prog_->LookupFlow(Client6(40010)).has_value());
}

TEST_F(SteerIpv6Test, FragmentsPass) {
  BindSocket();
  Expect(Packet()
             .Eth()
             .IPv6(kClient6, kListen6)
             .Ipv6Fragment(0, true)
             .Tcp(40012, kListenPort, kSyn)
             .Build(),
         XDP_PASS, SteerReason::kPassFragment);
  Expect(Packet()
             .Eth()
             .IPv6(kClient6, kListen6)
             .Ipv6Fragment(64, false)
             .Tcp(40012, kListenPort, kSyn)
             .Build(),
         XDP_PASS, SteerReason::kPassFragment);
  EXPECT_EQ(prog_->FlowCount(), 0u);
}

// ICMPv6 of every kind is the kernel's: neighbour discovery, packet too big (path MTU), echo.
TEST_F(SteerIpv6Test, Icmpv6AndOtherProtocolsPass) {
  BindSocket();
  const auto icmp6 = [](uint8_t type) {
    std::vector<uint8_t> body(24, 0);
    body[0] = type;
    return Packet().Eth().IPv6(kClient6, kListen6, 58).Payload(body).Build();
  };
  Expect(icmp6(135), XDP_PASS, SteerReason::kPassNotTcp);  // neighbour solicitation
  Expect(icmp6(136), XDP_PASS, SteerReason::kPassNotTcp);  // neighbour advertisement
  Expect(icmp6(2), XDP_PASS, SteerReason::kPassNotTcp);    // packet too big
  Expect(icmp6(128), XDP_PASS, SteerReason::kPassNotTcp);  // echo request
  Expect(Packet().Eth().IPv6(kClient6, kListen6, 17).Payload(std::vector<uint8_t>(16, 0)).Build(),
         XDP_PASS, SteerReason::kPassNotTcp);  // UDP
  Expect(Packet().Eth().IPv6(kClient6, kListen6, 59).Build(), XDP_PASS,
         SteerReason::kPassNotTcp);  // no next header
  Expect(Packet().Eth(0x0806).Raw(std::vector<uint8_t>(28, 0)).Build(), XDP_PASS,
         SteerReason::kPassNotIp);  // ARP
}

TEST_F(SteerIpv6Test, TruncatedHeadersPass) {
  BindSocket();
  const auto syn = Syn6(40020);
  Expect(std::vector<uint8_t>(syn.begin(), syn.begin() + 14 + 20), XDP_PASS,
         SteerReason::kPassTruncated);  // IPv6 header cut
  Expect(std::vector<uint8_t>(syn.begin(), syn.begin() + 14 + 40 + 12), XDP_PASS,
         SteerReason::kPassTruncated);  // TCP header cut
  Expect(std::vector<uint8_t>(syn.begin(), syn.begin() + 14 + 40), XDP_PASS,
         SteerReason::kPassTruncated);  // no TCP header at all
  EXPECT_EQ(prog_->FlowCount(), 0u);
}

TEST_F(SteerIpv6Test, MalformedHeadersPass) {
  BindSocket();
  // Version 4 in an IPv6 EtherType's header.
  auto bad_version = Syn6(40030);
  bad_version[14] = 0x40;
  Expect(bad_version, XDP_PASS, SteerReason::kPassMalformed);
  // Payload length beyond the frame.
  auto long_payload = Syn6(40031);
  long_payload[18] = 0x05;  // 0x05xx bytes
  Expect(long_payload, XDP_PASS, SteerReason::kPassMalformed);
  // Payload length shorter than the TCP header (0: a jumbogram without its hop-by-hop header).
  auto no_payload = Syn6(40032);
  no_payload[18] = 0;
  no_payload[19] = 0;
  Expect(no_payload, XDP_PASS, SteerReason::kPassMalformed);
  // TCP data offset past the frame, and below the minimum header.
  Expect(Packet()
             .Eth()
             .IPv6(kClient6, kListen6)
             .Tcp(40033, kListenPort, kSyn)
             .TcpDataOffsetWords(15)
             .Build(),
         XDP_PASS, SteerReason::kPassMalformed);
  Expect(Packet()
             .Eth()
             .IPv6(kClient6, kListen6)
             .Tcp(40034, kListenPort, kSyn)
             .TcpDataOffsetWords(3)
             .Build(),
         XDP_PASS, SteerReason::kPassMalformed);
  EXPECT_EQ(prog_->FlowCount(), 0u);
}

TEST_F(SteerIpv6Test, EthernetPaddingIsAccepted) {
  BindSocket();
  auto padded = Syn6(40040);
  padded.resize(padded.size() + 6, 0);
  Expect(padded, XDP_REDIRECT, SteerReason::kRedirectNewFlow);
}

// A packet longer than a page reaches the program in fragments; the IPv6 payload length is
// checked against the whole of it.
TEST_F(SteerIpv6Test, MultiBufferPacketOfKnownFlowRedirects) {
  BindSocket();
  Expect(Syn6(40041), XDP_REDIRECT, SteerReason::kRedirectNewFlow);
  const auto segment = Packet()
                           .Eth()
                           .IPv6(kClient6, kListen6)
                           .Tcp(40041, kListenPort, kAck)
                           .Payload(std::vector<uint8_t>(20000, 0x42))
                           .Build();
  Expect(segment, XDP_REDIRECT, SteerReason::kRedirectFlow);
  auto cut = segment;
  cut.resize(cut.size() - 1);
  Expect(cut, XDP_PASS, SteerReason::kPassMalformed);
}

// The client budget counts IPv6 client flows with the IPv4 ones; the userspace removals that
// give slots back (stray reaping, the close's stamped removal, a dead worker's flows) find
// IPv6 entries too.
TEST_F(SteerIpv6Test, IPv6FlowsShareTheClientBudgetAndAreReaped) {
  SteerOptions options;
  options.flow_capacity = 3;
  Load(options);
  ASSERT_TRUE(prog_->AddListener(Ip(kListen), kListenPort, kRule));
  BindSocket();
  Expect(Syn6(41000), XDP_REDIRECT, SteerReason::kRedirectNewFlow);
  Expect(Packet().Eth().IPv4(kClient, kListen).Tcp(41001, kListenPort, kSyn).Build(), XDP_REDIRECT,
         SteerReason::kRedirectNewFlow);
  Expect(Syn6(41002), XDP_REDIRECT, SteerReason::kRedirectNewFlow);
  Expect(Syn6(41003), XDP_PASS, SteerReason::kPassFlowTableFull);
  EXPECT_EQ(prog_->ClientFlowCount(), 3u);

  const uint64_t accepted_ns = MonotonicNs();
  ASSERT_TRUE(prog_->MarkAccepted(Client6(41002), 0, kRule, accepted_ns));
  EXPECT_EQ(prog_->LookupFlow(Client6(41002))->flags, STEER_FLOW_ACCEPTED);
  // 41000 (IPv6) and 41001 (IPv4) were never accepted: strays.
  EXPECT_EQ(prog_->ReapStrayFlows(MonotonicNs()), 2u);
  EXPECT_FALSE(prog_->LookupFlow(Client6(41000)).has_value());
  EXPECT_EQ(prog_->ClientFlowCount(), 1u);
  EXPECT_TRUE(prog_->RemoveFlowStampedBy(Client6(41002), accepted_ns, FlowReuse::kPossible));
  EXPECT_EQ(prog_->ClientFlowCount(), 0u);

  ASSERT_TRUE(prog_->AddFlow(Tuple6(kBackend6, kLocal6, 9001, 61001), 2, kRule));
  ASSERT_TRUE(prog_->AddFlow(Tuple6(kBackend6, kLocal6, 9001, 61002), 1, kRule));
  EXPECT_EQ(prog_->RemoveFlowsOwnedBy(2), 1u);
  EXPECT_EQ(prog_->FlowCount(), 1u);
}

// A tuple whose addresses are of two families, or of neither, is refused, not written.
TEST_F(SteerIpv6Test, MixedFamiliesAreRefused) {
  SteerTuple mixed = Client6(40050);
  mixed.daddr = SteerAddress::V4(Ip(kListen));
  EXPECT_FALSE(prog_->AddFlow(mixed, 0, kRule));
  EXPECT_FALSE(prog_->LookupFlow(mixed).has_value());
  SteerAddress none = SteerAddress::V6(Ip6(kListen6));
  none.family = AF_UNSPEC;
  EXPECT_FALSE(prog_->AddListener(none, 80, kRule));
  EXPECT_EQ(prog_->FlowCount(), 0u);
}

UniqueFd Socket6() { return UniqueFd(socket(AF_INET6, SOCK_STREAM | SOCK_CLOEXEC, 0)); }

uint16_t LocalPort6(int fd) {
  sockaddr_in6 a{};
  socklen_t len = sizeof(a);
  getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  return ntohs(a.sin6_port);
}

// The listener trap of steer_fixtures_test.cpp over IPv6 loopback: an established kernel
// connection's 4-tuple is the kernel's, a new 4-tuple to the kernel's listening port is not.
TEST_F(SteerIpv6Test, KernelOwnedTupleTakesPrecedenceButAListenerDoesNot) {
  BindSocket();
  UniqueFd listener = Socket6();
  sockaddr_in6 at{};
  at.sin6_family = AF_INET6;
  at.sin6_addr = in6addr_loopback;
  ASSERT_EQ(bind(listener.get(), reinterpret_cast<sockaddr*>(&at), sizeof(at)), 0)
      << strerror(errno);
  ASSERT_EQ(listen(listener.get(), 4), 0);
  at.sin6_port = htons(LocalPort6(listener.get()));
  UniqueFd client = Socket6();
  ASSERT_EQ(connect(client.get(), reinterpret_cast<sockaddr*>(&at), sizeof(at)), 0)
      << strerror(errno);
  const uint16_t port = ntohs(at.sin6_port);
  const uint16_t client_port = LocalPort6(client.get());
  ASSERT_TRUE(prog_->AddListener(SteerAddress::V6(in6addr_loopback), port, 1));

  Expect(Syn6(client_port, "::1", port, "::1"), XDP_PASS, SteerReason::kPassKernelOwns);
  const uint16_t fresh = client_port == 65000 ? 65001 : 65000;
  Expect(Syn6(fresh, "::1", port, "::1"), XDP_REDIRECT, SteerReason::kRedirectNewFlow);
}

// With N workers and hash owners, IPv6 flows are spread by their whole addresses: here only
// the third 32-bit word of the source differs, which an IPv4 key has zero. (The hash's product
// keeps bits 16-17 for 4 owners: only the low 18 bits of the XOR of the words and ports count,
// so the difference sits in the word's first two bytes.)
TEST_F(SteerIpv6Test, HashOwnersSpreadIPv6Flows) {
  SteerOptions options;
  options.hash_owners = 4;
  Load(options);
  BindSocket();
  uint32_t seen = 0;  // bit per owner
  for (int i = 0; i < 32; ++i) {
    char src[48];
    std::snprintf(src, sizeof(src), "2001:db8:0:0:%x00::2", i + 1);
    Expect(Syn6(42000, kListen6, kListenPort, src), XDP_REDIRECT, SteerReason::kRedirectNewFlow);
    const auto flow = prog_->LookupFlow(Tuple6(src, kListen6, 42000, kListenPort));
    ASSERT_TRUE(flow.has_value());
    ASSERT_LT(flow->owner, 4u);
    seen |= 1u << flow->owner;
  }
  EXPECT_EQ(seen, 0xfu) << "32 flows did not reach all 4 owners";
}

TEST(SteerIpv6Names, TheNewReasonHasItsName) {
  EXPECT_EQ(ReasonName(SteerReason::kPassIpv6ExtHeader), "pass_ipv6_ext_header");
  EXPECT_EQ(ReasonName(SteerReason::kPassNotIp), "pass_not_ip");
}

}  // namespace
}  // namespace xdpfwd::test
