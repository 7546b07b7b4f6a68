// Steering entries changed by one side while the other reads or changes them. The program
// looks entries up for every packet and stamps an entry anew on a client's SYN; userspace marks
// an entry accepted and removes it after its connection's close. Each race here once cost a live
// connection its entry: its next packet passed to the kernel, which reset it (docs/relay.md).
//
// Some tests rely on how the kernel's hash map lists a bucket: newest element first, and
// get_next_key walks the buckets in order, each from its head. That makes "in place" visible:
// an entry behind another in its bucket stays behind it.
// Needs root (loading BPF).
#include <arpa/inet.h>
#include <bpf/bpf.h>
#include <gtest/gtest.h>
#include <linux/bpf.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "os/clock.h"
#include "os/unique_fd.h"
#include "stack/xsk_port.h"
#include "tests/support/packet_builder.h"
#include "tests/support/steer_run.h"
#include "xdp/steer.h"

namespace xdpfwd::test {
namespace {

constexpr uint32_t kRule = 7;

FlowTuple ClientTuple(uint16_t sport) { return {Ip(kClient), Ip(kListen), sport, kListenPort}; }

bool SameKey(const steer_flow_key& a, const steer_flow_key& b) {
  return std::memcmp(&a, &b, sizeof(a)) == 0;
}

steer_flow_key KeyOf(const FlowTuple& t) {
  steer_flow_key key{};
  key.saddr[0] = t.saddr.v4().s_addr;
  key.daddr[0] = t.daddr.v4().s_addr;
  key.sport = htons(t.sport);
  key.dport = htons(t.dport);
  key.family = STEER_AF_INET;
  return key;
}

// The program's flow map, found through the program's map ids.
UniqueFd FlowMapOf(int prog_fd) {
  uint32_t ids[16] = {};
  bpf_prog_info info{};
  info.nr_map_ids = 16;
  info.map_ids = reinterpret_cast<uintptr_t>(ids);
  uint32_t len = sizeof(info);
  if (bpf_obj_get_info_by_fd(prog_fd, &info, &len) != 0) return UniqueFd{};
  for (uint32_t i = 0; i < std::min(info.nr_map_ids, 16u); ++i) {
    UniqueFd fd{bpf_map_get_fd_by_id(ids[i])};
    bpf_map_info map{};
    uint32_t map_len = sizeof(map);
    if (fd.get() < 0 || bpf_obj_get_info_by_fd(fd.get(), &map, &map_len) != 0) continue;
    if (std::string(map.name) == "steer_flows") return fd;
  }
  return UniqueFd{};
}

// Every key, in the order the kernel lists them.
std::vector<steer_flow_key> KeysInOrder(int map_fd) {
  std::vector<steer_flow_key> keys;
  steer_flow_key key{}, next{};
  const void* prev = nullptr;
  while (bpf_map_get_next_key(map_fd, prev, &next) == 0) {
    keys.push_back(next);
    key = next;
    prev = &key;
  }
  return keys;
}

ptrdiff_t PositionOf(const std::vector<steer_flow_key>& keys, const FlowTuple& t) {
  const steer_flow_key k = KeyOf(t);
  const auto it = std::find_if(keys.begin(), keys.end(),
                               [&](const steer_flow_key& x) { return SameKey(x, k); });
  return it == keys.end() ? -1 : it - keys.begin();
}

class SteerUpdateTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (geteuid() != 0) GTEST_SKIP() << "loading BPF needs root";
    Load(1);  // the smallest map: 258 entries in 512 buckets
  }

  void Load(uint32_t flow_capacity) {
    SteerOptions options;
    options.flow_capacity = flow_capacity;
    auto prog = SteerProgram::Load(options);
    ASSERT_TRUE(prog) << prog.error().message();
    prog_ = std::move(*prog);
    ASSERT_TRUE(prog_->AddListener(Ip(kListen), kListenPort, kRule));
    map_ = FlowMapOf(prog_->prog_fd());
    ASSERT_GE(map_.get(), 0) << "the program has no steer_flows map";
  }

  // The body of the ASynAtThe...Removal tests below.
  void SynAtTheRemovalLeavesAnEntry(FlowReuse reuse);

  // Re-entering a flow puts it at the head of its bucket.
  void ReEnter(const FlowTuple& t) {
    ASSERT_TRUE(prog_->RemoveFlow(t));
    ASSERT_TRUE(prog_->AddFlow(t, 0, kRule));
  }

  // Fills the map and finds two client flows in one bucket; returns {behind, ahead}, with
  // `ahead` at the bucket's head and `behind` right after it in the kernel's listing.
  std::optional<std::pair<FlowTuple, FlowTuple>> TwoFlowsInOneBucket() {
    constexpr uint16_t kFlows = 250;
    for (uint16_t i = 0; i < kFlows; ++i) {
      if (!prog_->AddFlow(ClientTuple(static_cast<uint16_t>(40000 + i)), 0, kRule)) return {};
    }
    // A flow that moves forward when re-entered had flows ahead of it in its bucket: the one
    // now right after it is one of them.
    for (uint16_t i = 0; i < kFlows; ++i) {
      const FlowTuple t = ClientTuple(static_cast<uint16_t>(40000 + i));
      const ptrdiff_t before = PositionOf(KeysInOrder(map_.get()), t);
      ReEnter(t);
      const auto keys = KeysInOrder(map_.get());
      const ptrdiff_t after = PositionOf(keys, t);
      if (after >= before) continue;
      const steer_flow_key& k = keys[static_cast<size_t>(after) + 1];
      const FlowTuple ahead{Ip(kClient), Ip(kListen), ntohs(k.sport), kListenPort};
      ReEnter(ahead);  // back ahead of `t`
      return std::pair{t, ahead};
    }
    return {};
  }

  std::unique_ptr<SteerProgram> prog_;
  UniqueFd map_;
};

TEST_F(SteerUpdateTest, MarkAcceptedRewritesTheEntryWhereItLies) {
  const auto pair = TwoFlowsInOneBucket();
  ASSERT_TRUE(pair.has_value()) << "no two of 250 flows shared a bucket";
  const auto& [flow, ahead] = *pair;
  auto keys = KeysInOrder(map_.get());
  ASSERT_EQ(PositionOf(keys, flow), PositionOf(keys, ahead) + 1);

  const uint64_t stamp = MonotonicNs();
  ASSERT_TRUE(prog_->MarkAccepted(flow, 0, kRule, stamp));
  keys = KeysInOrder(map_.get());
  EXPECT_EQ(PositionOf(keys, flow), PositionOf(keys, ahead) + 1)
      << "the entry was replaced (moved to its bucket's head), not rewritten in place";
  const auto marked = prog_->LookupFlow(flow);
  ASSERT_TRUE(marked.has_value());
  EXPECT_EQ(marked->flags, STEER_FLOW_ACCEPTED);
  EXPECT_EQ(marked->created_ns, stamp);
  EXPECT_EQ(marked->origin, static_cast<uint32_t>(STEER_FLOW_FROM_SYN));
  EXPECT_EQ(marked->rule_id, kRule);
}

// The race itself: the program looks the flow up over and over on one CPU while another marks
// it accepted, its bucket neighbour put back ahead of it each time. Replacing the entry there
// let lookups miss it; rewriting it in place, none may.
TEST_F(SteerUpdateTest, ALookupDuringMarkAcceptedFindsTheEntry) {
  if (std::thread::hardware_concurrency() < 2) GTEST_SKIP() << "the race needs two CPUs";
  auto port = XskPort::Open(SmallPortOnLo());
  ASSERT_TRUE(port) << port.error().message();
  ASSERT_TRUE(prog_->BindQueue(0, (*port)->fd()));
  const auto pair = TwoFlowsInOneBucket();
  ASSERT_TRUE(pair.has_value()) << "no two of 250 flows shared a bucket";
  const auto& [flow, ahead] = *pair;

  std::atomic<bool> done{false};
  std::atomic<uint64_t> marks{0};
  std::thread marker([&] {
    while (!done.load(std::memory_order_relaxed)) {
      if (!prog_->MarkAccepted(flow, 0, kRule, MonotonicNs())) break;
      if (!prog_->RemoveFlow(ahead) || !prog_->AddFlow(ahead, 0, kRule)) break;
      marks.fetch_add(1, std::memory_order_relaxed);
    }
  });

  const std::vector<uint8_t> ack =
      Packet().Eth().IPv4(kClient, kListen).Tcp(flow.sport, kListenPort, kAck).Build();
  const SteerCounters before = prog_->ReadCounters();
  uint64_t runs = 0;
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(1);
  while (std::chrono::steady_clock::now() < until) {
    constexpr uint32_t kRepeat = 10000;
    const int ran = RunFrame(prog_->prog_fd(), ack, kRepeat);
    ASSERT_GE(ran, 0) << strerror(-ran);
    runs += kRepeat;
  }
  done = true;
  marker.join();
  const SteerCounters after = prog_->ReadCounters();
  const auto moved = [&](SteerReason r) {
    const auto i = static_cast<size_t>(r);
    return after[i].packets - before[i].packets;
  };
  ASSERT_GT(marks.load(), 1000u) << "the marking thread stopped early";
  EXPECT_EQ(moved(SteerReason::kPassUnknownFlow), 0u)
      << "lookups that missed the entry, of " << runs << ", during " << marks.load() << " marks";
  EXPECT_EQ(moved(SteerReason::kRedirectFlow), runs);
}

// A client's SYN on its 4-tuple's lingering entry, at the moment that entry's removal comes due
// (the client reuses its port just as the old connection's linger ends, which at ~30,000
// connections per second happens about once a second). The removal must either see the SYN's
// stamp and leave the entry (or put it back), or come first, and the SYN then enters the flow
// anew: either way the new connection has its entry. The program once wrote the new stamp into
// the element where it lay; a removal that had just read the old stamp and unlinked the element
// lost that write, and with it the entry.
// FlowReuse::kNone (no newer pcb on the tuple in lwIP) skips the removal's first look: the race
// is then the delete-and-read against the SYN every round, and must lose nothing either.
void SteerUpdateTest::SynAtTheRemovalLeavesAnEntry(FlowReuse reuse) {
  if (std::thread::hardware_concurrency() < 2) GTEST_SKIP() << "the race needs two CPUs";
  // Room in the client budget: a SYN that comes between the removal's delete and its giving the
  // slot back would otherwise find the budget spent.
  Load(64);
  auto port = XskPort::Open(SmallPortOnLo());
  ASSERT_TRUE(port) << port.error().message();
  ASSERT_TRUE(prog_->BindQueue(0, (*port)->fd()));
  constexpr uint16_t kPort = 41000;
  const FlowTuple flow = ClientTuple(kPort);
  const std::vector<uint8_t> syn =
      Packet().Eth().IPv4(kClient, kListen).Tcp(kPort, kListenPort, kSyn).Build();
  ASSERT_EQ(RunFrame(prog_->prog_fd(), syn), XDP_REDIRECT);
  constexpr uint64_t kOldStamp = 1;  // the old connection's accept, long ago

  // Rounds until either bound: on a loaded machine each handover may wait for a time slice.
  constexpr uint32_t kRounds = 100000;
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(2);
  constexpr uint32_t kStop = ~0u;
  std::atomic<uint32_t> go{0}, removed{0};
  std::thread removal([&] {
    for (uint32_t seen = 0;;) {
      uint32_t round;
      while ((round = go.load(std::memory_order_acquire)) == seen) std::this_thread::yield();
      if (round == kStop) return;
      (void)prog_->RemoveFlowStampedBy(flow, kOldStamp, reuse);
      removed.store(round, std::memory_order_release);
      seen = round;
    }
  });
  uint32_t rounds = 0, lost = 0, refused = 0;
  while (rounds < kRounds && std::chrono::steady_clock::now() < until) {
    const uint32_t i = ++rounds;
    // The entry lingers: the old connection's, accepted long ago.
    if (!prog_->MarkAccepted(flow, 0, kRule, kOldStamp)) {
      ++refused;
      break;
    }
    go.store(i, std::memory_order_release);
    // Starts the SYN a little later each round, so that it sweeps across the removal's moments.
    for (uint32_t spin = 0; spin < (i % 64) * 8; ++spin) {
      std::atomic_signal_fence(std::memory_order_seq_cst);  // keeps the loop
    }
    const int ran = RunFrame(prog_->prog_fd(), syn);
    while (removed.load(std::memory_order_acquire) != i) std::this_thread::yield();
    if (ran != XDP_REDIRECT) {
      ++refused;
      break;
    }
    if (!prog_->LookupFlow(flow).has_value()) {
      ++lost;
      if (RunFrame(prog_->prog_fd(), syn) != XDP_REDIRECT) break;  // for the next round
    }
  }
  go.store(kStop, std::memory_order_release);
  removal.join();
  EXPECT_EQ(refused, 0u) << "a mark or a SYN failed";
  EXPECT_GT(rounds, 100u);
  EXPECT_EQ(lost, 0u) << "SYNs whose 4-tuple was left without an entry, of " << rounds;
  EXPECT_EQ(prog_->ClientFlowCount(), 1u) << "the client budget's count went astray";
}

TEST_F(SteerUpdateTest, ASynAtTheRemovalOfItsLingeringEntryLeavesAnEntry) {
  SynAtTheRemovalLeavesAnEntry(FlowReuse::kPossible);
}

TEST_F(SteerUpdateTest, ASynAtTheOneCallRemovalOfItsLingeringEntryLeavesAnEntry) {
  SynAtTheRemovalLeavesAnEntry(FlowReuse::kNone);
}

}  // namespace
}  // namespace xdpfwd::test
