// How userspace rewrites a live steering entry. Accepting a connection marks its entry
// (SteerProgram::MarkAccepted) while the client's next packets arrive, microseconds apart. A
// plain hash-map update links a new element at the head of the entry's bucket and then unlinks
// the old one; a lookup by the program that is already past the head at that moment finds
// neither, and the packet passes to the kernel, which resets the connection (docs/relay.md).
// MarkAccepted must rewrite the element where it lies.
//
// The tests rely on how the kernel's hash map lists a bucket: newest element first, and
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
#include "xdp/steer.h"

namespace xdpfwd::test {
namespace {

constexpr const char* kClient = "198.18.0.2";
constexpr const char* kListen = "198.18.0.1";
constexpr uint16_t kListenPort = 9000;
constexpr uint32_t kRule = 7;

in_addr Ip(const char* dotted) {
  in_addr a{};
  inet_pton(AF_INET, dotted, &a);
  return a;
}

FlowTuple ClientTuple(uint16_t sport) { return {Ip(kClient), Ip(kListen), sport, kListenPort}; }

bool SameKey(const steer_flow_key& a, const steer_flow_key& b) {
  return std::memcmp(&a, &b, sizeof(a)) == 0;
}

steer_flow_key KeyOf(const FlowTuple& t) {
  return {t.saddr.s_addr, t.daddr.s_addr, htons(t.sport), htons(t.dport)};
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
    SteerOptions options;
    options.flow_capacity = 1;  // the smallest map: 258 entries in 512 buckets
    auto prog = SteerProgram::Load(options);
    ASSERT_TRUE(prog) << prog.error().message();
    prog_ = std::move(*prog);
    ASSERT_TRUE(prog_->AddListener(Ip(kListen), kListenPort, kRule));
    map_ = FlowMapOf(prog_->prog_fd());
    ASSERT_GE(map_.get(), 0) << "the program has no steer_flows map";
  }

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
  auto port = XskPort::Open([] {
    XskPortConfig cfg;
    cfg.ifname = "lo";  // no program is attached there: nothing is redirected for real
    cfg.frame_count = 256;
    cfg.ring_size = 64;
    return cfg;
  }());
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
    std::vector<uint8_t> data = ack;
    bpf_test_run_opts opts{};
    opts.sz = sizeof(opts);
    opts.data_in = data.data();
    opts.data_size_in = static_cast<__u32>(data.size());
    opts.repeat = 10000;
    ASSERT_EQ(bpf_prog_test_run_opts(prog_->prog_fd(), &opts), 0) << strerror(errno);
    runs += opts.repeat;
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

}  // namespace
}  // namespace xdpfwd::test
