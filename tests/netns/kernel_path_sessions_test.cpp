// KernelPath's connection table and `shutdown session ID` in a namespace topology
// (tests/netns/kernel_path_fixture.h): every open connection listed with its addresses, bytes
// and TCP state (one still connecting), one connection reset by id and the others untouched,
// and the table answered while a loop relays in bulk and while one loop holds 2,000
// connections (its time printed, not asserted).
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <map>
#include <mutex>
#include <set>

#include "forwarder/session_log.h"
#include "tests/netns/kernel_path_fixture.h"

namespace xdpfwd::test {
namespace {

// Sends back every byte twice until end of stream: the two directions carry different counts,
// so a row with its directions swapped is caught. A reset ends it quietly. Returns the errno
// that ended it, 0 for an end of stream.
int DoubleUntilEofOrReset(int fd) {
  std::vector<uint8_t> in(16 * 1024), out(2 * in.size());
  for (;;) {
    const ssize_t n = recv(fd, in.data(), in.size(), 0);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return errno;
    if (n == 0) break;
    for (ssize_t i = 0; i < n; ++i) out[2 * i] = out[2 * i + 1] = in[i];
    const size_t len = 2 * static_cast<size_t>(n);
    for (size_t sent = 0; sent < len;) {
      const ssize_t m = send(fd, out.data() + sent, len - sent, MSG_NOSIGNAL);
      if (m < 0 && errno == EINTR) continue;
      if (m <= 0) return errno;
      sent += static_cast<size_t>(m);
    }
  }
  shutdown(fd, SHUT_WR);
  return 0;
}

void Double(int fd) { DoubleUntilEofOrReset(fd); }

// The access log's events, kept for the test to read.
class RecordedSessions final : public SessionSink {
 public:
  void Record(const SessionEvent& event) noexcept override {
    std::lock_guard lock(mu_);
    events_.push_back(event);
  }
  size_t Count(SessionResult result) {
    std::lock_guard lock(mu_);
    return static_cast<size_t>(std::count_if(events_.begin(), events_.end(),
                                             [&](const auto& e) { return e.result == result; }));
  }

 private:
  std::mutex mu_;
  std::vector<SessionEvent> events_;
};

std::string Text(const in_addr& addr, uint16_t port) { return ToString(Address(addr, port)); }

class KernelPathSessionsTest : public KernelPathTest {
 protected:
  static constexpr uint16_t kSilentListenPort = kListenPort + 1;
  static constexpr uint16_t kSilentBackendPort = kBackendPort + 1;

  // Rule 0 to the doubling backend, rule 1 to a backend that never answers SYNs.
  KernelPathConfig TwoRules() {
    KernelPathConfig config = Config();
    Rule silent;
    silent.id = 1;
    silent.listen = Address(topo_.client_gw(), kSilentListenPort);
    silent.backend = Address(topo_.server_addr(), kSilentBackendPort);
    config.rules.push_back(silent);
    config.limits.connect_timeout = 60s;  // still connecting when the test looks
    config.sessions = &sessions_;
    return config;
  }

  // A listener with backlog 1 whose two accept-queue slots are taken drops every further SYN
  // silently (as in SilentBackendTimesOut): a backend leg to it stays in SYN_SENT.
  void SilenceBackend() {
    silent_listener_ = TcpListen(topo_.server_ns(), topo_.server_addr(), kSilentBackendPort);
    ASSERT_EQ(listen(silent_listener_.get(), 1), 0);
    fillers_.push_back(TcpConnect(topo_.server_ns(), topo_.server_addr(), kSilentBackendPort));
    fillers_.push_back(TcpConnect(topo_.server_ns(), topo_.server_addr(), kSilentBackendPort));
    ASSERT_TRUE(Eventually([&] {
      tcp_info info{};
      socklen_t len = sizeof(info);
      getsockopt(silent_listener_.get(), IPPROTO_TCP, TCP_INFO, &info, &len);
      return info.tcpi_unacked == 2;
    }));
  }

  UniqueFd SilentClient() const {
    UniqueFd fd = TcpConnect(topo_.client_ns(), topo_.client_gw(), kSilentListenPort);
    BoundWaits(fd.get());
    return fd;
  }

  // Sends `n` bytes and reads the 2n the doubling backend returns.
  static void Exchange(int fd, size_t n) {
    std::vector<uint8_t> out(n, 'q'), in(2 * n);
    SendAll(fd, out.data(), n);
    RecvExactly(fd, in.data(), in.size());
  }

  std::string ClientText(int fd) const { return Text(topo_.client_addr(), LocalPort(fd)); }

  static std::map<std::string, ConnectionRow> ByClient(const std::vector<ConnectionRow>& rows) {
    std::map<std::string, ConnectionRow> by;
    for (const ConnectionRow& r : rows) by[r.client] = r;
    return by;
  }

  RecordedSessions sessions_;
  UniqueFd silent_listener_;
  std::vector<UniqueFd> fillers_;
};

// 24 connections relaying different amounts (one none at all) and one waiting for its backend's
// SYN-ACK: each listed once, with its addresses, its bytes each way, and what TCP_INFO says.
TEST_F(KernelPathSessionsTest, ListsEveryOpenConnection) {
  constexpr int kRelaying = 24;  // over 2 threads: all on one would be a 1 in 2^23 hash
  Backend backend(BackendListener(), Double);
  SilenceBackend();
  auto path = Start(TwoRules());

  std::vector<UniqueFd> clients;
  for (int i = 0; i < kRelaying; ++i) {
    clients.push_back(Client());
    if (i > 0) Exchange(clients.back().get(), 100 * static_cast<size_t>(i));
  }
  UniqueFd connecting = SilentClient();
  WaitFor(
      *path, [](const RelayTotals& r) { return r.active == kRelaying + 1; },
      "every connection open");

  std::vector<int> silent_threads{-1};
  const std::vector<ConnectionRow> rows = path->Connections(&silent_threads);
  EXPECT_TRUE(silent_threads.empty());
  ASSERT_EQ(rows.size(), kRelaying + 1u);
  const auto by = ByClient(rows);
  ASSERT_EQ(by.size(), rows.size()) << "two rows for one client";

  std::set<uint64_t> ids;
  std::set<int> workers;
  for (const ConnectionRow& r : rows) {
    EXPECT_TRUE(ids.insert(r.id).second) << "id " << r.id << " twice";
    EXPECT_EQ(r.path, "kernel");
    EXPECT_GE(r.worker, 0);
    EXPECT_LT(r.worker, path->threads());
    EXPECT_EQ(static_cast<int>(r.id >> 48), r.worker);
    EXPECT_LT(r.age_ms, 60'000u);
    workers.insert(r.worker);
  }
  EXPECT_EQ(workers.size(), 2u) << "every connection on one thread: the merge is not tested";

  for (int i = 0; i < kRelaying; ++i) {
    const std::string client = ClientText(clients[i].get());
    ASSERT_TRUE(by.contains(client)) << client;
    const ConnectionRow& r = by.at(client);
    EXPECT_EQ(r.rule, 0u);
    EXPECT_EQ(r.backend, Text(topo_.server_addr(), kBackendPort));
    EXPECT_EQ(r.bytes_to_backend, 100u * i) << client;
    EXPECT_EQ(r.bytes_to_client, 200u * i) << client;
    for (const LegTcpInfo* leg : {&r.client_leg, &r.backend_leg}) {
      EXPECT_EQ(leg->state, "ESTABLISHED") << client;
      EXPECT_GT(leg->srtt_us, 0u) << client;
      EXPECT_GT(leg->rto_ms, 0u) << client;
      EXPECT_GT(leg->cwnd_bytes, 0u) << client;
      EXPECT_GT(leg->peer_window, 0u) << client;
      EXPECT_EQ(leg->send_queue, 0u) << client;  // everything sent was read
    }
  }
  const std::string waiting = ClientText(connecting.get());
  ASSERT_TRUE(by.contains(waiting)) << waiting;
  const ConnectionRow& w = by.at(waiting);
  EXPECT_EQ(w.rule, 1u);
  EXPECT_EQ(w.backend, Text(topo_.server_addr(), kSilentBackendPort));
  EXPECT_EQ(w.client_leg.state, "ESTABLISHED");
  EXPECT_EQ(w.backend_leg.state, "SYN_SENT");
  EXPECT_EQ(w.bytes_to_backend + w.bytes_to_client, 0u);

  // A connection that ended is gone from the next table.
  clients.back().reset();
  WaitFor(
      *path, [](const RelayTotals& r) { return r.active == kRelaying; }, "one connection ends");
  EXPECT_EQ(path->Connections().size(), static_cast<size_t>(kRelaying));
  path->Stop();
  EXPECT_TRUE(path->Connections().empty());
}

// `shutdown session ID` resets both legs of that connection only, relaying or still
// connecting; an id no open connection has is an error.
TEST_F(KernelPathSessionsTest, ShutdownResetsThatConnectionOnly) {
  std::atomic<int> backend_resets{0};
  Backend backend(BackendListener(), [&](int fd) {
    if (DoubleUntilEofOrReset(fd) == ECONNRESET) ++backend_resets;
  });
  SilenceBackend();
  auto path = Start(TwoRules());

  std::vector<UniqueFd> clients;
  for (int i = 0; i < 4; ++i) {
    clients.push_back(Client());
    Exchange(clients.back().get(), 10);
  }
  UniqueFd connecting = SilentClient();
  WaitFor(
      *path, [](const RelayTotals& r) { return r.active == 5; }, "every connection open");
  const auto by = ByClient(path->Connections());
  const ConnectionRow victim = by.at(ClientText(clients[1].get()));

  const Result<void> shut = path->Shutdown(victim.id);
  ASSERT_TRUE(shut) << shut.error().message();
  const Ending end = ReadToEnd(clients[1].get(), 5s);
  EXPECT_EQ(end.err, ECONNRESET);
  for (int i : {0, 2, 3}) Exchange(clients[i].get(), 1000);  // the others still relay

  const Result<void> again = path->Shutdown(victim.id);
  ASSERT_FALSE(again);
  EXPECT_NE(again.error().message().find("no such session"), std::string::npos)
      << again.error().message();
  EXPECT_FALSE(path->Shutdown(victim.id + 1000));
  EXPECT_FALSE(path->Shutdown(uint64_t{7} << 48 | 1));  // a thread this path does not have

  // The one still connecting: its client is reset, its SYN_SENT socket closed.
  const Result<void> shut_connecting = path->Shutdown(by.at(ClientText(connecting.get())).id);
  ASSERT_TRUE(shut_connecting) << shut_connecting.error().message();
  EXPECT_EQ(ReadToEnd(connecting.get(), 5s).err, ECONNRESET);

  WaitFor(
      *path, [](const RelayTotals& r) { return r.admin_shutdown == 2 && r.active == 3; },
      "counted as admin_shutdown");
  const auto left = path->Connections();
  EXPECT_EQ(left.size(), 3u);
  EXPECT_FALSE(ByClient(left).contains(victim.client));
  EXPECT_EQ(sessions_.Count(SessionResult::kShutdown), 2u) << "the access log's done-shutdown";
  EXPECT_EQ(path->Totals().relay.backend_reset + path->Totals().relay.client_reset, 0u);
  ExpectAccountedFor(path->Totals());
  clients.clear();
  ASSERT_TRUE(backend.WaitServed(4));
  EXPECT_EQ(backend_resets.load(), 1) << "the victim's backend leg was reset";
}

// While its one loop thread relays 512 MiB as fast as it can, the table still answers, each
// time with the connection's bytes growing.
TEST_F(KernelPathSessionsTest, AnswersWhileTheLoopRelaysInBulk) {
  constexpr uint64_t kBytes = 512 * kMiB;
  Backend backend(BackendListener(), [](int fd) { ReceiveAll(fd); });
  KernelPathConfig config = Config();
  config.threads = 1;
  auto path = Start(config);

  UniqueFd client = Client();
  auto sending =
      std::async(std::launch::async, [fd = client.get()] { return SendPattern(fd, 3, kBytes); });
  std::vector<double> ms;
  uint64_t last = 0;
  int growing = 0;
  while (sending.wait_for(0s) != std::future_status::ready) {
    const auto start = Clock::now();
    std::vector<int> silent;
    const auto rows = path->Connections(&silent);
    ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - start).count());
    EXPECT_TRUE(silent.empty());
    if (rows.size() == 1) {
      if (rows[0].bytes_to_backend > last) ++growing;
      last = std::max(last, rows[0].bytes_to_backend);
    }
    std::this_thread::sleep_for(5ms);  // a pace for the asking, not a synchronisation
  }
  EXPECT_EQ(sending.get().bytes, kBytes);
  // The backend reads to the end before the path stops: stopping resets what is still open, and
  // up to a few MiB may still be on their way when the client's last send returns.
  shutdown(client.get(), SHUT_WR);
  EXPECT_TRUE(backend.WaitServed(1, 30s));
  ASSERT_GE(ms.size(), 3u) << "the transfer ended before the table was asked for twice";
  EXPECT_GE(growing, 2);
  std::sort(ms.begin(), ms.end());
  std::printf("[ kernel path ] table during bulk relay: %zu answers, median %.3f ms, max %.3f ms\n",
              ms.size(), ms[ms.size() / 2], ms.back());
}

// One loop thread holding 2,000 connections: all listed, ids unique. How long a table takes is
// printed for the record (a timing is not a test on a shared 2-CPU machine).
TEST_F(KernelPathSessionsTest, TwoThousandConnectionsOnOneLoop) {
  constexpr int kConnections = 2000;
  UniqueFd listener = BackendListener();
  // Backend legs accepted and held, not served: a thread each would cost more than the path.
  std::vector<UniqueFd> accepted;
  std::thread acceptor([&] {
    while (accepted.size() < kConnections) {
      pollfd p{listener.get(), POLLIN, 0};
      if (poll(&p, 1, 10'000) != 1) return;  // the clients stopped coming: the test fails
      UniqueFd fd(accept4(listener.get(), nullptr, nullptr, SOCK_CLOEXEC));
      if (!fd) return;
      accepted.push_back(std::move(fd));
    }
  });
  KernelPathConfig config = Config();
  config.threads = 1;
  config.limits.max_connections = kConnections + 100;
  auto path = Start(config);

  std::vector<UniqueFd> clients;
  try {
    for (int i = 0; i < kConnections; ++i) clients.push_back(Client());
  } catch (const std::exception& e) {
    ADD_FAILURE() << "client " << clients.size() << ": " << e.what();
  }
  acceptor.join();
  ASSERT_EQ(accepted.size(), static_cast<size_t>(kConnections));
  WaitFor(
      *path, [](const RelayTotals& r) { return r.active == kConnections; },
      "every connection open");

  std::vector<double> ms;
  for (int round = 0; round < 10; ++round) {
    const auto start = Clock::now();
    const auto rows = path->Connections();
    ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - start).count());
    ASSERT_EQ(rows.size(), static_cast<size_t>(kConnections));
    if (round == 0) {
      std::set<uint64_t> ids;
      for (const ConnectionRow& r : rows) ids.insert(r.id);
      EXPECT_EQ(ids.size(), rows.size());
      EXPECT_EQ(ByClient(rows).size(), rows.size());
    }
  }
  std::sort(ms.begin(), ms.end());
  std::printf(
      "[ kernel path ] table of %d connections on one loop: min %.2f ms, median %.2f ms, "
      "max %.2f ms (10 rounds)\n",
      kConnections, ms.front(), ms[ms.size() / 2], ms.back());
  path->Stop();
  ExpectAccountedFor(path->Totals());
}

}  // namespace
}  // namespace xdpfwd::test
