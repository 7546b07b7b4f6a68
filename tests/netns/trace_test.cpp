// The flight recorder through the real binary: a scripted connection's life in the decoded
// Perfetto trace, in order and on the right legs; lwIP's TCP events (retransmissions, RTOs, zero
// windows) on the leg they happened on; a worker killed by SIGKILL still dumped; the kernel
// path's threads; a gap trigger; the recorder off.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "os/endpoint.h"
#include "tests/netns/control_support.h"
#include "tests/support/backend.h"
#include "tests/support/child_process.h"
#include "tests/support/forwarder_process.h"
#include "tests/support/lossy_link.h"
#include "tests/support/netns_topology.h"
#include "tests/support/packet_builder.h"
#include "tests/support/tcp.h"

namespace xdpfwd::test {
namespace {

using namespace std::chrono_literals;

// The recorder always on: a scripted run's connection life, in order, both legs, the worker's
// iterations; and what a worker killed with SIGKILL recorded is still dumped afterwards.
TEST_F(TraceTest, ConnectionLifeInOrderAndSurvivesAWorkerKill) {
  ForwarderProcess fwd("xdp", Addr(topo_.client_gw(), kPort), Addr(topo_.server_addr(), kPort));
  Traffic();
  fwd.WaitForStats([&](const auto& s) { return fwd.Relay(s, "completed") == kConnections; });
  const std::string answer = fwd.Control("trace dump " + trace_);
  ASSERT_EQ(answer.rfind("wrote " + trace_ + ": ", 0), 0u) << answer;
  std::string text = DecodeTrace(trace_);
  // The first connection's events (the connections ran one after another).
  ExpectInOrder(text, {"client handshake done", "backend SYN sent", "backend established",
                       "first byte client->backend", "first byte backend->client",
                       "FIN from client", "FIN from backend", "connection end"});
  // One track per leg of each connection, and a flow from the client leg to the backend leg.
  for (int i = 1; i <= kConnections; ++i) {
    EXPECT_NE(text.find("name: \"conn " + std::to_string(i) + " client\""), std::string::npos);
    EXPECT_NE(text.find("name: \"conn " + std::to_string(i) + " backend\""), std::string::npos);
  }
  EXPECT_NE(text.find("terminating_flow_ids:"), std::string::npos);
  EXPECT_NE(text.find("name: \"iteration\""), std::string::npos);

  // SIGKILL: the worker's ring outlives it; its successor records after it.
  const auto before = fwd.Stats();
  const pid_t victim = static_cast<pid_t>(ForwarderProcess::Get(before, "worker.0.pid"));
  ASSERT_GT(victim, 0);
  ASSERT_EQ(kill(victim, SIGKILL), 0);
  ASSERT_TRUE(fwd.WaitForOutput("worker 0 serves its queues again", 15s)) << fwd.output();
  Traffic();
  ASSERT_EQ(fwd.Control("trace dump " + trace_).rfind("wrote ", 0), 0u);
  text = DecodeTrace(trace_);
  // The killed worker's connections, then the new worker's (its ids start again at 1: a new
  // instance of each, so the dump has each name twice).
  size_t handshakes = 0;
  for (size_t at = 0; (at = text.find("name: \"client handshake done\"", at)) != std::string::npos;
       ++at) {
    ++handshakes;
  }
  EXPECT_EQ(handshakes, 2u * kConnections);
}

// The kernel path's threads record their connections' lives too, on tracks of their own.
TEST_F(TraceTest, KernelPathRecordsToo) {
  ForwarderProcess fwd("kernel", Addr(topo_.client_gw(), kPort), Addr(topo_.server_addr(), kPort));
  Traffic();
  fwd.WaitForStats([&](const auto& s) { return fwd.Relay(s, "completed") == kConnections; });
  ASSERT_EQ(fwd.Control("trace dump " + trace_).rfind("wrote " + trace_ + ": ", 0), 0u);
  const std::string text = DecodeTrace(trace_);
  EXPECT_NE(text.find("name: \"kernel thread 0\""), std::string::npos);
  ExpectInOrder(text, {"client handshake done", "backend SYN sent", "backend established",
                       "first byte client->backend", "first byte backend->client",
                       "FIN from client", "FIN from backend", "connection end"});
  EXPECT_NE(text.find("terminating_flow_ids:"), std::string::npos);
}

// lwIP's TCP trouble on the leg it happened on (lwIP patch 0036): a client that stops reading
// closes its window (zero window in, client leg), so the relay stops taking the backend's bytes
// and the window we announce to the backend closes (zero window out, backend leg); then, with
// 5% of what the client namespace receives dropped, the client leg retransmits; a backend that
// answers no SYN for a while makes the backend leg's retransmission timer expire.
TEST_F(TraceTest, TcpTroubleOnTheLegItHappenedOn) {
  ForwarderProcess fwd("xdp", Addr(topo_.client_gw(), kPort), Addr(topo_.server_addr(), kPort));
  UniqueFd listener = TcpListen(topo_.server_ns(), topo_.server_addr(), kPort);
  constexpr uint64_t kTotal = 32u << 20;  // beyond the client's receive buffer and our windows
  StreamStats sent;
  std::thread server([&] {
    UniqueFd c(accept(listener.get(), nullptr, nullptr));
    sent = SendPattern(c.get(), 29, kTotal);
  });
  UniqueFd client = TcpConnect(topo_.client_ns(), topo_.client_gw(), kPort);
  // Unread, the client's buffer fills and both windows close; the server's send blocks.
  std::this_thread::sleep_for(1s);
  StreamStats got;
  {
    LossyLink loss(topo_.client_ns(), 50'000);
    got = ReceiveAll(client.get());
    EXPECT_GT(loss.dropped(), 0u);
  }
  server.join();
  EXPECT_EQ(got.bytes, kTotal);
  EXPECT_EQ(got.hash, sent.hash);

  // A backend that answers no SYN for 1.5 s: its leg's retransmission timer expires (1 s
  // before a round trip was timed), and the connection is made by the SYN sent again.
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

  ASSERT_EQ(fwd.Control("trace dump " + trace_).rfind("wrote " + trace_ + ": ", 0), 0u);
  const std::string text = DecodeTrace(trace_);
  EXPECT_EQ(TracksWith(text, "zero window in"), std::set<std::string>{"conn 1 client"});
  EXPECT_EQ(TracksWith(text, "zero window out"), std::set<std::string>{"conn 1 backend"});
  EXPECT_EQ(TracksWith(text, "retransmission"), std::set<std::string>{"conn 1 client"});
  // The late backend's SYN timed out; at 5% loss the client leg's timer may have expired too.
  const std::set<std::string> rto = TracksWith(text, "RTO");
  EXPECT_EQ(rto.count("conn 2 backend"), 1u);
  for (const std::string& track : rto) {
    EXPECT_TRUE(track == "conn 2 backend" || track == "conn 1 client") << track;
  }
}

// Armed, a trigger dumps by itself when a worker does not run for longer than its bound (a
// SIGSTOP here), once; the trace holds the gap.
TEST_F(TraceTest, GapTriggerDumpsByItself) {
  ForwarderProcess fwd("xdp", Addr(topo_.client_gw(), kPort), Addr(topo_.server_addr(), kPort));
  EXPECT_EQ(fwd.Control("trace trigger"), "no trigger armed\n\n");
  EXPECT_EQ(fwd.Control("trace trigger gap 30ms " + trace_),
            "armed: a worker gap of 30.0 ms or more -> " + trace_ + "\n\n");
  EXPECT_EQ(fwd.Control("trace trigger gap 1ms relative")
                .rfind("error: trace trigger: give an "
                       "absolute path",
                       0),
            0u);
  const pid_t worker = static_cast<pid_t>(ForwarderProcess::Get(fwd.Stats(), "worker.0.pid"));
  ASSERT_GT(worker, 0);
  ASSERT_EQ(kill(worker, SIGSTOP), 0);
  std::this_thread::sleep_for(100ms);
  ASSERT_EQ(kill(worker, SIGCONT), 0);
  ASSERT_TRUE(fwd.WaitForOutput("trace trigger: worker 0 did not run for ", 5s)) << fwd.output();
  ASSERT_TRUE(fwd.WaitForOutput("wrote " + trace_, 1s)) << fwd.output();
  EXPECT_EQ(fwd.Control("trace trigger"), "no trigger armed\n\n");  // once per arming
  const std::string text = DecodeTrace(trace_);
  EXPECT_NE(text.find("name: \"gap\""), std::string::npos);
}

// Off: nothing recorded, and the dump says why.
TEST_F(TraceTest, RecorderOffSaysSo) {
  ForwarderProcess fwd("xdp", Addr(topo_.client_gw(), kPort), Addr(topo_.server_addr(), kPort),
                       {"--tune", "recorder=off"});
  EXPECT_EQ(fwd.Control("trace dump " + trace_),
            "error: trace dump: the flight recorder is off (--tune recorder=off)\n\n");
  EXPECT_EQ(
      fwd.Control("trace dump relative.pftrace").rfind("error: trace dump: give an absolute", 0),
      0u);
}

}  // namespace
}  // namespace xdpfwd::test
