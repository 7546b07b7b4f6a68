// The datagram path over loopback: an association per UDP client with its own backend port,
// idle expiry, access control, the association limit, UDP<->TCP in both directions, [src=],
// backend failures and what Stop() leaves behind.
#include "forwarder/datagram_path.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "tests/support/echo_server.h"
#include "tests/support/eventually.h"

namespace xdpfwd {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

SocketAddress FromStorage(const sockaddr_storage& storage) {
  SocketAddress a;
  a.storage = storage;
  a.length = storage.ss_family == AF_INET6 ? sizeof(sockaddr_in6) : sizeof(sockaddr_in);
  return a;
}

// `host`:`port` on loopback; port 0 lets the kernel choose.
SocketAddress Address(int family, const char* host, uint16_t port = 0) {
  sockaddr_storage s{};
  if (family == AF_INET6) {
    auto& in6 = reinterpret_cast<sockaddr_in6&>(s);
    in6.sin6_family = AF_INET6;
    in6.sin6_port = htons(port);
    EXPECT_EQ(inet_pton(AF_INET6, host, &in6.sin6_addr), 1) << host;
  } else {
    auto& in = reinterpret_cast<sockaddr_in&>(s);
    in.sin_family = AF_INET;
    in.sin_port = htons(port);
    EXPECT_EQ(inet_pton(AF_INET, host, &in.sin_addr), 1) << host;
  }
  return FromStorage(s);
}

SocketAddress Loopback(int family, uint16_t port = 0) {
  return Address(family, family == AF_INET6 ? "::1" : "127.0.0.1", port);
}

SocketAddress LocalAddress(int fd) {
  sockaddr_storage s{};
  socklen_t len = sizeof(s);
  EXPECT_EQ(getsockname(fd, reinterpret_cast<sockaddr*>(&s), &len), 0) << std::strerror(errno);
  return FromStorage(s);
}

UniqueFd Socket(int family, int type) {
  UniqueFd fd(socket(family, type | SOCK_CLOEXEC, 0));
  EXPECT_TRUE(fd) << std::strerror(errno);
  return fd;
}

UniqueFd BoundSocket(const SocketAddress& at, int type) {
  UniqueFd fd = Socket(at.family(), type);
  EXPECT_EQ(bind(fd.get(), at.get(), at.length), 0) << ToString(at) << ": " << std::strerror(errno);
  return fd;
}

UniqueFd UdpSocket(const SocketAddress& at) { return BoundSocket(at, SOCK_DGRAM); }

UniqueFd TcpListener(const SocketAddress& at) {
  UniqueFd fd = BoundSocket(at, SOCK_STREAM);
  EXPECT_EQ(listen(fd.get(), 16), 0) << std::strerror(errno);
  return fd;
}

UniqueFd TcpConnect(const SocketAddress& to) {
  UniqueFd fd = Socket(to.family(), SOCK_STREAM);
  EXPECT_EQ(connect(fd.get(), to.get(), to.length), 0)
      << ToString(to) << ": " << std::strerror(errno);
  return fd;
}

// A port of `type` on loopback that nothing listens on (bound once, then closed).
SocketAddress ClosedPort(int type) {
  UniqueFd fd = BoundSocket(Loopback(AF_INET), type);
  return LocalAddress(fd.get());
}

void SendTo(int fd, const SocketAddress& to, const std::string& payload) {
  EXPECT_EQ(sendto(fd, payload.data(), payload.size(), 0, to.get(), to.length),
            static_cast<ssize_t>(payload.size()))
      << ToString(to) << ": " << std::strerror(errno);
}

struct Datagram {
  std::string payload;
  SocketAddress from;
};

// The next datagram on `fd`, or nothing within `timeout`.
std::optional<Datagram> Receive(int fd, milliseconds timeout = milliseconds(5000)) {
  pollfd p{fd, POLLIN, 0};
  if (poll(&p, 1, static_cast<int>(timeout.count())) != 1) return std::nullopt;
  std::string buf(65536, '\0');
  sockaddr_storage from{};
  socklen_t len = sizeof(from);
  const ssize_t n =
      recvfrom(fd, buf.data(), buf.size(), 0, reinterpret_cast<sockaddr*>(&from), &len);
  if (n < 0) {
    ADD_FAILURE() << "recvfrom: " << std::strerror(errno);
    return std::nullopt;
  }
  buf.resize(static_cast<size_t>(n));
  return Datagram{buf, FromStorage(from)};
}

// Exactly `n` bytes from a stream, or what came before `timeout` ran out.
std::string ReadStream(int fd, size_t n, milliseconds timeout = milliseconds(5000)) {
  std::string out;
  const auto deadline = Clock::now() + timeout;
  while (out.size() < n && Clock::now() < deadline) {
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, 100) != 1) continue;
    char buf[65536];
    const ssize_t got = recv(fd, buf, std::min(sizeof(buf), n - out.size()), 0);
    if (got <= 0) break;
    out.append(buf, static_cast<size_t>(got));
  }
  return out;
}

std::string Pattern(size_t n, char seed) {
  std::string s(n, '\0');
  for (size_t i = 0; i < n; ++i) s[i] = static_cast<char>(seed + i * 7 + i / 251);
  return s;
}

size_t OpenDescriptors() {
  size_t n = 0;
  DIR* dir = opendir("/proc/self/fd");
  if (dir == nullptr) return 0;
  while (const dirent* entry = readdir(dir)) {
    if (entry->d_name[0] != '.') ++n;
  }
  closedir(dir);
  return n;
}

// Collects the path's session events (they come on its thread) with the time each arrived.
class SessionRecorder {
 public:
  struct Entry {
    SessionEvent event;
    Clock::time_point at;
  };

  std::function<void(const SessionEvent&)> Callback() {
    return [this](const SessionEvent& e) {
      std::lock_guard<std::mutex> lock(mutex_);
      entries_.push_back({e, Clock::now()});
    };
  }
  std::vector<Entry> Of(SessionResult result) const {
    std::lock_guard<std::mutex> lock(mutex_);
    std::vector<Entry> out;
    for (const Entry& e : entries_) {
      if (e.event.result == result) out.push_back(e);
    }
    return out;
  }
  size_t Count(SessionResult result) const { return Of(result).size(); }
  bool WaitFor(SessionResult result, size_t n) {
    return test::Eventually([&] { return Count(result) >= n; });
  }
  size_t size() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return entries_.size();
  }

 private:
  mutable std::mutex mutex_;
  std::vector<Entry> entries_;
};

std::string ClientOf(const SessionRecorder::Entry& e) {
  return ToString(FromStorage(e.event.client));
}

Rule MakeRule(const SocketAddress& listen, Protocol from, const SocketAddress& backend,
              Protocol to) {
  Rule rule;
  rule.listen = listen;
  rule.listen_protocol = from;
  rule.backend = backend;
  rule.backend_protocol = to;
  return rule;
}

Rule UdpRule(const SocketAddress& listen, const SocketAddress& backend) {
  return MakeRule(listen, Protocol::kUdp, backend, Protocol::kUdp);
}

std::unique_ptr<DatagramPath> StartPath(DatagramPathConfig config) {
  for (size_t i = 0; i < config.rules.size(); ++i) config.rules[i].id = static_cast<uint32_t>(i);
  auto path = DatagramPath::Start(std::move(config));
  EXPECT_TRUE(path.ok()) << path.error().message();
  return path.ok() ? std::move(*path) : nullptr;
}

class DatagramPathFamilyTest : public ::testing::TestWithParam<int> {};

TEST_P(DatagramPathFamilyTest, EachClientHasItsOwnBackendPortAndGetsItsOwnReplies) {
  const int family = GetParam();
  UniqueFd backend = UdpSocket(Loopback(family));
  SessionRecorder sessions;
  DatagramPathConfig config;
  config.rules.push_back(UdpRule(Loopback(family), LocalAddress(backend.get())));
  config.on_session = sessions.Callback();
  auto path = StartPath(std::move(config));
  ASSERT_NE(path, nullptr);
  const SocketAddress listener = path->bound_address(0);
  EXPECT_NE(listener.port(), 0);

  UniqueFd one = UdpSocket(Loopback(family)), two = UdpSocket(Loopback(family));
  SendTo(one.get(), listener, "from one");
  SendTo(two.get(), listener, "from two");
  // The backend answers each datagram to where it came from, as a server does.
  std::vector<uint16_t> backend_ports;
  std::vector<std::string> seen;
  for (int i = 0; i < 2; ++i) {
    auto d = Receive(backend.get());
    ASSERT_TRUE(d) << "datagram " << i << " never reached the backend";
    EXPECT_EQ(ToString(d->from).rfind(family == AF_INET6 ? "[::1]:" : "127.0.0.1:", 0), 0u)
        << ToString(d->from);
    backend_ports.push_back(d->from.port());
    seen.push_back(d->payload);
    SendTo(backend.get(), d->from, "echo " + d->payload);
  }
  EXPECT_NE(backend_ports[0], backend_ports[1]) << "one backend port per client";
  EXPECT_NE(seen[0], seen[1]);

  const std::vector<std::pair<int, std::string>> replies = {{one.get(), "echo from one"},
                                                            {two.get(), "echo from two"}};
  for (const auto& [fd, expected] : replies) {
    auto reply = Receive(fd);
    ASSERT_TRUE(reply) << expected;
    EXPECT_EQ(reply->payload, expected);
    EXPECT_EQ(ToString(reply->from), ToString(listener)) << "replies come from the listener";
  }

  // A client's next datagram goes through its association: the same backend port.
  SendTo(one.get(), listener, "again");
  auto again = Receive(backend.get());
  ASSERT_TRUE(again);
  EXPECT_EQ(again->payload, "again");
  const uint16_t one_port = seen[0] == "from one" ? backend_ports[0] : backend_ports[1];
  EXPECT_EQ(again->from.port(), one_port);

  ASSERT_TRUE(sessions.WaitFor(SessionResult::kOpened, 2));
  const auto opened = sessions.Of(SessionResult::kOpened);
  ASSERT_EQ(opened.size(), 2u);
  std::vector<std::string> clients = {ClientOf(opened[0]), ClientOf(opened[1])};
  std::sort(clients.begin(), clients.end());
  std::vector<std::string> expected = {ToString(LocalAddress(one.get())),
                                       ToString(LocalAddress(two.get()))};
  std::sort(expected.begin(), expected.end());
  EXPECT_EQ(clients, expected);
  for (const auto& e : opened) {
    EXPECT_EQ(e.event.rule_id, 0u);
    EXPECT_GT(e.event.unix_ns, int64_t{1'600'000'000} * 1'000'000'000) << "CLOCK_REALTIME";
  }
  const DatagramPathTotals totals = path->Totals();
  EXPECT_EQ(totals.associations_opened, 2u);
  EXPECT_EQ(totals.associations_open, 2u);
  EXPECT_EQ(totals.datagrams_in, 3u);
  EXPECT_EQ(totals.datagrams_out, 2u);
  EXPECT_EQ(totals.bytes_in, 8u + 8u + 5u);
  EXPECT_EQ(totals.bytes_out, 13u + 13u);
  EXPECT_EQ(totals.dropped, 0u);
  EXPECT_EQ(totals.errors, 0u);
}

INSTANTIATE_TEST_SUITE_P(DatagramPath, DatagramPathFamilyTest, ::testing::Values(AF_INET, AF_INET6),
                         [](const ::testing::TestParamInfo<int>& p) {
                           return p.param == AF_INET6 ? "IPv6" : "IPv4";
                         });

TEST(DatagramPathTest, IdleAssociationClosesAndTheNextDatagramOpensANewOne) {
  UniqueFd backend = UdpSocket(Loopback(AF_INET));
  SessionRecorder sessions;
  DatagramPathConfig config;
  config.rules.push_back(UdpRule(Loopback(AF_INET), LocalAddress(backend.get())));
  config.rules[0].udp_timeout_s = 1;
  config.on_session = sessions.Callback();
  auto path = StartPath(std::move(config));
  ASSERT_NE(path, nullptr);
  const SocketAddress listener = path->bound_address(0);

  UniqueFd client = UdpSocket(Loopback(AF_INET));
  SendTo(client.get(), listener, "ping");
  auto first = Receive(backend.get());
  ASSERT_TRUE(first);
  // The association's last activity is the path relaying this reply: after this instant.
  const auto last_activity = Clock::now();
  SendTo(backend.get(), first->from, "pong!");
  auto reply = Receive(client.get());
  ASSERT_TRUE(reply);
  EXPECT_EQ(reply->payload, "pong!");

  ASSERT_TRUE(sessions.WaitFor(SessionResult::kRemoteClosedFirst, 1))
      << "the idle association never closed: " << path->Totals().Format();
  const auto closed = sessions.Of(SessionResult::kRemoteClosedFirst);
  ASSERT_EQ(closed.size(), 1u);
  const auto after = closed[0].at - last_activity;
  EXPECT_GE(after, milliseconds(950)) << "closed before its second of idleness";
  EXPECT_LE(after, milliseconds(3000));
  EXPECT_EQ(closed[0].event.bytes_in, 4u);
  EXPECT_EQ(closed[0].event.bytes_out, 5u);
  EXPECT_EQ(ClientOf(closed[0]), ToString(LocalAddress(client.get())));
  DatagramPathTotals totals = path->Totals();
  EXPECT_EQ(totals.closed_idle, 1u);
  EXPECT_EQ(totals.associations_open, 0u);

  SendTo(client.get(), listener, "again");
  auto second = Receive(backend.get());
  ASSERT_TRUE(second);
  EXPECT_EQ(second->payload, "again");
  // A new backend socket; the kernel picks its port at random from ~28,000, so the same one
  // again is a 1-in-28,000 chance.
  EXPECT_NE(second->from.port(), first->from.port()) << "the same backend socket as before";
  EXPECT_EQ(sessions.Count(SessionResult::kOpened), 2u);
  EXPECT_EQ(path->Totals().associations_opened, 2u);
}

TEST(DatagramPathTest, GlobalDenyDropsTheDatagramBeforeAnyBackendLeg) {
  UniqueFd backend = UdpSocket(Loopback(AF_INET));
  SessionRecorder sessions;
  DatagramPathConfig config;
  config.rules.push_back(UdpRule(Loopback(AF_INET), LocalAddress(backend.get())));
  config.global_access.push_back({false, "127.0.0.*", 1});
  config.on_session = sessions.Callback();
  auto path = StartPath(std::move(config));
  ASSERT_NE(path, nullptr);

  UniqueFd client = UdpSocket(Loopback(AF_INET));
  SendTo(client.get(), path->bound_address(0), "let me in");
  SendTo(client.get(), path->bound_address(0), "please");
  ASSERT_TRUE(sessions.WaitFor(SessionResult::kDenied, 2)) << path->Totals().Format();
  EXPECT_EQ(ClientOf(sessions.Of(SessionResult::kDenied)[0]), ToString(LocalAddress(client.get())));
  // The refusal is decided before any backend socket exists, and the events came after it.
  EXPECT_FALSE(Receive(backend.get(), milliseconds(200)));
  const DatagramPathTotals totals = path->Totals();
  EXPECT_EQ(totals.refused_denied, 2u) << "each datagram of a refused client, as rinetd";
  EXPECT_EQ(totals.refused_not_allowed, 0u);
  EXPECT_EQ(totals.associations_opened, 0u);
  EXPECT_EQ(sessions.Count(SessionResult::kOpened), 0u);
}

TEST(DatagramPathTest, RuleAllowListThatDoesNotMatchIsNotAllowed) {
  UniqueFd backend = UdpSocket(Loopback(AF_INET));
  SessionRecorder sessions;
  DatagramPathConfig config;
  config.rules.push_back(UdpRule(Loopback(AF_INET), LocalAddress(backend.get())));
  config.rules[0].access.push_back({true, "10.0.0.*", 2});
  // A second rule whose allow list matches: the same client gets through there.
  config.rules.push_back(UdpRule(Loopback(AF_INET), LocalAddress(backend.get())));
  config.rules[1].access.push_back({true, "127.0.0.1", 4});
  config.on_session = sessions.Callback();
  auto path = StartPath(std::move(config));
  ASSERT_NE(path, nullptr);

  UniqueFd client = UdpSocket(Loopback(AF_INET));
  SendTo(client.get(), path->bound_address(0), "not me");
  ASSERT_TRUE(sessions.WaitFor(SessionResult::kNotAllowed, 1)) << path->Totals().Format();
  const auto refused = sessions.Of(SessionResult::kNotAllowed);
  EXPECT_EQ(refused[0].event.rule_id, 0u);
  EXPECT_EQ(ClientOf(refused[0]), ToString(LocalAddress(client.get())));

  SendTo(client.get(), path->bound_address(1), "me");
  auto allowed = Receive(backend.get());
  ASSERT_TRUE(allowed) << "the matching allow list let nothing through";
  EXPECT_EQ(allowed->payload, "me") << "the refused datagram reached the backend";
  EXPECT_FALSE(Receive(backend.get(), milliseconds(100)));
  const DatagramPathTotals totals = path->Totals();
  EXPECT_EQ(totals.refused_not_allowed, 1u);
  EXPECT_EQ(totals.refused_denied, 0u);
  EXPECT_EQ(totals.associations_opened, 1u);
}

TEST(DatagramPathTest, ClientsBeyondMaxAssociationsAreRefused) {
  UniqueFd backend = UdpSocket(Loopback(AF_INET));
  SessionRecorder sessions;
  DatagramPathConfig config;
  config.rules.push_back(UdpRule(Loopback(AF_INET), LocalAddress(backend.get())));
  config.max_associations = 2;
  config.on_session = sessions.Callback();
  auto path = StartPath(std::move(config));
  ASSERT_NE(path, nullptr);
  const SocketAddress listener = path->bound_address(0);

  UniqueFd one = UdpSocket(Loopback(AF_INET)), two = UdpSocket(Loopback(AF_INET)),
           three = UdpSocket(Loopback(AF_INET));
  SendTo(one.get(), listener, "1");
  SendTo(two.get(), listener, "2");
  ASSERT_TRUE(Receive(backend.get()));
  ASSERT_TRUE(Receive(backend.get()));
  SendTo(three.get(), listener, "3");
  ASSERT_TRUE(test::Eventually([&] { return path->Totals().refused_full == 1; }))
      << path->Totals().Format();
  EXPECT_FALSE(Receive(backend.get(), milliseconds(200))) << "the third client got through";
  // The two open associations still carry their clients.
  SendTo(two.get(), listener, "2 again");
  auto again = Receive(backend.get());
  ASSERT_TRUE(again);
  EXPECT_EQ(again->payload, "2 again");
  const DatagramPathTotals totals = path->Totals();
  EXPECT_EQ(totals.associations_open, 2u);
  EXPECT_EQ(totals.associations_opened, 2u);
  EXPECT_EQ(sessions.Count(SessionResult::kOpened), 2u);
}

TEST(DatagramPathTest, UdpClientsTalkToATcpBackend) {
  UniqueFd echo_listener = TcpListener(Loopback(AF_INET));
  const SocketAddress backend = LocalAddress(echo_listener.get());
  test::EchoServer echo(std::move(echo_listener));
  SessionRecorder sessions;
  DatagramPathConfig config;
  config.rules.push_back(MakeRule(Loopback(AF_INET), Protocol::kUdp, backend, Protocol::kTcp));
  config.on_session = sessions.Callback();
  auto path = StartPath(std::move(config));
  ASSERT_NE(path, nullptr);

  UniqueFd client = UdpSocket(Loopback(AF_INET));
  // The first datagrams likely arrive before the handshake completes: queued, then written.
  const std::string payload = Pattern(20000, 'a');
  for (int i = 0; i < 3; ++i) SendTo(client.get(), path->bound_address(0), payload);
  std::string back;
  while (back.size() < 3 * payload.size()) {
    auto d = Receive(client.get());
    ASSERT_TRUE(d) << back.size() << " bytes came back; " << path->Totals().Format();
    EXPECT_LE(d->payload.size(), 65507u);
    EXPECT_EQ(ToString(d->from), ToString(path->bound_address(0)));
    back += d->payload;
  }
  EXPECT_EQ(back, payload + payload + payload);
  EXPECT_EQ(sessions.Count(SessionResult::kOpened), 1u);

  // Stop ends the open association with its byte counts.
  path->Stop();
  const auto ended = sessions.Of(SessionResult::kShutdown);
  ASSERT_EQ(ended.size(), 1u);
  EXPECT_EQ(ended[0].event.bytes_in, 60000u);
  EXPECT_EQ(ended[0].event.bytes_out, 60000u);
  EXPECT_EQ(path->Totals().closed_stopped, 1u);
}

TEST(DatagramPathTest, TcpClientTalksToAUdpBackend) {
  UniqueFd backend = UdpSocket(Loopback(AF_INET));
  const int big = 4 << 20;  // the whole burst below must fit while the test is sending
  setsockopt(backend.get(), SOL_SOCKET, SO_RCVBUF, &big, sizeof(big));
  SessionRecorder sessions;
  DatagramPathConfig config;
  config.rules.push_back(
      MakeRule(Loopback(AF_INET), Protocol::kTcp, LocalAddress(backend.get()), Protocol::kUdp));
  config.on_session = sessions.Callback();
  auto path = StartPath(std::move(config));
  ASSERT_NE(path, nullptr);
  const SocketAddress listener = path->bound_address(0);

  UniqueFd client = TcpConnect(listener);
  ASSERT_EQ(send(client.get(), "abc", 3, MSG_NOSIGNAL), 3);
  auto request = Receive(backend.get());
  ASSERT_TRUE(request);
  EXPECT_EQ(request->payload, "abc");
  SendTo(backend.get(), request->from, "reply1");
  SendTo(backend.get(), request->from, "reply2");
  EXPECT_EQ(ReadStream(client.get(), 12), "reply1reply2");

  // More than one datagram's worth: the stream is cut into datagrams of at most 65,507 bytes.
  const std::string bulk = Pattern(150000, 'k');
  std::thread sender([&] {
    EXPECT_EQ(send(client.get(), bulk.data(), bulk.size(), MSG_NOSIGNAL),
              static_cast<ssize_t>(bulk.size()));
  });
  std::string got;
  size_t datagrams = 0;
  while (got.size() < bulk.size()) {
    auto d = Receive(backend.get());
    if (!d) break;
    EXPECT_LE(d->payload.size(), 65507u);
    EXPECT_EQ(d->from.port(), request->from.port()) << "one backend socket per connection";
    got += d->payload;
    ++datagrams;
  }
  sender.join();
  EXPECT_EQ(got.size(), bulk.size()) << path->Totals().Format();
  EXPECT_TRUE(got == bulk) << "bytes lost or reordered";
  EXPECT_GE(datagrams, 3u);

  client.reset();  // the client's end of stream ends the association
  ASSERT_TRUE(sessions.WaitFor(SessionResult::kRemoteClosedFirst, 1)) << path->Totals().Format();
  const auto ended = sessions.Of(SessionResult::kRemoteClosedFirst);
  EXPECT_EQ(ended[0].event.bytes_in, 3u + bulk.size());
  EXPECT_EQ(ended[0].event.bytes_out, 12u);
  const DatagramPathTotals totals = path->Totals();
  EXPECT_EQ(totals.closed_client, 1u);
  EXPECT_EQ(totals.associations_open, 0u);
}

TEST(DatagramPathTest, SourceAddressIsTheBackendLegsLocalAddress) {
  UniqueFd backend = UdpSocket(Loopback(AF_INET));
  DatagramPathConfig config;
  config.rules.push_back(UdpRule(Loopback(AF_INET), LocalAddress(backend.get())));
  config.rules[0].source = Address(AF_INET, "127.0.0.2");
  auto path = StartPath(std::move(config));
  ASSERT_NE(path, nullptr);

  UniqueFd client = UdpSocket(Loopback(AF_INET));
  SendTo(client.get(), path->bound_address(0), "from where?");
  auto d = Receive(backend.get());
  ASSERT_TRUE(d);
  EXPECT_EQ(d->payload, "from where?");
  const std::string from = ToString(d->from);
  EXPECT_EQ(from.substr(0, from.find(':')), "127.0.0.2");
  // The reply still reaches the client, from the listener.
  SendTo(backend.get(), d->from, "here");
  auto reply = Receive(client.get());
  ASSERT_TRUE(reply);
  EXPECT_EQ(reply->payload, "here");
}

TEST(DatagramPathTest, StopWithOpenAssociationsLeavesNoDescriptorOpen) {
  // Everything the test itself owns exists before the first count.
  UniqueFd backend = UdpSocket(Loopback(AF_INET));
  UniqueFd tcp_backend = TcpListener(Loopback(AF_INET));  // never accepts: the queue suffices
  UniqueFd client = UdpSocket(Loopback(AF_INET));
  UniqueFd tcp_client = Socket(AF_INET, SOCK_STREAM);
  SessionRecorder sessions;
  DatagramPathConfig config;
  config.rules.push_back(UdpRule(Loopback(AF_INET), LocalAddress(backend.get())));
  config.rules.push_back(
      MakeRule(Loopback(AF_INET), Protocol::kUdp, LocalAddress(tcp_backend.get()), Protocol::kTcp));
  config.rules.push_back(
      MakeRule(Loopback(AF_INET), Protocol::kTcp, LocalAddress(backend.get()), Protocol::kUdp));
  config.on_session = sessions.Callback();
  const size_t before = OpenDescriptors();
  ASSERT_GT(before, 0u);

  auto path = StartPath(std::move(config));
  ASSERT_NE(path, nullptr);
  SendTo(client.get(), path->bound_address(0), "udp");
  SendTo(client.get(), path->bound_address(1), "tcp");
  const SocketAddress stream_listener = path->bound_address(2);
  ASSERT_EQ(connect(tcp_client.get(), stream_listener.get(), stream_listener.length), 0)
      << std::strerror(errno);
  ASSERT_EQ(send(tcp_client.get(), "x", 1, MSG_NOSIGNAL), 1);
  std::vector<std::string> arrived;
  for (int i = 0; i < 2; ++i) {
    auto d = Receive(backend.get());
    ASSERT_TRUE(d);
    arrived.push_back(d->payload);
  }
  std::sort(arrived.begin(), arrived.end());
  EXPECT_EQ(arrived, (std::vector<std::string>{"udp", "x"}));
  ASSERT_TRUE(sessions.WaitFor(SessionResult::kOpened, 3));
  // Listeners, epoll, eventfd, and a backend leg per association plus the accepted client.
  EXPECT_GE(OpenDescriptors(), before + 3 + 2 + 3 + 1);

  path->Stop();
  path->Stop();  // idempotent
  EXPECT_EQ(OpenDescriptors(), before);
  EXPECT_EQ(sessions.Count(SessionResult::kShutdown), 3u);
  const DatagramPathTotals totals = path->Totals();
  EXPECT_EQ(totals.closed_stopped, 3u);
  EXPECT_EQ(totals.associations_open, 0u);
}

TEST(DatagramPathTest, PortUnreachableEndsTheAssociationAsLocalClosed) {
  SessionRecorder sessions;
  DatagramPathConfig config;
  config.rules.push_back(UdpRule(Loopback(AF_INET), ClosedPort(SOCK_DGRAM)));
  config.on_session = sessions.Callback();
  auto path = StartPath(std::move(config));
  ASSERT_NE(path, nullptr);

  UniqueFd client = UdpSocket(Loopback(AF_INET));
  SendTo(client.get(), path->bound_address(0), "anyone?");
  ASSERT_TRUE(sessions.WaitFor(SessionResult::kLocalClosedFirst, 1)) << path->Totals().Format();
  const auto ended = sessions.Of(SessionResult::kLocalClosedFirst);
  EXPECT_EQ(ended[0].event.bytes_in, 7u);
  EXPECT_EQ(ended[0].event.bytes_out, 0u);
  EXPECT_EQ(sessions.Count(SessionResult::kOpened), 1u);
  const DatagramPathTotals totals = path->Totals();
  EXPECT_EQ(totals.closed_backend, 1u);
  EXPECT_EQ(totals.associations_open, 0u);
}

TEST(DatagramPathTest, TcpBackendThatRefusesIsLocalConnectFailed) {
  SessionRecorder sessions;
  DatagramPathConfig config;
  config.rules.push_back(
      MakeRule(Loopback(AF_INET), Protocol::kUdp, ClosedPort(SOCK_STREAM), Protocol::kTcp));
  config.on_session = sessions.Callback();
  auto path = StartPath(std::move(config));
  ASSERT_NE(path, nullptr);

  UniqueFd client = UdpSocket(Loopback(AF_INET));
  SendTo(client.get(), path->bound_address(0), "hello?");
  ASSERT_TRUE(sessions.WaitFor(SessionResult::kLocalConnectFailed, 1)) << path->Totals().Format();
  EXPECT_EQ(ClientOf(sessions.Of(SessionResult::kLocalConnectFailed)[0]),
            ToString(LocalAddress(client.get())));
  const DatagramPathTotals totals = path->Totals();
  EXPECT_EQ(totals.backend_failed, 1u);
  EXPECT_EQ(totals.associations_open, 0u);
  EXPECT_EQ(sessions.Count(SessionResult::kLocalClosedFirst), 0u);
}

TEST(DatagramPathTest, ListenerInUseNamesTheRule) {
  UniqueFd taken = UdpSocket(Loopback(AF_INET));
  const SocketAddress address = LocalAddress(taken.get());
  DatagramPathConfig config;
  config.rules.push_back(UdpRule(address, Loopback(AF_INET, 9)));
  auto path = DatagramPath::Start(std::move(config));
  ASSERT_FALSE(path.ok());
  EXPECT_EQ(path.error().message(),
            "listen 127.0.0.1:" + std::to_string(address.port()) + "/udp: Address already in use");
}

TEST(DatagramPathTest, RefusesRulesWithoutUdp) {
  DatagramPathConfig config;
  config.rules.push_back(
      MakeRule(Loopback(AF_INET), Protocol::kTcp, Loopback(AF_INET, 9), Protocol::kTcp));
  auto path = DatagramPath::Start(std::move(config));
  ASSERT_FALSE(path.ok());
  EXPECT_NE(path.error().message().find("TCP on both sides"), std::string::npos)
      << path.error().message();
}

}  // namespace
}  // namespace xdpfwd
