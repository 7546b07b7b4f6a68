// The kernel path's backend local ports (issue #11): the xdpfwd binary runs inside the topology's
// client namespace, whose own net.ipv4.ip_local_port_range is set to 50 ports here (never the
// machine's), so that the client-closes-first order, which leaves every backend leg in
// TIME_WAIT for 60 s, exhausts the range within a test. Clients connect from the root namespace
// to the client namespace's address; backend legs go through the root namespace to the server
// namespace.
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "forwarder/rules.h"
#include "tests/support/backend.h"
#include "tests/support/child_process.h"
#include "tests/support/connection_ends.h"
#include "tests/support/eventually.h"
#include "tests/support/forwarder_process.h"
#include "tests/support/netns_topology.h"
#include "tests/support/tcp.h"

namespace xdpfwd::test {
namespace {

using namespace std::chrono_literals;

// Ports on this test's own topology addresses only (each test builds its own topology).
constexpr uint16_t kListenPort = 9000;
constexpr uint16_t kBackendPort = 9100;
constexpr int kPorts = 50;  // 40000-40049
constexpr uint64_t kRequest = 3000;

SocketAddress Address(const in_addr& addr, uint16_t port) {
  return FromEndpoint(Endpoint{addr, port});
}

class KernelPathPortsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const CommandResult r =
        topo_.Run(topo_.client_ns(), "sysctl -q -w net.ipv4.ip_local_port_range='40000 40049'");
    ASSERT_EQ(r.status, 0) << r.output;
  }

  void StartForwarder(const std::vector<std::string>& extra = {}) {
    std::vector<std::string> options{"--threads", "2"};
    options.insert(options.end(), extra.begin(), extra.end());
    forwarder_ = std::make_unique<ForwarderProcess>(
        "kernel", ToString(Address(topo_.client_addr(), kListenPort)),
        ToString(Address(topo_.server_addr(), kBackendPort)), options, topo_.client_ns());
  }

  // Waits until `total` connections have ended (each counter is written by its loop thread;
  // active drops last) and returns the counters.
  std::map<std::string, uint64_t> StatsOnceEnded(uint64_t total) {
    std::map<std::string, uint64_t> s;
    EXPECT_TRUE(Eventually([&] {
      s = forwarder_->Stats();
      const RelayTotals r = RelayFromStats(s, "kernel.");
      return r.completed + r.backend_no_port == total && r.active == 0;
    })) << forwarder_->output();
    return s;
  }

  // One client-closes-first connection from the root namespace: a request the backend echoes,
  // the client's FIN, then the whole echo and the backend's FIN. "" when every byte came back;
  // otherwise what went wrong.
  std::string ClientClosesFirst(uint64_t seed) {
    UniqueFd fd(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
    BoundWaits(fd.get());
    const timeval wait{20, 0};
    setsockopt(fd.get(), SOL_SOCKET, SO_RCVTIMEO, &wait, sizeof(wait));
    const SocketAddress to = Address(topo_.client_addr(), kListenPort);
    if (connect(fd.get(), to.get(), to.length) != 0) {
      return std::string("connect: ") + strerror(errno);
    }
    try {
      SendPattern(fd.get(), seed, kRequest);  // ends with SHUT_WR
    } catch (const std::exception& e) {
      return e.what();
    }
    uint64_t echoed = 0;
    char buf[4096];
    for (;;) {
      const ssize_t n = recv(fd.get(), buf, sizeof(buf), 0);
      if (n == 0) break;
      if (n < 0) return std::string("echo: ") + strerror(errno);
      echoed += static_cast<uint64_t>(n);
    }
    if (echoed != kRequest) return "echo: " + std::to_string(echoed) + " bytes";
    return "";
  }

  // `total` connections, `concurrency` at a time; every byte of each is checked: the backend
  // compares the request with the pattern, the client counts the echo.
  std::vector<std::string> RunClients(int total, int concurrency) {
    std::vector<std::string> failures;
    std::mutex mu;
    std::atomic<int> next{0};
    std::vector<std::thread> workers;
    for (int w = 0; w < concurrency; ++w) {
      workers.emplace_back([&] {
        for (int i = next++; i < total; i = next++) {
          const std::string f = ClientClosesFirst(1000 + static_cast<uint64_t>(i));
          if (f.empty()) continue;
          std::lock_guard<std::mutex> lock(mu);
          failures.push_back("connection " + std::to_string(i) + ": " + f);
        }
      });
    }
    for (std::thread& t : workers) t.join();
    return failures;
  }

  UniqueFd BackendListener() const {
    return TcpListen(topo_.server_ns(), topo_.server_addr(), kBackendPort);
  }

  // Echoes each request, and counts where it came from and the bytes.
  Backend::Serve CheckingEcho() {
    return [this](int fd) {
      sockaddr_in peer{};
      socklen_t len = sizeof(peer);
      getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &len);
      const StreamStats echoed = EchoUntilEof(fd);
      std::lock_guard<std::mutex> lock(peers_mu_);
      ++peers_[ToString(peer.sin_addr)];
      bytes_echoed_ += echoed.bytes;
    };
  }

  Topology topo_;
  std::unique_ptr<ForwarderProcess> forwarder_;
  std::mutex peers_mu_;
  std::map<std::string, int> peers_;
  uint64_t bytes_echoed_ = 0;
};

std::string First(const std::vector<std::string>& failures) {
  return failures.empty() ? "" : failures.front();
}

// With the client closing first, each backend leg ends in TIME_WAIT on the forwarder for 60 s,
// and the kernel's port choice ran out after exactly the range's size (28,232 in the root
// namespace; 50 here). Eight times the range, eight at a time: none may fail.
TEST_F(KernelPathPortsTest, ClientClosesFirstFarBeyondThePortRange) {
  Backend backend(BackendListener(), CheckingEcho());
  StartForwarder();
  constexpr int kConnections = 8 * kPorts;
  const std::vector<std::string> failures = RunClients(kConnections, 8);
  EXPECT_TRUE(failures.empty()) << failures.size() << " failed, first: " << First(failures) << "\n"
                                << forwarder_->output();
  ASSERT_TRUE(backend.WaitServed(kConnections)) << backend.served();
  EXPECT_EQ(bytes_echoed_, uint64_t{kConnections} * kRequest);
  const std::map<std::string, uint64_t> s = StatsOnceEnded(kConnections);
  EXPECT_EQ(ForwarderProcess::Get(s, "kernel.completed"), uint64_t{kConnections});
  EXPECT_EQ(ForwarderProcess::Get(s, "kernel.backend_error"), 0u);
  EXPECT_GT(ForwarderProcess::Get(s, "kernel.own_port_connects"), 0u)
      << "the range never ran out: the test proves nothing";
  ExpectEachEndedOnce(RelayFromStats(s, "kernel."), forwarder_->output());
}

// The fallback is O(1) and stays so: 2,000 connections one after another through 50 ports
// (40 times the range, every port taken over from its own TIME_WAIT about 40 times). Each
// connection costs one connect: no port refused, and the kernel never asked to scan a range
// with no port left. The kernel chooses the first ports, until a quarter of each thread's
// slice of the range is taken; the rest are chosen here.
TEST_F(KernelPathPortsTest, SequentialConnectionsFortyTimesTheRangeCostOneConnectEach) {
  Backend backend(BackendListener(), CheckingEcho());
  StartForwarder();
  constexpr int kConnections = 2000;
  const std::vector<std::string> failures = RunClients(kConnections, 1);
  EXPECT_TRUE(failures.empty()) << failures.size() << " failed, first: " << First(failures) << "\n"
                                << forwarder_->output();
  ASSERT_TRUE(backend.WaitServed(kConnections)) << backend.served();
  const std::map<std::string, uint64_t> s = StatsOnceEnded(kConnections);
  EXPECT_EQ(ForwarderProcess::Get(s, "kernel.completed"), uint64_t{kConnections});
  EXPECT_EQ(ForwarderProcess::Get(s, "kernel.backend_no_port"), 0u);
  EXPECT_EQ(ForwarderProcess::Get(s, "kernel.port_retries"), 0u) << forwarder_->output();
  EXPECT_EQ(ForwarderProcess::Get(s, "kernel.kernel_no_port"), 0u) << forwarder_->output();
  // Two threads, 25 ports each: the kernel chose at most a quarter of each slice, then the
  // threads took over for good (their TIME_WAITs stay above an eighth for 60 s).
  EXPECT_GE(ForwarderProcess::Get(s, "kernel.own_port_connects"), uint64_t{kConnections - 14});
  EXPECT_NE(forwarder_->output().find("choosing ports here"), std::string::npos)
      << forwarder_->output();
  ExpectEachEndedOnce(RelayFromStats(s, "kernel."), forwarder_->output());
}
// --backend-source: legs alternate between the two addresses (each thread in turn), and each
// address brings its own port range.
TEST_F(KernelPathPortsTest, BackendSourcesTakeTurns) {
  const uint32_t base = ntohl(topo_.client_addr().s_addr) & 0xffffff00u;
  in_addr a{}, b{};
  a.s_addr = htonl(base | 10);
  b.s_addr = htonl(base | 11);
  for (const in_addr& x : {a, b}) {
    const CommandResult r =
        topo_.Run(topo_.client_ns(), "ip addr add " + ToString(x) + "/24 dev eth0");
    ASSERT_EQ(r.status, 0) << r.output;
  }
  Backend backend(BackendListener(), CheckingEcho());
  StartForwarder({"--backend-source", ToString(a) + "," + ToString(b)});
  constexpr int kConnections = 4 * kPorts;  // twice the two sources' ports
  const std::vector<std::string> failures = RunClients(kConnections, 1);
  EXPECT_TRUE(failures.empty()) << failures.size() << " failed, first: " << First(failures);
  ASSERT_TRUE(backend.WaitServed(kConnections));
  std::lock_guard<std::mutex> lock(peers_mu_);
  EXPECT_EQ(peers_.size(), 2u);
  // Two loop threads, each alternating: the split is even to within one per thread.
  EXPECT_NEAR(peers_[ToString(a)], kConnections / 2, 2);
  EXPECT_NEAR(peers_[ToString(b)], kConnections / 2, 2);
}

// A source address this host does not have fails at start, with the address in the message.
TEST_F(KernelPathPortsTest, ForeignBackendSourceFailsAtStart) {
  RunResult r = RunProgram({"/usr/sbin/ip", "netns", "exec", topo_.client_ns(),
                            ForwarderProcess::BinaryPath(), "--path", "kernel", "--backend-source",
                            "192.0.2.7", ToString(Address(topo_.client_addr(), kListenPort)),
                            ToString(Address(topo_.server_addr(), kBackendPort))},
                           10s);
  EXPECT_EQ(r.status, 1) << r.output;
  EXPECT_NE(r.output.find("--backend-source 192.0.2.7 (not an address of this host): Cannot "
                          "assign requested address"),
            std::string::npos)
      << r.output;
}

// Without TCP timestamps from the backend the kernel refuses to hand over a TIME_WAIT 4-tuple,
// so ports do run out; that must be counted as its own end reason (and the client reset), not
// hidden in backend_error.
TEST_F(KernelPathPortsTest, ExhaustionWithoutTimestampsIsCounted) {
  const CommandResult r = topo_.Run(topo_.server_ns(), "sysctl -q -w net.ipv4.tcp_timestamps=0");
  ASSERT_EQ(r.status, 0) << r.output;
  Backend backend(BackendListener(), CheckingEcho());
  StartForwarder();
  constexpr int kConnections = 2 * kPorts;
  const std::vector<std::string> failures = RunClients(kConnections, 1);
  const std::map<std::string, uint64_t> s = StatsOnceEnded(kConnections);
  EXPECT_EQ(ForwarderProcess::Get(s, "kernel.completed"), uint64_t{kPorts});
  EXPECT_EQ(ForwarderProcess::Get(s, "kernel.backend_no_port"), uint64_t{kPorts});
  EXPECT_EQ(ForwarderProcess::Get(s, "kernel.backend_error"), 0u);
  EXPECT_EQ(failures.size(), size_t{kPorts});
  // The reset reaches the client at any point of its exchange: on send, on shutdown, on recv.
  for (const std::string& f : failures) {
    EXPECT_TRUE(f.find("reset by peer") != std::string::npos ||
                f.find("not connected") != std::string::npos ||
                f.find("Broken pipe") != std::string::npos)
        << f;
  }
  EXPECT_NE(forwarder_->output().find("no local port left towards"), std::string::npos)
      << forwarder_->output();
  ExpectEachEndedOnce(RelayFromStats(s, "kernel."), forwarder_->output());
}

}  // namespace
}  // namespace xdpfwd::test
