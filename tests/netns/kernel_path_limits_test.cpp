// KernelPath driven directly in a namespace topology (tests/netns/kernel_path_fixture.h): refused
// and silent backends, the idle timeout (asleep and busy-polling), the stall timeout,
// max_connections, running out of descriptors, IPv6 and mixed-family rules, start-up errors, and
// every descriptor closed at Stop.
#include <gtest/gtest.h>

#include "tests/netns/kernel_path_fixture.h"

namespace xdpfwd::test {
namespace {

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

// A client that never reads behind a backend that never stops sending: once the client's
// window is zero and the kernel's probes bring no progress for the stall timeout, the client
// leg fails with ETIMEDOUT (TCP_USER_TIMEOUT) and both legs go, counted as stall_timeout. Without
// it the kernel probes the zero window for as long as the client answers.
TEST_F(KernelPathTest, ZeroWindowClientIsResetAtTheStallTimeout) {
  std::atomic<int> backend_err{0};
  Backend backend(BackendListener(), [&](int fd) {
    const std::vector<uint8_t> chunk(64 * 1024, 'z');
    for (;;) {
      if (send(fd, chunk.data(), chunk.size(), MSG_NOSIGNAL) < 0) {
        backend_err = errno;
        return;
      }
    }
  });
  KernelPathConfig config = Config();
  config.limits.stall_timeout = 1s;
  auto path = Start(config);
  UniqueFd client = Client();  // reads nothing until the end
  const auto start = Clock::now();
  WaitFor(
      *path, [](const RelayTotals& r) { return r.stall_timeout == 1 && r.active == 0; },
      "counted as stall_timeout", 20s);
  EXPECT_GE(Clock::now() - start, 1s);
  // What the client had received it can still read; its window update then meets no socket.
  const Ending end = ReadToEnd(client.get());
  EXPECT_EQ(end.err, ECONNRESET) << end.bytes << " bytes read";
  EXPECT_GT(end.bytes, 0u);
  ASSERT_TRUE(backend.WaitServed(1));
  EXPECT_TRUE(backend_err == ECONNRESET || backend_err == EPIPE) << std::strerror(backend_err);
  ExpectAccountedFor(path->Totals());
}

// The same on the backend side: a backend that reads nothing while the client sends. It learns
// only when it reads again and its window update meets no socket (TCP_USER_TIMEOUT closes the
// leg without a reset), as the client above.
TEST_F(KernelPathTest, ZeroWindowBackendIsResetAtTheStallTimeout) {
  std::promise<void> stalled;
  std::shared_future<void> counted = stalled.get_future().share();
  Ending backend_end;
  Backend backend(BackendListener(), [&](int fd) {
    counted.wait();  // reads nothing until the forwarder gave up on it
    backend_end = ReadToEnd(fd);
  });
  KernelPathConfig config = Config();
  config.limits.stall_timeout = 1s;
  auto path = Start(config);
  UniqueFd client = Client();
  int client_err = 0;
  std::thread sender([&] {
    const std::vector<uint8_t> chunk(64 * 1024, 'z');
    while (send(client.get(), chunk.data(), chunk.size(), MSG_NOSIGNAL) >= 0) {
    }
    client_err = errno;
  });
  const bool stall_counted = Eventually(
      [&] {
        const RelayTotals r = path->Totals().relay;
        return r.stall_timeout == 1 && r.active == 0;
      },
      20s);
  EXPECT_TRUE(stall_counted) << path->Totals().Format();
  if (!stall_counted) shutdown(client.get(), SHUT_RDWR);  // stops the sender: fail, not hang
  stalled.set_value();
  sender.join();
  EXPECT_TRUE(client_err == ECONNRESET || client_err == EPIPE) << std::strerror(client_err);
  ASSERT_TRUE(backend.WaitServed(1));
  EXPECT_EQ(backend_end.err, ECONNRESET) << backend_end.bytes << " bytes read";
  EXPECT_GT(backend_end.bytes, 0u);
  ExpectAccountedFor(path->Totals());
}

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
