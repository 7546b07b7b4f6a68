// The relay semantics suite (relay_test.cpp, IPv4 only) over IPv6 and a mixed family, through the
// real xdpfwd binary: 6 -> 6 and 4 -> 6 on the fast path, 6 -> 6 on the kernel path. One
// forwarder per path serves every family's steps in turn (bytes both ways at once, half close,
// resets both ways, a refused backend, a stalled reader, 10,000 short connections) so that the
// suite pays one start-up and one final wait per path; on the fast path the steps run during a
// flood of spoofed IPv6 SYNs that must all be reaped, and a 1% loss transfer follows. What each
// step leaves to the IPv4 suite is said at the step. Every backend leg leaves from an IPv6
// --backend-source. Reloads with IPv6 rules: relay_ipv6_reload_test.cpp.
#include <poll.h>
#include <sys/socket.h>

#include <future>
#include <mutex>

#include "tests/netns/auto_mode_fixture.h"
#include "tests/support/backend.h"
#include "tests/support/connection_ends.h"
#include "tests/support/lossy_link.h"
#include "tests/support/packet_builder.h"
#include "tests/support/stream_check.h"
#include "tests/support/tcp.h"

namespace xdpfwd::test {
namespace {

// Under ASan the allocator keeps freed memory in quarantine (relay_test.cpp says the same).
#ifdef __SANITIZE_ADDRESS__
constexpr bool kRssIsMeaningful = false;
#else
constexpr bool kRssIsMeaningful = true;
#endif

// One family case: the client's and the backend's family, and its rules' ports: a backend that
// plays each step's part, one with no listener, an echo server.
struct Family {
  std::string name;
  bool client_v6 = false, backend_v6 = false;
  uint16_t step_port = 0;
  uint16_t refused_port() const { return step_port + 1; }
  uint16_t echo_port() const { return step_port + 2; }
};

// What the steps leave in the relay's counters.
struct Expected {
  uint64_t accepted = 0, completed = 0, backend_reset = 0, client_reset = 0, backend_refused = 0;
  uint64_t to_backend = 0, to_client = 0;  // at least
  // At most this much more: what was sent just before a reset may be discarded with it.
  uint64_t may_be_lost_to_backend = 0, may_be_lost_to_client = 0;
  // The backend legs' source addresses, as the step backends saw them.
  std::mutex mu;
  std::vector<std::string> leg_sources;
};

// accept() on a step's listener, noting the leg's source address in `e`.
UniqueFd AcceptLeg(int listener, Expected& e) {
  sockaddr_storage peer{};
  socklen_t length = sizeof(peer);
  UniqueFd c(accept(listener, reinterpret_cast<sockaddr*>(&peer), &length));
  if (c) {
    char text[INET6_ADDRSTRLEN] = {};
    const void* a =
        peer.ss_family == AF_INET6
            ? static_cast<const void*>(&reinterpret_cast<sockaddr_in6*>(&peer)->sin6_addr)
            : static_cast<const void*>(&reinterpret_cast<sockaddr_in*>(&peer)->sin_addr);
    std::lock_guard lock(e.mu);
    e.leg_sources.push_back(inet_ntop(peer.ss_family, a, text, sizeof(text)));
  }
  return c;
}

// Param: --path. The fast path runs 6 -> 6 and 4 -> 6, the kernel path 6 -> 6.
class RelayIpv6FamiliesTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    if (geteuid() != 0) GTEST_SKIP() << "namespace tests need root";
    v6_ = AddIpv6(topo_);
  }

  bool fast() const { return GetParam() == "xdp"; }
  std::string ListenAddr(const Family& f) const {
    return f.client_v6 ? v6_.client.root : ToString(topo_.client_gw());
  }
  std::string BackendAddr(const Family& f) const {
    return f.backend_v6 ? v6_.server.ns : ToString(topo_.server_addr());
  }
  std::string Rules(const Family& f) const {
    std::string rules;
    for (const uint16_t port : {f.step_port, f.refused_port(), f.echo_port()}) {
      rules += ListenAddr(f) + " " + std::to_string(port) + " " + BackendAddr(f) + " " +
               std::to_string(port) + "\n";
    }
    return rules;
  }
  // The backend's listener on `port`, in the backend's family. accept() gives up after 20 s, so
  // a connection that never reaches the backend fails the test instead of hanging it.
  UniqueFd Listen(const Family& f, uint16_t port) const {
    UniqueFd fd = f.backend_v6 ? TcpListen6(topo_.server_ns(), v6_.server.ns, port)
                               : TcpListen(topo_.server_ns(), topo_.server_addr(), port);
    const timeval limit{20, 0};
    setsockopt(fd.get(), SOL_SOCKET, SO_RCVTIMEO, &limit, sizeof(limit));
    return fd;
  }
  UniqueFd Connect(const Family& f, uint16_t port) const {
    return TcpConnectTo(topo_.client_ns(), ListenAddr(f), port);
  }
  // A raw connect from inside the client namespace (call within RunInNamespace): -1 with errno
  // on failure.
  int ConnectHere(const Family& f, uint16_t port) const {
    sockaddr_storage sa{};
    socklen_t length = sizeof(sockaddr_in);
    if (f.client_v6) {
      auto* sin6 = reinterpret_cast<sockaddr_in6*>(&sa);
      sin6->sin6_family = AF_INET6;
      sin6->sin6_port = htons(port);
      inet_pton(AF_INET6, v6_.client.root.c_str(), &sin6->sin6_addr);
      length = sizeof(sockaddr_in6);
    } else {
      auto* sin = reinterpret_cast<sockaddr_in*>(&sa);
      sin->sin_family = AF_INET;
      sin->sin_port = htons(port);
      sin->sin_addr = topo_.client_gw();
    }
    const int fd = socket(sa.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd >= 0 && connect(fd, reinterpret_cast<sockaddr*>(&sa), length) != 0) {
      const int err = errno;
      close(fd);
      errno = err;
      return -1;
    }
    return fd;
  }

  // `count` SYNs to `port` from spoofed IPv6 sources through a raw socket, each its own 4-tuple:
  // 64 addresses of the client's on-link prefix that nobody holds, so no one answers the SYN-ACK
  // (a few addresses, as hostile_test.cpp's flood: the worker's neighbour requests for each are
  // not what the flood is about). Returns how many the kernel took.
  int FloodIpv6(uint16_t port, int count) const {
    int sent = 0;
    RunInNamespace(topo_.client_ns(), [&] {
      UniqueFd raw(socket(AF_INET6, SOCK_RAW | SOCK_CLOEXEC, IPPROTO_RAW));  // header included
      ASSERT_TRUE(raw) << strerror(errno);
      const std::string prefix = v6_.client.root.substr(0, v6_.client.root.rfind("::"));
      sockaddr_in6 to{};
      to.sin6_family = AF_INET6;
      inet_pton(AF_INET6, v6_.client.root.c_str(), &to.sin6_addr);
      for (int i = 0; i < count; ++i) {
        char host[16];
        std::snprintf(host, sizeof(host), "::f:%x", 0x100 + i % 64);
        const auto sport = static_cast<uint16_t>(1024 + i / 64);
        const std::vector<uint8_t> frame =
            Packet()
                .Eth()
                .IPv6(prefix + host, v6_.client.root)
                .Tcp(sport, port, kSyn, static_cast<uint32_t>(i) * 2654435761u)
                .Build();
        for (int attempt = 0; attempt < 100; ++attempt) {
          if (sendto(raw.get(), frame.data() + 14, frame.size() - 14, 0,
                     reinterpret_cast<sockaddr*>(&to), sizeof(to)) > 0) {
            ++sent;
            break;
          }
          if (errno != ENOBUFS && errno != EAGAIN) {
            ADD_FAILURE() << "sendto: " << strerror(errno);
            return;
          }
          std::this_thread::sleep_for(1ms);  // the veth's queue is full: let it drain
        }
        // Paced, as hostile_test.cpp's holey clients: a raw socket outruns the receiving side.
        if (i % 32 == 31) std::this_thread::sleep_for(1ms);
      }
    });
    return sent;
  }

  void Steps(const Family& f, ForwarderProcess& fwd, Expected& e) const;
  static constexpr int kShort = 10000;  // short connections per family

  Topology topo_;
  Ipv6Addresses v6_;
};

// The relay suite's steps for one family, in turn, each checked as relay_test.cpp checks it;
// what they leave in the counters is added to `e`.
void RelayIpv6FamiliesTest::Steps(const Family& f, ForwarderProcess& fwd, Expected& e) const {
  UniqueFd listener = Listen(f, f.step_port);
  EchoServer echo(Listen(f, f.echo_port()));

  // Bytes both ways at the same time, intact: a GiB each way, as the IPv4 suite moves (the
  // AF_XDP TX and the copy-always variants stay IPv4's: OneGibEachWay*). auto_mode_tests runs
  // only in the release tree; with the 10,000 short connections below this suite went from 9
  // to 21-37 s on the fast path (two families) and from 3 to 9-16 s on the kernel path.
  constexpr uint64_t kBulk = 1ull << 30;
  {
    SCOPED_TRACE("1 GiB each way at once");
    UniqueFd client = Connect(f, f.step_port);
    const BothWays x = ExchangeBothWays(
        client.get(), [&] { return AcceptLeg(listener.get(), e); }, kBulk);
    EXPECT_EQ(x.backend_got.bytes, kBulk);
    EXPECT_EQ(x.backend_got.hash, x.client_sent.hash) << "client -> backend stream corrupted";
    EXPECT_EQ(x.client_got.bytes, kBulk);
    EXPECT_EQ(x.client_got.hash, x.backend_sent.hash) << "backend -> client stream corrupted";
    e.accepted += 1, e.completed += 1, e.to_backend += kBulk, e.to_client += kBulk;
  }

  // Half close: the client's FIN reaches the backend, whose 8 MiB answer then still flows.
  {
    SCOPED_TRACE("half close");
    constexpr uint64_t kRequest = 100000, kResponse = 8ull << 20;
    std::promise<StreamStats> request;
    std::thread server([&] {
      UniqueFd c = AcceptLeg(listener.get(), e);
      request.set_value(ReceiveAll(c.get()));  // to EOF
      SendPattern(c.get(), 7, kResponse);
    });
    UniqueFd client = Connect(f, f.step_port);
    const StreamStats sent = SendPattern(client.get(), 6, kRequest);  // then SHUT_WR
    const StreamStats got = ReceiveAll(client.get());
    server.join();
    const StreamStats req = request.get_future().get();
    EXPECT_EQ(req.bytes, sent.bytes);
    EXPECT_EQ(req.hash, sent.hash);
    EXPECT_EQ(got.bytes, kResponse);
    e.accepted += 1, e.completed += 1, e.to_backend += kRequest, e.to_client += kResponse;
  }

  // Resets both ways: the backend's mid-stream reset resets the client, the client's abort
  // resets the backend.
  {
    SCOPED_TRACE("backend reset");
    std::thread server([&] {
      UniqueFd c = AcceptLeg(listener.get(), e);
      char buf[4096];
      ASSERT_GT(recv(c.get(), buf, sizeof(buf), 0), 0);
      ASSERT_EQ(send(c.get(), "partial", 7, 0), 7);
      SetLinger0(c.get());  // close sends RST
    });
    UniqueFd client = Connect(f, f.step_port);
    ASSERT_EQ(send(client.get(), "hello", 5, 0), 5);
    server.join();
    EXPECT_EQ(DrainUntilClosed(client.get(), 5s), -ECONNRESET);
    e.accepted += 1, e.backend_reset += 1, e.to_backend += 5, e.may_be_lost_to_client += 7;
  }
  {
    SCOPED_TRACE("client abort");
    constexpr size_t kChunk = 256 * 1024;
    std::promise<int64_t> backend_end;
    std::thread server([&] {
      UniqueFd c = AcceptLeg(listener.get(), e);
      send(c.get(), "R", 1, 0);  // the backend leg exists: the abort is mid-stream
      backend_end.set_value(DrainUntilClosed(c.get(), 10s));
    });
    {
      UniqueFd client = Connect(f, f.step_port);
      char ready;
      ASSERT_EQ(recv(client.get(), &ready, 1, 0), 1);
      const std::vector<char> chunk(kChunk, 'a');
      ASSERT_EQ(send(client.get(), chunk.data(), chunk.size(), 0),
                static_cast<ssize_t>(chunk.size()));
      SetLinger0(client.get());
    }  // RST
    server.join();
    EXPECT_EQ(backend_end.get_future().get(), -ECONNRESET);
    e.accepted += 1, e.client_reset += 1, e.to_client += 1, e.may_be_lost_to_backend += kChunk;
  }

  // No listener behind the rule: the client is reset promptly (the reset can beat connect()).
  {
    SCOPED_TRACE("refused backend");
    const auto start = Clock::now();
    int fd = -1, connect_errno = 0;
    RunInNamespace(topo_.client_ns(), [&] {
      fd = ConnectHere(f, f.refused_port());
      connect_errno = fd < 0 ? errno : 0;
    });
    UniqueFd client(fd);
    if (fd < 0) {
      EXPECT_EQ(connect_errno, ECONNRESET) << strerror(connect_errno);
    } else {
      EXPECT_EQ(DrainUntilClosed(client.get(), 5s), -ECONNRESET);
    }
    EXPECT_LT(Clock::now() - start, 2s);
    e.accepted += 1, e.backend_refused += 1;
  }

  // Backpressure: the backend writes 16 MiB as fast as it can to a client that does not read for
  // half a second, long enough to fill both legs' windows on a veth. The forwarder's memory stays
  // within its windows and every byte arrives. (The IPv4 suite's SlowReaderKeepsMemoryBounded:
  // 64 MiB, 1.5 s, the same bounds.)
  {
    SCOPED_TRACE("stalled reader");
    constexpr uint64_t kSlow = 16ull << 20;
    const uint64_t rss_before = fwd.RssKib();
    std::promise<StreamStats> sent;
    std::thread server([&] {
      UniqueFd c = AcceptLeg(listener.get(), e);
      sent.set_value(SendPattern(c.get(), 9, kSlow));
    });
    UniqueFd client = Connect(f, f.step_port);
    std::this_thread::sleep_for(500ms);  // a stalled reader (the point of the step, not a sync)
    const auto stalled = fwd.Stats();
    const uint64_t rss_stalled = fwd.RssKib();
    const StreamStats got = ReceiveAll(client.get());
    server.join();
    EXPECT_EQ(got.bytes, kSlow);
    EXPECT_EQ(got.hash, sent.get_future().get().hash);
    if (kRssIsMeaningful) {
      EXPECT_LT(rss_stalled - rss_before, 24u * 1024) << "RSS grew from " << rss_before << " KiB";
    }
    if (fast()) {
      EXPECT_LT(ForwarderProcess::Get(stalled, "fast.lwip_heap_bytes"), 8u << 20);
      EXPECT_LT(ForwarderProcess::Get(stalled, "fast.frames_held"), 64u);
    }
    e.accepted += 1, e.completed += 1, e.to_client += kSlow;
  }

  // 10,000 short connections one after another, as the IPv4 suite's
  // TenThousandShortConnectionsLeaveNothingBehind: memory where it was after the first 500
  // (pools have their size by then), and, once every family has run and all has closed,
  // nothing left behind (checked in RelaySemanticsStepByStep).
  {
    SCOPED_TRACE("10,000 short connections");
    uint64_t rss_warm = 0;
    RunInNamespace(topo_.client_ns(), [&] {
      for (int i = 0; i < kShort; ++i) {
        if (i == 500) rss_warm = fwd.RssKib();
        UniqueFd fd(ConnectHere(f, f.echo_port()));
        ASSERT_TRUE(fd) << "connection " << i << ": " << strerror(errno);
        char msg[32] = "ping";
        ASSERT_EQ(send(fd.get(), msg, sizeof(msg), 0), 32);
        ASSERT_EQ(recv(fd.get(), msg, sizeof(msg), MSG_WAITALL), 32) << "connection " << i;
      }
    });
    e.accepted += kShort, e.completed += kShort, e.to_backend += kShort * 32,
        e.to_client += kShort * 32;
    if (kRssIsMeaningful) {
      EXPECT_LT(fwd.RssKib(), rss_warm + 2048) << "memory grew with connections served";
    }
  }
}

// Each family's steps in turn through one forwarder, then the counters of all of them.
TEST_P(RelayIpv6FamiliesTest, RelaySemanticsStepByStep) {
  std::vector<Family> families = {{"6 -> 6", true, true, 9000}};
  if (fast()) families.push_back({"4 -> 6", false, true, 9010});
  constexpr uint16_t kLossPort = 9020;  // 6 -> 6, a rule of its own
  std::string rules;
  for (const Family& f : families) rules += Rules(f);
  rules += v6_.client.root + " " + std::to_string(kLossPort) + " " + v6_.server.ns + " " +
           std::to_string(kLossPort) + "\n";
  const RulesFile file(rules);
  // The backend legs leave from two IPv6 --backend-source addresses in turn (the IPv4 one
  // between them is for IPv4 backends, which these rules do not have): deprecated, so that the
  // kernel never takes them as a route's source itself.
  const std::string prefix = v6_.server.root.substr(0, v6_.server.root.rfind("::"));
  const std::string source_a = prefix + "::21", source_b = prefix + "::22";
  for (const std::string& a : {source_a, source_b}) {
    ASSERT_EQ(topo_
                  .Run("", "ip -6 addr add " + a + "/64 dev " + topo_.server_side_if() +
                               " nodad preferred_lft 0")
                  .status,
              0);
  }
  const std::string source_4 =
      ToString(in_addr{htonl((ntohl(topo_.server_gw().s_addr) & 0xffffff00u) | 210)});
  ASSERT_EQ(topo_.Run("", "ip addr add " + source_4 + "/32 dev " + topo_.server_side_if()).status,
            0);
  auto fwd = ForwarderProcess::WithConfig(
      GetParam(), file.path(), {"--backend-source", source_a + "," + source_4 + "," + source_b});
  const auto base = fwd->Stats();

  // On the fast path the steps run during a flood of spoofed IPv6 SYNs (hostile_test.cpp's
  // SpoofedSynFloodIsReapedAndRealClientsAreServed over IPv6): each takes an IPv6 client flow
  // entry and a half-open pcb, every step is a real client served during it, and at the end
  // the reaper has taken every stray. (The flood past the flow capacity and the holes test stay
  // IPv4's: the flow table's capacity and lwIP's out-of-order queue do not depend on the
  // family.) A thread of its own, so that the handshake timeout and the reaper's age run while
  // the steps do.
  constexpr int kFloodSyns = 1000;
  std::future<int> flooded = std::async(std::launch::async, [&] {
    return fast() ? FloodIpv6(families[0].refused_port(), kFloodSyns) : 0;
  });

  Expected e;
  size_t fds_warm = 0;  // once the kernel path's pipe pool has its size
  for (const Family& f : families) {
    SCOPED_TRACE(f.name);
    Steps(f, *fwd, e);
    if (fds_warm == 0) fds_warm = fwd->OpenFds();
  }
  const int flood = flooded.get();
  if (fast()) {
    EXPECT_EQ(flood, kFloodSyns);
  }

  // The loss test over IPv6 (OnePercentLossStillDeliversEverything: 32 MiB each way over IPv4,
  // both paths), on the fast path: 1% of the TCP frames the client and the backend receive are
  // dropped, and lwIP's retransmissions still deliver 8 MiB each way intact. Retransmission is
  // the same code for either family; what differs is the IPv6 headers of a resent segment.
  if (fast()) {
    SCOPED_TRACE("1% loss, 6 -> 6");
    constexpr uint64_t kLossy = 8ull << 20;
    UniqueFd listener = TcpListen6(topo_.server_ns(), v6_.server.ns, kLossPort);
    LossyLink client_loss(topo_.client_ns(), 10'000);
    LossyLink server_loss(topo_.server_ns(), 10'000);
    std::vector<uint8_t> at_server;
    std::thread server([&] {
      UniqueFd c(accept(listener.get(), nullptr, nullptr));
      std::thread rx([&] { at_server = ReceiveAllBytes(c.get()); });
      SendPattern(c.get(), 4, kLossy);
      rx.join();
    });
    UniqueFd client = TcpConnectTo(topo_.client_ns(), v6_.client.root, kLossPort);
    std::vector<uint8_t> at_client;
    std::string client_end;
    std::thread rx([&] { at_client = ReceiveAllBytes(client.get(), &client_end); });
    SendPattern(client.get(), 3, kLossy);
    rx.join();
    server.join();
    EXPECT_EQ(FirstDifference(at_server, ExpectedPattern(3, kLossy)), "") << "client -> backend";
    EXPECT_EQ(FirstDifference(at_client, ExpectedPattern(4, kLossy)), "")
        << "backend -> client; the client's stream ended with " << client_end;
    EXPECT_GT(client_loss.dropped(), 0u);
    EXPECT_GT(server_loss.dropped(), 0u);
    // (Not fast.retransmits: lwIP resends the strays' SYN-ACKs meanwhile. Frames dropped on
    // their way to the client were lwIP's to resend, and the client's stream is intact.)
    e.accepted += 1, e.completed += 1, e.to_backend += kLossy, e.to_client += kLossy;
  }

  // Everything has ended, each connection in one way, and nothing is left behind: no flow
  // entry, pcb, heap byte or frame on the fast path (the strays reaped), no fd on either.
  const auto stats = fwd->WaitForStats(
      [&](const auto& s) {
        if (fwd->Relay(s, "active") != 0 || fwd->Relay(s, "completed") != e.completed) {
          return false;
        }
        return !fast() || (ForwarderProcess::Get(s, "fast.flows") == 0 &&
                           ForwarderProcess::Get(s, "fast.closing_flows") == 0 &&
                           ForwarderProcess::Get(s, "fast.lwip_pcbs") == 0 &&
                           ForwarderProcess::Get(s, "fast.client_flows") == 0);
      },
      20s);
  ExpectEachEndedOnce(RelayFromStats(stats, fast() ? "fast." : "kernel."), "--path " + GetParam());
  // Every leg the step backends saw came from an IPv6 --backend-source, not the route's own
  // source; the fast path's one worker takes the two in turn (each kernel-path thread takes its
  // own turn, so there one thread may have had every leg of a family from the first).
  size_t from_a = 0, from_b = 0;
  for (const std::string& source : e.leg_sources) {
    from_a += source == source_a;
    from_b += source == source_b;
  }
  std::string sources;
  for (const std::string& source : e.leg_sources) sources += " " + source;
  EXPECT_EQ(from_a + from_b, e.leg_sources.size()) << "legs from:" << sources;
  EXPECT_EQ(e.leg_sources.size(), 5 * families.size()) << "legs from:" << sources;
  if (fast()) {
    EXPECT_GE(from_a, 2u) << "legs from:" << sources;
    EXPECT_GE(from_b, 2u) << "legs from:" << sources;
  }
  EXPECT_EQ(fwd->Relay(stats, "accepted"), e.accepted);
  EXPECT_EQ(fwd->Relay(stats, "completed"), e.completed);
  EXPECT_EQ(fwd->Relay(stats, "backend_reset"), e.backend_reset);
  EXPECT_EQ(fwd->Relay(stats, "client_reset"), e.client_reset);
  EXPECT_EQ(fwd->Relay(stats, "backend_refused"), e.backend_refused);
  EXPECT_GE(fwd->Relay(stats, "bytes_to_backend"), e.to_backend);
  EXPECT_LE(fwd->Relay(stats, "bytes_to_backend"), e.to_backend + e.may_be_lost_to_backend);
  EXPECT_GE(fwd->Relay(stats, "bytes_to_client"), e.to_client);
  EXPECT_LE(fwd->Relay(stats, "bytes_to_client"), e.to_client + e.may_be_lost_to_client);
  EXPECT_LE(fwd->OpenFds(), fds_warm) << "an fd left open";
  if (!fast()) return;
  EXPECT_EQ(ForwarderProcess::Get(stats, "fast.flows"), 0u);
  EXPECT_EQ(ForwarderProcess::Get(stats, "fast.closing_flows"), 0u);
  EXPECT_EQ(ForwarderProcess::Get(stats, "fast.client_flows"), 0u) << "a stray was not reaped";
  EXPECT_EQ(ForwarderProcess::Get(stats, "fast.lwip_pcbs"), 0u);
  EXPECT_EQ(ForwarderProcess::Get(stats, "fast.lwip_heap_bytes"), 0u);
  EXPECT_EQ(ForwarderProcess::Get(stats, "fast.frames_held"), 0u);
  // Every SYN that reached the program made a flow entry: each connection's, and the strays',
  // every one of which was reaped. Some of the flood's may be lost on the way: beside a bulk
  // transfer on a loaded machine the receiving side's backlog (1,000 packets) overflowed, 141
  // of 1,000 once at load average 23; most arrive.
  const uint64_t strays = ForwarderProcess::Get(stats, "steer.redirect_new_flow") -
                          ForwarderProcess::Get(base, "steer.redirect_new_flow") - e.accepted;
  EXPECT_GE(strays, static_cast<uint64_t>(flood) / 2) << flood << " SYNs sent";
  EXPECT_LE(strays, static_cast<uint64_t>(flood));
  EXPECT_EQ(ForwarderProcess::Get(stats, "fast.stray_flows_reaped"), strays)
      << "a real client's flow was reaped, or a stray was not";
  // The worker's bpf() calls per connection, as TenThousandShortConnections counts them: the
  // backend leg's entry, the client entry's removal, the backend entries' removals a batch at
  // a time; the short connections are most of them.
  const uint64_t calls = ForwarderProcess::Get(stats, "fast.flow_map_syscalls") -
                         ForwarderProcess::Get(base, "fast.flow_map_syscalls");
  EXPECT_GE(calls, 2 * e.accepted - e.accepted / 100);
  EXPECT_LE(calls, 2 * e.accepted + e.accepted / 10);
  // No TCP segment of either leg went to the kernel (relay_ipv6_test.cpp says why the IPv6
  // extension-header counter is not among these).
  for (const char* pass : {"steer.pass_unknown_flow", "steer.pass_not_listener",
                           "steer.pass_kernel_owns", "steer.pass_flow_table_full"}) {
    EXPECT_EQ(ForwarderProcess::Get(stats, pass), 0u) << pass;
  }

  // An IPv6 --backend-source the backend-side interface does not have is refused at start,
  // with the command that adds it.
  fwd.reset();
  const std::string missing = prefix + "::99";
  try {
    ForwarderProcess::WithConfig("xdp", file.path(), {"--backend-source", missing});
    ADD_FAILURE() << "started with " << missing << ", which no interface has";
  } catch (const std::exception& error) {
    const std::string what = error.what();
    EXPECT_NE(what.find("--backend-source " + missing + " is not an address of " +
                        topo_.server_side_if()),
              std::string::npos)
        << what;
    EXPECT_NE(what.find("ip -6 addr add " + missing + "/128 dev " + topo_.server_side_if()),
              std::string::npos)
        << what;
  }
}

INSTANTIATE_TEST_SUITE_P(Paths, RelayIpv6FamiliesTest, ::testing::Values("xdp", "kernel"),
                         [](const auto& p) { return p.param; });

}  // namespace
}  // namespace xdpfwd::test
