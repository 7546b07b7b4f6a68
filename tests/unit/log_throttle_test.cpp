// LogThrottle: the first event is said at once, then one line per interval at most, and each
// line that goes out counts the events held back since the one before.
#include <gtest/gtest.h>

#include <cstdint>

#include "os/log.h"

namespace xdpfwd {
namespace {

TEST(LogThrottleTest, SaysTheFirstAtOnceThenOncePerIntervalWithWhatItHeldBack) {
  LogThrottle throttle(1000);
  uint64_t held = 99;
  EXPECT_TRUE(throttle.Count(0, held)) << "the first event, even at time 0";
  EXPECT_EQ(held, 0u);
  for (uint64_t t = 1; t <= 10; ++t) EXPECT_FALSE(throttle.Count(t * 50, held)) << t;
  EXPECT_FALSE(throttle.Count(999, held));
  EXPECT_TRUE(throttle.Count(1000, held));
  EXPECT_EQ(held, 11u) << "the ten at 50-500 ms and the one at 999 ms";
  EXPECT_TRUE(throttle.Count(5000, held)) << "a quiet spell: said at once";
  EXPECT_EQ(held, 0u);
  EXPECT_FALSE(throttle.Count(5999, held));
}

}  // namespace
}  // namespace xdpfwd
