// Every RX queue served, through the real xdpfwd binary: with two or four queues on all four
// veth ends, flows land on every queue (the sender's transmit hash picks one per flow), client
// SYNs and backend SYN-ACKs alike. Hundreds of connections with data both ways must all arrive
// intact, on the fast path, with every queue of both interfaces receiving, and leave nothing
// behind.
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "tests/support/backend.h"
#include "tests/support/connection_ends.h"
#include "tests/support/forwarder_process.h"
#include "tests/support/netns_topology.h"
#include "tests/support/tcp.h"

namespace xdpfwd::test {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

constexpr uint16_t kPort = 9000;  // inside this test's own topology only
constexpr uint64_t kUp = 20'000, kDown = 50'000;

std::string Addr(in_addr a, uint16_t port) { return ToString(a) + ":" + std::to_string(port); }

// What the backend answers a connection with: kDown bytes of the pattern seeded by the hash of
// what it received, so the client can check both directions and that the answer is its own.
uint64_t AnswerHash(uint64_t upload_hash) {
  PatternStream pattern(upload_hash);
  Fnv1a h;
  std::vector<uint8_t> buf(65536);
  for (uint64_t left = kDown; left > 0;) {
    const size_t n = static_cast<size_t>(std::min<uint64_t>(left, buf.size()));
    pattern.Fill(buf.data(), n);
    h.Update(buf.data(), n);
    left -= n;
  }
  return h.value();
}

// --path xdp and --path auto: in auto mode the kernel path listens on the same address, so a
// flow the fast path missed would still be served there; the test requires none to be.
class MultiQueueTest : public ::testing::TestWithParam<std::tuple<std::string, int>> {
 protected:
  void SetUp() override {
    if (geteuid() != 0) GTEST_SKIP() << "namespace tests need root";
  }

  std::string path() const { return std::get<0>(GetParam()); }
  // Set at veth creation (numrxqueues), so not bounded by the CPU count as `ethtool -L` is.
  int queues() const { return std::get<1>(GetParam()); }

  Topology topo_{TopologyOptions{.queues = queues()}};
};

TEST_P(MultiQueueTest, EveryConnectionIsServedWhicheverQueueItLandsOn) {
  constexpr int kConns = 300;
  constexpr int kClients = 6;  // concurrent clients, each running its share in turn
  UniqueFd listener = TcpListen(topo_.server_ns(), topo_.server_addr(), kPort);
  Backend backend(std::move(listener), [](int fd) {
    BoundWaits(fd);
    const StreamStats up = ReceiveAll(fd);
    if (up.bytes != kUp) throw std::runtime_error("backend got " + std::to_string(up.bytes));
    SendPattern(fd, up.hash, kDown);
  });
  ForwarderProcess fwd(path(), Addr(topo_.client_gw(), kPort), Addr(topo_.server_addr(), kPort));
  for (const std::string& ifname : {topo_.client_side_if(), topo_.server_side_if()}) {
    EXPECT_NE(fwd.output().find(ifname + " ("), std::string::npos) << fwd.output();
    EXPECT_NE(fwd.output().find(std::to_string(queues()) + " RX queues, all served"),
              std::string::npos)
        << fwd.output();
  }

  std::mutex mu;
  std::vector<std::string> failures;
  std::vector<std::thread> clients;
  for (int c = 0; c < kClients; ++c) {
    clients.emplace_back([&, c] {
      for (int i = c; i < kConns; i += kClients) {
        try {
          UniqueFd fd = TcpConnect(topo_.client_ns(), topo_.client_gw(), kPort);
          BoundWaits(fd.get());
          const StreamStats sent = SendPattern(fd.get(), static_cast<uint64_t>(i) + 1, kUp);
          const StreamStats got = ReceiveAll(fd.get());
          if (got.bytes != kDown || got.hash != AnswerHash(sent.hash)) {
            throw std::runtime_error("received " + std::to_string(got.bytes) +
                                     " bytes, not the backend's answer to this connection");
          }
        } catch (const std::exception& e) {
          std::lock_guard lock(mu);
          failures.push_back("connection " + std::to_string(i) + ": " + e.what());
        }
      }
    });
  }
  for (std::thread& t : clients) t.join();
  EXPECT_TRUE(failures.empty()) << failures.size() << " of " << kConns
                                << " failed, first: " << failures.front() << "\n"
                                << fwd.output();
  EXPECT_TRUE(backend.WaitServed(kConns - static_cast<int>(failures.size())));

  // Every connection on the fast path (auto mode's kernel path took none), each ended once.
  auto stats = fwd.WaitForStats([&](const auto& s) { return fwd.Relay(s, "active") == 0; });
  ExpectEachEndedOnce(RelayFromStats(stats, "fast."), "--path " + path());
  EXPECT_EQ(ForwarderProcess::Get(stats, "fast.accepted"), static_cast<uint64_t>(kConns));
  EXPECT_EQ(ForwarderProcess::Get(stats, "fast.completed"), static_cast<uint64_t>(kConns));
  EXPECT_EQ(ForwarderProcess::Get(stats, "kernel.accepted"), 0u);
  EXPECT_EQ(ForwarderProcess::Get(stats, "fast.backend_timeout"), 0u);
  EXPECT_EQ(ForwarderProcess::Get(stats, "steer.pass_no_socket"), 0u);
  // Every queue of both interfaces carried packets: client flows and backend return traffic.
  // Except, in generic mode (the default on veth), the last one: generic XDP sees the queue
  // the skb recorded, and veth leaves the sender's TX queue k in it, read back as k - 1 (k = 0:
  // none recorded, queue 0). Every socket still serves what reaches it (the checks above).
  const bool generic = fwd.output().find("XDP generic") != std::string::npos;
  for (const std::string& ifname : {topo_.client_side_if(), topo_.server_side_if()}) {
    for (int q = 0; q < queues(); ++q) {
      const std::string key = "fast.rx_packets." + ifname + ".q" + std::to_string(q);
      if (generic && q == queues() - 1) {
        EXPECT_EQ(ForwarderProcess::Get(stats, key), 0u) << key;
      } else {
        EXPECT_GT(ForwarderProcess::Get(stats, key), 0u) << key;
      }
    }
  }

  // Nothing left behind: flow entries (after their linger), pcbs, UMEM frames, then XDP.
  stats = fwd.WaitForStats([](const auto& s) {
    return ForwarderProcess::Get(s, "fast.flows") == 0 &&
           ForwarderProcess::Get(s, "fast.lwip_pcbs") == 0;
  });
  EXPECT_EQ(ForwarderProcess::Get(stats, "fast.flows"), 0u);
  EXPECT_EQ(ForwarderProcess::Get(stats, "fast.lwip_pcbs"), 0u);
  EXPECT_EQ(ForwarderProcess::Get(stats, "fast.frames_held"), 0u);
  EXPECT_EQ(fwd.Stop(), 0) << fwd.output();
  for (const std::string& ifname : {topo_.client_side_if(), topo_.server_side_if()}) {
    const CommandResult link = topo_.Run("", "ip -o link show dev " + ifname);
    EXPECT_EQ(link.output.find("xdp"), std::string::npos) << link.output;
  }
}

INSTANTIATE_TEST_SUITE_P(PathsAndQueues, MultiQueueTest,
                         ::testing::Combine(::testing::Values("xdp", "auto"),
                                            ::testing::Values(2, 4)),
                         [](const auto& p) {
                           return std::get<0>(p.param) + "_" +
                                  std::to_string(std::get<1>(p.param)) + "_queues";
                         });

}  // namespace
}  // namespace xdpfwd::test
