// KernelPath driven directly in a namespace topology: it runs in the root namespace, clients
// connect from the client namespace to the root side of their veth, backends serve from the
// server namespace. Covers bulk both ways at once (splice and copy), many concurrent
// connections, half-close, resets in both directions, refused and silent backends, the idle
// timeout, max_connections, IPv6 and mixed-family rules, busy-polling, start-up errors, and
// descriptors. The backend-port tests (xdpfwd in a namespace with a tiny port range) are in
// kernel_path_ports_test.cpp.
#include <gtest/gtest-spi.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <functional>
#include <future>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "forwarder/kernel_path.h"
#include "forwarder/rules.h"
#include "tests/support/backend.h"
#include "tests/support/child_process.h"
#include "tests/support/connection_ends.h"
#include "tests/support/eventually.h"
#include "tests/support/netns_topology.h"
#include "tests/support/tcp.h"

namespace xdpfwd::test {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

// Ports on this test's own topology addresses only (each test builds its own topology).
constexpr uint16_t kListenPort = 9000;
constexpr uint16_t kBackendPort = 9100;
constexpr uint64_t kMiB = 1024 * 1024;

size_t OpenFds() {
  return static_cast<size_t>(std::distance(std::filesystem::directory_iterator("/proc/self/fd"),
                                           std::filesystem::directory_iterator()));
}

// The next close() sends a RST instead of a FIN.
void ArmReset(int fd) {
  const linger abort{1, 0};
  setsockopt(fd, SOL_SOCKET, SO_LINGER, &abort, sizeof(abort));
}

SocketAddress Address(const in_addr& addr, uint16_t port) {
  return FromEndpoint(Endpoint{addr, port});
}

SocketAddress Address(const std::string& text) {
  auto a = ParseSocketAddress(text);
  if (!a) throw std::runtime_error(a.error().message());
  return *a;
}

// Listening and connected sockets of either family, created inside `ns`.
UniqueFd ListenOn(const std::string& ns, const SocketAddress& at) {
  UniqueFd fd;
  RunInNamespace(ns, [&] {
    fd.reset(socket(at.family(), SOCK_STREAM | SOCK_CLOEXEC, 0));
    const int one = 1;
    setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (at.family() == AF_INET6) setsockopt(fd.get(), IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof(one));
    if (bind(fd.get(), at.get(), at.length) != 0 || listen(fd.get(), 1024) != 0) {
      throw std::runtime_error("listen " + ToString(at) + ": " + std::strerror(errno));
    }
  });
  return fd;
}

UniqueFd ConnectTo(const std::string& ns, const SocketAddress& to) {
  UniqueFd fd;
  RunInNamespace(ns, [&] {
    fd.reset(socket(to.family(), SOCK_STREAM | SOCK_CLOEXEC, 0));
    if (connect(fd.get(), to.get(), to.length) != 0) {
      throw std::runtime_error("connect " + ToString(to) + ": " + std::strerror(errno));
    }
  });
  BoundWaits(fd.get());
  return fd;
}

// How a stream ended for a reader.
struct Ending {
  uint64_t bytes = 0;
  int err = 0;  // 0: orderly end of stream (FIN); ECONNRESET: reset; ETIMEDOUT: neither in time
};

Ending ReadToEnd(int fd, std::chrono::milliseconds timeout = 10s) {
  const auto deadline = Clock::now() + timeout;
  std::vector<uint8_t> buf(64 * 1024);
  Ending end;
  for (;;) {
    const auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - Clock::now());
    if (left.count() <= 0) {
      end.err = ETIMEDOUT;
      return end;
    }
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, static_cast<int>(left.count())) <= 0) continue;
    const ssize_t n = recv(fd, buf.data(), buf.size(), MSG_DONTWAIT);
    if (n > 0) {
      end.bytes += static_cast<uint64_t>(n);
    } else if (n == 0) {
      return end;
    } else if (errno != EAGAIN && errno != EINTR) {
      end.err = errno;
      return end;
    }
  }
}

void SendAll(int fd, const void* data, size_t len) {
  const auto* p = static_cast<const uint8_t*>(data);
  while (len > 0) {
    const ssize_t n = send(fd, p, len, MSG_NOSIGNAL);
    if (n <= 0) throw std::runtime_error(std::string("send: ") + std::strerror(errno));
    p += n;
    len -= static_cast<size_t>(n);
  }
}

void RecvExactly(int fd, void* data, size_t len) {
  auto* p = static_cast<uint8_t*>(data);
  while (len > 0) {
    const ssize_t n = recv(fd, p, len, 0);
    if (n <= 0) {
      throw std::runtime_error(n == 0 ? "recv: early end of stream"
                                      : std::string("recv: ") + std::strerror(errno));
    }
    p += n;
    len -= static_cast<size_t>(n);
  }
}

// One round trip through an echo backend.
bool Ping(int fd, char tag = 'x') {
  char reply = 0;
  SendAll(fd, &tag, 1);
  RecvExactly(fd, &reply, 1);
  return reply == tag;
}

// Every accepted connection ended in exactly one way or is still open.
void ExpectAccountedFor(const KernelPathTotals& t) { ExpectEachEndedOnce(t.relay, t.Format()); }

class KernelPathTest : public ::testing::Test {
 protected:
  KernelPathConfig Config(bool use_splice = true) const {
    KernelPathConfig config;
    Rule rule;
    rule.listen = Address(topo_.client_gw(), kListenPort);
    rule.backend = Address(topo_.server_addr(), kBackendPort);
    config.rules.push_back(rule);
    config.threads = 2;  // more than one loop even on a one-CPU machine
    config.use_splice = use_splice;
    config.limits.max_connections = 1000;
    return config;
  }

  std::unique_ptr<KernelPath> Start(const KernelPathConfig& config) {
    auto path = KernelPath::Start(config);
    if (!path) throw std::runtime_error("KernelPath::Start: " + path.error().message());
    return std::move(*path);
  }

  UniqueFd BackendListener() const {
    return TcpListen(topo_.server_ns(), topo_.server_addr(), kBackendPort);
  }

  UniqueFd Client() const {
    UniqueFd fd = TcpConnect(topo_.client_ns(), topo_.client_gw(), kListenPort);
    BoundWaits(fd.get());
    return fd;
  }

  // Waits for a counter condition; on timeout the failure shows every counter.
  void WaitFor(KernelPath& path, const std::function<bool(const RelayTotals&)>& done,
               const char* what, std::chrono::milliseconds timeout = 10s) {
    const bool ok = Eventually([&] { return done(path.Totals().relay); }, timeout);
    EXPECT_TRUE(ok) << what << ": " << path.Totals().Format();
  }

  Topology topo_;
};

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

// Nothing listens on the backend port: the server namespace answers the SYN with a RST, and
// the client is reset at once.
TEST_F(KernelPathTest, RefusedBackendResetsTheClientPromptly) {
  auto path = Start(Config());
  UniqueFd client = Client();
  const auto start = Clock::now();
  const Ending end = ReadToEnd(client.get());
  EXPECT_EQ(end.err, ECONNRESET);
  EXPECT_LT(Clock::now() - start, 1s);
  WaitFor(
      *path, [](const RelayTotals& r) { return r.backend_refused == 1 && r.active == 0; },
      "counted as backend_refused");
  ExpectAccountedFor(path->Totals());
}

// A backend that never answers the SYN. Deterministic without a firewall: a listener with
// backlog 1 whose two accept-queue slots are taken (and never accepted) drops every further
// SYN silently (tcp_conn_request: accept queue full -> drop), so the forwarder's connect hangs
// until its own connect_timeout.
TEST_F(KernelPathTest, SilentBackendTimesOut) {
  UniqueFd listener = BackendListener();
  ASSERT_EQ(listen(listener.get(), 1), 0);  // listen() again only changes the backlog
  UniqueFd filler1 = TcpConnect(topo_.server_ns(), topo_.server_addr(), kBackendPort);
  UniqueFd filler2 = TcpConnect(topo_.server_ns(), topo_.server_addr(), kBackendPort);
  ASSERT_TRUE(Eventually([&] {
    tcp_info info{};
    socklen_t len = sizeof(info);
    getsockopt(listener.get(), IPPROTO_TCP, TCP_INFO, &info, &len);
    return info.tcpi_unacked == 2;  // for a listener: connections waiting in its accept queue
  }));

  KernelPathConfig config = Config();
  config.limits.connect_timeout = 300ms;
  auto path = Start(config);
  UniqueFd client = Client();
  const auto start = Clock::now();
  const Ending end = ReadToEnd(client.get());
  const auto waited = Clock::now() - start;
  EXPECT_EQ(end.err, ECONNRESET);
  EXPECT_GE(waited, 250ms);
  EXPECT_LT(waited, 3s);
  WaitFor(
      *path, [](const RelayTotals& r) { return r.backend_timeout == 1 && r.active == 0; },
      "counted as backend_timeout");
  ExpectAccountedFor(path->Totals());
}

// A connection with a byte every 100 ms outlives a 300 ms idle timeout; once silent, both legs
// are reset.
TEST_F(KernelPathTest, IdleTimeoutResetsBothLegsOnlyWhenIdle) {
  Ending backend_end;
  Backend backend(BackendListener(), [&](int fd) {
    char c;
    for (;;) {
      const ssize_t n = recv(fd, &c, 1, 0);
      if (n <= 0) {
        backend_end.err = n == 0 ? 0 : errno;
        return;
      }
      SendAll(fd, &c, 1);
    }
  });
  KernelPathConfig config = Config();
  config.limits.idle_timeout = 300ms;
  auto path = Start(config);

  UniqueFd client = Client();
  const auto busy_start = Clock::now();
  ASSERT_TRUE(Ping(client.get()));
  for (int i = 0; i < 10; ++i) {
    std::this_thread::sleep_for(100ms);  // the gap under test, not a synchronisation
    ASSERT_TRUE(Ping(client.get()));
  }
  const auto last_byte = Clock::now();
  EXPECT_GE(last_byte - busy_start, 1000ms) << "busy for longer than the idle timeout";
  EXPECT_EQ(path->Totals().relay.idle_timeout, 0u);
  const Ending end = ReadToEnd(client.get());
  const auto silent = Clock::now() - last_byte;
  EXPECT_EQ(end.err, ECONNRESET);
  EXPECT_GE(silent, 250ms);  // 300 ms after the forwarder relayed the last reply
  EXPECT_LT(silent, 2s);
  ASSERT_TRUE(backend.WaitServed(1));
  EXPECT_EQ(backend_end.err, ECONNRESET);
  WaitFor(
      *path, [](const RelayTotals& r) { return r.idle_timeout == 1 && r.active == 0; },
      "counted as idle_timeout");
  ExpectAccountedFor(path->Totals());
}

// Busy-polling passes no timeout to epoll_wait, so the loop must check deadlines on every spin:
// an idle connection is still reset on time, a busy one is not.
TEST_F(KernelPathTest, BusyPollKeepsTheIdleTimeout) {
  Backend backend(BackendListener(), EchoUntilEofOrReset);
  KernelPathConfig config = Config();
  config.threads = 1;
  config.busy_poll = true;
  config.limits.idle_timeout = 300ms;
  auto path = Start(config);

  UniqueFd client = Client();
  ASSERT_TRUE(Ping(client.get()));
  for (int i = 0; i < 5; ++i) {
    std::this_thread::sleep_for(100ms);  // the gap under test, not a synchronisation
    ASSERT_TRUE(Ping(client.get()));
  }
  const auto last_byte = Clock::now();
  EXPECT_EQ(path->Totals().relay.idle_timeout, 0u);
  const Ending end = ReadToEnd(client.get());
  const auto silent = Clock::now() - last_byte;
  EXPECT_EQ(end.err, ECONNRESET);
  EXPECT_GE(silent, 250ms);
  EXPECT_LT(silent, 2s);
  WaitFor(
      *path, [](const RelayTotals& r) { return r.idle_timeout == 1 && r.active == 0; },
      "counted as idle_timeout");
  ExpectAccountedFor(path->Totals());
}

// max_connections holds across both loop threads; a refused client is reset at once, and a
// freed slot can be used again.
TEST_F(KernelPathTest, MaxConnectionsRefusesTheExtraOnes) {
  Backend backend(BackendListener(), EchoUntilEofOrReset);
  KernelPathConfig config = Config();
  config.limits.max_connections = 3;
  auto path = Start(config);

  std::vector<UniqueFd> clients;
  for (int i = 0; i < 3; ++i) {
    clients.push_back(Client());
    ASSERT_TRUE(Ping(clients.back().get()));
  }
  for (int i = 0; i < 2; ++i) {
    UniqueFd extra = Client();  // the kernel completes the handshake before accept
    EXPECT_EQ(ReadToEnd(extra.get()).err, ECONNRESET);
  }
  EXPECT_EQ(path->Totals().relay.over_limit, 2u);
  for (const UniqueFd& c : clients) EXPECT_TRUE(Ping(c.get(), 'y')) << "open ones still work";

  shutdown(clients[0].get(), SHUT_WR);
  EXPECT_EQ(ReadToEnd(clients[0].get()).err, 0);
  WaitFor(
      *path, [](const RelayTotals& r) { return r.active == 2; }, "one slot freed");
  UniqueFd again = Client();
  EXPECT_TRUE(Ping(again.get(), 'z'));
  const KernelPathTotals t = path->Totals();
  EXPECT_EQ(t.relay.over_limit, 2u);
  EXPECT_EQ(t.relay.accepted, 4u);
  ExpectAccountedFor(t);
}

// Out of file descriptors, the listener (level-triggered) would fire forever while the client
// waits in its queue. The loop's spare descriptor lets it accept and reset that client. The
// client is a child process, and the limit is set to the lowest free descriptor number, so
// the forwarder's next accept is the one that fails, deterministically.
TEST_F(KernelPathTest, OutOfDescriptorsResetsNewClients) {
  Backend backend(BackendListener(), EchoUntilEofOrReset);
  KernelPathConfig config = Config();
  config.threads = 1;
  auto path = Start(config);
  // Every thread involved must have run before descriptors run out: a sanitizer's first check
  // on a new thread may need a pipe, and fails falsely without one.
  UniqueFd warm = Client();
  ASSERT_TRUE(Ping(warm.get()));

  // Waits for a directory to appear (mkdir needs no descriptor), then connects and reads.
  const std::string go = "/tmp/xdpfwd-kernel-path-" + std::to_string(getpid()) + "-go";
  const std::string script = "while [ ! -d " + go + " ]; do sleep 0.01; done; exec 3<>/dev/tcp/" +
                             ToString(topo_.client_gw()) + "/" + std::to_string(kListenPort) +
                             "; timeout 20 cat <&3; echo status=$?";
  ChildProcess client({"/usr/sbin/ip", "netns", "exec", topo_.client_ns(), "bash", "-c", script});
  {
    rlimit saved{};
    ASSERT_EQ(getrlimit(RLIMIT_NOFILE, &saved), 0);
    const int lowest_free = dup(0);
    ASSERT_GE(lowest_free, 0);
    close(lowest_free);
    rlimit tight = saved;
    tight.rlim_cur = static_cast<rlim_t>(lowest_free);
    ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &tight), 0);
    const bool made = mkdir(go.c_str(), 0700) == 0;
    const bool shed = made && Eventually([&] { return path->Totals().errors >= 1; });
    setrlimit(RLIMIT_NOFILE, &saved);
    rmdir(go.c_str());
    ASSERT_TRUE(made);
    EXPECT_TRUE(shed) << path->Totals().Format();
  }
  EXPECT_TRUE(client.WaitForLine("status=", 10s)) << client.output();
  EXPECT_NE(client.output().find("Connection reset by peer"), std::string::npos) << client.output();
  const KernelPathTotals t = path->Totals();
  EXPECT_EQ(t.relay.accepted, 1u) << t.Format();  // the warm-up connection only
  EXPECT_EQ(t.errors, 1u) << t.Format();          // one client shed, nothing else
  // Descriptors back: the loop accepts and relays again (its spare was reopened).
  UniqueFd again = Client();
  EXPECT_TRUE(Ping(again.get()));
}

// IPv6 end to end, and rules that change family on the way (IPv6 client to IPv4 backend and
// back), on unique ULA subnets.
TEST_F(KernelPathTest, Ipv6AndMixedFamilies) {
  // fd00:<pid>:<k>::/48, k being this topology's own 198.18.k.0/24: unique among live tests.
  char prefix[64];
  std::snprintf(prefix, sizeof(prefix), "fd00:%x:%x", static_cast<unsigned>(getpid()) & 0xffff,
                (ntohl(topo_.client_gw().s_addr) >> 8) & 0xff);
  const std::string p = prefix;
  auto run = [&](const std::string& ns, const std::string& cmd) {
    const CommandResult r = topo_.Run(ns, cmd);
    ASSERT_EQ(r.status, 0) << cmd << ": " << r.output;
  };
  run("", "ip -6 addr add " + p + ":1::1/64 dev " + topo_.client_side_if() + " nodad");
  run(topo_.client_ns(), "ip -6 addr add " + p + ":1::2/64 dev eth0 nodad");
  run("", "ip -6 addr add " + p + ":2::1/64 dev " + topo_.server_side_if() + " nodad");
  run(topo_.server_ns(), "ip -6 addr add " + p + ":2::2/64 dev eth0 nodad");

  const SocketAddress backend6 = Address("[" + p + ":2::2]:" + std::to_string(kBackendPort));
  const SocketAddress backend4 = Address(topo_.server_addr(), kBackendPort);
  auto echo = [](int fd) { EchoUntilEof(fd); };
  Backend serve6(ListenOn(topo_.server_ns(), backend6), echo);
  Backend serve4(ListenOn(topo_.server_ns(), backend4), echo);

  KernelPathConfig config = Config();
  config.rules.clear();
  struct Case {
    SocketAddress listen, backend;
  };
  const std::vector<Case> cases = {
      {Address("[" + p + ":1::1]:9000"), backend6},  // 6 -> 6
      {Address("[" + p + ":1::1]:9001"), backend4},  // 6 -> 4
      {Address(topo_.client_gw(), 9002), backend6},  // 4 -> 6
  };
  for (const Case& c : cases) {
    Rule rule;
    rule.id = static_cast<uint32_t>(config.rules.size());
    rule.listen = c.listen;
    rule.backend = c.backend;
    config.rules.push_back(rule);
  }
  auto path = Start(config);

  for (size_t i = 0; i < cases.size(); ++i) {
    SCOPED_TRACE(ToString(cases[i].listen) + " -> " + ToString(cases[i].backend));
    UniqueFd client = ConnectTo(topo_.client_ns(), cases[i].listen);
    const StreamStats sent = SendPattern(client.get(), 40 + i, kMiB);
    const StreamStats echoed = ReceiveAll(client.get());
    EXPECT_EQ(echoed.bytes, kMiB);
    EXPECT_EQ(echoed.hash, sent.hash);
  }
  WaitFor(
      *path, [](const RelayTotals& r) { return r.completed == 3 && r.active == 0; },
      "three connections complete");
  EXPECT_TRUE(serve6.WaitServed(2));
  EXPECT_TRUE(serve4.WaitServed(1));
  EXPECT_EQ(serve6.failures() + serve4.failures(), "");
}

// Start fails with a message that names the rule's address and the reason, and leaves nothing
// open behind it; threads = 0 means one per CPU this process may use.
TEST_F(KernelPathTest, StartErrorsNameTheAddress) {
  const size_t fds_before = OpenFds();
  const std::string listen = ToString(Address(topo_.client_gw(), kListenPort));
  {
    // Taken by a socket without SO_REUSEPORT, so the path's listeners cannot join it.
    UniqueFd taken = ListenOn("", Address(topo_.client_gw(), kListenPort));
    KernelPathConfig config = Config();
    Rule second = config.rules[0];
    second.listen = Address(topo_.client_gw(), kListenPort + 1);  // would bind fine
    config.rules.insert(config.rules.begin(), second);
    auto path = KernelPath::Start(config);
    ASSERT_FALSE(path);
    EXPECT_EQ(path.error().message(), "listen " + listen + ": Address already in use");
  }
  {
    KernelPathConfig config = Config();
    config.rules[0].listen = Address("192.0.2.1:9000");  // TEST-NET-1: on no interface here
    auto path = KernelPath::Start(config);
    ASSERT_FALSE(path);
    EXPECT_EQ(path.error().message(), "listen 192.0.2.1:9000: Cannot assign requested address");
  }
  EXPECT_EQ(OpenFds(), fds_before) << "a failed Start leaked descriptors";

  KernelPathConfig config = Config();
  config.threads = 0;
  auto path = Start(config);
  cpu_set_t cpus;
  ASSERT_EQ(sched_getaffinity(0, sizeof(cpus), &cpus), 0);
  EXPECT_EQ(path->threads(), CPU_COUNT(&cpus));
  const std::string line = path->Totals().Format();
  EXPECT_EQ(line.rfind("accepted=0 active=0 ", 0), 0u) << line;
  EXPECT_NE(line.find(" splice_bytes=0 copy_bytes=0 splice_calls=0 copy_calls=0 errors=0"),
            std::string::npos)
      << line;
}

// Traffic in both modes, then Stop (twice) with connections open, one of them stalled with
// bytes in flight: every socket, pipe, epoll and eventfd is closed, the open clients are
// reset, and the counters still answer.
TEST_F(KernelPathTest, StopClosesEveryDescriptor) {
  const size_t fds_before = OpenFds();
  for (const bool splice : {true, false}) {
    SCOPED_TRACE(splice ? "splice" : "copy");
    Backend backend(BackendListener(), EchoUntilEofOrReset);
    KernelPathConfig config = Config(splice);
    config.limits.max_connections = 3;
    auto path = Start(config);
    for (int i = 0; i < 4; ++i) {
      UniqueFd c = Client();
      const StreamStats sent = SendPattern(c.get(), 9, 2 * kMiB);
      EXPECT_EQ(ReceiveAll(c.get()).hash, sent.hash);
    }
    WaitFor(
        *path, [](const RelayTotals& r) { return r.completed == 4 && r.active == 0; },
        "sequential connections complete");

    std::vector<UniqueFd> open;
    for (int i = 0; i < 2; ++i) {
      open.push_back(Client());
      ASSERT_TRUE(Ping(open.back().get()));
    }
    // Sends until every buffer on the way is full and never reads the echo: the relay towards
    // it stalls with bytes in its pipe or buffer. (Sent from this thread: a concurrent sender
    // could take the reset's error for itself, leaving the reader only an end of stream.)
    UniqueFd busy = Client();
    std::vector<uint8_t> chunk(64 * 1024, 1);
    for (uint64_t sent = 0; sent < 64 * kMiB;) {
      const ssize_t n = send(busy.get(), chunk.data(), chunk.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
      if (n > 0) {
        sent += static_cast<uint64_t>(n);
        continue;
      }
      ASSERT_EQ(errno, EAGAIN);
      pollfd p{busy.get(), POLLOUT, 0};
      if (poll(&p, 1, 200) == 0) break;  // nothing drained for 200 ms: stalled
    }
    UniqueFd over = Client();  // three are open: this one is over the limit
    EXPECT_EQ(ReadToEnd(over.get()).err, ECONNRESET);

    path->Stop();
    path->Stop();
    const KernelPathTotals t = path->Totals();
    EXPECT_EQ(t.relay.completed, 4u) << t.Format();
    EXPECT_EQ(t.relay.over_limit, 1u) << t.Format();
    EXPECT_EQ(t.relay.shutdown_reset, 3u) << t.Format();
    EXPECT_EQ(t.relay.active, 0u) << t.Format();
    ExpectAccountedFor(t);
    for (const UniqueFd& c : open) EXPECT_EQ(ReadToEnd(c.get()).err, ECONNRESET);
    const Ending busy_end = ReadToEnd(busy.get());
    EXPECT_EQ(busy_end.err, ECONNRESET) << "after " << busy_end.bytes << " bytes";
  }
  EXPECT_EQ(OpenFds(), fds_before);
}

}  // namespace
}  // namespace xdpfwd::test
