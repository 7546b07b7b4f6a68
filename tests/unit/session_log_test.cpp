// The access log's two formats, byte for byte against rinetd 0.73's printf formats (logEvent in
// src/rinetd.c), in two time zones.
#include "forwarder/session_log.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <time.h>

#include <cstdlib>

#include "forwarder/config.h"

namespace xdpfwd {
namespace {

class SessionLogTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const char* tz = std::getenv("TZ");
    saved_tz_ = tz != nullptr ? std::optional<std::string>(tz) : std::nullopt;
  }
  void TearDown() override {
    if (saved_tz_) {
      setenv("TZ", saved_tz_->c_str(), 1);
    } else {
      unsetenv("TZ");
    }
    tzset();
  }
  static void Zone(const char* tz) {
    setenv("TZ", tz, 1);
    tzset();
  }
  static Rule FirstRule(const std::string& text) {
    auto c = ParseConfig(text, "t.conf");
    EXPECT_TRUE(c) << c.error().message();
    return c ? c->rules[0] : Rule{};
  }
  static SessionEvent Event(SessionResult result, uint64_t in, uint64_t out) {
    SessionEvent e;
    e.unix_ns = 1795772702LL * 1'000'000'000 + 999'999'999;  // 2026-11-27 09:45:02.999 UTC
    e.rule_id = 0;
    auto* sin = reinterpret_cast<sockaddr_in*>(&e.client);
    sin->sin_family = AF_INET;
    inet_pton(AF_INET, "10.0.1.2", &sin->sin_addr);
    sin->sin_port = htons(40000);
    e.bytes_in = in;
    e.bytes_out = out;
    e.result = result;
    return e;
  }
  std::optional<std::string> saved_tz_;
};

TEST_F(SessionLogTest, TabFormatIsRinetds) {
  Zone("UTC0");
  const Rule rule = FirstRule("0.0.0.0 80 localhost 8080\n");
  // "%s\t%s\t%s\t%d\t%s\t%d\t%llu\t%llu\t%s\n" with the time's trailing blank.
  EXPECT_EQ(FormatSessionLine(Event(SessionResult::kOpened, 0, 0), rule, false),
            "27/Nov/2026:09:45:02 \t10.0.1.2\t0.0.0.0\t80\tlocalhost\t8080\t0\t0\topened\n");
  EXPECT_EQ(FormatSessionLine(Event(SessionResult::kRemoteClosedFirst, 1234, 56789), rule, false),
            "27/Nov/2026:09:45:02 \t10.0.1.2\t0.0.0.0\t80\tlocalhost\t8080\t1234\t56789\t"
            "done-remote-closed\n");
  EXPECT_EQ(FormatSessionLine(Event(SessionResult::kLocalConnectFailed, 0, 0), rule, false),
            "27/Nov/2026:09:45:02 \t10.0.1.2\t0.0.0.0\t80\tlocalhost\t8080\t0\t0\t"
            "local-connect-failed -\n");
}

TEST_F(SessionLogTest, CommonFormatIsRinetds) {
  Zone("EST5");  // -0500, no daylight saving rule
  const Rule rule = FirstRule("10.0.1.1 9000 10.0.0.2 9001\n");
  // "%s - - [%s %c%.2d%.2d] \"GET /rinetd-services/%s/%d/%s/%d/%s HTTP/1.0\" 200 %llu - - -
  // %llu\n": bytes to the client first, from the client last.
  EXPECT_EQ(FormatSessionLine(Event(SessionResult::kLocalClosedFirst, 100, 2000), rule, true),
            "10.0.1.2 - - [27/Nov/2026:04:45:02  -0500] \"GET "
            "/rinetd-services/10.0.1.1/9000/10.0.0.2/9001/done-local-closed HTTP/1.0\" 200 2000 "
            "- - - 100\n");
  Zone("IST-5:30");
  EXPECT_EQ(FormatSessionLine(Event(SessionResult::kDenied, 0, 0), rule, true),
            "10.0.1.2 - - [27/Nov/2026:15:15:02  +0530] \"GET "
            "/rinetd-services/10.0.1.1/9000/10.0.0.2/9001/denied HTTP/1.0\" 200 0 - - - 0\n");
}

// A command-line rule has no written host: its address stands in; an unknown client is '?'.
TEST_F(SessionLogTest, CommandLineRulesAndUnknownClients) {
  Zone("UTC0");
  Rule rule;
  rule.listen = ParseSocketAddress("[2001:db8::1]:443").value();
  rule.backend = ParseSocketAddress("10.0.0.2:8443").value();
  SessionEvent e = Event(SessionResult::kAcceptFailed, 0, 0);
  e.client.ss_family = AF_UNSPEC;
  EXPECT_EQ(
      FormatSessionLine(e, rule, false),
      "27/Nov/2026:09:45:02 \t?\t[2001:db8::1]\t443\t10.0.0.2\t8443\t0\t0\taccept-failed -\n");
  EXPECT_EQ(SessionResultName(SessionResult::kNotAllowed), "not-allowed");
  EXPECT_EQ(SessionResultName(SessionResult::kLocalBindFailed), "local-bind-failed -");
}

}  // namespace
}  // namespace xdpfwd
