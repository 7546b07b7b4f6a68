// A rule whose backends are of both families (an IPv4 and an IPv6 one), through the real xdpfwd
// binary with --path xdp and auto: the fast path carries it, each backend leg in its backend's
// family and from that family's --backend-source (or the route's source), connections spread by
// the weights, bytes intact both ways, a dead backend of one family failed over to the other,
// and the steering program's counters showing every flow on the fast path.
#include <sys/socket.h>

#include "tests/netns/auto_mode_fixture.h"
#include "tests/netns/named_echo.h"

namespace xdpfwd::test {
namespace {

constexpr uint64_t kBytes = 128 << 10;  // each way, per connection

class RelayMixedFamiliesTest : public ::testing::TestWithParam<const char*> {
 protected:
  void SetUp() override {
    if (geteuid() != 0) GTEST_SKIP() << "namespace tests need root";
  }
};

// Two rules, each with an IPv4 and an IPv6 backend: A listens on IPv4 (weights 3:1, IPv4
// first), B on IPv6, its IPv4 backend dead (nothing listens). IPv6 legs leave from an IPv6
// --backend-source (deprecated, so the kernel never picks it as the route's source), IPv4 legs
// from the route's source (--backend-source has no IPv4 address). Then A's IPv6 backend dies.
TEST_P(RelayMixedFamiliesTest, OneRuleServesBackendsOfBothFamiliesOnTheFastPath) {
  constexpr uint16_t kPortA = 9000, kPortB = 9001, kEcho = 9100, kDead4 = 9109;
  constexpr int kClientsA = 40, kClientsB = 12, kAfterDeath = 12;
  Topology topo;
  const Ipv6Addresses v6 = AddIpv6(topo);
  const std::string gw4 = ToString(topo.client_gw()), server4 = ToString(topo.server_addr());
  const std::string source6 = v6.server.root.substr(0, v6.server.root.rfind("::")) + "::11";
  ASSERT_EQ(topo.Run("", "ip -6 addr add " + source6 + "/64 dev " + topo.server_side_if() +
                             " nodad preferred_lft 0")
                .status,
            0);
  const RulesFile file(gw4 + " " + std::to_string(kPortA) + " " + server4 + " " +
                       std::to_string(kEcho) + " [weight=3]\n" + "backend " + v6.server.ns + " " +
                       std::to_string(kEcho) + " [weight=1]\n" + v6.client.root + " " +
                       std::to_string(kPortB) + " " + server4 + " " + std::to_string(kDead4) +
                       "\n" + "backend " + v6.server.ns + " " + std::to_string(kEcho) + "\n");
  NamedEcho four(TcpListen(topo.server_ns(), topo.server_addr(), kEcho), '4');
  auto six = std::make_unique<NamedEcho>(TcpListen6(topo.server_ns(), v6.server.ns, kEcho), '6');
  auto fwd = ForwarderProcess::WithConfig(GetParam(), file.path(), {"--backend-source", source6});

  std::map<char, int> a;
  for (int i = 0; i < kClientsA; ++i) ++a[AskNamed(topo.client_ns(), gw4, kPortA, 1 + i, kBytes)];
  EXPECT_EQ(a['-'] + a['!'], 0) << "failed or corrupted connections\n" << fwd->output();
  // Weighted round robin on one worker (or one kernel-path thread): exactly 3:1.
  EXPECT_EQ(a['4'], kClientsA * 3 / 4);
  EXPECT_EQ(a['6'], kClientsA / 4);

  std::map<char, int> b;
  for (int i = 0; i < kClientsB; ++i)
    ++b[AskNamed(topo.client_ns(), v6.client.root, kPortB, 100 + i, kBytes)];
  EXPECT_EQ(b['6'], kClientsB) << "rule B: the dead IPv4 backend is failed over to the IPv6 one";

  // Each leg in its backend's family, from that family's source.
  for (const std::string& peer : four.peers()) EXPECT_EQ(peer, ToString(topo.server_gw()));
  const std::vector<std::string> peers6 = six->peers();
  EXPECT_EQ(peers6.size(), static_cast<size_t>(kClientsA / 4 + kClientsB));
  for (const std::string& peer : peers6) EXPECT_EQ(peer, source6);

  // A's IPv6 backend dies: its share goes to the IPv4 one, no client fails.
  EXPECT_EQ(six->failures(), "");
  six.reset();
  std::map<char, int> after;
  for (int i = 0; i < kAfterDeath; ++i)
    ++after[AskNamed(topo.client_ns(), gw4, kPortA, 200 + i, kBytes)];
  EXPECT_EQ(after['4'], kAfterDeath) << "rule A: the dead IPv6 backend is failed over";

  const int clients = kClientsA + kClientsB + kAfterDeath;
  const auto stats = fwd->WaitForStats([&](const auto& s) {
    return fwd->Relay(s, "active") == 0 && fwd->Relay(s, "completed") == uint64_t(clients);
  });
  EXPECT_EQ(fwd->Relay(stats, "completed"), uint64_t(clients));
  EXPECT_GE(fwd->Relay(stats, "backend_failovers"), 2u) << "one failover per rule at least";
  EXPECT_EQ(fwd->Relay(stats, "bytes_to_backend"), clients * kBytes);
  EXPECT_EQ(fwd->Relay(stats, "bytes_to_client"), clients * (kBytes + 1));
  // Every connection on the fast path, none passed to the kernel (auto mode too).
  EXPECT_EQ(ForwarderProcess::Get(stats, "fast.accepted"), uint64_t(clients)) << fwd->output();
  EXPECT_EQ(ForwarderProcess::Get(stats, "kernel.accepted"), 0u);
  EXPECT_EQ(ForwarderProcess::Get(stats, "steer.redirect_new_flow"), uint64_t(clients));
  for (const char* pass : {"steer.pass_unknown_flow", "steer.pass_not_listener",
                           "steer.pass_kernel_owns", "steer.pass_flow_table_full"}) {
    EXPECT_EQ(ForwarderProcess::Get(stats, pass), 0u) << pass;
  }
  EXPECT_EQ(ForwarderProcess::Get(stats, "fast.frames_held"), 0u);
  EXPECT_EQ(four.failures(), "");
  EXPECT_EQ(fwd->Stop(), 0);
}

INSTANTIATE_TEST_SUITE_P(Paths, RelayMixedFamiliesTest, ::testing::Values("xdp", "auto"),
                         [](const auto& p) { return p.param; });

}  // namespace
}  // namespace xdpfwd::test
