// [accept-proxy] through the binary: a client of such a rule sends a PROXY header (v1 or v2)
// first; the backend receives the stream without it, the header's client becomes the client
// (allow/deny, the access log, the header [proxy=v2] sends on), and a sender not of the
// proxy-from lines, a malformed header or none in time resets the connection and is counted.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>
#include <nlohmann/json.hpp>

#include <chrono>
#include <exception>
#include <fstream>
#include <memory>
#include <sstream>
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

// Rules (ids in file order): 0 passes the header's client on with [proxy=v2] and denies one
// address; 1 trusts no address of this topology; 2 takes headers and sends none.
constexpr uint16_t kPassOnPort = 9000, kUntrustedPort = 9001, kPlainPort = 9002;
constexpr uint16_t kBackendPort = 9100;
constexpr const char* kDeniedClient = "198.51.100.66";
constexpr auto kHeaderTimeout = 200ms;

in_addr V4(const char* text) {
  in_addr a{};
  inet_pton(AF_INET, text, &a);
  return a;
}

in6_addr V6(const char* text) {
  in6_addr a{};
  inet_pton(AF_INET6, text, &a);
  return a;
}

// A reset the client sees: recv fails with ECONNRESET within `limit`.
bool ResetWithin(int fd, std::chrono::milliseconds limit) {
  pollfd p{fd, POLLIN, 0};
  if (poll(&p, 1, static_cast<int>(limit.count())) != 1) return false;
  char byte;
  return recv(fd, &byte, 1, 0) < 0 && errno == ECONNRESET;
}

void Send(int fd, const std::string& bytes) {
  ASSERT_EQ(send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL), static_cast<ssize_t>(bytes.size()));
}

class AcceptProxyTest : public ::testing::TestWithParam<const char*> {
 protected:
  void SetUp() override {
    if (geteuid() != 0) GTEST_SKIP() << "namespace tests need root";
    topo_ = std::make_unique<Topology>();
    const std::string gw = ToString(topo_->client_gw()), server = ToString(topo_->server_addr());
    const std::string client = ToString(topo_->client_addr());
    {
      std::ofstream f(config_);
      f << gw << " " << kPassOnPort << " " << server << " " << kBackendPort
        << " [accept-proxy, accept-proxy-timeout=" << kHeaderTimeout.count() << "ms, proxy=v2]\n"
        << "proxy-from " << client << "\n"
        << "deny " << kDeniedClient << "\n"
        << gw << " " << kUntrustedPort << " " << server << " " << kBackendPort
        << " [accept-proxy]\n"
        << "proxy-from 192.0.2.*\n"
        << gw << " " << kPlainPort << " " << server << " " << kBackendPort << " [accept-proxy]\n"
        << "proxy-from " << client.substr(0, client.rfind('.') + 1) << "*\n"
        << "logfile " << log_ << "\n";
    }
    backend_ = TcpListen(topo_->server_ns(), topo_->server_addr(), kBackendPort);
    fwd_ = ForwarderProcess::WithConfig(GetParam(), config_);
  }

  UniqueFd Connect(uint16_t port) {
    UniqueFd c = TcpConnect(topo_->client_ns(), topo_->client_gw(), port);
    const int one = 1;  // each write its own segment (the split-header test)
    setsockopt(c.get(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    return c;
  }

  // Sends `bytes` on `port`, ends the stream and returns what the backend read, or "" when no
  // connection reached it within a second; the client reads the backend's "ok".
  std::string Relay(uint16_t port, const std::string& bytes) {
    std::string got;
    std::thread backend([&] { got = ServeOnce(); });
    UniqueFd c = Connect(port);
    Send(c.get(), bytes);
    shutdown(c.get(), SHUT_WR);
    std::string reply;
    char buf[64];
    for (ssize_t n; (n = recv(c.get(), buf, sizeof buf, 0)) > 0;) reply.append(buf, n);
    backend.join();
    EXPECT_EQ(reply, got.empty() ? "" : "ok");
    return got;
  }

  // One connection: read to its end, answer "ok", close.
  std::string ServeOnce() {
    pollfd p{backend_.get(), POLLIN, 0};
    if (poll(&p, 1, 1000) != 1) return "";
    UniqueFd c(accept4(backend_.get(), nullptr, nullptr, SOCK_CLOEXEC));
    std::string got;
    char buf[4096];
    for (ssize_t n; (n = recv(c.get(), buf, sizeof buf, 0)) > 0;) got.append(buf, n);
    (void)send(c.get(), "ok", 2, MSG_NOSIGNAL);
    return got;
  }

  bool BackendSawNothing() {
    pollfd p{backend_.get(), POLLIN, 0};
    return poll(&p, 1, 0) == 0;
  }

  // The path's counter once it reaches `n` (or the last value after the wait).
  uint64_t WaitFor(const std::string& counter, uint64_t n) {
    return fwd_->Relay(
        fwd_->WaitForStats([&](const auto& s) { return fwd_->Relay(s, counter) >= n; }, 5s),
        counter);
  }

  // One rule's counter from `show counters`.
  uint64_t RuleCounter(int rule, const std::string& counter) {
    const nlohmann::json j = nlohmann::json::parse(fwd_->Control("show counters"));
    for (const char* path : {"kernel_path", "fast_path"}) {
      if (!j.contains(path)) continue;
      for (const nlohmann::json& r : j[path]["rules"]) {
        if (r["rule"] == std::to_string(rule)) return r[counter].get<uint64_t>();
      }
    }
    return 0;
  }

  // Stops the forwarder (which flushes the access log) and returns the log's lines.
  std::vector<std::string> StopAndReadLog() {
    EXPECT_EQ(fwd_->Stop(), 0);
    std::ifstream f(log_);
    std::vector<std::string> lines;
    for (std::string line; std::getline(f, line);) lines.push_back(line);
    return lines;
  }

  // Whether a line of the access log names `client` and ends in `result`.
  static bool Logged(const std::vector<std::string>& log, const std::string& client,
                     const std::string& result) {
    for (const std::string& line : log) {
      if (line.find("\t" + client + "\t") != std::string::npos && line.size() >= result.size() &&
          line.compare(line.size() - result.size(), result.size(), result) == 0) {
        return true;
      }
    }
    return false;
  }

  std::unique_ptr<Topology> topo_;
  TempDir dir_;
  const std::string config_ = dir_.File("xdpfwd.conf"), log_ = dir_.File("access.log");
  UniqueFd backend_;
  std::unique_ptr<ForwarderProcess> fwd_;
};

// (a) v1 and v2 headers, an IPv6 client in a header that came over IPv4: the backend reads the
// stream without the header; with [proxy=v2] its own header names the received header's ends.
TEST_P(AcceptProxyTest, BackendGetsTheStreamAndTheHeadersClient) {
  const std::string payload = "GET / HTTP/1.0\r\n\r\n";
  const in_addr v4_client = V4("203.0.113.7"), v4_dest = V4("198.18.0.1");
  const in6_addr v6_client = V6("2001:db8::7"), v6_dest = V6("2001:db8::1");

  EXPECT_EQ(Relay(kPlainPort, ProxyV1(V4("203.0.113.7"), 4242, V4("198.18.0.1"), 443) + payload),
            payload);
  EXPECT_EQ(Relay(kPassOnPort, ProxyV1(V4("203.0.113.7"), 4242, V4("198.18.0.1"), 443) + payload),
            ProxyV2(v4_client, 4242, v4_dest, 443) + payload);
  EXPECT_EQ(Relay(kPassOnPort, ProxyV2(v4_client, 4343, v4_dest, 80) + payload),
            ProxyV2(v4_client, 4343, v4_dest, 80) + payload);
  EXPECT_EQ(Relay(kPassOnPort, ProxyV2(v6_client, 4444, v6_dest, 8443) + payload),
            ProxyV2(v6_client, 4444, v6_dest, 8443) + payload);
  // v2's LOCAL command names nobody: the connection's own ends stand.
  const std::string got = Relay(kPassOnPort, ProxyV2Local() + payload);
  const std::string own = ProxyV2(topo_->client_addr(), 0, topo_->client_gw(), kPassOnPort);
  ASSERT_EQ(got.size(), own.size() + payload.size());
  EXPECT_EQ(got.substr(0, 24), own.substr(0, 24));  // up to the client's port, which varies
  EXPECT_EQ(got.substr(26), own.substr(26) + payload);

  EXPECT_EQ(WaitFor("completed", 5), 5u) << fwd_->output();
  const auto stats = fwd_->Stats();
  EXPECT_EQ(fwd_->Relay(stats, "proxy_headers"), 5u);
  EXPECT_EQ(fwd_->Relay(stats, "accepted"), 5u);
  EXPECT_EQ(fwd_->Relay(stats, "bytes_to_backend"), 5 * payload.size());  // no header counted
  const auto log = StopAndReadLog();
  EXPECT_TRUE(Logged(log, "203.0.113.7", "done-remote-closed")) << log.size();
  EXPECT_TRUE(Logged(log, "2001:db8::7", "done-remote-closed")) << log.size();
}

// (b) A sender not of the rule's proxy-from lines is reset at once, before any header.
TEST_P(AcceptProxyTest, UntrustedSenderIsReset) {
  // The reset follows the handshake's last ACK, within microseconds on the fast path: connect
  // itself may already find it (Linux reports it when the caller wakes after it came).
  bool reset = false;
  try {
    UniqueFd c = Connect(kUntrustedPort);
    reset = ResetWithin(c.get(), 1s);
  } catch (const std::exception& e) {
    reset = std::string(e.what()).find("reset by peer") != std::string::npos;
    EXPECT_TRUE(reset) << e.what();
  }
  EXPECT_TRUE(reset);
  EXPECT_EQ(WaitFor("proxy_untrusted", 1), 1u) << fwd_->output();
  EXPECT_EQ(RuleCounter(1, "proxy_untrusted"), 1u);
  EXPECT_EQ(fwd_->Relay(fwd_->Stats(), "accepted"), 0u);
  EXPECT_TRUE(BackendSawNothing());
  EXPECT_TRUE(Logged(StopAndReadLog(), ToString(topo_->client_addr()), "proxy-refused"));
}

// (c) Not a header, or the client's end before a whole one: reset, proxy_invalid.
TEST_P(AcceptProxyTest, MalformedOrUnfinishedHeaderIsReset) {
  UniqueFd c = Connect(kPlainPort);
  Send(c.get(), "GET / HTTP/1.0\r\n\r\n");
  EXPECT_TRUE(ResetWithin(c.get(), 1s));
  UniqueFd d = Connect(kPlainPort);
  Send(d.get(), "PROXY TCP4 203.0.113.7 ");
  shutdown(d.get(), SHUT_WR);
  EXPECT_TRUE(ResetWithin(d.get(), 1s));
  EXPECT_EQ(WaitFor("proxy_invalid", 2), 2u) << fwd_->output();
  EXPECT_EQ(RuleCounter(2, "proxy_invalid"), 2u);
  EXPECT_EQ(fwd_->Relay(fwd_->Stats(), "accepted"), 0u);
  EXPECT_TRUE(BackendSawNothing());
  EXPECT_TRUE(Logged(StopAndReadLog(), ToString(topo_->client_addr()), "proxy-refused"));
}

// (d) No whole header within accept-proxy-timeout: reset once it passes, not before.
TEST_P(AcceptProxyTest, NoHeaderInTimeIsReset) {
  const auto start = std::chrono::steady_clock::now();  // before the forwarder's accept
  UniqueFd c = Connect(kPassOnPort);
  Send(c.get(), "PROXY TCP4 ");  // a beginning, never finished
  EXPECT_TRUE(ResetWithin(c.get(), 2s));
  const auto took = std::chrono::steady_clock::now() - start;
  EXPECT_GE(took, kHeaderTimeout);
  EXPECT_LT(took, 1500ms);
  EXPECT_EQ(WaitFor("proxy_timeout", 1), 1u) << fwd_->output();
  EXPECT_EQ(RuleCounter(0, "proxy_timeout"), 1u);
  EXPECT_TRUE(BackendSawNothing());
  EXPECT_TRUE(Logged(StopAndReadLog(), ToString(topo_->client_addr()), "proxy-refused"));
}

// (e) A header that arrives in pieces, 50 ms apart, with the stream's first bytes in its last.
TEST_P(AcceptProxyTest, HeaderSplitAcrossWrites) {
  for (const std::string& header : {ProxyV1(V4("203.0.113.7"), 4242, V4("198.18.0.1"), 443),
                                    ProxyV2(V4("203.0.113.7"), 4242, V4("198.18.0.1"), 443)}) {
    std::string got;
    std::thread backend([&] { got = ServeOnce(); });
    UniqueFd c = Connect(kPlainPort);
    Send(c.get(), header.substr(0, 7));
    std::this_thread::sleep_for(50ms);  // what the test is about, not a synchronisation
    Send(c.get(), header.substr(7) + "hello");
    shutdown(c.get(), SHUT_WR);
    char buf[8];
    EXPECT_EQ(recv(c.get(), buf, sizeof buf, MSG_WAITALL), 2);
    backend.join();
    EXPECT_EQ(got, "hello");
  }
  EXPECT_EQ(WaitFor("proxy_headers", 2), 2u) << fwd_->output();
}

// (f) Allow/deny look at the header's client, not at the proxy that sent it.
TEST_P(AcceptProxyTest, DenyAppliesToTheHeadersClient) {
  UniqueFd c = Connect(kPassOnPort);
  Send(c.get(), ProxyV1(V4(kDeniedClient), 4242, V4("198.18.0.1"), 443));
  pollfd p{c.get(), POLLIN, 0};
  ASSERT_EQ(poll(&p, 1, 1000), 1);
  char byte;
  const ssize_t n = recv(c.get(), &byte, 1, 0);
  EXPECT_TRUE(n == 0 || (n < 0 && errno == ECONNRESET)) << n;  // closed, without a byte
  EXPECT_EQ(WaitFor("denied", 1), 1u) << fwd_->output();
  EXPECT_EQ(RuleCounter(0, "denied"), 1u);
  EXPECT_EQ(fwd_->Relay(fwd_->Stats(), "accepted"), 0u);
  EXPECT_TRUE(BackendSawNothing());
  EXPECT_TRUE(Logged(StopAndReadLog(), kDeniedClient, "denied"));
}

INSTANTIATE_TEST_SUITE_P(Paths, AcceptProxyTest, ::testing::Values("xdp", "kernel"),
                         [](const auto& p) { return std::string(p.param); });

}  // namespace
}  // namespace xdpfwd::test
