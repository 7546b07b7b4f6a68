// The kernel path's TCP events (xdp/tcp_events.bpf.c) through the real binary: the kernel's
// retransmissions, RTOs, fast recovery and zero windows each way on the leg they happened on in
// a dumped trace; a Nagle backend counted, warned about and recorded; sockets that are not the
// kernel path's ignored; only connections that last tagged; `--tune tcp-events=off`; a path
// whose programs cannot load still serving.
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <iostream>
#include <memory>
#include <set>
#include <string>
#include <thread>

#include "os/endpoint.h"
#include "tests/netns/control_support.h"
#include "tests/support/backend.h"
#include "tests/support/forwarder_process.h"
#include "tests/support/lossy_link.h"
#include "tests/support/netns_topology.h"
#include "tests/support/tcp.h"
#include "xdp/tcp_events_shared.h"

namespace xdpfwd::test {
namespace {

using namespace std::chrono_literals;

const char* const kTcpEvents[] = {
    "retransmission",        "RTO",
    "fast recovery entered", "zero window in",
    "zero window out",       "Nagle peer: small segments waited for our delayed ACK"};

// The kernel's TCP trouble on the kernel path's legs: a client that stops reading closes its
// window (zero window in on the client leg, once the kernel probes it), and the backend leg,
// read no more, closes ours toward the backend (zero window out); with 5% of what the
// client namespace receives dropped, the client leg retransmits and enters fast recovery; a
// backend that answers no SYN for 1.5 s makes the backend leg's retransmission timer expire.
TEST_F(TraceTest, KernelPathTcpTroubleOnTheLegItHappenedOn) {
  ForwarderProcess fwd("kernel", Addr(topo_.client_gw(), kPort), Addr(topo_.server_addr(), kPort),
                       {"--threads", "1", "--tune", "tcp-events=on"});
  UniqueFd listener = TcpListen(topo_.server_ns(), topo_.server_addr(), kPort);
  constexpr uint64_t kTotal = 32u << 20;
  StreamStats sent;
  std::thread server([&] {
    UniqueFd c(accept(listener.get(), nullptr, nullptr));
    sent = SendPattern(c.get(), 29, kTotal);
  });
  UniqueFd client = TcpConnect(topo_.client_ns(), topo_.client_gw(), kPort);
  std::this_thread::sleep_for(1s);  // unread: the client's window closes, the kernel probes it
  StreamStats got;
  {
    LossyLink loss(topo_.client_ns(), 50'000);
    got = ReceiveAll(client.get());
    EXPECT_GT(loss.dropped(), 0u);
  }
  server.join();
  EXPECT_EQ(got.bytes, kTotal);
  EXPECT_EQ(got.hash, sent.hash);

  std::thread quiet_server([&] {
    UniqueFd c(accept(listener.get(), nullptr, nullptr));
    EchoUntilEof(c.get());
  });
  {
    auto blackhole = std::make_unique<LossyLink>(topo_.server_ns(), 1'000'000);
    UniqueFd late = TcpConnect(topo_.client_ns(), topo_.client_gw(), kPort);
    // A relay that never answers fails the test here, not at ctest's 300 s timeout (seen once
    // under load): the socket closes, the echo server gets its EOF and the test goes on.
    BoundWaits(late.get(), 15);
    std::this_thread::sleep_for(1500ms);
    blackhole.reset();
    ASSERT_EQ(send(late.get(), "x", 1, 0), 1);
    char back;
    EXPECT_EQ(recv(late.get(), &back, 1, 0), 1);
  }
  quiet_server.join();
  std::this_thread::sleep_for(300ms);  // the thread drains its ring at least every 250 ms

  ASSERT_EQ(fwd.Control("trace dump " + trace_).rfind("wrote " + trace_ + ": ", 0), 0u);
  const std::string text = DecodeTrace(trace_);
  EXPECT_EQ(TracksWith(text, "zero window in"), std::set<std::string>{"conn 1 client"});
  EXPECT_EQ(TracksWith(text, "zero window out"), std::set<std::string>{"conn 1 backend"});
  EXPECT_EQ(TracksWith(text, "fast recovery entered"), std::set<std::string>{"conn 1 client"});
  // The late backend's SYN was sent again after its timer expired (a retransmission too).
  EXPECT_EQ(TracksWith(text, "retransmission"),
            (std::set<std::string>{"conn 1 client", "conn 2 backend"}));
  const std::set<std::string> rto = TracksWith(text, "RTO");
  EXPECT_EQ(rto.count("conn 2 backend"), 1u);
  for (const std::string& track : rto) {
    EXPECT_TRUE(track == "conn 2 backend" || track == "conn 1 client") << track;
  }
}

// A backend with Nagle on that writes each answer in two small writes: the second waits for
// the kernel's delayed ACK of the first (44 ms). The kernel path finds it on the backend leg
// (our delayed-ACK timer fired, its next segment came within 1 ms, three times in a row),
// counts it, records it and names the backend with the fix. With TCP_NODELAY on the backend
// nothing is counted; with `quickack 1` on the route toward it, nothing waits.
TEST_F(TraceTest, KernelPathNaglePeerIsNamed) {
  ForwarderProcess fwd("kernel", Addr(topo_.client_gw(), kPort), Addr(topo_.server_addr(), kPort),
                       {"--threads", "1", "--tune", "tcp-events=on"});
  UniqueFd listener = TcpListen(topo_.server_ns(), topo_.server_addr(), kPort);
  constexpr int kExchanges = 20;
  auto slow_exchanges = [&](bool nodelay) {
    std::thread server([&] {
      UniqueFd c(accept(listener.get(), nullptr, nullptr));
      const int on = nodelay ? 1 : 0;
      setsockopt(c.get(), IPPROTO_TCP, TCP_NODELAY, &on, sizeof(on));
      char req[32];
      while (recv(c.get(), req, sizeof(req), MSG_WAITALL) == 32) {
        if (send(c.get(), req, 16, 0) != 16 || send(c.get(), req + 16, 16, 0) != 16) break;
      }
    });
    UniqueFd client = TcpConnect(topo_.client_ns(), topo_.client_gw(), kPort);
    int slow = 0;
    for (int i = 0; i < kExchanges; ++i) {
      const auto start = std::chrono::steady_clock::now();
      char buf[32] = {};
      EXPECT_EQ(send(client.get(), buf, 32, 0), 32);
      EXPECT_EQ(recv(client.get(), buf, 32, MSG_WAITALL), 32);
      if (std::chrono::steady_clock::now() - start >= 20ms) ++slow;
    }
    shutdown(client.get(), SHUT_WR);
    server.join();
    return slow;
  };
  const int slow_nodelay = slow_exchanges(true);
  std::this_thread::sleep_for(300ms);  // drained
  EXPECT_EQ(fwd.Relay(fwd.Stats(), "backend_nagle_peers"), 0u);
  const int slow_nagle = slow_exchanges(false);
  std::cerr << "exchanges of 20 ms or more: " << slow_nodelay << " with TCP_NODELAY, " << slow_nagle
            << " with Nagle on\n";
  EXPECT_GE(slow_nagle, 3);  // the stall is there to be found
  fwd.WaitForStats([&](const auto& s) { return fwd.Relay(s, "backend_nagle_peers") >= 1; });
  const auto stats = fwd.Stats();
  EXPECT_EQ(ForwarderProcess::Get(stats, "kernel.backend_nagle_peers"), 1u);
  EXPECT_EQ(ForwarderProcess::Get(stats, "kernel.client_nagle_peers"), 0u);

  ASSERT_TRUE(fwd.WaitForOutput("its small segments waited for our delayed ACK", 6s))
      << fwd.output();
  const std::string info = fwd.Control("show info");
  EXPECT_NE(info.find("warning: backend " + ToString(topo_.server_addr()) + ":" +
                      std::to_string(kPort) + " (rule "),
            std::string::npos)
      << info;
  EXPECT_NE(info.find("kernel path"), std::string::npos) << info;
  EXPECT_NE(info.find("set TCP_NODELAY on the backend"), std::string::npos) << info;
  const std::string metrics = fwd.Control("show metrics");
  const auto peers = Sample(metrics, "xdpfwd_nagle_peers_total{path=\"kernel\",side=\"backend\"}");
  ASSERT_TRUE(peers.has_value()) << metrics;
  EXPECT_EQ(*peers, "1");

  ASSERT_EQ(fwd.Control("trace dump " + trace_).rfind("wrote " + trace_ + ": ", 0), 0u);
  EXPECT_EQ(
      TracksWith(DecodeTrace(trace_), "Nagle peer: small segments waited for our delayed ACK"),
      std::set<std::string>{"conn 2 backend"});

  // The cure the warning names: the route toward the backend says `quickack 1`, and Linux
  // ACKs the backend leg's segments at once; the same backend's exchanges stop waiting, and
  // there is no stall left to find.
  const auto route = topo_.Run("", "ip route replace " + ToString(topo_.server_addr()) +
                                       "/32 dev " + topo_.server_side_if() + " quickack 1");
  ASSERT_EQ(route.status, 0) << route.output;
  const int slow_quickack = slow_exchanges(false);
  std::cerr << "with quickack on the route: " << slow_quickack << " of " << kExchanges << "\n";
  EXPECT_LE(slow_quickack, 2);
  std::this_thread::sleep_for(300ms);
  EXPECT_EQ(ForwarderProcess::Get(fwd.Stats(), "kernel.backend_nagle_peers"), 1u);
}

// A socket of this test's own, beside the forwarder, retransmitting through the same lossy
// link: the programs see it and record nothing (only the kernel path's sockets are tagged).
// Then, with --tune tcp-events=off, a forwarded connection's retransmissions are not recorded.
TEST_F(TraceTest, KernelPathTcpEventsOnlyForItsOwnSockets) {
  for (const bool on : {true, false}) {
    SCOPED_TRACE(on ? "tcp-events=on" : "tcp-events=off");
    const std::vector<std::string> args = {"--threads", "1", "--tune",
                                           on ? "tcp-events=on" : "tcp-events=off"};
    ForwarderProcess fwd("kernel", Addr(topo_.client_gw(), kPort), Addr(topo_.server_addr(), kPort),
                         args);
    Traffic();  // connections of the kernel path's own, without trouble
    // Ours: a listener in this (the forwarder's) namespace, on the client side's address.
    UniqueFd own(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
    sockaddr_in sa{};
    sa.sin_family = AF_INET;
    sa.sin_addr = topo_.client_gw();
    ASSERT_EQ(bind(own.get(), reinterpret_cast<sockaddr*>(&sa), sizeof(sa)), 0);
    ASSERT_EQ(listen(own.get(), 1), 0);
    UniqueFd reader = TcpConnect(topo_.client_ns(), topo_.client_gw(), LocalPort(own.get()));
    UniqueFd writer(accept(own.get(), nullptr, nullptr));
    ASSERT_TRUE(writer);
    constexpr uint64_t kTotal = 8u << 20;
    {
      LossyLink loss(topo_.client_ns(), 50'000);
      std::thread send_all([&] {
        SendPattern(writer.get(), 7, kTotal);
        shutdown(writer.get(), SHUT_WR);
      });
      EXPECT_EQ(ReceiveAll(reader.get()).bytes, kTotal);
      send_all.join();
      EXPECT_GT(loss.dropped(), 0u);
      // The forwarder's own connection through the same loss: recorded only when on.
      UniqueFd listener = TcpListen(topo_.server_ns(), topo_.server_addr(), kPort);
      std::thread server([&] {
        UniqueFd c(accept(listener.get(), nullptr, nullptr));
        SendPattern(c.get(), 9, kTotal);
      });
      UniqueFd client = TcpConnect(topo_.client_ns(), topo_.client_gw(), kPort);
      EXPECT_EQ(ReceiveAll(client.get()).bytes, kTotal);
      server.join();
    }
    std::this_thread::sleep_for(300ms);
    ASSERT_EQ(fwd.Control("trace dump " + trace_).rfind("wrote " + trace_ + ": ", 0), 0u);
    const std::string text = DecodeTrace(trace_);
    const std::string forwarded = "conn " + std::to_string(kConnections + 1) + " client";
    for (const char* event : kTcpEvents) {
      const std::set<std::string> tracks = TracksWith(text, event);
      for (const std::string& track : tracks) EXPECT_EQ(track, forwarded) << event;
    }
    EXPECT_EQ(TracksWith(text, "retransmission").size(), on ? 1u : 0u);
  }
}

// A socket is tagged (a bpf syscall, and socket storage) only once its connection has lived
// 10 ms: the short connections of a rate load pay nothing. Ten exchanges on fresh connections
// tag fewer than their 20 sockets (all of them before tagging waited; none on a quiet
// machine); a connection held open gets both its sockets tagged while it lasts.
TEST_F(TraceTest, KernelPathTagsOnlyConnectionsThatLast) {
  ForwarderProcess fwd("kernel", Addr(topo_.client_gw(), kPort), Addr(topo_.server_addr(), kPort),
                       {"--threads", "1", "--tune", "tcp-events=on"});
  Traffic();
  Traffic();
  auto stats = fwd.WaitForStats(
      [&](const auto& s) { return fwd.Relay(s, "completed") == 2 * kConnections; });
  const uint64_t short_tags = ForwarderProcess::Get(stats, "kernel.tcp_events_tagged");
  std::cerr << "sockets tagged for " << 2 * kConnections << " short connections: " << short_tags
            << "\n";
  EXPECT_LT(short_tags, uint64_t{4 * kConnections});

  UniqueFd listener = TcpListen(topo_.server_ns(), topo_.server_addr(), kPort);
  std::thread server([&] {
    UniqueFd c(accept(listener.get(), nullptr, nullptr));
    EchoUntilEof(c.get());
  });
  UniqueFd client = TcpConnect(topo_.client_ns(), topo_.client_gw(), kPort);
  ASSERT_EQ(send(client.get(), "x", 1, 0), 1);
  char back;
  ASSERT_EQ(recv(client.get(), &back, 1, 0), 1);
  stats = fwd.WaitForStats([&](const auto& s) {
    return ForwarderProcess::Get(s, "kernel.tcp_events_tagged") >= short_tags + 2;
  });
  EXPECT_EQ(ForwarderProcess::Get(stats, "kernel.tcp_events_tagged"), short_tags + 2);
  EXPECT_EQ(fwd.Relay(stats, "active"), 1u);  // tagged while it lasts
  shutdown(client.get(), SHUT_WR);
  server.join();
}

// Where the programs cannot run (here: more threads than they have rings for), the kernel path
// starts all the same, relays, and says once why it records no TCP events.
TEST_F(TraceTest, KernelPathWithoutTcpEventsStillServesAndSaysWhy) {
  ForwarderProcess fwd(
      "kernel", Addr(topo_.client_gw(), kPort), Addr(topo_.server_addr(), kPort),
      {"--threads", std::to_string(TCP_EVENTS_MAX_THREADS + 1), "--tune", "tcp-events=on"});
  Traffic();
  fwd.WaitForStats([&](const auto& s) { return fwd.Relay(s, "completed") == kConnections; });
  // Logged before "ready", once.
  const std::string out = fwd.output();
  const std::string why =
      "TCP events: 65 threads, at most 64 have rings; TCP events are not recorded";
  ASSERT_NE(out.find(why), std::string::npos) << out;
  EXPECT_EQ(out.find(why), out.rfind(why));
}

}  // namespace
}  // namespace xdpfwd::test
