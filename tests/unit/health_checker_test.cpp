// Active health checks against listeners on the loopback: a backend that refuses is marked down
// after `fall` checks and its bit cleared on the board, one that comes back is up again after
// `rise`, a rule with PROXY gets v2's LOCAL header on each check, and a reload keeps a kept
// rule's state and gives a removed rule's entry back.
#include "forwarder/health_checker.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <thread>

namespace xdpfwd {
namespace {

using namespace std::chrono_literals;

// A port on 127.0.0.1 the kernel picks: listened on, or only bound (connects to it are then
// refused, as to a backend that is down).
struct LoopbackPort {
  explicit LoopbackPort(bool listening) {
    fd.reset(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT_EQ(bind(fd.get(), reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
    if (listening) {
      EXPECT_EQ(listen(fd.get(), 64), 0);
    }
    socklen_t len = sizeof a;
    getsockname(fd.get(), reinterpret_cast<sockaddr*>(&a), &len);
    port = ntohs(a.sin_port);
  }
  UniqueFd fd;
  uint16_t port = 0;
};
struct Listener : LoopbackPort {
  Listener() : LoopbackPort(true) {}
};
struct Refuser : LoopbackPort {
  Refuser() : LoopbackPort(false) {}
};

Rule CheckedRule(uint32_t id, uint16_t first, uint16_t second) {
  Rule r;
  r.id = id;
  r.listen = ParseSocketAddress("127.0.0.1:1").value();
  r.backend = ParseSocketAddress("127.0.0.1:" + std::to_string(first)).value();
  RuleBackend b;
  b.address = ParseSocketAddress("127.0.0.1:" + std::to_string(second)).value();
  r.more_backends = {b};
  r.check_ms = 20;
  r.check_fall = 2;
  r.check_rise = 2;
  return r;
}

bool Within(std::chrono::milliseconds limit, const std::function<bool()>& done) {
  const auto until = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < until) {
    if (done()) return true;
    std::this_thread::sleep_for(5ms);
  }
  return done();
}

TEST(HealthChecker, ARefusingBackendGoesDownAndComesBackUp) {
  auto board = std::make_unique<HealthBoard>();
  Listener live;
  auto refuser = std::make_unique<Refuser>();
  const uint16_t flapping = refuser->port;
  auto checker = HealthChecker::Start(*board);
  ASSERT_TRUE(checker) << checker.error().message();
  (*checker)->SetRules({CheckedRule(7, live.port, flapping)});
  const std::atomic<uint64_t>* bits = board->Find(7);
  ASSERT_NE(bits, nullptr);
  EXPECT_TRUE(Within(2s, [&] { return bits->load() == 0b01; })) << bits->load();
  auto view = (*checker)->View();
  ASSERT_EQ(view.size(), 2u);
  EXPECT_TRUE(view[0].up);
  EXPECT_FALSE(view[1].up);
  EXPECT_GE(view[1].failures, 2u);
  EXPECT_EQ(view[1].last_error, "Connection refused");
  EXPECT_EQ(view[1].backend, "127.0.0.1:" + std::to_string(flapping));

  // It comes back on the same port: up again after two passed checks.
  refuser.reset();
  UniqueFd back(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(flapping);
  const int one = 1;
  setsockopt(back.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  ASSERT_EQ(bind(back.get(), reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  ASSERT_EQ(listen(back.get(), 64), 0);
  EXPECT_TRUE(Within(2s, [&] { return bits->load() == 0b11; })) << bits->load();

  // A reload without the rule gives its entry back.
  (*checker)->SetRules({});
  EXPECT_EQ(board->Find(7), nullptr);
  EXPECT_TRUE((*checker)->View().empty());
}

TEST(HealthChecker, AKeptRuleKeepsItsStateAndProxyRulesGetALocalHeader) {
  auto board = std::make_unique<HealthBoard>();
  Listener live;
  Refuser dead;
  Rule rule = CheckedRule(3, live.port, dead.port);
  rule.proxy = ProxyVersion::kV2;
  auto checker = HealthChecker::Start(*board);
  ASSERT_TRUE(checker);
  (*checker)->SetRules({rule});
  // The live backend's first check: v2's LOCAL header (16 bytes, command 0x20) and the close.
  pollfd p{live.fd.get(), POLLIN, 0};
  ASSERT_EQ(poll(&p, 1, 2000), 1);
  UniqueFd c(accept4(live.fd.get(), nullptr, nullptr, SOCK_CLOEXEC));
  ASSERT_TRUE(c);
  std::string got;
  char buf[64];
  for (ssize_t n; (n = recv(c.get(), buf, sizeof buf, 0)) > 0;) got.append(buf, n);
  ASSERT_EQ(got.size(), 16u);
  EXPECT_EQ(got.substr(0, 12), std::string("\r\n\r\n\0\r\nQUIT\n", 12));
  EXPECT_EQ(static_cast<uint8_t>(got[12]), 0x20);
  const std::atomic<uint64_t>* bits = board->Find(3);
  ASSERT_NE(bits, nullptr);
  ASSERT_TRUE(Within(2s, [&] { return bits->load() == 0b01; }));
  // Reloaded with the same rule (same id) beside a new one: its verdict stays.
  Rule other = CheckedRule(4, live.port, dead.port);
  (*checker)->SetRules({rule, other});
  EXPECT_EQ(board->Find(3), bits);
  EXPECT_EQ(bits->load(), 0b01u);
  ASSERT_NE(board->Find(4), nullptr);
}

}  // namespace
}  // namespace xdpfwd
