// The binary's start and its fast path's footprint, outside the relay's semantics
// (relay_test.cpp): a forwarded connection leaves no socket in the root namespace's kernel, bad
// arguments exit 2 with a message, and a fast path that cannot start exits 1 and says why.
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "os/endpoint.h"
#include "tests/support/child_process.h"
#include "tests/support/forwarder_process.h"
#include "tests/support/netns_topology.h"
#include "tests/support/tcp.h"

namespace xdpfwd::test {
namespace {

using namespace std::chrono_literals;

constexpr uint16_t kPort = 9000;  // inside this test's own topology only

std::string Addr(in_addr a, uint16_t port) { return ToString(a) + ":" + std::to_string(port); }

// Fast path only: the forwarded connections have no kernel socket at all.
class FastPathTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (geteuid() != 0) GTEST_SKIP() << "namespace tests need root";
  }
  Topology topo_;
};

// The lines of `after` that name `endpoint` and were not in `before`.
std::string NewSocketsOn(const std::string& before, const std::string& after,
                         const std::string& endpoint) {
  std::set<std::string> old_lines;
  std::istringstream b(before);
  for (std::string line; std::getline(b, line);) old_lines.insert(line);
  std::string found;
  std::istringstream a(after);
  for (std::string line; std::getline(a, line);) {
    if (line.find(endpoint) != std::string::npos && !old_lines.contains(line)) found += line + "\n";
  }
  return found;
}

TEST_F(FastPathTest, ForwardedConnectionsHaveNoKernelSocket) {
  // Kernel-path tests before this one may have used the same subnets, and their TIME_WAIT
  // sockets stay in the root namespace for 60 s: only sockets that appear from here on count.
  const std::string sockets_before = RunCommand("", "ss -tan").output;
  UniqueFd listener = TcpListen(topo_.server_ns(), topo_.server_addr(), kPort);
  ForwarderProcess fwd("xdp", Addr(topo_.client_gw(), kPort), Addr(topo_.server_addr(), kPort));
  std::thread server([&] {
    UniqueFd c(accept(listener.get(), nullptr, nullptr));
    EchoUntilEof(c.get());
  });
  UniqueFd client = TcpConnect(topo_.client_ns(), topo_.client_gw(), kPort);
  ASSERT_EQ(send(client.get(), "abc", 3, 0), 3);
  char buf[3];
  ASSERT_EQ(recv(client.get(), buf, 3, MSG_WAITALL), 3);
  // The root namespace's kernel has no socket on the listen address nor toward the backend.
  const std::string sockets = RunCommand("", "ss -tan").output;
  EXPECT_EQ(NewSocketsOn(sockets_before, sockets, Addr(topo_.client_gw(), kPort)), "");
  EXPECT_EQ(NewSocketsOn(sockets_before, sockets, Addr(topo_.server_addr(), kPort)), "");
  const auto stats = fwd.Stats();
  EXPECT_EQ(ForwarderProcess::Get(stats, "fast.active"), 1u);
  EXPECT_GE(ForwarderProcess::Get(stats, "steer.redirect_new_flow"), 1u);
  EXPECT_GE(ForwarderProcess::Get(stats, "steer.redirect_flow"), 4u);
  shutdown(client.get(), SHUT_WR);
  server.join();
  EXPECT_EQ(fwd.Stop(), 0);
  // Stopped: XDP detached from both interfaces.
  for (const std::string& ifname : {topo_.client_side_if(), topo_.server_side_if()}) {
    const auto link = RunCommand("", "ip link show " + ifname);
    EXPECT_EQ(link.output.find("xdp"), std::string::npos) << link.output;
  }
}

TEST(Cli, BadArgumentsExitTwoWithAMessage) {
  struct Case {
    std::vector<std::string> args;
    std::string expected;
  } cases[] = {
      {{}, "no rule"},
      {{"10.0.0.1:80"}, "expected LISTEN BACKEND"},
      {{"10.0.0.1:80", "nowhere"}, "BACKEND: 'nowhere' is not ADDRESS:PORT"},
      {{"--path", "fast", "10.0.0.1:80", "10.0.0.2:80"},
       "--path: 'fast' is not auto, xdp or kernel"},
      {{"--connect-timeout", "soon", "10.0.0.1:80", "10.0.0.2:80"}, "is not a duration"},
      {{"--bogus", "10.0.0.1:80", "10.0.0.2:80"}, "unknown option --bogus"},
      {{"-c", "/nonexistent/rules"}, "/nonexistent/rules"},
  };
  for (const Case& c : cases) {
    std::vector<std::string> argv{ForwarderProcess::BinaryPath()};
    argv.insert(argv.end(), c.args.begin(), c.args.end());
    const RunResult r = RunProgram(argv, 10s);
    EXPECT_EQ(r.status, 2) << r.output;
    EXPECT_NE(r.output.find(c.expected), std::string::npos) << r.output;
  }
}

// --path xdp on an address no interface has: exit 1, saying so, nothing left attached.
TEST_F(FastPathTest, XdpPathThatCannotStartExitsOne) {
  const RunResult r = RunProgram({ForwarderProcess::BinaryPath(), "--path", "xdp",
                                  "198.51.100.77:9000", Addr(topo_.server_addr(), kPort)},
                                 10s);
  EXPECT_EQ(r.status, 1) << r.output;
  EXPECT_NE(r.output.find("fast path cannot start"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("198.51.100.77"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace xdpfwd::test
