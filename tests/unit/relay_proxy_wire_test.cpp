// [accept-proxy] on the fast path's relay, in-process (support/relay_wire_fixture.h): the
// client's PROXY header read before any backend leg, dropped, and its client passed on; what is
// refused (an untrusted peer, a malformed header, none in time) is reset and counted, a client
// the allow/deny lines refuse is closed, and none reaches a backend.
#include <string>

#include "tests/support/relay_wire_fixture.h"

namespace xdpfwd::test {
namespace {

class RelayProxyWireTest : public RelayWireTest {
 protected:
  // A rule that takes PROXY headers from `from` (a glob over the peer's address), within
  // `timeout_ms`, and sends v1 toward its backend.
  RelayConfig ProxyConfig(const std::string& from = "*", uint32_t timeout_ms = 1000) {
    RelayConfig c = Config();
    c.rules[0].accept_proxy = AcceptProxy{true, timeout_ms, {AccessPattern{true, from, 0}}};
    c.rules[0].proxy = ProxyVersion::kV1;
    return c;
  }
};

// A v2 header naming 192.0.2.7:5555 → 10.0.1.1:9000, then the stream's own bytes.
std::string V2Header() {
  return std::string("\r\n\r\n\0\r\nQUIT\n", 12) +
         std::string("\x21\x11\x00\x0c\xc0\x00\x02\x07\x0a\x00\x01\x01\x15\xb3\x23\x28", 16);
}

TEST_F(RelayProxyWireTest, HeaderIsReadDroppedAndItsClientPassedOn) {
  ASSERT_NO_FATAL_FAILURE(StartRelay(ProxyConfig()));
  Peer* client = Connect(40000);
  Settle();
  ASSERT_TRUE(client->connected);
  EXPECT_TRUE(backends_.empty()) << "a backend leg opened before the header";
  EXPECT_EQ(Count(&RelayCounters::accepted), 0u) << "accepted counts from the header on";
  EXPECT_EQ(Count(&RelayCounters::active), 1u);
  const std::string header = V2Header();
  client->Send(header.substr(0, 10));  // the header in two pieces
  Settle();
  EXPECT_TRUE(backends_.empty());
  client->Send(header.substr(10) + "hello");
  Settle();
  ASSERT_EQ(backends_.size(), 1u);
  Peer& backend = *backends_.front();
  // The backend's own v1 header names the client the v2 header named; the v2 bytes are gone.
  EXPECT_EQ(backend.received, "PROXY TCP4 192.0.2.7 10.0.1.1 5555 9000\r\nhello");
  EXPECT_EQ(Count(&RelayCounters::proxy_headers), 1u);
  EXPECT_EQ(Count(&RelayCounters::accepted), 1u);
  EXPECT_EQ(Count(&RelayCounters::bytes_to_backend), 5u);
  backend.Send("world");
  Settle();
  EXPECT_EQ(client->received, "world");
  // A second client's header names no one (LOCAL): its own address stands.
  Peer* local = Connect(40001);
  local->Send(std::string("\r\n\r\n\0\r\nQUIT\n\x20\x00\x00\x00", 16) + "x");
  Settle();
  ASSERT_EQ(backends_.size(), 2u);
  EXPECT_EQ(backends_.back()->received, "PROXY TCP4 10.0.0.2 10.0.0.1 40001 7000\r\nx");
  CloseBoth(*client, backend);
  CloseBoth(*local, *backends_.back());
  EXPECT_EQ(relay_->state().connections, 0u);
}

TEST_F(RelayProxyWireTest, AnUntrustedPeerIsResetAtAccept) {
  ASSERT_NO_FATAL_FAILURE(StartRelay(ProxyConfig("192.0.2.*")));
  Peer* client = Connect(40000);
  Settle();
  EXPECT_TRUE(client->errored);
  EXPECT_EQ(client->error, ERR_RST);
  EXPECT_EQ(Count(&RelayCounters::proxy_untrusted), 1u);
  EXPECT_EQ(Count(&RelayCounters::accepted), 0u);
  EXPECT_TRUE(backends_.empty());
}

TEST_F(RelayProxyWireTest, AMalformedHeaderOrAnEndBeforeOneIsReset) {
  ASSERT_NO_FATAL_FAILURE(StartRelay(ProxyConfig()));
  Peer* http = Connect(40000);
  Settle();
  http->Send("GET / HTTP/1.0\r\n\r\n");
  Settle();
  EXPECT_TRUE(http->errored);
  EXPECT_EQ(Count(&RelayCounters::proxy_invalid), 1u);
  Peer* quits = Connect(40001);
  Settle();
  quits->Send("PROXY TCP4 ", /*then_shutdown=*/true);
  Settle();
  EXPECT_TRUE(quits->errored);
  EXPECT_EQ(Count(&RelayCounters::proxy_invalid), 2u);
  EXPECT_TRUE(backends_.empty());
  EXPECT_EQ(Count(&RelayCounters::accepted), 0u);
  EXPECT_EQ(relay_->state().connections, 0u);
}

TEST_F(RelayProxyWireTest, NoWholeHeaderInTimeIsReset) {
  ASSERT_NO_FATAL_FAILURE(StartRelay(ProxyConfig("*", 300)));
  Peer* slow = Connect(40000);
  Settle();
  slow->Send("PROXY TCP4 192.0.2.7");
  Advance(200);
  EXPECT_FALSE(slow->errored) << "reset before its timeout";
  Advance(200);
  EXPECT_TRUE(slow->errored);
  EXPECT_EQ(Count(&RelayCounters::proxy_timeout), 1u);
  EXPECT_TRUE(backends_.empty());
}

// The allow/deny lines judge the client the header names, not the proxy that sent it.
TEST_F(RelayProxyWireTest, AccessIsCheckedOnTheHeadersClient) {
  RelayConfig config = ProxyConfig();
  config.rules[0].access = {AccessPattern{false, "192.0.2.7", 0}};
  ASSERT_NO_FATAL_FAILURE(StartRelay(config));
  Peer* denied = Connect(40000);
  denied->Send("PROXY TCP4 192.0.2.7 10.0.1.1 5555 9000\r\n");
  Settle();
  EXPECT_TRUE(denied->got_fin) << "refused as any client is: closed";
  EXPECT_FALSE(denied->errored);
  EXPECT_EQ(Count(&RelayCounters::denied), 1u);
  EXPECT_EQ(Count(&RelayCounters::accepted), 0u);
  EXPECT_EQ(Count(&RelayCounters::active), 0u);
  EXPECT_TRUE(backends_.empty());
  Peer* allowed = Connect(40001);
  allowed->Send("PROXY TCP4 192.0.2.8 10.0.1.1 5556 9000\r\n");
  Settle();
  ASSERT_EQ(backends_.size(), 1u);
  EXPECT_EQ(backends_.front()->received, "PROXY TCP4 192.0.2.8 10.0.1.1 5556 9000\r\n");
  CloseBoth(*allowed, *backends_.front());
}

}  // namespace
}  // namespace xdpfwd::test
