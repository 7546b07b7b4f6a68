// The fast path relays IPv6 and the mixed families rinetd allows, through the real xdpfwd binary
// (--path xdp, so nothing can fall back to the kernel): IPv6 client to IPv6 backend, IPv6 to
// IPv4 and IPv4 to IPv6, each carrying bytes both ways intact across a half close, an IPv6
// [src=] (one more lwIP netif), a PROXY header naming the client leg's own family, a refused
// backend resetting its client, and the steering program's counters showing every flow
// redirected and none passed to the kernel.
// One forwarder serves every case (a rules file), so the suite pays one start-up.
#include <poll.h>
#include <sys/socket.h>

#include <future>

#include "tests/netns/auto_mode_fixture.h"
#include "tests/support/backend.h"

namespace xdpfwd::test {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

constexpr uint64_t kBytes = 4ull << 20;  // each way, per case

// Reads one line ending in "\r\n" (a PROXY v1 header) byte by byte, so nothing after it is taken.
std::string ReadHeaderLine(int fd) {
  std::string line;
  char c = 0;
  while (line.size() < 108 && recv(fd, &c, 1, 0) == 1) {
    line += c;
    if (line.size() >= 2 && line.compare(line.size() - 2, 2, "\r\n") == 0) break;
  }
  return line;
}

// What the client sees of a connection it has half closed: the bytes, or how it ended.
int ReadUntilReset(int fd, std::chrono::milliseconds timeout) {
  const auto deadline = Clock::now() + timeout;
  char buf[4096];
  while (Clock::now() < deadline) {
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, 100) <= 0) continue;
    const ssize_t n = recv(fd, buf, sizeof(buf), 0);
    if (n == 0) return 0;
    if (n < 0) return errno;
  }
  return ETIMEDOUT;
}

TEST(RelayIpv6Test, SixToSixFourToSixAndSixToFourOnTheFastPath) {
  if (geteuid() != 0) GTEST_SKIP() << "namespace tests need root";
  Topology topo;
  const Ipv6Addresses v6 = AddIpv6(topo);
  const std::string gw4 = ToString(topo.client_gw()), server4 = ToString(topo.server_addr());
  struct Case {
    std::string name;
    uint16_t port;
    bool client_v6, backend_v6;
    bool proxy = false;  // [proxy=v1]: the backend reads the header first
    std::string src;     // [src=ADDR]: the backend leg's local address
  };
  // One more IPv6 address on the backend side, for a rule's [src=] (one more lwIP netif);
  // deprecated, so that the kernel never picks it as the route's source (two addresses of one
  // prefix tie, and it took the newer one).
  const std::string alias6 = v6.server.root.substr(0, v6.server.root.rfind("::")) + "::11";
  ASSERT_EQ(topo.Run("", "ip -6 addr add " + alias6 + "/64 dev " + topo.server_side_if() +
                             " nodad preferred_lft 0")
                .status,
            0);
  const std::vector<Case> cases = {
      {"6 -> 6", 9000, true, true, false, ""},
      {"6 -> 4", 9001, true, false, true, ""},
      {"4 -> 6", 9002, false, true, false, ""},
      {"6 -> 6 [src=]", 9005, true, true, false, alias6},
  };
  constexpr uint16_t kRefused6 = 9003, kRefused4To6 = 9004;  // nothing listens behind them
  std::string rules;
  for (const Case& c : cases) {
    rules += (c.client_v6 ? v6.client.root : gw4) + " " + std::to_string(c.port) + " " +
             (c.backend_v6 ? v6.server.ns : server4) + " " + std::to_string(c.port) +
             (c.proxy ? " [proxy=v1]" : "") + (c.src.empty() ? "" : " [src=" + c.src + "]") + "\n";
  }
  rules += v6.client.root + " " + std::to_string(kRefused6) + " " + v6.server.ns + " " +
           std::to_string(kRefused6) + "\n";
  rules += gw4 + " " + std::to_string(kRefused4To6) + " " + v6.server.ns + " " +
           std::to_string(kRefused6) + "\n";
  const RulesFile file(rules);

  // Each backend reads to the client's FIN, then answers with its own pattern: the answer
  // crosses the relay after the client half closed.
  struct Served {
    std::string header;
    std::string peer;  // the backend leg's source address
    StreamStats received, sent;
  };
  std::vector<std::promise<Served>> served(cases.size());
  std::vector<std::unique_ptr<Backend>> backends;
  for (size_t i = 0; i < cases.size(); ++i) {
    const Case& c = cases[i];
    UniqueFd listener = c.backend_v6 ? TcpListen6(topo.server_ns(), v6.server.ns, c.port)
                                     : TcpListen(topo.server_ns(), topo.server_addr(), c.port);
    backends.push_back(std::make_unique<Backend>(std::move(listener), [&, i](int fd) {
      Served s;
      sockaddr_storage peer{};
      socklen_t length = sizeof(peer);
      if (getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &length) == 0) {
        char text[INET6_ADDRSTRLEN] = {};
        const void* a =
            peer.ss_family == AF_INET6
                ? static_cast<const void*>(&reinterpret_cast<sockaddr_in6*>(&peer)->sin6_addr)
                : static_cast<const void*>(&reinterpret_cast<sockaddr_in*>(&peer)->sin_addr);
        s.peer = inet_ntop(peer.ss_family, a, text, sizeof(text));
      }
      if (cases[i].proxy) s.header = ReadHeaderLine(fd);
      s.received = ReceiveAll(fd);
      s.sent = SendPattern(fd, 100 + i, kBytes);
      served[i].set_value(s);
    }));
  }
  auto fwd = ForwarderProcess::WithConfig("xdp", file.path());

  for (size_t i = 0; i < cases.size(); ++i) {
    const Case& c = cases[i];
    SCOPED_TRACE(c.name);
    UniqueFd client = TcpConnectTo(topo.client_ns(), c.client_v6 ? v6.client.root : gw4, c.port);
    const StreamStats sent = SendPattern(client.get(), 1 + i, kBytes);  // then SHUT_WR
    const StreamStats got = ReceiveAll(client.get());
    auto result = served[i].get_future();
    ASSERT_EQ(result.wait_for(20s), std::future_status::ready);
    const Served s = result.get();
    EXPECT_EQ(s.received.bytes, kBytes);
    EXPECT_EQ(s.received.hash, sent.hash) << "client -> backend corrupted";
    EXPECT_EQ(got.bytes, kBytes) << "backend -> client after the client's half close";
    EXPECT_EQ(got.hash, s.sent.hash) << "backend -> client corrupted";
    // The backend leg leaves from the rule's [src=], else the backend side's own address.
    EXPECT_EQ(s.peer, !c.src.empty() ? c.src
                      : c.backend_v6 ? v6.server.root
                                     : ToString(topo.server_gw()));
    if (c.proxy) {
      // The client leg's own ends, IPv6 both, whatever the backend's family.
      sockaddr_in6 local{};
      socklen_t length = sizeof(local);
      ASSERT_EQ(getsockname(client.get(), reinterpret_cast<sockaddr*>(&local), &length), 0);
      EXPECT_EQ(s.header, "PROXY TCP6 " + v6.client.ns + " " + v6.client.root + " " +
                              std::to_string(ntohs(local.sin6_port)) + " " +
                              std::to_string(c.port) + "\r\n");
    }
  }

  // Refused backends: lwIP took the handshake, the backend's RST resets the client at once.
  for (const bool from_v6 : {true, false}) {
    SCOPED_TRACE(from_v6 ? "refused 6 -> 6" : "refused 4 -> 6");
    const auto start = Clock::now();
    int error = 0;
    try {
      UniqueFd client = TcpConnectTo(topo.client_ns(), from_v6 ? v6.client.root : gw4,
                                     from_v6 ? kRefused6 : kRefused4To6);
      error = ReadUntilReset(client.get(), 5s);
    } catch (const std::exception& e) {  // the reset can come before connect() returns
      error =
          std::string(e.what()).find(strerror(ECONNRESET)) != std::string::npos ? ECONNRESET : -1;
      if (error != ECONNRESET) ADD_FAILURE() << e.what();
    }
    EXPECT_EQ(error, ECONNRESET) << strerror(error);
    EXPECT_LT(Clock::now() - start, 2s);
  }

  const auto stats = fwd->WaitForStats([&](const auto& s) {
    return fwd->Relay(s, "active") == 0 && fwd->Relay(s, "completed") == cases.size();
  });
  EXPECT_EQ(fwd->Relay(stats, "accepted"), cases.size() + 2);
  EXPECT_EQ(fwd->Relay(stats, "completed"), cases.size());
  EXPECT_EQ(fwd->Relay(stats, "backend_refused"), 2u);
  EXPECT_EQ(fwd->Relay(stats, "bytes_to_backend"), cases.size() * kBytes);
  EXPECT_EQ(fwd->Relay(stats, "bytes_to_client"), cases.size() * kBytes);
  // Every client SYN made a flow entry and the rest of each flow followed it; no TCP segment of
  // either leg went to the kernel. ICMPv6 does, as it should: neighbour discovery
  // (pass_not_tcp) and the kernel's MLD reports, whose hop-by-hop header counts them as
  // pass_ipv6_ext_header (6 in a run), so that counter says nothing about TCP here.
  EXPECT_EQ(ForwarderProcess::Get(stats, "steer.redirect_new_flow"), cases.size() + 2);
  EXPECT_GT(ForwarderProcess::Get(stats, "steer.redirect_flow"), 2 * cases.size() * kBytes / 65536);
  for (const char* pass : {"steer.pass_unknown_flow", "steer.pass_not_listener",
                           "steer.pass_kernel_owns", "steer.pass_flow_table_full"}) {
    EXPECT_EQ(ForwarderProcess::Get(stats, pass), 0u) << pass;
  }
  EXPECT_EQ(ForwarderProcess::Get(stats, "fast.frames_held"), 0u);
  for (const auto& b : backends) EXPECT_EQ(b->failures(), "");
}

// The IPv6 backend's next hop is resolved (neighbour discovery) before the forwarder says ready,
// as IPv4's is (next_hop_test.cpp), and the client's MAC is learned from its SYN: the first
// connection's segments wait for no neighbour. Without the priming the first SYN to the backend
// waited for the worker's own request (tx_no_neighbor 1).
TEST(RelayIpv6Test, FirstConnectionToAnIpv6BackendWaitsForNoNeighbour) {
  if (geteuid() != 0) GTEST_SKIP() << "namespace tests need root";
  constexpr uint16_t kPort = 9000;
  Topology topo;
  const Ipv6Addresses v6 = AddIpv6(topo);
  // The kernel solicits from a link-local address that has passed duplicate address detection
  // (ndisc_send_ns), and a veth made a moment ago has none yet for a second or two: it would send
  // nothing. One more link-local address, usable at once, as a long-up interface has.
  ASSERT_EQ(
      topo.Run("", "ip -6 addr add fe80::1/64 dev " + topo.server_side_if() + " nodad").status, 0);
  const RulesFile file(v6.client.root + " " + std::to_string(kPort) + " " + v6.server.ns + " " +
                       std::to_string(kPort) + "\n");
  Backend backend(TcpListen6(topo.server_ns(), v6.server.ns, kPort), EchoUntilEofOrReset);
  auto fwd = ForwarderProcess::WithConfig("xdp", file.path());
  {
    UniqueFd client = TcpConnectTo(topo.client_ns(), v6.client.root, kPort);
    const StreamStats sent = SendPattern(client.get(), 1, 4096);
    const StreamStats back = ReceiveAll(client.get());
    EXPECT_EQ(back.bytes, sent.bytes);
    EXPECT_EQ(back.hash, sent.hash);
  }
  ASSERT_TRUE(backend.WaitServed(1));
  const auto stats = fwd->Stats();
  EXPECT_EQ(ForwarderProcess::Get(stats, "fast.tx_no_neighbor"), 0u) << fwd->output();
  EXPECT_EQ(ForwarderProcess::Get(stats, "fast.next_hops"), 2u)
      << "the client (learned from its SYN) and the backend";
  EXPECT_EQ(ForwarderProcess::Get(stats, "fast.accepted"), 1u);
}

}  // namespace
}  // namespace xdpfwd::test
