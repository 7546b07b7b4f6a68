// [retry-on=empty-response] on the fast path's relay, in-process (support/relay_wire_fixture.h):
// a backend that ends its established connection (reset or FIN) before answering hands the
// client's bytes to another backend, and the client never learns; one that answered, or a
// request past kRetryBytes, is not retried.
#include <string>

#include "tests/support/relay_wire_fixture.h"

namespace xdpfwd::test {
namespace {

constexpr uint16_t kSecondPort = 9002;

class RelayRetryWireTest : public RelayWireTest {
 protected:
  void SetUp() override {
    RelayWireTest::SetUp();
    second_ = LwipWire::ListenOnB(kSecondPort, this, AcceptBackend);
    ASSERT_NE(second_, nullptr);
  }
  void TearDown() override {
    EXPECT_EQ(tcp_close(second_), ERR_OK);  // before the fixture counts listeners
    RelayWireTest::TearDown();
  }
  // Two backends (round robin: the first connection goes to kBackendPort), retry on or off.
  void Start(bool retry) {
    RelayConfig config = Config();
    config.rules[0].more_backends = {RelayBackend{{LwipWire::InAddrB(), kSecondPort}, 1, false}};
    config.rules[0].retry_empty_response = retry;
    ASSERT_NO_FATAL_FAILURE(StartRelay(config));
  }
  // A client whose request reached the first backend.
  Pair Requested(const std::string& request) {
    Pair p = Open(40000);
    if (p.backend == nullptr) return p;
    p.client->Send(request);
    Settle();
    EXPECT_EQ(p.backend->received, request);
    return p;
  }
  // The first backend resets; not retried: the client sees the reset, no second backend leg.
  void ExpectResetReachesTheClient(const Pair& p) {
    p.backend->Abort();
    Settle();
    EXPECT_TRUE(p.client->errored);
    EXPECT_EQ(backends_.size(), 1u);
    EXPECT_EQ(Count(&RelayCounters::backend_retries), 0u);
  }

  tcp_pcb* second_ = nullptr;
};

TEST_F(RelayRetryWireTest, AResetBeforeAnyAnswerGoesToTheNextBackend) {
  ASSERT_NO_FATAL_FAILURE(Start(true));
  Pair p = Requested("GET /a");
  ASSERT_NE(p.backend, nullptr);
  p.backend->Abort();  // dies with the request read, unanswered
  Settle();
  ASSERT_EQ(backends_.size(), 2u) << "no second backend leg";
  Peer& second = *backends_.back();
  EXPECT_EQ(second.received, "GET /a");
  EXPECT_FALSE(p.client->errored);
  EXPECT_EQ(Count(&RelayCounters::backend_retries), 1u);
  second.Send("200 ok");
  Settle();
  EXPECT_EQ(p.client->received, "200 ok");
  p.client->Send("more");
  Settle();
  EXPECT_EQ(second.received, "GET /amore");  // the kept bytes once, then the stream
  CloseBoth(*p.client, second);
}

// A FIN with no answer, after the client's own FIN: the request and the FIN both go again.
TEST_F(RelayRetryWireTest, AnEmptyCloseAfterTheClientsFinIsRetriedWithTheFin) {
  ASSERT_NO_FATAL_FAILURE(Start(true));
  Pair p = Requested("GET /b");
  ASSERT_NE(p.backend, nullptr);
  p.client->Shutdown();
  Settle();
  EXPECT_TRUE(p.backend->got_fin);
  p.backend->Shutdown();  // closes without a byte
  Settle();
  ASSERT_EQ(backends_.size(), 2u);
  Peer& second = *backends_.back();
  EXPECT_EQ(second.received, "GET /b");
  EXPECT_TRUE(second.got_fin) << "the client's FIN did not follow the request";
  EXPECT_FALSE(p.client->got_fin) << "the first backend's empty FIN reached the client";
  second.Send("200 ok");
  second.Shutdown();
  Settle();
  EXPECT_EQ(p.client->received, "200 ok");
  EXPECT_TRUE(p.client->got_fin);
  EXPECT_EQ(Count(&RelayCounters::backend_retries), 1u);
  p.client->Close();
  second.Close();
  Settle();
  EXPECT_EQ(Count(&RelayCounters::completed), 1u);
}

TEST_F(RelayRetryWireTest, WithoutTheOptionTheClientSeesTheReset) {
  ASSERT_NO_FATAL_FAILURE(Start(false));
  Pair p = Requested("GET /c");
  ASSERT_NE(p.backend, nullptr);
  ExpectResetReachesTheClient(p);
}

TEST_F(RelayRetryWireTest, ABackendThatAnsweredIsNotRetried) {
  ASSERT_NO_FATAL_FAILURE(Start(true));
  Pair p = Requested("GET /d");
  ASSERT_NE(p.backend, nullptr);
  p.backend->Send("2");
  Settle();
  ExpectResetReachesTheClient(p);
  EXPECT_EQ(p.client->received, "2");
}

TEST_F(RelayRetryWireTest, MoreThanTheKeptBytesIsNotRetried) {
  ASSERT_NO_FATAL_FAILURE(Start(true));
  Pair p = Requested(Pattern('r', kRetryBytes + 1));
  ASSERT_NE(p.backend, nullptr);
  ExpectResetReachesTheClient(p);
}

}  // namespace
}  // namespace xdpfwd::test
