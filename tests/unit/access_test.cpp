// rinetd's access control: its glob, its evaluation order, and the address text it matches.
#include "forwarder/access.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>

namespace xdpfwd {
namespace {

std::vector<AccessPattern> List(std::initializer_list<std::pair<bool, const char*>> items) {
  std::vector<AccessPattern> out;
  for (const auto& [allow, pattern] : items) out.push_back({allow, pattern, 1});
  return out;
}

TEST(Access, GlobMatchesAsRinetdDoes) {
  EXPECT_TRUE(GlobMatch("192.168.2.7", "192.168.2.*"));
  EXPECT_TRUE(GlobMatch("192.168.2.", "192.168.2.*"));  // '*' matches nothing too
  EXPECT_FALSE(GlobMatch("192.168.3.7", "192.168.2.*"));
  EXPECT_TRUE(GlobMatch("192.168.2.15", "192.168.2.1?"));
  EXPECT_FALSE(GlobMatch("192.168.2.1", "192.168.2.1?"));    // '?' is exactly one
  EXPECT_FALSE(GlobMatch("192.168.2.150", "192.168.2.1?"));  // and the text must end
  EXPECT_TRUE(GlobMatch("2001:618:1:e43f", "2001:618:*:e43f"));
  EXPECT_FALSE(GlobMatch("2001:618:1:e43e", "2001:618:*:e43f"));
  EXPECT_TRUE(GlobMatch("10.1.2.3", "*"));
  EXPECT_TRUE(GlobMatch("10.1.2.3", "1*2*3"));
  EXPECT_FALSE(GlobMatch("10.1.2.4", "1*2*3"));
  EXPECT_TRUE(GlobMatch("10.11.1.1", "*1.1"));  // backtracks past the first "1.1"
  EXPECT_TRUE(GlobMatch("a*b", "a\\*b"));
  EXPECT_FALSE(GlobMatch("axb", "a\\*b"));
  EXPECT_FALSE(GlobMatch("", "?"));
  EXPECT_TRUE(GlobMatch("", "*"));
  // A long text against many stars stays linear: this would take ages if it backtracked
  // exponentially.
  EXPECT_FALSE(GlobMatch(std::string(4000, 'a'), "*a*a*a*a*a*a*a*a*b"));
}

TEST(Access, EvaluatesGlobalAllowGlobalDenyRuleAllowRuleDeny) {
  const auto global = List({{true, "10.*"}, {false, "10.9.*"}});
  const auto rule = List({{true, "10.1.*"}, {true, "10.9.*"}, {false, "10.1.2.*"}});
  EXPECT_EQ(CheckAccess(global, rule, "11.0.0.1"), AccessVerdict::kNotAllowed);  // global allow
  EXPECT_EQ(CheckAccess(global, rule, "10.9.0.1"), AccessVerdict::kDenied);      // global deny
  EXPECT_EQ(CheckAccess(global, rule, "10.2.0.1"), AccessVerdict::kNotAllowed);  // rule allow
  EXPECT_EQ(CheckAccess(global, rule, "10.1.2.3"), AccessVerdict::kDenied);      // rule deny
  EXPECT_EQ(CheckAccess(global, rule, "10.1.3.3"), AccessVerdict::kAllowed);
  // Deny lines alone allow everything they do not match.
  EXPECT_EQ(CheckAccess(List({{false, "10.9.*"}}), {}, "10.8.0.1"), AccessVerdict::kAllowed);
  EXPECT_EQ(CheckAccess({}, {}, "10.8.0.1"), AccessVerdict::kAllowed);
  EXPECT_FALSE(HasAccessPatterns({}, {}));
  EXPECT_TRUE(HasAccessPatterns({}, rule));
  EXPECT_EQ(VerdictName(AccessVerdict::kNotAllowed), "not-allowed");
  EXPECT_EQ(VerdictName(AccessVerdict::kDenied), "denied");
}

TEST(Access, AddressTextIsNumericAndMappedIpv4IsIpv4) {
  sockaddr_in v4{};
  v4.sin_family = AF_INET;
  inet_pton(AF_INET, "10.0.0.7", &v4.sin_addr);
  EXPECT_EQ(ClientAddressText(reinterpret_cast<const sockaddr*>(&v4)), "10.0.0.7");
  sockaddr_in6 v6{};
  v6.sin6_family = AF_INET6;
  inet_pton(AF_INET6, "2001:db8::7", &v6.sin6_addr);
  EXPECT_EQ(ClientAddressText(reinterpret_cast<const sockaddr*>(&v6)), "2001:db8::7");
  // An IPv4 client of a dual-stack listener matches IPv4 patterns.
  inet_pton(AF_INET6, "::ffff:10.0.0.8", &v6.sin6_addr);
  EXPECT_EQ(ClientAddressText(reinterpret_cast<const sockaddr*>(&v6)), "10.0.0.8");
  EXPECT_EQ(CheckAccess(List({{true, "10.0.0.*"}}), {},
                        ClientAddressText(reinterpret_cast<const sockaddr*>(&v6))),
            AccessVerdict::kAllowed);
}

}  // namespace
}  // namespace xdpfwd
