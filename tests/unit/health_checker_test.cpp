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
  ASSERT_NE(board->Find(7), nullptr);
  const std::atomic<uint64_t>* bits = &board->Find(7)->up;
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
  ASSERT_NE(board->Find(3), nullptr);
  const std::atomic<uint64_t>* bits = &board->Find(3)->up;
  ASSERT_TRUE(Within(2s, [&] { return bits->load() == 0b01; }));
  // Reloaded with the same rule (same id) beside a new one: its verdict stays.
  Rule other = CheckedRule(4, live.port, dead.port);
  (*checker)->SetRules({rule, other});
  EXPECT_EQ(&board->Find(3)->up, bits);
  EXPECT_EQ(bits->load(), 0b01u);
  ASSERT_NE(board->Find(4), nullptr);
}

// The operator's word: the file's states and weights on the board from the start; `set backend`
// and `set weight` at run time; a reload (ApplyFile) brings the file's back, for a kept rule
// too; View shows weight and the counters the paths add.
TEST(HealthChecker, StatesAndWeightsFromTheFileAndAtRunTime) {
  auto board = std::make_unique<HealthBoard>();
  Rule rule;
  rule.id = 2;
  rule.listen = ParseSocketAddress("127.0.0.1:1").value();
  rule.backend = ParseSocketAddress("127.0.0.1:2").value();
  rule.backend_weight = 3;
  RuleBackend b;
  b.address = ParseSocketAddress("127.0.0.1:3").value();
  b.admin = BackendAdmin::kDrain;
  rule.more_backends = {b};
  Rule single;  // one backend, no checks: on the board only for its state
  single.id = 4;
  single.listen = ParseSocketAddress("127.0.0.1:4").value();
  single.backend = ParseSocketAddress("127.0.0.1:5").value();
  EXPECT_FALSE(HealthChecker::Covers(single));
  single.backend_admin = BackendAdmin::kMaint;
  EXPECT_TRUE(HealthChecker::Covers(single));
  auto checker = HealthChecker::Start(*board);
  ASSERT_TRUE(checker);
  (*checker)->SetRules({rule, single});
  HealthBoard::Entry* e = board->Find(2);
  ASSERT_NE(e, nullptr);
  EXPECT_EQ(e->ready.load(), 0b01u);
  EXPECT_EQ(e->weights[0].load(), 3u);
  EXPECT_EQ(e->weights[1].load(), 1u);
  ASSERT_NE(board->Find(4), nullptr);
  EXPECT_EQ(board->Find(4)->ready.load(), 0u);

  ASSERT_TRUE((*checker)->SetAdmin(2, "127.0.0.1:3", BackendAdmin::kReady));
  EXPECT_EQ(e->ready.load(), 0b11u);
  const uint32_t generation = e->weights_generation.load();
  ASSERT_TRUE((*checker)->SetWeight(2, "127.0.0.1:3", 7));
  EXPECT_EQ(e->weights[1].load(), 7u);
  EXPECT_NE(e->weights_generation.load(), generation);
  EXPECT_FALSE((*checker)->SetWeight(2, "127.0.0.1:3", 0));
  EXPECT_FALSE((*checker)->SetWeight(2, "127.0.0.1:3", 257));
  const auto missing = (*checker)->SetWeight(2, "127.0.0.1:9", 2);
  ASSERT_FALSE(missing);
  EXPECT_EQ(missing.error().message(), "rule 2 has no backend 127.0.0.1:9");
  e->counters[1].sessions = 4;
  e->counters[1].bytes_from_backend = 99;
  auto view = (*checker)->View();
  ASSERT_EQ(view.size(), 3u);
  EXPECT_EQ(view[1].weight, 7u);
  EXPECT_EQ(view[1].admin, BackendAdmin::kReady);
  EXPECT_EQ(view[1].sessions, 4u);
  EXPECT_EQ(view[1].bytes_from_backend, 99u);

  // A reload of the same file: the file wins (drain again, weight 1), the counters stay.
  (*checker)->SetRules({rule, single});
  (*checker)->ApplyFile({rule, single});
  EXPECT_EQ(board->Find(2), e);
  EXPECT_EQ(e->ready.load(), 0b01u);
  EXPECT_EQ(e->weights[1].load(), 1u);
  view = (*checker)->View();
  EXPECT_EQ(view[1].admin, BackendAdmin::kDrain);
  EXPECT_EQ(view[1].sessions, 4u);
}

}  // namespace
}  // namespace xdpfwd
