// The handoff ring between fast-path workers: order, tags, packets over several slots, the
// wrap, drops when full, and two real ends (threads, then processes over a memfd) moving
// millions of packets with every byte checked.
#include "stack/handoff_ring.h"

#include <gtest/gtest.h>
#include <sched.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <cstring>
#include <thread>
#include <vector>

#include "os/shared_memory.h"

namespace xdpfwd {
namespace {

uint64_t Mix(uint64_t x) {  // splitmix64: a packet's length and bytes follow from its number
  x += 0x9e3779b97f4a7c15;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9;
  x = (x ^ (x >> 27)) * 0x94d049bb133111eb;
  return x ^ (x >> 31);
}

// Mostly MTU-1500 frames; every 16th packet a longer one that needs two or three slots.
uint32_t LengthOf(uint64_t seq) {
  const uint64_t r = Mix(seq);
  if (seq % 16 == 15) return 1515 + static_cast<uint32_t>(r % 3000);
  return 60 + static_cast<uint32_t>(r % 1455);
}

// Word i of packet `seq` is Mix(seq) + i: one hash per packet keeps the check cheap enough
// for the sanitizer build, and still differs from every other packet's bytes.
void Fill(uint64_t seq, std::span<uint8_t> out) {
  const uint64_t base = Mix(seq);
  for (size_t i = 0; i < out.size(); i += 8) {
    const uint64_t word = base + i;
    std::memcpy(out.data() + i, &word, std::min<size_t>(8, out.size() - i));
  }
}

// Index of the first wrong byte (0 for a wrong length), or -1.
long Check(uint64_t seq, std::span<const uint8_t> got) {
  if (got.size() != LengthOf(seq)) return 0;
  const uint64_t base = Mix(seq);
  for (size_t i = 0; i < got.size(); i += 8) {
    const uint64_t word = base + i;
    if (std::memcmp(got.data() + i, &word, std::min<size_t>(8, got.size() - i)) != 0) {
      for (size_t j = i; j < got.size(); ++j) {
        if (got[j] != reinterpret_cast<const uint8_t*>(&word)[j - i]) return static_cast<long>(j);
      }
    }
  }
  return -1;
}

uint16_t TagOf(uint64_t seq) { return static_cast<uint16_t>(seq % 3); }

// Page-aligned memory for one ring, zeroed as a fresh memfd would be.
struct RingMemory {
  explicit RingMemory(uint32_t slots) {
    auto shm = SharedMemory::Create("handoff-test", HandoffRing::MemoryBytes(slots));
    EXPECT_TRUE(shm) << shm.error().message();
    memory = std::move(*shm);
    EXPECT_TRUE(HandoffRing::Format(memory.data(), memory.size(), slots));
  }
  HandoffRing View() {
    auto ring = HandoffRing::Attach(memory.data(), memory.size());
    EXPECT_TRUE(ring) << ring.error().message();
    return std::move(*ring);
  }
  SharedMemory memory;
};

// The producer side of the stress tests: waits for room instead of dropping, so the consumer
// can demand every packet. Gives up when `stop` is set (the consumer failed).
void Produce(HandoffRing& ring, uint64_t count, const std::atomic<bool>* stop = nullptr) {
  for (uint64_t seq = 0; seq < count; ++seq) {
    const uint32_t len = LengthOf(seq);
    std::span<uint8_t> room;
    while ((room = ring.Reserve(len, TagOf(seq))).empty()) {
      if (stop != nullptr && stop->load(std::memory_order_relaxed)) return;
      sched_yield();  // on a machine with fewer free cores than spinners, let the other end run
    }
    Fill(seq, room);
    ring.Commit();
  }
}

// The consumer side: every packet in order, every byte; a message on the first failure.
std::string Consume(HandoffRing& ring, uint64_t count, std::chrono::seconds limit) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  uint64_t seq = 0;
  uint32_t idle = 0;
  while (seq < count) {
    auto packet = ring.Peek();
    if (!packet) {
      if (++idle % 1024 == 0 && std::chrono::steady_clock::now() > deadline) {
        return "stalled after " + std::to_string(seq) + " packets";
      }
      sched_yield();
      continue;
    }
    if (packet->tag != TagOf(seq)) return "packet " + std::to_string(seq) + ": wrong tag";
    if (long at = Check(seq, packet->bytes); at >= 0) {
      return "packet " + std::to_string(seq) + " (" + std::to_string(packet->bytes.size()) +
             " bytes, " + std::to_string(LengthOf(seq)) + " expected): wrong at byte " +
             std::to_string(at);
    }
    ring.Pop();
    ++seq;
  }
  return "";
}

TEST(HandoffRingTest, FormatAndAttachRefuseWhatIsNotARing) {
  auto shm = SharedMemory::Create("handoff-test", HandoffRing::MemoryBytes(16));
  ASSERT_TRUE(shm);
  EXPECT_FALSE(HandoffRing::Attach(shm->data(), shm->size())) << "unformatted memory";
  EXPECT_FALSE(HandoffRing::Format(shm->data(), shm->size(), 12)) << "not a power of two";
  EXPECT_FALSE(HandoffRing::Format(shm->data(), shm->size(), 1));
  EXPECT_FALSE(HandoffRing::Format(shm->data() + 8, shm->size() - 8, 8)) << "misaligned";
  EXPECT_FALSE(HandoffRing::Format(shm->data(), HandoffRing::MemoryBytes(16) - 1, 16));
  ASSERT_TRUE(HandoffRing::Format(shm->data(), shm->size(), 16));
  EXPECT_FALSE(HandoffRing::Attach(shm->data(), HandoffRing::MemoryBytes(16) - 1));
  auto ring = HandoffRing::Attach(shm->data(), shm->size());
  ASSERT_TRUE(ring);
  EXPECT_EQ(ring->slot_count(), 16u);
  EXPECT_EQ(ring->max_packet(), 8 * HandoffRing::kSlotBytes - 16);
}

// Long packets take consecutive slots; one that would wrap starts again at slot 0 behind
// padding. Sizes chosen to hit the padding at every offset of an 8-slot ring.
TEST(HandoffRingTest, PacketsComeOutWholeInOrderAcrossTheWrap) {
  RingMemory mem(8);
  HandoffRing producer = mem.View();
  HandoffRing consumer = mem.View();
  EXPECT_FALSE(consumer.Peek());
  uint64_t out = 0;
  for (uint64_t seq = 0; seq < 2000; ++seq) {
    std::vector<uint8_t> packet(LengthOf(seq));
    Fill(seq, packet);
    while (!producer.Push(packet, TagOf(seq))) {  // full: take one out, as the owner would
      auto got = consumer.Peek();
      ASSERT_TRUE(got);
      ASSERT_EQ(Check(out, got->bytes), -1) << out;
      ASSERT_EQ(got->tag, TagOf(out));
      consumer.Pop();
      ++out;
    }
  }
  while (auto got = consumer.Peek()) {
    ASSERT_EQ(Check(out, got->bytes), -1) << out;
    consumer.Pop();
    ++out;
  }
  EXPECT_EQ(out, 2000u);
  const HandoffCounters c = producer.counters();
  EXPECT_EQ(c.pushed, 2000u);
  EXPECT_EQ(c.popped, 2000u);
  EXPECT_GT(c.dropped_full, 0u);  // the loop above relied on drops to know the ring was full
  EXPECT_EQ(c.dropped_size, 0u);
}

TEST(HandoffRingTest, AFullRingDropsAndCountsAndTakesAgainOnceDrained) {
  RingMemory mem(4);
  HandoffRing producer = mem.View();
  HandoffRing consumer = mem.View();
  const std::vector<uint8_t> frame(1514, 0xab);
  for (int i = 0; i < 4; ++i) EXPECT_TRUE(producer.Push(frame, 1)) << i;
  EXPECT_FALSE(producer.Push(frame, 1));
  EXPECT_FALSE(producer.Push(frame, 1));
  EXPECT_EQ(producer.counters().dropped_full, 2u);
  ASSERT_TRUE(consumer.Peek());
  EXPECT_FALSE(producer.Push(frame, 1)) << "a slot is free only once popped";
  consumer.Pop();
  EXPECT_TRUE(producer.Push(frame, 1));
  // Too long for any ring this size, and empty: refused whatever the fill level.
  while (consumer.Peek()) consumer.Pop();
  EXPECT_FALSE(producer.Push(std::vector<uint8_t>(producer.max_packet() + 1), 1));
  EXPECT_FALSE(producer.Push({}, 1));
  EXPECT_EQ(producer.counters().dropped_size, 2u);
  EXPECT_EQ(producer.counters().dropped_full, 3u);
}

// The longest packet fits an empty ring wherever the head stands.
TEST(HandoffRingTest, TheLongestPacketFitsAnEmptyRingAtEveryOffset) {
  RingMemory mem(8);
  HandoffRing producer = mem.View();
  HandoffRing consumer = mem.View();
  const std::vector<uint8_t> longest(producer.max_packet(), 7);
  for (int offset = 0; offset < 8; ++offset) {
    ASSERT_TRUE(producer.Push(longest, 2)) << offset;
    auto got = consumer.Peek();
    ASSERT_TRUE(got);
    EXPECT_EQ(got->bytes.size(), longest.size());
    consumer.Pop();
    ASSERT_TRUE(producer.Push(std::vector<uint8_t>(100, 1), 2));  // move the head one slot
    ASSERT_TRUE(consumer.Peek());
    consumer.Pop();
  }
}

TEST(HandoffRingTest, TwoThreadsMoveHalfAMillionPacketsIntact) {
  constexpr uint64_t kPackets = 500'000;
  RingMemory mem(256);
  HandoffRing producer = mem.View();
  HandoffRing consumer = mem.View();
  std::atomic<bool> stop{false};
  std::thread thread([&] { Produce(producer, kPackets, &stop); });
  const std::string failure = Consume(consumer, kPackets, std::chrono::seconds(120));
  stop = true;
  thread.join();
  EXPECT_EQ(failure, "");
  EXPECT_EQ(consumer.counters().pushed, kPackets);
  EXPECT_EQ(consumer.counters().popped, kPackets);
  EXPECT_FALSE(consumer.Peek());
}

// What the workers will do: the ring in a memfd made before the fork, producer in the child,
// consumer in the parent.
TEST(HandoffRingTest, TwoProcessesOverAMemfdMoveMillionsOfPacketsIntact) {
  constexpr uint64_t kPackets = 2'000'000;
  RingMemory mem(1024);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    auto ring = HandoffRing::Attach(mem.memory.data(), mem.memory.size());
    if (!ring) _exit(2);
    Produce(*ring, kPackets);
    _exit(0);
  }
  HandoffRing consumer = mem.View();
  const std::string failure = Consume(consumer, kPackets, std::chrono::seconds(240));
  if (!failure.empty()) kill(child, SIGKILL);
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  EXPECT_EQ(failure, "");
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  const HandoffCounters c = consumer.counters();
  EXPECT_EQ(c.pushed, kPackets);
  EXPECT_EQ(c.popped, kPackets);
  EXPECT_EQ(c.dropped_full + c.dropped_size, 0u);
}

}  // namespace
}  // namespace xdpfwd
