// The workers' handoff rings as workers use them: a received packet (a chain of frames) copied
// toward its owner arrives whole, tagged, at that worker only, and the counts the control
// process reads add up.
#include "stack/worker_handoff.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "os/shared_memory.h"

namespace xdpfwd {
namespace {

TEST(WorkerHandoffTest, RingsShrinkWithMoreWorkersWithinTheBudget) {
  EXPECT_EQ(WorkerHandoff::SlotsPerRing(2), 4096u);
  EXPECT_EQ(WorkerHandoff::SlotsPerRing(4), 2048u);
  EXPECT_EQ(WorkerHandoff::SlotsPerRing(16), 256u);
  EXPECT_EQ(WorkerHandoff::MemoryBytes(1), 0u) << "one worker hands nothing over";
  EXPECT_LE(WorkerHandoff::MemoryBytes(8), size_t{72} << 20);
}

TEST(WorkerHandoffTest, AChainGoesWholeToItsOwnerOnly) {
  constexpr uint32_t kWorkers = 3;
  auto mem = SharedMemory::Create("handoff-test", WorkerHandoff::MemoryBytes(kWorkers));
  ASSERT_TRUE(mem) << mem.error().message();
  ASSERT_TRUE(WorkerHandoff::Format(mem->data(), mem->size(), kWorkers));
  std::vector<WorkerHandoff> w;
  for (uint32_t k = 0; k < kWorkers; ++k) {
    auto h = WorkerHandoff::Attach(mem->data(), mem->size(), kWorkers, k);
    ASSERT_TRUE(h) << h.error().message();
    w.push_back(std::move(*h));
  }
  // A 3-frame chain received by worker 0 for worker 2's flow.
  std::vector<std::vector<uint8_t>> bufs = {
      std::vector<uint8_t>(3000, 1), std::vector<uint8_t>(3840, 2), std::vector<uint8_t>(100, 3)};
  RxFrame frames[3];
  for (int i = 0; i < 3; ++i) {
    frames[i] = RxFrame{0, bufs[i].data(), static_cast<uint32_t>(bufs[i].size()), i < 2};
  }
  EXPECT_TRUE(w[0].Forward(2, frames, 3, 7));
  EXPECT_FALSE(w[0].Forward(0, frames, 3, 7)) << "never to itself";
  EXPECT_FALSE(w[0].Forward(kWorkers, frames, 3, 7)) << "no such worker";
  const auto none = [](uint16_t, std::span<const uint8_t>) { FAIL() << "not this worker's"; };
  EXPECT_EQ(w[1].Poll(none, 64), 0u);
  std::vector<uint8_t> got;
  uint16_t tag = 0;
  EXPECT_EQ(w[2].Poll(
                [&](uint16_t t, std::span<const uint8_t> bytes) {
                  tag = t;
                  got.assign(bytes.begin(), bytes.end());
                },
                64),
            1u);
  EXPECT_EQ(tag, 7);
  std::vector<uint8_t> want;
  for (const auto& b : bufs) want.insert(want.end(), b.begin(), b.end());
  EXPECT_EQ(got, want);
  EXPECT_EQ(w[2].Poll(none, 64), 0u) << "taken once";
  const HandoffTotals from = WorkerHandoff::Read(mem->data(), mem->size(), kWorkers, 0);
  const HandoffTotals to = WorkerHandoff::Read(mem->data(), mem->size(), kWorkers, 2);
  EXPECT_EQ(from.out, 1u);
  EXPECT_EQ(from.in, 0u);
  EXPECT_EQ(to.in, 1u);
  EXPECT_EQ(to.out, 0u);
}

TEST(WorkerHandoffTest, AFullRingDropsAndCountsAndAReattachedViewCarriesOn) {
  constexpr uint32_t kWorkers = 2;
  auto mem = SharedMemory::Create("handoff-test", WorkerHandoff::MemoryBytes(kWorkers));
  ASSERT_TRUE(mem);
  ASSERT_TRUE(WorkerHandoff::Format(mem->data(), mem->size(), kWorkers));
  auto producer = WorkerHandoff::Attach(mem->data(), mem->size(), kWorkers, 0);
  ASSERT_TRUE(producer);
  std::vector<uint8_t> packet(1500, 9);
  RxFrame f{0, packet.data(), static_cast<uint32_t>(packet.size()), false};
  uint32_t pushed = 0;
  while (producer->Forward(1, &f, 1, 0)) ++pushed;
  EXPECT_EQ(pushed, WorkerHandoff::SlotsPerRing(kWorkers)) << "one slot per MTU-sized packet";
  EXPECT_EQ(WorkerHandoff::Read(mem->data(), mem->size(), kWorkers, 0).dropped, 1u);
  // A restarted producer attaches to the ring in use and appends after what is there.
  auto restarted = WorkerHandoff::Attach(mem->data(), mem->size(), kWorkers, 0);
  ASSERT_TRUE(restarted);
  auto consumer = WorkerHandoff::Attach(mem->data(), mem->size(), kWorkers, 1);
  ASSERT_TRUE(consumer);
  EXPECT_EQ(consumer->Poll([](uint16_t, std::span<const uint8_t>) {}, 10), 10u);
  EXPECT_TRUE(restarted->Forward(1, &f, 1, 0));
  uint32_t rest = 0;
  while (consumer->Poll([&](uint16_t, std::span<const uint8_t> b) { EXPECT_EQ(b.size(), 1500u); },
                        64) > 0) {
    ++rest;
  }
  EXPECT_EQ(WorkerHandoff::Read(mem->data(), mem->size(), kWorkers, 1).in, pushed + 1);
}

}  // namespace
}  // namespace xdpfwd
