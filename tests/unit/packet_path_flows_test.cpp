// PacketPathFlows: which TX path a flow's next packets must or may take.
#include "stack/packet_path_flows.h"

#include <gtest/gtest.h>

#include <cstdint>

namespace xdpfwd {
namespace {

constexpr uint64_t kHold = PacketPathFlows::kHoldNs;
constexpr uint64_t kT0 = 1'000'000'000;  // any clock reading

TEST(PacketPathFlowsTest, AFlowThatSentThroughThePacketSocketIsHeldThereForTheHoldTime) {
  PacketPathFlows f;
  EXPECT_FALSE(f.Held(7, kT0)) << "never seen";
  f.Sent(7, /*bare_ack=*/true, /*through_packet=*/true, kT0);
  EXPECT_TRUE(f.Held(7, kT0));
  EXPECT_TRUE(f.Held(7, kT0 + kHold - 1));
  EXPECT_FALSE(f.Held(7, kT0 + kHold));
  EXPECT_FALSE(f.Held(8, kT0)) << "another flow";
  // Each packet through the packet socket starts the hold again; one through the port does not.
  f.Sent(7, false, true, kT0 + kHold);
  f.Sent(7, false, false, kT0 + 2 * kHold - 1);
  EXPECT_TRUE(f.Held(7, kT0 + 2 * kHold - 1));
  EXPECT_FALSE(f.Held(7, kT0 + 2 * kHold));
}

TEST(PacketPathFlowsTest, OnlyARunOfBareAcksCountsAsAnAckRun) {
  PacketPathFlows f;
  // A handshake: the SYN, then its ACK, then the request. Not a run at any point.
  f.Sent(9, false, false, kT0);
  f.Sent(9, true, false, kT0 + 1);
  EXPECT_FALSE(f.InAckRun(9));
  f.Sent(9, false, false, kT0 + 2);
  for (uint8_t i = 1; i < PacketPathFlows::kAckRun; ++i) {
    f.Sent(9, true, false, kT0 + 2 + i);
    EXPECT_FALSE(f.InAckRun(9)) << i << " in a row";
  }
  f.Sent(9, true, false, kT0 + 100);
  EXPECT_TRUE(f.InAckRun(9));
  f.Sent(9, true, true, kT0 + 101);
  EXPECT_TRUE(f.InAckRun(9)) << "the run goes on whichever way the ACKs go";
  f.Sent(9, false, true, kT0 + 102);  // data
  EXPECT_FALSE(f.InAckRun(9));
  EXPECT_FALSE(f.InAckRun(0)) << "not a flow";
  f.Sent(0, true, true, kT0);
  EXPECT_FALSE(f.Held(0, kT0)) << "packets that are not TCP are not remembered";
}

// Flows 1, 1 + 4096, 1 + 8192 share a set of two slots.
TEST(PacketPathFlowsTest, AHeldFlowIsNotDisplacedWhileASlotOfItsSetIsNotHeld) {
  PacketPathFlows f;
  constexpr uint32_t a = 1, b = 1 + 4096, c = 1 + 8192;
  f.Sent(a, true, true, kT0);   // held
  f.Sent(b, true, false, kT0);  // through the port: not held
  f.Sent(c, true, false, kT0 + 1);
  EXPECT_TRUE(f.Held(a, kT0 + 1)) << "c took b's slot, not a's";
  EXPECT_FALSE(f.InAckRun(b));
  // Both held: a newcomer displaces the one held longest ago.
  f.Sent(c, true, true, kT0 + 2);
  f.Sent(b, true, true, kT0 + 3);
  EXPECT_FALSE(f.Held(a, kT0 + 3));
  EXPECT_TRUE(f.Held(c, kT0 + 3));
  EXPECT_TRUE(f.Held(b, kT0 + 3));
}

}  // namespace
}  // namespace xdpfwd
