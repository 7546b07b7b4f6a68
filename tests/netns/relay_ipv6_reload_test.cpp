// Reloads with IPv6 rules on the running fast path, through the real xdpfwd binary: IPv6 rules
// added and removed, an IPv6 rule whose backend or port changes, and a reload that needs an
// interface's first IPv6 address (the running workers have none there).
#include <signal.h>
#include <sys/socket.h>

#include <fstream>

#include "tests/netns/auto_mode_fixture.h"
#include "tests/netns/named_echo.h"

namespace xdpfwd::test {
namespace {

// Reload (the control socket's `reload`, as SIGHUP) with IPv6 rules, on the fast path: the
// running workers take an added 6 -> 6, 4 -> 6 and 6 -> 4 rule and serve each at once, and a
// removed IPv6 rule's listener entry goes (its port is the kernel's again: refused). The
// forwarder starts with an IPv4 and an IPv6 rule, so each interface has its address of each
// family: a reload cannot add one (GetInterface says so).
TEST(RelayIpv6ReloadTest, Ipv6RulesAddedAndRemovedOnTheRunningFastPath) {
  if (geteuid() != 0) GTEST_SKIP() << "namespace tests need root";
  constexpr uint16_t kEcho = 9100, k44 = 9000, k66 = 9001, kAdded66 = 9002, kAdded46 = 9003,
                     kAdded64 = 9004;
  Topology topo;
  const Ipv6Addresses v6 = AddIpv6(topo);
  const std::string gw4 = ToString(topo.client_gw()), server4 = ToString(topo.server_addr());
  EchoServer echo4(TcpListen(topo.server_ns(), topo.server_addr(), kEcho));
  EchoServer echo6(TcpListen6(topo.server_ns(), v6.server.ns, kEcho));
  auto rule = [&](bool client_v6, uint16_t port, bool backend_v6) {
    return (client_v6 ? v6.client.root : gw4) + " " + std::to_string(port) + " " +
           (backend_v6 ? v6.server.ns : server4) + " " + std::to_string(kEcho) + "\n";
  };
  auto echoes = [&](bool client_v6, uint16_t port) {
    UniqueFd c = TcpConnectTo(topo.client_ns(), client_v6 ? v6.client.root : gw4, port);
    const StreamStats sent = SendPattern(c.get(), port, 100000);
    const StreamStats got = ReceiveAll(c.get());
    return got.bytes == sent.bytes && got.hash == sent.hash;
  };
  const RulesFile file(rule(false, k44, false) + rule(true, k66, true));
  auto rewrite = [&](const std::string& text) {
    std::ofstream f(file.path(), std::ios::trunc);
    f << text;
  };
  auto fwd = ForwarderProcess::WithConfig("xdp", file.path());
  EXPECT_TRUE(echoes(false, k44));
  EXPECT_TRUE(echoes(true, k66));

  rewrite(rule(false, k44, false) + rule(true, k66, true) + rule(true, kAdded66, true) +
          rule(false, kAdded46, true) + rule(true, kAdded64, false));
  std::string answer = fwd->Control("reload");
  EXPECT_NE(answer.find("kept 2, changed 0, added 3"), std::string::npos) << answer;
  EXPECT_TRUE(echoes(true, kAdded66)) << "6 -> 6 added by a reload";
  EXPECT_TRUE(echoes(false, kAdded46)) << "4 -> 6 added by a reload";
  EXPECT_TRUE(echoes(true, kAdded64)) << "6 -> 4 added by a reload";
  EXPECT_TRUE(echoes(true, k66)) << "the IPv6 rule kept";

  // The IPv6 rules go but the 4 -> 6 one: their ports are the kernel's, which has no listener.
  rewrite(rule(false, k44, false) + rule(false, kAdded46, true));
  answer = fwd->Control("reload");
  EXPECT_NE(answer.find("removed 3"), std::string::npos) << answer;
  for (const uint16_t gone : {k66, kAdded66, kAdded64}) {
    try {
      TcpConnectTo(topo.client_ns(), v6.client.root, gone);
      ADD_FAILURE() << "port " << gone << " still served after its rule was removed";
    } catch (const std::exception& e) {
      EXPECT_NE(std::string(e.what()).find(strerror(ECONNREFUSED)), std::string::npos) << e.what();
    }
  }
  EXPECT_TRUE(echoes(false, kAdded46)) << "4 -> 6 kept";
  EXPECT_TRUE(echoes(false, k44));

  const auto stats = fwd->WaitForStats([&](const auto& s) { return fwd->Relay(s, "active") == 0; });
  EXPECT_EQ(fwd->Relay(stats, "accepted"), 8u);
  EXPECT_EQ(fwd->Relay(stats, "completed"), 8u);
  EXPECT_EQ(ForwarderProcess::Get(stats, "steer.redirect_new_flow"), 8u);
  EXPECT_EQ(ForwarderProcess::Get(stats, "steer.pass_unknown_flow"), 0u);
  EXPECT_EQ(fwd->Stop(), 0);
}

// A reload that changes IPv6 rules on the fast path: a 6 -> 6 rule's backend port, a 4 -> 6
// rule's backend address, a 6 -> 4 rule's listen port. New connections go where the new rules
// say, at once; a connection open across the reload keeps its backend; the old listen port is
// the kernel's again (refused); every flow stays on the fast path.
TEST(RelayIpv6ReloadTest, ChangedIpv6RulesTakeTheirNewBackendAndPort) {
  if (geteuid() != 0) GTEST_SKIP() << "namespace tests need root";
  constexpr uint16_t k66 = 9000, k46 = 9001, k64 = 9002, kMoved64 = 9003, kEcho = 9100,
                     kOtherEcho = 9101;
  constexpr uint64_t kBytes = 64 << 10;
  Topology topo;
  const Ipv6Addresses v6 = AddIpv6(topo);
  const std::string gw4 = ToString(topo.client_gw()), server4 = ToString(topo.server_addr());
  // A second IPv6 address of the backend's namespace, for the 4 -> 6 rule's new backend.
  const std::string other6 = v6.server.ns.substr(0, v6.server.ns.rfind("::")) + "::3";
  ASSERT_EQ(topo.Run(topo.server_ns(), "ip -6 addr add " + other6 + "/64 dev " +
                                           std::string(Topology::kNsIf) + " nodad")
                .status,
            0);
  NamedEcho a(TcpListen6(topo.server_ns(), v6.server.ns, kEcho), 'a');
  NamedEcho b(TcpListen6(topo.server_ns(), v6.server.ns, kOtherEcho), 'b');
  NamedEcho c(TcpListen6(topo.server_ns(), other6, kEcho), 'c');
  NamedEcho four(TcpListen(topo.server_ns(), topo.server_addr(), kEcho), '4');
  auto rule = [](const std::string& listen, uint16_t port, const std::string& backend,
                 uint16_t backend_port) {
    return listen + " " + std::to_string(port) + " " + backend + " " +
           std::to_string(backend_port) + "\n";
  };
  const RulesFile file(rule(v6.client.root, k66, v6.server.ns, kEcho) +
                       rule(gw4, k46, v6.server.ns, kEcho) +
                       rule(v6.client.root, k64, server4, kEcho));
  auto fwd = ForwarderProcess::WithConfig("xdp", file.path());
  int asked = 0;
  auto ask = [&](const std::string& addr, uint16_t port) {
    ++asked;
    return AskNamed(topo.client_ns(), addr, port, asked, kBytes);
  };
  EXPECT_EQ(ask(v6.client.root, k66), 'a');
  EXPECT_EQ(ask(gw4, k46), 'a');
  EXPECT_EQ(ask(v6.client.root, k64), '4');
  // Open across the reload: it began under the old 6 -> 6 rule.
  UniqueFd held = TcpConnectTo(topo.client_ns(), v6.client.root, k66);
  char held_name = 0;
  ASSERT_EQ(recv(held.get(), &held_name, 1, MSG_WAITALL), 1);
  EXPECT_EQ(held_name, 'a');

  {
    std::ofstream f(file.path(), std::ios::trunc);
    f << rule(v6.client.root, k66, v6.server.ns, kOtherEcho) + rule(gw4, k46, other6, kEcho) +
             rule(v6.client.root, kMoved64, server4, kEcho);
  }
  const std::string answer = fwd->Control("reload");
  EXPECT_NE(answer.find("kept 0, changed 2, added 1, removed 1"), std::string::npos) << answer;
  EXPECT_EQ(answer.find("kernel path"), std::string::npos) << answer;
  EXPECT_EQ(ask(v6.client.root, k66), 'b') << "6 -> 6: the new backend port";
  EXPECT_EQ(ask(gw4, k46), 'c') << "4 -> 6: the new backend address";
  EXPECT_EQ(ask(v6.client.root, kMoved64), '4') << "6 -> 4: the new listen port";
  try {
    TcpConnectTo(topo.client_ns(), v6.client.root, k64);
    ADD_FAILURE() << "port " << k64 << " still served after its rule moved";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find(strerror(ECONNREFUSED)), std::string::npos) << e.what();
  }
  // The held connection still reaches its first backend, both ways.
  {
    const int fd = held.get();
    std::future<StreamStats> echoed =
        std::async(std::launch::async, [fd] { return ReceiveAll(fd); });
    const StreamStats sent = SendPattern(fd, 99, kBytes);
    const StreamStats got = echoed.get();
    EXPECT_EQ(got.bytes, sent.bytes);
    EXPECT_EQ(got.hash, sent.hash);
  }
  held.reset();
  ++asked;

  const auto stats = fwd->WaitForStats([&](const auto& s) {
    return fwd->Relay(s, "active") == 0 && fwd->Relay(s, "completed") == uint64_t(asked);
  });
  EXPECT_EQ(fwd->Relay(stats, "accepted"), uint64_t(asked));
  EXPECT_EQ(fwd->Relay(stats, "completed"), uint64_t(asked));
  EXPECT_EQ(ForwarderProcess::Get(stats, "steer.redirect_new_flow"), uint64_t(asked));
  for (const char* pass :
       {"steer.pass_unknown_flow", "steer.pass_kernel_owns", "steer.pass_flow_table_full"}) {
    EXPECT_EQ(ForwarderProcess::Get(stats, pass), 0u) << pass;
  }
  // The moved port's refused SYN is the only TCP segment the program passed as no listener's.
  EXPECT_EQ(ForwarderProcess::Get(stats, "steer.pass_not_listener"), 1u);
  for (NamedEcho* e : {&a, &b, &c, &four}) EXPECT_EQ(e->failures(), "");
  EXPECT_EQ(a.peers().size(), 3u) << "two asks and the held connection";
  EXPECT_EQ(b.peers().size(), 1u);
  EXPECT_EQ(c.peers().size(), 1u);
  EXPECT_EQ(four.peers().size(), 2u);
  EXPECT_EQ(fwd->Stop(), 0);
}

class FirstIpv6ByReloadTest : public ::testing::TestWithParam<const char*> {
 protected:
  void SetUp() override {
    if (geteuid() != 0) GTEST_SKIP() << "namespace tests need root";
  }
};

// The fast path starts with IPv4 rules only, on interfaces that have no IPv6 address yet; then
// they get their first, and a reload adds a 6 -> 6 and a 4 -> 6 rule. The running workers add
// each interface's first IPv6 address to their netif (WorkerRuleSet::ipv6) and serve both rules
// on the fast path, with either --path; a worker restarted after it starts with the address.
// Before, --path xdp refused the reload ("the running workers answer on no IPv6 address there
// (a restart adds ...)") and auto gave both rules to the kernel path until a restart.
TEST_P(FirstIpv6ByReloadTest, AReloadGivesTheWorkersAnInterfacesFirstIpv6Address) {
  constexpr uint16_t k44 = 9000, k66 = 9001, k46 = 9002, kEcho = 9100;
  constexpr uint64_t kBytes = 64 << 10;
  Topology topo;
  const std::string gw4 = ToString(topo.client_gw()), server4 = ToString(topo.server_addr());
  NamedEcho four(TcpListen(topo.server_ns(), topo.server_addr(), kEcho), '4');
  const RulesFile file(gw4 + " " + std::to_string(k44) + " " + server4 + " " +
                       std::to_string(kEcho) + "\n");
  auto fwd = ForwarderProcess::WithConfig(GetParam(), file.path());
  int asked = 0;
  auto ask = [&](const std::string& addr, uint16_t port) {
    return AskNamed(topo.client_ns(), addr, port, ++asked, kBytes);
  };
  EXPECT_EQ(ask(gw4, k44), '4');

  const Ipv6Addresses v6 = AddIpv6(topo);
  NamedEcho six(TcpListen6(topo.server_ns(), v6.server.ns, kEcho), '6');
  {
    std::ofstream f(file.path(), std::ios::trunc);
    f << gw4 << " " << k44 << " " << server4 << " " << kEcho << "\n"
      << v6.client.root << " " << k66 << " " << v6.server.ns << " " << kEcho << "\n"
      << gw4 << " " << k46 << " " << v6.server.ns << " " << kEcho << "\n";
  }
  const std::string answer = fwd->Control("reload");
  EXPECT_NE(answer.find("kept 1, changed 0, added 2"), std::string::npos) << answer;
  EXPECT_EQ(answer.find("kernel path"), std::string::npos) << answer;
  EXPECT_EQ(answer.find("error"), std::string::npos) << answer;
  EXPECT_EQ(ask(v6.client.root, k66), '6') << "6 -> 6 on the client side's first IPv6 address";
  EXPECT_EQ(ask(gw4, k46), '6') << "4 -> 6 from the backend side's first IPv6 address";
  EXPECT_EQ(ask(gw4, k44), '4') << "the IPv4 rule kept";
  // The backend legs left from the backend side's new address.
  for (const std::string& peer : six.peers()) EXPECT_EQ(peer, v6.server.root);

  // A worker restarted from here on starts with the address.
  const pid_t worker = static_cast<pid_t>(ForwarderProcess::Get(fwd->Stats(), "worker.0.pid"));
  ASSERT_GT(worker, 0);
  ASSERT_EQ(kill(worker, SIGKILL), 0);
  ASSERT_TRUE(fwd->WaitForOutput("worker 0 serves its queues again", 20s)) << fwd->output();
  EXPECT_EQ(ask(v6.client.root, k66), '6') << "after a worker restart\n" << fwd->output();
  EXPECT_EQ(ask(gw4, k46), '6') << "after a worker restart";

  const auto stats = fwd->WaitForStats([&](const auto& s) {
    return fwd->Relay(s, "active") == 0 && fwd->Relay(s, "completed") >= 2;
  });
  // Every connection on the fast path (the restarted worker's counters start again: only the
  // two after the restart are in its numbers, those before in the dead worker's kept ones).
  EXPECT_EQ(ForwarderProcess::Get(stats, "kernel.accepted"), 0u);
  EXPECT_EQ(ForwarderProcess::Get(stats, "steer.redirect_new_flow"), uint64_t(asked));
  for (const char* pass : {"steer.pass_unknown_flow", "steer.pass_not_listener",
                           "steer.pass_kernel_owns", "steer.pass_flow_table_full"}) {
    EXPECT_EQ(ForwarderProcess::Get(stats, pass), 0u) << pass;
  }
  EXPECT_EQ(four.failures(), "");
  EXPECT_EQ(six.failures(), "");
  EXPECT_EQ(fwd->Stop(), 0);
}

INSTANTIATE_TEST_SUITE_P(Paths, FirstIpv6ByReloadTest, ::testing::Values("xdp", "auto"),
                         [](const auto& p) { return p.param; });

}  // namespace
}  // namespace xdpfwd::test
