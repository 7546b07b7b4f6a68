// The fast path's frame-fit and attach-mode policy (forwarder/link_fit.h) on facts given by hand.
#include "forwarder/link_fit.h"

#include <gtest/gtest.h>

namespace xdpfwd {
namespace {

LinkFacts Link(const std::string& driver, uint32_t mtu, bool generic = false,
               bool aggregation = false, bool chains = false) {
  LinkFacts f;
  f.ifname = "eth7";
  f.driver = driver;
  f.mtu = mtu;
  f.generic_xdp = generic;
  f.rx_aggregation = aggregation;
  f.rx_frame_bytes = 3840;  // a 4096-byte frame less XDP_PACKET_HEADROOM
  f.chains = chains;
  f.tx_frame_bytes = 4072;  // a 4096-byte frame less 24 bytes of TX metadata
  return f;
}

std::string Refusal(const LinkFacts& link) {
  const auto r = CheckLinkFit(link);
  return r.ok() ? std::string("(accepted)") : r.error().message();
}

TEST(LinkFitTest, WithoutChainsNativeModeTakesWhatFitsOneFrame) {
  EXPECT_TRUE(CheckLinkFit(Link("ice", 1500)).ok());
  EXPECT_TRUE(CheckLinkFit(Link("ice", 3826)).ok());
  const std::string why = Refusal(Link("ice", 3827));
  EXPECT_NE(why.find("eth7: MTU 3827 is above the 3826 the fast path can receive"),
            std::string::npos)
      << why;
  EXPECT_NE(why.find("ip link set dev eth7 mtu 3826"), std::string::npos) << why;
  EXPECT_NE(why.find("--path kernel"), std::string::npos) << why;
}

TEST(LinkFitTest, WithoutChainsVethStopsWhereItsNativeXdpStopsInOneBuffer) {
  EXPECT_TRUE(CheckLinkFit(Link("veth", 3506)).ok());
  const std::string why = Refusal(Link("veth", 3507));
  EXPECT_NE(why.find("MTU 3507 is above the 3506"), std::string::npos) << why;
}

TEST(LinkFitTest, WithoutChainsOnePacketMustFitATxFrameToo) {
  LinkFacts big_rx = Link("ice", 4000);
  big_rx.rx_frame_bytes = 8192;  // as if frames were larger on RX
  EXPECT_TRUE(CheckLinkFit(big_rx).ok()) << Refusal(big_rx);
  big_rx.mtu = 4059;
  EXPECT_NE(Refusal(big_rx).find("MTU 4059 is above the 4058 the fast path can send"),
            std::string::npos)
      << Refusal(big_rx);
}

TEST(LinkFitTest, ChainsServeJumboMtusBothWays) {
  EXPECT_TRUE(CheckLinkFit(Link("veth", 9000, false, false, true)).ok());
  EXPECT_TRUE(CheckLinkFit(Link("veth", 9000, true, false, true)).ok());
  EXPECT_TRUE(CheckLinkFit(Link("ice", 9000, false, false, true)).ok());
  const std::string why = Refusal(Link("veth", 9000));
  EXPECT_NE(why.find("eth7: MTU 9000 is above the 3506 the fast path can receive"),
            std::string::npos)
      << why;
  EXPECT_NE(why.find("--tune multi-buffer=off"), std::string::npos) << why;
}

TEST(LinkFitTest, GenericModeOnlyWherePacketsFit) {
  EXPECT_NE(Refusal(Link("veth", 1500, true)).find("keeps its TSO"), std::string::npos)
      << "the veth peer keeps its TSO: 64 KiB packets need chains";
  EXPECT_TRUE(CheckLinkFit(Link("veth", 1500, true, true, true)).ok()) << "chains take them";
  const std::string why = Refusal(Link("ice", 1500, true, true));
  EXPECT_NE(why.find("ethtool -K eth7 gro off lro off"), std::string::npos) << why;
  // A GRO-merged packet's TCP checksum is its first segment's: chains do not make it checkable.
  EXPECT_FALSE(CheckLinkFit(Link("ice", 1500, true, true, true)).ok());
  EXPECT_TRUE(CheckLinkFit(Link("ice", 1500, true, false)).ok());
}

TEST(LinkFitTest, GenericIsPreferredOnVethWithChainsOnly) {
  EXPECT_TRUE(PreferGenericXdp("veth", true));
  EXPECT_FALSE(PreferGenericXdp("veth", false));
  EXPECT_FALSE(PreferGenericXdp("ice", true));
  EXPECT_FALSE(PreferGenericXdp("", true));
}

}  // namespace
}  // namespace xdpfwd
