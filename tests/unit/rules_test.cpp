// ADDRESS:PORT words of both families, and the errors a user sees (the file grammar is
// config_test.cpp's).
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

}  // namespace
}  // namespace xdpfwd
