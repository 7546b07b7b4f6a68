// The fast path's frame-fit policy (forwarder/link_fit.h) on facts given by hand.
#include "forwarder/link_fit.h"

#include <gtest/gtest.h>

namespace xdpfwd {
namespace {

LinkFacts Link(const std::string& driver, uint32_t mtu, bool generic = false,
               bool aggregation = false) {
  LinkFacts f;
  f.ifname = "eth7";
  f.driver = driver;
  f.mtu = mtu;
  f.generic_xdp = generic;
  f.rx_aggregation = aggregation;
  f.rx_frame_bytes = 3840;  // a 4096-byte frame less XDP_PACKET_HEADROOM
  return f;
}

TEST(LinkFitTest, NativeModeTakesWhatFitsOneFrame) {
  EXPECT_TRUE(CheckLinkFit(Link("ice", 1500)).ok());
  EXPECT_TRUE(CheckLinkFit(Link("ice", 3826)).ok());
  const auto r = CheckLinkFit(Link("ice", 3827));
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message().find("eth7: MTU 3827 is above the 3826"), std::string::npos)
      << r.error().message();
  EXPECT_NE(r.error().message().find("ip link set dev eth7 mtu 3826"), std::string::npos);
  EXPECT_NE(r.error().message().find("--path kernel"), std::string::npos);
}

TEST(LinkFitTest, VethStopsWhereItsNativeXdpStops) {
  EXPECT_TRUE(CheckLinkFit(Link("veth", 3506)).ok());
  const auto r = CheckLinkFit(Link("veth", 9000));
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message().find("MTU 9000 is above the 3506"), std::string::npos)
      << r.error().message();
}

TEST(LinkFitTest, GenericModeOnlyWherePacketsStayWithinTheMtu) {
  EXPECT_FALSE(CheckLinkFit(Link("veth", 1500, true)).ok()) << "the veth peer keeps its TSO";
  const auto r = CheckLinkFit(Link("ice", 1500, true, true));
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message().find("ethtool -K eth7 gro off lro off"), std::string::npos)
      << r.error().message();
  EXPECT_TRUE(CheckLinkFit(Link("ice", 1500, true, false)).ok());
}

}  // namespace
}  // namespace xdpfwd
