// Passive health (forwarder/backend_health.h): `fall` failures in a row mark a backend down;
// after the down period one trial connection at a time decides, and a success counts only if
// its handshake began after the backend's latest failure.
#include "forwarder/backend_health.h"

#include <gtest/gtest.h>

#include <vector>

namespace xdpfwd {
namespace {

constexpr uint64_t kDown = PassiveHealth::kDownMs;

uint64_t Bit(size_t i) { return uint64_t{1} << i; }

// Backend 0 of three marked down at `at` by kFall handshakes that began then and failed.
void MarkDown(PassiveHealth& h, uint64_t at) {
  for (uint32_t k = 0; k < PassiveHealth::kFall; ++k) {
    HealthAttempt a = h.Began(0, at);
    EXPECT_FALSE(a.trial);
    EXPECT_EQ(h.Failed(0, at, a), k + 1 == PassiveHealth::kFall) << "failure " << k + 1;
  }
  ASSERT_EQ(h.Up(at), Bit(1) | Bit(2));
}

TEST(PassiveHealthTest, FallFailuresInARowMarkDownForTheDownPeriod) {
  PassiveHealth h(3);
  EXPECT_EQ(h.Up(0), Bit(0) | Bit(1) | Bit(2));
  ASSERT_NO_FATAL_FAILURE(MarkDown(h, 100));
  EXPECT_EQ(h.Up(100 + kDown - 1), Bit(1) | Bit(2));
  EXPECT_EQ(h.Up(100 + kDown), Bit(0) | Bit(1) | Bit(2)) << "its trial is due";
}

TEST(PassiveHealthTest, AFreshSuccessRestartsTheRow) {
  PassiveHealth h(3);
  HealthAttempt first = h.Began(0, 10), second = h.Began(0, 10), ok = h.Began(0, 11);
  h.Failed(0, 10, first);
  h.Failed(0, 10, second);
  h.Succeeded(0, ok);  // began after both failures
  HealthAttempt third = h.Began(0, 12);
  EXPECT_FALSE(h.Failed(0, 12, third)) << "one failure after a success, not three in a row";
  EXPECT_EQ(h.Up(12), Bit(0) | Bit(1) | Bit(2));
}

// A handshake that began before the backend died and completes after its first refusals says
// nothing about it now: the row goes on, and kFall refusals still mark it down.
TEST(PassiveHealthTest, AStaleSuccessDoesNotClearFailures) {
  PassiveHealth h(3);
  HealthAttempt old = h.Began(0, 10);
  HealthAttempt refused = h.Began(0, 11);
  EXPECT_FALSE(h.Failed(0, 12, refused));
  h.Succeeded(0, old);  // began at 10, before the failure at 12
  for (uint32_t k = 1; k < PassiveHealth::kFall; ++k) {
    HealthAttempt a = h.Began(0, 13);
    EXPECT_EQ(h.Failed(0, 13, a), k + 1 == PassiveHealth::kFall);
  }
  EXPECT_EQ(h.Up(13), Bit(1) | Bit(2));

  // Nor does it bring a backend that is down back.
  HealthAttempt before_mark = h.Began(0, 13);
  HealthAttempt late = h.Began(0, 14);
  HealthAttempt again = h.Began(0, 15);
  h.Failed(0, 15, again);
  h.Succeeded(0, late);
  EXPECT_EQ(h.Up(16), Bit(1) | Bit(2));
  h.Abandoned(0, before_mark);
  EXPECT_EQ(h.Up(16), Bit(1) | Bit(2));
}

// After the down period one connection tries the backend; every other pick leaves it out until
// that handshake's verdict.
TEST(PassiveHealthTest, OneTrialAtATime) {
  PassiveHealth h(3);
  ASSERT_NO_FATAL_FAILURE(MarkDown(h, 100));
  const uint64_t due = 100 + kDown;
  HealthAttempt trial = h.Began(0, due);
  EXPECT_TRUE(trial.trial);
  EXPECT_EQ(h.Up(due), Bit(1) | Bit(2)) << "left out while its trial is under way";
  EXPECT_EQ(h.Up(due + 10 * kDown), Bit(1) | Bit(2)) << "for as long as it is under way";
  // A connection that takes it anyway (every backend marked down) is no second trial.
  HealthAttempt another = h.Began(0, due + 1);
  EXPECT_FALSE(another.trial);
  // Other backends are not affected.
  EXPECT_FALSE(h.Began(1, due).trial);
}

TEST(PassiveHealthTest, AFailedTrialMarksDownAtOnce) {
  PassiveHealth h(3);
  ASSERT_NO_FATAL_FAILURE(MarkDown(h, 100));
  const uint64_t due = 100 + kDown;
  HealthAttempt trial = h.Began(0, due);
  ASSERT_TRUE(trial.trial);
  EXPECT_TRUE(h.Failed(0, due + 5, trial)) << "one failure, not kFall";
  EXPECT_FALSE(trial.trial);
  EXPECT_EQ(h.Up(due + 5 + kDown - 1), Bit(1) | Bit(2)) << "down for another period";
  EXPECT_EQ(h.Up(due + 5 + kDown), Bit(0) | Bit(1) | Bit(2));
  HealthAttempt next = h.Began(0, due + 5 + kDown);
  EXPECT_TRUE(next.trial) << "then the next trial";
}

TEST(PassiveHealthTest, ASuccessfulTrialMarksUp) {
  PassiveHealth h(3);
  ASSERT_NO_FATAL_FAILURE(MarkDown(h, 100));
  const uint64_t due = 100 + kDown;
  HealthAttempt trial = h.Began(0, due);
  ASSERT_TRUE(trial.trial);
  h.Succeeded(0, trial);
  EXPECT_EQ(h.Up(due + 1), Bit(0) | Bit(1) | Bit(2));
  EXPECT_FALSE(h.Began(0, due + 1).trial) << "up: no more trials";
  // The failures are cleared: it takes kFall again to mark it down.
  for (uint32_t k = 0; k + 1 < PassiveHealth::kFall; ++k) {
    HealthAttempt a = h.Began(0, due + 2);
    EXPECT_FALSE(h.Failed(0, due + 2, a));
  }
  EXPECT_EQ(h.Up(due + 2), Bit(0) | Bit(1) | Bit(2));
}

// The trial's connection ended some other way (the client left, its connect timeout): the
// backend is not left out forever, the next pick tries it.
TEST(PassiveHealthTest, AnAbandonedTrialReleasesTheBackend) {
  PassiveHealth h(3);
  ASSERT_NO_FATAL_FAILURE(MarkDown(h, 100));
  const uint64_t due = 100 + kDown;
  HealthAttempt trial = h.Began(0, due);
  ASSERT_TRUE(trial.trial);
  h.Abandoned(0, trial);
  EXPECT_FALSE(trial.trial);
  EXPECT_EQ(h.Up(due + 1), Bit(0) | Bit(1) | Bit(2));
  HealthAttempt next = h.Began(0, due + 1);
  EXPECT_TRUE(next.trial);
  EXPECT_EQ(h.Up(due + 1), Bit(1) | Bit(2));
  // Abandoning the first again (a connection's end after its verdict) releases nothing.
  h.Abandoned(0, trial);
  EXPECT_EQ(h.Up(due + 1), Bit(1) | Bit(2));
  h.Succeeded(0, next);
  h.Abandoned(0, next);  // Finish after the handshake completed
  EXPECT_EQ(h.Up(due + 2), Bit(0) | Bit(1) | Bit(2));
}

// A failure of another connection while the trial is under way (one that began before the
// mark) marks it down again; the trial's success then began before that failure and does not
// clear it, but does end the trial.
TEST(PassiveHealthTest, AFailureDuringTheTrialOutweighsItsSuccess) {
  PassiveHealth h(3);
  HealthAttempt straggler = h.Began(0, 100);
  ASSERT_NO_FATAL_FAILURE(MarkDown(h, 100));
  const uint64_t due = 100 + kDown;
  HealthAttempt trial = h.Began(0, due);
  ASSERT_TRUE(trial.trial);
  EXPECT_TRUE(h.Failed(0, due + 1, straggler)) << "down again";
  h.Succeeded(0, trial);
  EXPECT_EQ(h.Up(due + 2), Bit(1) | Bit(2));
  EXPECT_EQ(h.Up(due + 1 + kDown), Bit(0) | Bit(1) | Bit(2));
  EXPECT_TRUE(h.Began(0, due + 1 + kDown).trial);
}

}  // namespace
}  // namespace xdpfwd
