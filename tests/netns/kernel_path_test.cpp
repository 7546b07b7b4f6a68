// KernelPath driven directly in a namespace topology (tests/netns/kernel_path_fixture.h): bulk
// both ways at once (splice and copy), many concurrent connections, half-close, resets in both
// directions and busy-polling, in both relay modes. Refused and silent backends, timeouts,
// limits, IPv6, start-up errors and descriptors are in kernel_path_limits_test.cpp; the
// backend-port tests (xdpfwd in a namespace with a tiny port range) in kernel_path_ports_test.cpp.
#include <gtest/gtest-spi.h>
#include <gtest/gtest.h>

#include "tests/netns/kernel_path_fixture.h"

namespace xdpfwd::test {
namespace {

class KernelPathModeTest : public KernelPathTest, public ::testing::WithParamInterface<bool> {};

std::string ModeName(const ::testing::TestParamInfo<bool>& info) {
  return info.param ? "Splice" : "Copy";
}

// 64 MiB each way at the same time on one connection; every byte arrives, in order, and the
// counters say which mechanism moved them.
TEST_P(KernelPathModeTest, BulkBothWaysAtOnce) {
  const bool splice = GetParam();
  constexpr uint64_t kBytes = 64 * kMiB;
  StreamStats backend_sent, backend_received;
  Backend backend(BackendListener(), [&](int fd) {
    auto sending = std::async(std::launch::async, [fd] { return SendPattern(fd, 2, kBytes); });
    backend_received = ReceiveAll(fd);
    backend_sent = sending.get();
  });
  auto path = Start(Config(splice));

  const auto start = Clock::now();
  UniqueFd client = Client();
  auto sending =
      std::async(std::launch::async, [fd = client.get()] { return SendPattern(fd, 1, kBytes); });
  const StreamStats client_received = ReceiveAll(client.get());
  const StreamStats client_sent = sending.get();
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  ASSERT_TRUE(backend.WaitServed(1));
  EXPECT_EQ(backend.failures(), "");

  EXPECT_EQ(backend_received.bytes, kBytes);
  EXPECT_EQ(backend_received.hash, client_sent.hash);
  EXPECT_EQ(client_received.bytes, kBytes);
  EXPECT_EQ(client_received.hash, backend_sent.hash);

  WaitFor(
      *path, [](const RelayTotals& r) { return r.completed == 1 && r.active == 0; },
      "connection completes");
  const KernelPathTotals t = path->Totals();
  EXPECT_EQ(t.relay.accepted, 1u);
  EXPECT_EQ(t.relay.bytes_to_backend, kBytes);
  EXPECT_EQ(t.relay.bytes_to_client, kBytes);
  EXPECT_EQ(splice ? t.splice_bytes : t.copy_bytes, 2 * kBytes) << t.Format();
  EXPECT_EQ(splice ? t.copy_bytes : t.splice_bytes, 0u) << t.Format();
  EXPECT_EQ(t.errors, 0u);
  ExpectAccountedFor(t);
  const uint64_t calls = splice ? t.splice_calls : t.copy_calls;
  // For orientation only: both ends generate and hash every byte in this same process, which
  // bounds the rate far below the relay's own (iperf3 for that).
  std::printf("[ kernel path ] %s: 2 x 64 MiB in %.2f s, %.1f %s calls per MiB\n",
              splice ? "splice" : "copy", seconds, static_cast<double>(calls) / (2 * 64),
              splice ? "splice" : "recv/send");
}

// Client sends its request and shuts down its write side; the backend reads to the end before
// it answers, so the answer only arrives if the forwarder relayed the FIN and kept the other
// direction open.
TEST_P(KernelPathModeTest, HalfCloseKeepsTheOtherDirection) {
  constexpr uint64_t kRequest = 1 * kMiB, kResponse = 4 * kMiB;
  StreamStats request, response;
  Backend backend(BackendListener(), [&](int fd) {
    request = ReceiveAll(fd);
    response = SendPattern(fd, 7, kResponse);
  });
  auto path = Start(Config(GetParam()));

  UniqueFd client = Client();
  const StreamStats sent = SendPattern(client.get(), 6, kRequest);  // ends with SHUT_WR
  const StreamStats received = ReceiveAll(client.get());
  ASSERT_TRUE(backend.WaitServed(1));
  EXPECT_EQ(backend.failures(), "");
  EXPECT_EQ(request.bytes, kRequest);
  EXPECT_EQ(request.hash, sent.hash);
  EXPECT_EQ(received.bytes, kResponse);
  EXPECT_EQ(received.hash, response.hash);
  WaitFor(
      *path, [](const RelayTotals& r) { return r.completed == 1 && r.active == 0; },
      "connection completes");
  ExpectAccountedFor(path->Totals());
}

// 200 connections open at the same time (two loop threads), each echoing its own stream.
TEST_P(KernelPathModeTest, TwoHundredConcurrentEchoes) {
  constexpr int kConnections = 200;
  constexpr uint64_t kBytes = 16 * 1024;  // fits the socket buffers: no reader needed yet
  Backend backend(BackendListener(), [](int fd) { EchoUntilEof(fd); });
  auto path = Start(Config(GetParam()));

  std::vector<UniqueFd> clients;
  for (int i = 0; i < kConnections; ++i) clients.push_back(Client());
  WaitFor(
      *path, [](const RelayTotals& r) { return r.active == kConnections; },
      "every connection open at once");

  std::vector<StreamStats> sent;
  for (int i = 0; i < kConnections; ++i) {
    sent.push_back(SendPattern(clients[i].get(), 100 + static_cast<uint64_t>(i), kBytes));
  }
  for (int i = 0; i < kConnections; ++i) {
    const StreamStats echoed = ReceiveAll(clients[i].get());
    EXPECT_EQ(echoed.bytes, kBytes) << "connection " << i;
    EXPECT_EQ(echoed.hash, sent[i].hash) << "connection " << i;
  }
  ASSERT_TRUE(backend.WaitServed(kConnections));
  EXPECT_EQ(backend.failures(), "");
  WaitFor(
      *path, [](const RelayTotals& r) { return r.completed == kConnections && r.active == 0; },
      "every connection completes");
  const KernelPathTotals t = path->Totals();
  EXPECT_EQ(t.relay.bytes_to_backend, kConnections * kBytes);
  EXPECT_EQ(t.relay.bytes_to_client, kConnections * kBytes);
  EXPECT_EQ(t.errors, 0u);
  ExpectAccountedFor(t);
}

// The backend sends part of a response and then resets: the client must see a reset, not an
// orderly end that would make the truncated response look complete.
TEST_P(KernelPathModeTest, BackendResetReachesTheClient) {
  constexpr size_t kPart = 256 * 1024;
  Backend backend(BackendListener(), [&](int fd) {
    std::vector<uint8_t> part(kPart, 0x5a);
    SendAll(fd, part.data(), part.size());
    char go = 0;
    RecvExactly(fd, &go, 1);
    ArmReset(fd);  // closed with a RST when serve returns
  });
  auto path = Start(Config(GetParam()));

  UniqueFd client = Client();
  std::vector<uint8_t> part(kPart);
  RecvExactly(client.get(), part.data(), part.size());  // mid-stream: the relay works
  SendAll(client.get(), "g", 1);
  const Ending end = ReadToEnd(client.get());
  EXPECT_EQ(end.err, ECONNRESET) << "bytes after the reset: " << end.bytes;
  WaitFor(
      *path, [](const RelayTotals& r) { return r.backend_reset == 1 && r.active == 0; },
      "counted as backend_reset");
  ExpectAccountedFor(path->Totals());
}

// The client aborts mid-stream: the backend must see a reset.
TEST_P(KernelPathModeTest, ClientAbortReachesTheBackend) {
  constexpr uint64_t kPart = 256 * 1024;
  std::atomic<uint64_t> received{0};
  Ending backend_end;
  Backend backend(BackendListener(), [&](int fd) {
    std::vector<uint8_t> buf(64 * 1024);
    for (;;) {
      const ssize_t n = recv(fd, buf.data(), buf.size(), 0);
      if (n <= 0) {
        backend_end.err = n == 0 ? 0 : errno;
        return;
      }
      received += static_cast<uint64_t>(n);
    }
  });
  auto path = Start(Config(GetParam()));

  UniqueFd client = Client();
  std::vector<uint8_t> part(kPart, 0xa5);
  SendAll(client.get(), part.data(), part.size());
  ASSERT_TRUE(Eventually([&] { return received.load() == kPart; })) << received.load();
  ArmReset(client.get());
  client.reset();
  ASSERT_TRUE(backend.WaitServed(1));
  EXPECT_EQ(backend_end.err, ECONNRESET);
  WaitFor(
      *path, [](const RelayTotals& r) { return r.client_reset == 1 && r.active == 0; },
      "counted as client_reset");
  ExpectAccountedFor(path->Totals());
}

// A client that has sent its FIN and then drops the connection while the response streams:
// its leg on the forwarder goes CLOSE_WAIT -> reset, and the next write into it fails with
// EPIPE. splice(2) has no MSG_NOSIGNAL, so unless the loop threads block SIGPIPE this kills
// the process. Repeated, because the write must race the EPOLLERR that also reports it.
TEST_P(KernelPathModeTest, ClientGoneWhileResponseStreams) {
  constexpr int kRounds = 20;
  Backend backend(BackendListener(), [](int fd) {
    char request;
    RecvExactly(fd, &request, 1);
    std::vector<uint8_t> chunk(256 * 1024, 3);
    try {
      for (;;) SendAll(fd, chunk.data(), chunk.size());
    } catch (const std::runtime_error&) {
      // The reset arrived: how this backend is meant to end.
    }
  });
  auto path = Start(Config(GetParam()));
  for (int i = 0; i < kRounds; ++i) {
    UniqueFd client = Client();
    SendAll(client.get(), "r", 1);
    shutdown(client.get(), SHUT_WR);
    std::vector<uint8_t> part(kMiB);
    RecvExactly(client.get(), part.data(), part.size());
    client.reset();  // unread bytes: the kernel sends a RST
  }
  ASSERT_TRUE(backend.WaitServed(kRounds));
  WaitFor(
      *path, [](const RelayTotals& r) { return r.client_reset == kRounds && r.active == 0; },
      "every round counted as client_reset");
  ExpectAccountedFor(path->Totals());
}

// busy_poll: the loop never sleeps (empty polls keep coming while nothing happens and no
// deadline is pending, where a sleeping loop makes none) and relays as it does asleep: small
// request/response exchanges as in the latency benchmark, then a stream both ways. One thread,
// since it keeps a CPU busy.
TEST_P(KernelPathModeTest, BusyPollRelaysWithoutSleeping) {
  const bool splice = GetParam();
  Backend backend(BackendListener(), [](int fd) { EchoUntilEof(fd); });
  KernelPathConfig config = Config(splice);
  config.threads = 1;
  config.busy_poll = true;
  auto path = Start(config);

  UniqueFd client = Client();
  constexpr int kExchanges = 2000;
  constexpr size_t kMessage = 32;
  PatternStream pattern(77);  // every message differs, so a reply can only be its own echo
  for (int i = 0; i < kExchanges; ++i) {
    uint8_t sent[kMessage], echoed[kMessage];
    pattern.Fill(sent, kMessage);
    SendAll(client.get(), sent, kMessage);
    RecvExactly(client.get(), echoed, kMessage);
    ASSERT_EQ(std::memcmp(sent, echoed, kMessage), 0) << "exchange " << i;
  }
  const uint64_t polls = path->Totals().empty_polls;
  EXPECT_TRUE(Eventually([&] { return path->Totals().empty_polls >= polls + 10000; }))
      << "the loop slept: " << path->Totals().Format();

  constexpr uint64_t kBytes = 16 * kMiB;
  auto sending =
      std::async(std::launch::async, [fd = client.get()] { return SendPattern(fd, 78, kBytes); });
  const StreamStats echoed = ReceiveAll(client.get());
  const StreamStats sent = sending.get();
  EXPECT_EQ(echoed.bytes, kBytes);
  EXPECT_EQ(echoed.hash, sent.hash);
  ASSERT_TRUE(backend.WaitServed(1));
  EXPECT_EQ(backend.failures(), "");
  WaitFor(
      *path, [](const RelayTotals& r) { return r.completed == 1 && r.active == 0; },
      "connection completes");
  const KernelPathTotals t = path->Totals();
  const uint64_t each_way = kExchanges * kMessage + kBytes;
  EXPECT_EQ(t.relay.bytes_to_backend, each_way);
  EXPECT_EQ(t.relay.bytes_to_client, each_way);
  EXPECT_EQ(splice ? t.splice_bytes : t.copy_bytes, 2 * each_way) << t.Format();
  EXPECT_EQ(t.errors, 0u) << t.Format();
  ExpectAccountedFor(t);
}

// A Backend whose serve function throws (here not even a std::exception) on its own thread:
// the owning test fails, with what was thrown; the binary goes on.
void BackendThatThrows() {
  in_addr loopback{};
  loopback.s_addr = htonl(INADDR_LOOPBACK);
  UniqueFd listener = TcpListen("", loopback);
  const uint16_t port = LocalPort(listener.get());
  Backend backend(std::move(listener), [](int) { throw 42; });
  UniqueFd client = TcpConnect("", loopback, port);
  EXPECT_TRUE(backend.WaitServed(1));
}

TEST(BackendHelper, AThrowOnItsThreadFailsTheTest) {
  EXPECT_NONFATAL_FAILURE(BackendThatThrows(),
                          "backend: an exception that is not a std::exception");
}

INSTANTIATE_TEST_SUITE_P(Modes, KernelPathModeTest, ::testing::Bool(), ModeName);

}  // namespace
}  // namespace xdpfwd::test
