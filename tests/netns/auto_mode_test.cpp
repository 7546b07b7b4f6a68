// --path auto through the real xdpfwd binary (tests/netns/auto_mode_fixture.h): new IPv4 flows
// go to the fast path until --flow-capacity, half-open handshakes give their slots back, backend
// legs use every backend source, and IPv6 goes to the kernel path on the same address. What the
// kernel already had, and the fallback when the fast path cannot start, are in
// auto_mode_kernel_test.cpp.
#include <gtest/gtest.h>

#include "tests/netns/auto_mode_fixture.h"

namespace xdpfwd::test {
namespace {

// With the flow capacity at 4, the first four of twelve concurrent connections take the fast
// path and the steering program passes the other eight to the kernel path; every connection
// then echoes 1 MiB intact, all at once. When the fast connections have ended and their flow
// entries have lingered out, the capacity is free again and a new connection takes the fast
// path.
TEST_F(AutoModeTest, ConnectionsBeyondTheFlowCapacityGoToTheKernelPath) {
  constexpr uint64_t kCapacity = 4;
  constexpr uint64_t kConns = 12;
  EchoBackend echo(topo(), kPort);
  AutoForwarder fwd({"--flow-capacity", std::to_string(kCapacity), listen(), backend()});
  ExpectFastPathRunning(fwd);
  std::vector<UniqueFd> clients;
  for (uint64_t i = 0; i < kConns; ++i) clients.push_back(Connect());
  const auto accepted = [](const Counters& s) {
    return Get(s, "fast.accepted") + Get(s, "kernel.accepted");
  };
  Counters c = fwd.WaitForStats([&](const Counters& s) { return accepted(s) == kConns; });
  EXPECT_EQ(Get(c, "fast.accepted"), kCapacity) << fwd.output();
  EXPECT_EQ(Get(c, "kernel.accepted"), kConns - kCapacity);
  EXPECT_EQ(Get(c, "fast.client_flows"), kCapacity);
  EXPECT_GE(Get(c, "steer.pass_flow_table_full"), kConns - kCapacity);
  EXPECT_EQ(Get(c, "fast.backend_error"), 0u) << "a backend leg found no room in the flow table";

  std::vector<std::thread> transfers;
  for (uint64_t i = 0; i < kConns; ++i) {
    transfers.emplace_back([fd = clients[i].get(), i] { ExpectEchoedMiB(fd, 100 + i); });
  }
  for (std::thread& t : transfers) t.join();
  clients.clear();
  c = fwd.WaitForStats(
      [](const Counters& s) { return Get(s, "fast.active") == 0 && Get(s, "kernel.active") == 0; });
  EXPECT_EQ(Get(c, "fast.completed"), kCapacity);
  EXPECT_EQ(Get(c, "kernel.completed"), kConns - kCapacity);
  EXPECT_EQ(Get(c, "fast.bytes_to_client") + Get(c, "kernel.bytes_to_client"), kConns * kMiB);

  // The flow entries linger 4.5 s after close (late retransmissions still reach lwIP).
  c = fwd.WaitForStats([](const Counters& s) { return Get(s, "fast.client_flows") == 0; });
  ASSERT_EQ(Get(c, "fast.client_flows"), 0u) << "closed connections kept their slots";
  {
    UniqueFd again = Connect();
    ExpectEchoedMiB(again.get(), 99);
  }
  c = fwd.WaitForStats([](const Counters& s) { return Get(s, "fast.completed") == kCapacity + 1; });
  EXPECT_EQ(Get(c, "fast.completed"), kCapacity + 1);
  EXPECT_EQ(Get(c, "kernel.accepted"), kConns - kCapacity);
}

// Half-open handshakes never hold a --flow-capacity slot for long. Raw SYNs from the client
// namespace (no socket behind them: the client's kernel answers lwIP's SYN-ACK with a reset)
// leave client flow entries that no connection will ever claim; the reaper removes them once
// they are older than the handshake timeout, and the capacity serves real clients again.
TEST_F(AutoModeTest, HalfOpenHandshakesAreReapedAndTheirSlotsReturn) {
  constexpr uint64_t kCapacity = 8;
  constexpr uint16_t kStrays = 8;
  EchoBackend echo(topo(), kPort);
  AutoForwarder fwd({"--flow-capacity", std::to_string(kCapacity), listen(), backend()});
  ExpectFastPathRunning(fwd);
  RunInNamespace(topo().client_ns(), [&] {
    UniqueFd raw(socket(AF_INET, SOCK_RAW | SOCK_CLOEXEC, IPPROTO_TCP));
    ASSERT_TRUE(raw) << strerror(errno);
    for (uint16_t i = 0; i < kStrays; ++i) {
      // A bare SYN; its checksum is left for the veth peer to ignore (CHECKSUM_PARTIAL is what
      // lwIP expects there) and the steering program does not look at it.
      tcphdr syn{};
      syn.source = htons(static_cast<uint16_t>(40000 + i));
      syn.dest = htons(kPort);
      syn.seq = htonl(1000u * i);
      syn.doff = sizeof(tcphdr) / 4;
      syn.syn = 1;
      syn.window = htons(65535);
      sockaddr_in to{};
      to.sin_family = AF_INET;
      to.sin_addr = topo().client_gw();
      ASSERT_EQ(
          sendto(raw.get(), &syn, sizeof(syn), 0, reinterpret_cast<sockaddr*>(&to), sizeof(to)),
          static_cast<ssize_t>(sizeof(syn)))
          << strerror(errno);
    }
  });
  Counters c = fwd.WaitForStats([](const Counters& s) { return Get(s, "fast.client_flows") > 0; });
  EXPECT_EQ(Get(c, "fast.client_flows"), kStrays) << "the SYNs did not take fast-path slots";
  EXPECT_EQ(Get(c, "fast.accepted"), 0u);
  // The capacity is spent: a real client now goes to the kernel path.
  {
    UniqueFd client = Connect();
    ExpectEchoedMiB(client.get(), 7);
  }
  c = fwd.WaitForStats([](const Counters& s) { return Get(s, "kernel.completed") == 1; });
  EXPECT_EQ(Get(c, "kernel.completed"), 1u);
  EXPECT_EQ(Get(c, "fast.accepted"), 0u);
  // lwIP gives up a handshake after 5 s; the reaper takes entries a second older than that.
  c = fwd.WaitForStats([](const Counters& s) { return Get(s, "fast.client_flows") == 0; }, 15s);
  EXPECT_EQ(Get(c, "fast.client_flows"), 0u) << fwd.output();
  EXPECT_EQ(Get(c, "fast.stray_flows_reaped"), kStrays);
  {
    UniqueFd client = Connect();
    ExpectEchoedMiB(client.get(), 8);
  }
  c = fwd.WaitForStats([](const Counters& s) { return Get(s, "fast.completed") == 1; });
  EXPECT_EQ(Get(c, "fast.completed"), 1u) << "the freed slots did not serve a real client";
  EXPECT_EQ(Get(c, "fast.stray_flows_reaped"), kStrays) << "an accepted flow was reaped";
}

// --backend-source on the fast path: backend legs take the given addresses in turn (each one
// more port space toward the backend), lwIP answers on them, and an address the interface does
// not have is refused at start with the command that adds it.
TEST_F(AutoModeTest, FastPathBackendLegsUseEveryBackendSource) {
  const uint32_t base = ntohl(topo().server_gw().s_addr) & 0xffffff00u;
  in_addr a{}, b{};
  a.s_addr = htonl(base | 200);
  b.s_addr = htonl(base | 201);
  for (const in_addr& x : {a, b}) {
    const CommandResult r =
        topo().Run("", "ip addr add " + ToString(x) + "/32 dev " + topo().server_side_if());
    ASSERT_EQ(r.status, 0) << r.output;
  }
  EchoBackend echo(topo(), kPort);
  AutoForwarder fwd({"--backend-source", ToString(a) + "," + ToString(b), listen(), backend()});
  ExpectFastPathRunning(fwd);
  EXPECT_NE(fwd.ready_line().find(ToString(a) + "+" + ToString(b)), std::string::npos)
      << fwd.ready_line();
  std::vector<UniqueFd> held;
  for (int i = 0; i < 10; ++i) {
    held.push_back(Connect());
    SetTimeouts(held.back().get());
    char msg[64] = {static_cast<char>(i)};
    ASSERT_EQ(send(held.back().get(), msg, sizeof(msg), MSG_NOSIGNAL), 64);
    ASSERT_EQ(recv(held.back().get(), msg, sizeof(msg), MSG_WAITALL), 64);
    EXPECT_EQ(msg[0], static_cast<char>(i));
  }
  const std::string seen =
      topo()
          .Run(topo().server_ns(),
               "ss -Htn state established '( sport = :" + std::to_string(kPort) + " )'")
          .output;
  for (const in_addr& x : {a, b}) {
    EXPECT_NE(seen.find(ToString(x) + ":"), std::string::npos)
        << "no leg from " << ToString(x) << ":\n"
        << seen;
  }
  held.clear();
  const Counters c = fwd.WaitForStats([](const Counters& s) { return Get(s, "fast.active") == 0; });
  EXPECT_EQ(Get(c, "fast.accepted"), 10u) << fwd.output();
  EXPECT_EQ(Get(c, "fast.completed"), 10u);
}

// An IPv6 client is served by the fast path as an IPv4 one is (#31 item 3), both through one
// xdpfwd whose rules share port 9000; a wildcard [::] rule, which the fast path does not take,
// goes to the kernel path, and the log says so and why.
TEST_F(AutoModeTest, IPv6ClientIsServedByTheFastPathAndAWildcardOneByTheKernelPath) {
  const Ipv6Addresses v6 = AddIpv6(topo());
  EchoBackend echo(topo(), kPort);
  const std::string to = ToString(topo().server_addr()) + " " + std::to_string(kPort) + "\n";
  constexpr uint16_t kWildcardPort = kPort + 1;
  RulesFile rules(ToString(topo().client_gw()) + " " + std::to_string(kPort) + " " + to +
                  v6.client.root + " " + std::to_string(kPort) + " " + to +
                  ":: " + std::to_string(kWildcardPort) + " " + to);
  AutoForwarder fwd({"-c", rules.path()});
  ExpectFastPathRunning(fwd);
  EXPECT_NE(fwd.ready_line().find("[" + v6.client.root + "]:9000 -> " + backend()),
            std::string::npos)
      << fwd.ready_line();
  EXPECT_NE(fwd.output().find("rule [::]:" + std::to_string(kWildcardPort) + " -> " + backend() +
                              ": on the kernel path (the fast path needs a concrete listen "
                              "address)"),
            std::string::npos)
      << fwd.output();

  {
    UniqueFd client = TcpConnect6(topo().client_ns(), v6.client.root, kPort);
    ExpectEchoedMiB(client.get(), 1);
  }
  Counters c = fwd.WaitForStats([](const Counters& s) { return Get(s, "fast.completed") == 1; });
  EXPECT_EQ(Get(c, "fast.accepted"), 1u);
  EXPECT_EQ(Get(c, "kernel.accepted"), 0u) << "the IPv6 client reached the kernel path";
  // The IPv6 SYN found the fast path's IPv6 listener entry, and the rest (1 MiB of data among
  // it) its flow entry.
  EXPECT_EQ(Get(c, "steer.redirect_new_flow"), 1u);
  EXPECT_GT(Get(c, "steer.redirect_flow"), kMinFramesPerMiB);
  EXPECT_EQ(Get(c, "steer.pass_not_listener"), 0u);
  EXPECT_EQ(Get(c, "steer.pass_unknown_flow"), 0u);

  {
    UniqueFd client = Connect();
    ExpectEchoedMiB(client.get(), 2);
  }
  c = fwd.WaitForStats([](const Counters& s) { return Get(s, "fast.completed") == 2; });
  EXPECT_EQ(Get(c, "fast.accepted"), 2u);
  EXPECT_EQ(Get(c, "steer.redirect_new_flow"), 2u);

  {
    UniqueFd client = TcpConnect6(topo().client_ns(), v6.client.root, kWildcardPort);
    ExpectEchoedMiB(client.get(), 3);
  }
  c = fwd.WaitForStats([](const Counters& s) { return Get(s, "kernel.completed") == 1; });
  EXPECT_EQ(Get(c, "kernel.accepted"), 1u);
  EXPECT_EQ(Get(c, "fast.accepted"), 2u);
  EXPECT_GE(Get(c, "steer.pass_not_listener"), 1u) << "the wildcard rule's SYN";
  EXPECT_EQ(fwd.Stop(), 0) << fwd.output();
}

}  // namespace
}  // namespace xdpfwd::test
