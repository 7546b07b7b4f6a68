// Rule parsing: rinetd's format, addresses of both families, and the errors a user sees.
#include "forwarder/rules.h"

#include <gtest/gtest.h>

namespace xdpfwd {
namespace {

TEST(SocketAddress, ParsesIpv4AndBracketedIpv6) {
  auto v4 = ParseSocketAddress("10.0.1.1:9000");
  ASSERT_TRUE(v4) << v4.error().message();
  EXPECT_TRUE(v4->is_ipv4());
  EXPECT_EQ(v4->port(), 9000);
  EXPECT_EQ(ToString(*v4), "10.0.1.1:9000");
  auto v6 = ParseSocketAddress("[2001:db8::1]:443");
  ASSERT_TRUE(v6) << v6.error().message();
  EXPECT_EQ(v6->family(), AF_INET6);
  EXPECT_EQ(ToString(*v6), "[2001:db8::1]:443");
  EXPECT_TRUE(ParseSocketAddress("[::]:1")->is_any());
  EXPECT_TRUE(ParseSocketAddress("0.0.0.0:1")->is_any());
  EXPECT_FALSE(v4->is_any());
}

TEST(SocketAddress, RejectsWhatIsNotAnAddress) {
  EXPECT_FALSE(ParseSocketAddress("10.0.1.1"));
  EXPECT_FALSE(ParseSocketAddress("10.0.1.1:0"));
  EXPECT_FALSE(ParseSocketAddress("10.0.1.1:65536"));
  EXPECT_FALSE(ParseSocketAddress("10.0.1.1:9x"));
  EXPECT_FALSE(ParseSocketAddress("example.com:80"));
  EXPECT_FALSE(ParseSocketAddress("10.0.1.300:80"));
  auto bare6 = ParseSocketAddress("2001:db8::1:80");
  ASSERT_FALSE(bare6);
  EXPECT_NE(bare6.error().message().find("brackets"), std::string::npos);
}

TEST(Rules, ParsesRinetdFileWithCommentsAndBlankLines) {
  auto rules = ParseRules(
      "# rinetd style\n"
      "\n"
      "10.0.1.1 9000 10.0.0.2 9001   # web\n"
      "  10.0.1.1\t9002  10.0.0.3 80\n"
      ":: 9003 2001:db8::2 9003\n",
      "rules.conf");
  ASSERT_TRUE(rules) << rules.error().message();
  ASSERT_EQ(rules->size(), 3u);
  EXPECT_EQ(ToString((*rules)[0].listen), "10.0.1.1:9000");
  EXPECT_EQ(ToString((*rules)[0].backend), "10.0.0.2:9001");
  EXPECT_EQ((*rules)[0].line, 3);
  EXPECT_EQ((*rules)[1].id, 1u);
  EXPECT_EQ(ToString((*rules)[1].backend), "10.0.0.3:80");
  EXPECT_EQ((*rules)[2].line, 5);
  EXPECT_EQ(ToString((*rules)[2].listen), "[::]:9003");
}

// Each error names the file and line and says what is wrong.
TEST(Rules, ErrorsNameTheLine) {
  struct Case {
    const char* text;
    const char* expected;
  } cases[] = {
      {"10.0.1.1 9000 10.0.0.2 9001\nallow 10.*\n", "rules.conf:2: rinetd directive 'allow'"},
      {"logfile /var/log/x\n", "rules.conf:1: rinetd directive 'logfile'"},
      {"10.0.1.1 9000 10.0.0.2\n", "rules.conf:1: expected 'bindaddress bindport"},
      {"10.0.1.1 9000 10.0.0.2 9001 extra\n", "got 5 words"},
      {"10.0.1.1 99999 10.0.0.2 9001\n", "rules.conf:1: listen address: '99999'"},
      {"10.0.1.1 9000 backend.local 9001\n", "rules.conf:1: backend address: 'backend.local'"},
      {"10.0.1.1 9000 0.0.0.0 9001\n", "is not a connectable address"},
      {"10.0.1.1 9000 10.0.0.2 1\n\n10.0.1.1 9000 10.0.0.3 2\n",
       "rules.conf:3: 10.0.1.1:9000 is already the listen address of line 1"},
      {"# nothing\n\n", "rules.conf: no rules"},
  };
  for (const Case& c : cases) {
    auto rules = ParseRules(c.text, "rules.conf");
    ASSERT_FALSE(rules) << c.text;
    EXPECT_NE(rules.error().message().find(c.expected), std::string::npos)
        << "got: " << rules.error().message() << "\nwanted: " << c.expected;
  }
}

TEST(Rules, MissingFileIsAnErrorWithThePath) {
  auto rules = LoadRulesFile("/nonexistent/xdpfwd-rules.conf");
  ASSERT_FALSE(rules);
  EXPECT_NE(rules.error().message().find("/nonexistent/xdpfwd-rules.conf"), std::string::npos);
}

}  // namespace
}  // namespace xdpfwd
