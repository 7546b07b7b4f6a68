// [proxy=v1|v2] through the binary, on both paths: the backend reads a PROXY protocol header
// naming the client's address and port and the address it connected to, byte for byte as the
// specification lays it out, then the client's bytes, and nothing of the header reaches the
// client or the byte counts.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "os/endpoint.h"
#include "tests/support/forwarder_process.h"
#include "tests/support/netns_topology.h"
#include "tests/support/proxy_header_bytes.h"
#include "tests/support/tcp.h"
#include "tests/support/temp_dir.h"

namespace xdpfwd::test {
namespace {

using namespace std::chrono_literals;

constexpr uint16_t kV1Port = 9000, kV2Port = 9001, kBackendPort = 9100;

// The backend: takes one connection, reads it to its end, answers "ok" and closes.
std::string ServeOnce(int listener) {
  UniqueFd c(accept4(listener, nullptr, nullptr, SOCK_CLOEXEC));
  if (!c) return "accept failed";
  std::string got;
  char buf[4096];
  for (;;) {
    const ssize_t n = recv(c.get(), buf, sizeof buf, 0);
    if (n <= 0) break;
    got.append(buf, static_cast<size_t>(n));
  }
  (void)send(c.get(), "ok", 2, MSG_NOSIGNAL);
  return got;
}

class ProxyProtocolTest : public ::testing::TestWithParam<const char*> {};

TEST_P(ProxyProtocolTest, BackendReadsTheClientFirst) {
  if (geteuid() != 0) GTEST_SKIP() << "namespace tests need root";
  Topology topo;
  TempDir dir;
  const std::string config = dir.File("xdpfwd.conf");
  {
    const std::string gw = ToString(topo.client_gw()), server = ToString(topo.server_addr());
    std::ofstream f(config);
    f << gw << " " << kV1Port << " " << server << " " << kBackendPort << " [proxy=v1]\n"
      << gw << " " << kV2Port << " " << server << " " << kBackendPort << " [proxy=v2]\n";
  }
  UniqueFd listener = TcpListen(topo.server_ns(), topo.server_addr(), kBackendPort);
  auto fwd = ForwarderProcess::WithConfig(GetParam(), config);

  for (uint16_t port : {kV1Port, kV2Port}) {
    std::string backend_got;
    std::thread backend([&] { backend_got = ServeOnce(listener.get()); });
    UniqueFd c = TcpConnect(topo.client_ns(), topo.client_gw(), port);
    const uint16_t client_port = LocalPort(c.get());
    const std::string payload = "GET / HTTP/1.0\r\n\r\n";
    ASSERT_EQ(send(c.get(), payload.data(), payload.size(), 0),
              static_cast<ssize_t>(payload.size()));
    shutdown(c.get(), SHUT_WR);
    std::string reply;
    char buf[64];
    for (ssize_t n; (n = recv(c.get(), buf, sizeof buf, 0)) > 0;) reply.append(buf, n);
    backend.join();
    const std::string header =
        port == kV1Port ? ProxyV1(topo.client_addr(), client_port, topo.client_gw(), port)
                        : ProxyV2(topo.client_addr(), client_port, topo.client_gw(), port);
    EXPECT_EQ(backend_got, header + payload) << "port " << port << "\n" << fwd->output();
    EXPECT_EQ(reply, "ok");  // nothing of the header came back to the client
  }
  const auto stats =
      fwd->WaitForStats([&](const auto& s) { return fwd->Relay(s, "completed") == 2; });
  EXPECT_EQ(fwd->Relay(stats, "completed"), 2u) << fwd->output();
  // The access log's and the counters' bytes are the client's: the header is not counted.
  EXPECT_EQ(fwd->Relay(stats, "bytes_to_backend"), 2u * 18u);
  EXPECT_EQ(fwd->Stop(), 0);
}

INSTANTIATE_TEST_SUITE_P(Paths, ProxyProtocolTest, ::testing::Values("xdp", "kernel"),
                         [](const auto& p) { return std::string(p.param); });

}  // namespace
}  // namespace xdpfwd::test
