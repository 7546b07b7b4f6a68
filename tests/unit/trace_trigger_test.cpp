// Trace triggers: what arms one, and which recorded events fire it (only after it was armed).
#include "forwarder/trace_trigger.h"

#include <gtest/gtest.h>

#include <vector>

namespace xdpfwd {
namespace {

RecorderRecord Event(uint64_t ns, RecorderEvent kind, uint32_t connection, uint32_t arg0 = 0) {
  RecorderRecord r{};
  r.monotonic_ns = ns;
  r.kind = static_cast<uint16_t>(kind);
  r.connection = connection;
  r.args[0] = arg0;
  return r;
}

std::vector<WorkerRecording> Rings(std::vector<RecorderRecord> records) {
  WorkerRecording w;
  w.name = "worker 0";
  w.snapshot.records = std::move(records);
  return {w};
}

TEST(TraceTrigger, ParsesWhatItTakesAndRefusesTheRest) {
  auto gap = ParseTraceTrigger("gap 5ms /tmp/x.pftrace", 42);
  ASSERT_TRUE(gap) << gap.error().message();
  EXPECT_EQ(gap->kind, TraceTrigger::Kind::kGap);
  EXPECT_EQ(gap->bound_ns, 5'000'000u);
  EXPECT_EQ(gap->armed_ns, 42u);
  EXPECT_EQ(gap->Describe(), "a worker gap of 5.0 ms or more -> /tmp/x.pftrace");
  auto connect = ParseTraceTrigger("connect 2s /tmp/y", 0);
  ASSERT_TRUE(connect);
  EXPECT_EQ(connect->bound_ns, 2'000'000'000u);
  EXPECT_FALSE(ParseTraceTrigger("gap 500us /tmp/x", 0));   // under what the workers record
  EXPECT_FALSE(ParseTraceTrigger("gap 5ms x.pftrace", 0));  // relative
  EXPECT_FALSE(ParseTraceTrigger("slow 5ms /tmp/x", 0));
  EXPECT_FALSE(ParseTraceTrigger("gap /tmp/x", 0));
  EXPECT_FALSE(ParseTraceTrigger("connect 0ms /tmp/x", 0));
}

TEST(TraceTrigger, GapFiresOnlyPastItsBoundAndAfterArming) {
  auto t = ParseTraceTrigger("gap 5ms /tmp/x", 1'000);
  ASSERT_TRUE(t);
  // A long gap before arming, a short one after: nothing.
  EXPECT_FALSE(FindTraceTrigger(*t, Rings({Event(500, RecorderEvent::kGap, 0, 9'000),
                                           Event(2'000, RecorderEvent::kGap, 0, 4'999)})));
  const auto fired = FindTraceTrigger(*t, Rings({Event(3'000, RecorderEvent::kGap, 0, 12'300)}));
  ASSERT_TRUE(fired);
  EXPECT_EQ(*fired, "worker 0 did not run for 12.3 ms");
}

TEST(TraceTrigger, ConnectFiresOnTheSlowBackendOnly) {
  auto t = ParseTraceTrigger("connect 100ms /tmp/x", 0);
  ASSERT_TRUE(t);
  const uint64_t ms = 1'000'000;
  const auto rings = Rings({Event(1 * ms, RecorderEvent::kClientEstablished, 1),
                            Event(2 * ms, RecorderEvent::kClientEstablished, 2),
                            Event(50 * ms, RecorderEvent::kBackendEstablished, 1),
                            Event(152 * ms, RecorderEvent::kBackendEstablished, 2)});
  const auto fired = FindTraceTrigger(*t, rings);
  ASSERT_TRUE(fired);
  EXPECT_EQ(*fired, "worker 0: connection 2's backend took 150.0 ms to establish");
  EXPECT_FALSE(
      FindTraceTrigger(*t, Rings({Event(1 * ms, RecorderEvent::kClientEstablished, 1),
                                  Event(99 * ms, RecorderEvent::kBackendEstablished, 1)})));
}

TEST(TraceTrigger, FirstByteFiresOnTheSlowAnswerOnly) {
  auto t = ParseTraceTrigger("first-byte 100ms /tmp/x", 0);
  ASSERT_TRUE(t);
  EXPECT_EQ(t->Describe(), "a first byte back of 100.0 ms or more -> /tmp/x");
  const uint64_t ms = 1'000'000;
  // Connection 1's backend connected late but answered in time; connection 2's answer was late.
  const auto rings = Rings({Event(1 * ms, RecorderEvent::kClientEstablished, 1),
                            Event(2 * ms, RecorderEvent::kClientEstablished, 2),
                            Event(90 * ms, RecorderEvent::kBackendEstablished, 1),
                            Event(95 * ms, RecorderEvent::kFirstByteToClient, 1),
                            Event(3 * ms, RecorderEvent::kBackendEstablished, 2),
                            Event(130 * ms, RecorderEvent::kFirstByteToClient, 2)});
  const auto fired = FindTraceTrigger(*t, rings);
  ASSERT_TRUE(fired);
  EXPECT_EQ(*fired, "worker 0: connection 2's first byte back took 128.0 ms from its handshake");
}

}  // namespace
}  // namespace xdpfwd
