// FillDepth: how deep the fill ring is kept, driven as RefillFill drives it.
#include "stack/fill_depth.h"

#include <gtest/gtest.h>

namespace xdpfwd {
namespace {

constexpr uint32_t kFloor = 512, kCeiling = 4096;

// Runs `periods` decision periods in which the kernel takes `per_iteration` frames an
// iteration and the ring never runs low (the level stays at the depth less what was taken).
void Steady(FillDepth& d, uint32_t per_iteration, uint32_t periods) {
  for (uint32_t i = 0; i < periods * FillDepth::kPeriod; ++i) {
    d.Update(d.target() - per_iteration, per_iteration);
  }
}

TEST(FillDepthTest, StartsFullAndIdleIterationsChangeNothing) {
  FillDepth d(kFloor, kCeiling);
  EXPECT_EQ(d.target(), kCeiling);
  for (int i = 0; i < 100000; ++i) EXPECT_EQ(d.Update(kCeiling, 0), kCeiling);
  EXPECT_EQ(d.grows(), 0u);
  EXPECT_EQ(d.shrinks(), 0u);
}

TEST(FillDepthTest, SteadyLoadThatCyclesTheRingShrinksItToTheFloorAnEighthAPeriodAtATime) {
  FillDepth d(kFloor, kCeiling);
  Steady(d, 17, 1);  // a 64 KiB super-segment an iteration: 17,408 frames a period
  EXPECT_EQ(d.target(), kCeiling - kCeiling / 8);
  Steady(d, 17, 40);
  EXPECT_EQ(d.target(), kFloor);
  Steady(d, 17, 10);
  EXPECT_EQ(d.target(), kFloor) << "never below the floor";
  EXPECT_GE(d.shrinks(), 15u);
  EXPECT_EQ(d.grows(), 0u);
}

TEST(FillDepthTest, TheRingRunningLowDoublesItAtOnce) {
  FillDepth d(kFloor, kCeiling);
  Steady(d, 17, 60);
  ASSERT_EQ(d.target(), kFloor);
  // One iteration took all but a few of the posted frames (a burst, a stalled iteration).
  EXPECT_EQ(d.Update(kFloor / 4 - 1, kFloor - kFloor / 4 + 1), 2 * kFloor);
  EXPECT_EQ(d.Update(0, 2 * kFloor), 4 * kFloor);
  EXPECT_EQ(d.Update(0, 4 * kFloor), kCeiling);
  EXPECT_EQ(d.Update(0, kCeiling), kCeiling) << "never above the ceiling";
  EXPECT_EQ(d.grows(), 3u);
  // Half left is not low.
  FillDepth e(kFloor, kCeiling);
  Steady(e, 17, 60);
  ASSERT_EQ(e.target(), kFloor);
  EXPECT_EQ(e.Update(kFloor / 2, kFloor / 2), kFloor);
  EXPECT_EQ(e.grows(), 0u);
}

TEST(FillDepthTest, ItStaysTwiceTheMostOneIterationTook) {
  FillDepth d(kFloor, kCeiling);
  // Mostly 17 frames an iteration, now and then 700 (a worker iteration that ran long).
  for (uint32_t p = 0; p < 60; ++p) {
    for (uint32_t i = 0; i < FillDepth::kPeriod; ++i) {
      const uint32_t taken = i == 100 ? 700 : 17;
      d.Update(d.target() - taken, taken);
    }
  }
  EXPECT_EQ(d.target(), 1400u);
  EXPECT_EQ(d.grows(), 0u) << "it never ran low";
}

TEST(FillDepthTest, LightTrafficReturnsItToTheCeiling) {
  FillDepth d(kFloor, kCeiling);
  Steady(d, 17, 60);
  ASSERT_EQ(d.target(), kFloor);
  // Requests and handshakes: a frame or two an iteration, under kSteadyPerIteration.
  for (uint32_t i = 0; i < 3 * FillDepth::kPeriod; ++i) d.Update(d.target() - 2, 1 + i % 2);
  EXPECT_EQ(d.target(), kCeiling);
}

TEST(FillDepthTest, AFloorAtTheCeilingKeepsEveryFramePosted) {
  FillDepth d(kCeiling, kCeiling);
  Steady(d, 17, 10);
  EXPECT_EQ(d.target(), kCeiling);
  EXPECT_EQ(d.shrinks(), 0u);
}

}  // namespace
}  // namespace xdpfwd
