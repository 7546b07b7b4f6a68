// The flow map's size as FlowCount reports it (show counters, /metrics, the stats line): the
// kernel's own count (xdp/map_count.h) must agree with what was put in and taken out — by
// userspace calls and by the program, one at a time and in a batch — and with a walk of the map.
// Needs root (loading BPF); the AF_XDP socket is bound to lo, where no program is attached.
#include <bpf/bpf.h>
#include <gtest/gtest.h>
#include <linux/bpf.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "os/unique_fd.h"
#include "stack/xsk_port.h"
#include "tests/support/packet_builder.h"
#include "tests/support/steer_run.h"
#include "xdp/map_count.h"
#include "xdp/steer.h"

namespace xdpfwd::test {
namespace {

// 6.6 and later keep the per-CPU element count of hash maps that bpf_map_sum_elem_count sums;
// there FlowCount must take it, not fall back to the walk unnoticed.
bool KernelCountsElements() {
  utsname u{};
  if (uname(&u) != 0) return false;
  int major = 0;
  int minor = 0;
  if (std::sscanf(u.release, "%d.%d", &major, &minor) != 2) return false;
  return major > 6 || (major == 6 && minor >= 6);
}

class FlowCountTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (geteuid() != 0) GTEST_SKIP() << "loading BPF needs root";
  }

  void Load(uint32_t capacity) {
    SteerOptions options;
    options.flow_capacity = capacity;
    auto prog = SteerProgram::Load(options);
    ASSERT_TRUE(prog) << prog.error().message();
    prog_ = std::move(*prog);
    ASSERT_TRUE(prog_->AddListener(Ip(kListen), kListenPort, 7));
    if (KernelCountsElements()) {
      ASSERT_EQ(prog_->flow_count_source(), "the kernel (bpf_map_sum_elem_count)");
    }
  }

  void BindSocket() {
    auto port = XskPort::Open(SmallPortOnLo());
    ASSERT_TRUE(port) << port.error().message();
    xsk_ = std::move(*port);
    ASSERT_TRUE(prog_->BindQueue(0, xsk_->fd()));
  }

  // The count both ways, and what the test knows the map holds.
  void ExpectCount(size_t n, const char* after) {
    EXPECT_EQ(prog_->FlowCount(), n) << "after " << after;
    EXPECT_EQ(prog_->WalkFlowCount(), n) << "after " << after << " (the walk)";
  }

  // Backend legs as the worker enters them: one local port each.
  static FlowTuple Leg(uint32_t i) {
    return FlowTuple{Ip(kBackend), Ip(kLocal), static_cast<uint16_t>(9001 + i / 50000),
                     static_cast<uint16_t>(10000 + i % 50000)};
  }
  static FlowTuple Client(uint16_t sport) {
    return FlowTuple{Ip(kClient), Ip(kListen), sport, kListenPort};
  }
  static std::vector<uint8_t> Syn(uint16_t sport) {
    return Packet().Eth().IPv4(kClient, kListen).Tcp(sport, kListenPort, kSyn).Build();
  }

  std::unique_ptr<SteerProgram> prog_;
  std::unique_ptr<XskPort> xsk_;
};

TEST_F(FlowCountTest, KernelCountFollowsInsertsAndDeletes) {
  Load(16384);
  ExpectCount(0, "load");
  constexpr uint32_t kLegs = 5000;
  std::vector<FlowTuple> legs;
  for (uint32_t i = 0; i < kLegs; ++i) {
    legs.push_back(Leg(i));
    ASSERT_TRUE(prog_->AddFlow(legs.back(), 0, 7));
  }
  ExpectCount(kLegs, "userspace inserts");

  // Entries the program inserts itself, on SYNs to the listener.
  BindSocket();
  constexpr uint16_t kSyns = 300;
  for (uint16_t p = 40000; p < 40000 + kSyns; ++p) {
    ASSERT_EQ(RunFrame(prog_->prog_fd(), Syn(p)), XDP_REDIRECT);
  }
  ExpectCount(kLegs + kSyns, "the program's inserts");
  // A SYN that finds its 4-tuple's entry replaces it whole (the preallocated map swaps in a
  // spare element): the count must not move.
  ASSERT_EQ(RunFrame(prog_->prog_fd(), Syn(40000)), XDP_REDIRECT);
  ExpectCount(kLegs + kSyns, "a replaced entry");
  ASSERT_TRUE(prog_->AddFlow(legs[0], 0, 7));  // BPF_ANY: written over
  ExpectCount(kLegs + kSyns, "an entry written over from userspace");

  constexpr uint32_t kSingles = 100;
  for (uint32_t i = 0; i < kSingles; ++i) ASSERT_TRUE(prog_->RemoveFlow(legs[i]));
  EXPECT_FALSE(prog_->RemoveFlow(legs[0])) << "an entry was removed twice";
  ExpectCount(kLegs - kSingles + kSyns, "single deletes");

  // One BPF_MAP_DELETE_BATCH for the rest of the legs.
  EXPECT_EQ(prog_->RemoveFlows(std::span<const FlowTuple>(legs).subspan(kSingles)),
            kLegs - kSingles);
  ExpectCount(kSyns, "a batch delete");

  for (uint16_t p = 40000; p < 40000 + kSyns; ++p) ASSERT_TRUE(prog_->RemoveFlow(Client(p)));
  ExpectCount(0, "removing the client flows");
  EXPECT_EQ(prog_->ClientFlowCount(), 0u);
}

// A full map refuses inserts; the count stops at its size and stays exact.
TEST_F(FlowCountTest, FullMapCountsItsSize) {
  Load(8);  // 2 x 8 + 256 entries (steer_maps.cpp's FlowMapEntries)
  constexpr uint32_t kEntries = 2 * 8 + 256;
  uint32_t added = 0;
  while (added < kEntries + 10 && prog_->AddFlow(Leg(added), 0, 7)) ++added;
  EXPECT_EQ(added, kEntries);
  ExpectCount(kEntries, "filling the map");
  ASSERT_TRUE(prog_->RemoveFlow(Leg(0)));
  ExpectCount(kEntries - 1, "a delete from a full map");
  ASSERT_TRUE(prog_->AddFlow(Leg(0), 0, 7));
  ExpectCount(kEntries, "refilling it");
}

// The same count for the other kinds of hash map the kernel counts, as a check of our reading of
// kernel/bpf/hashtab.c: preallocated, not preallocated, LRU.
TEST_F(FlowCountTest, MapElementCountCountsEveryKindOfHashMap) {
  if (!KernelCountsElements()) GTEST_SKIP() << "the kernel keeps no element count before 6.6";
  struct Kind {
    const char* name;
    bpf_map_type type;
    uint32_t flags;
  };
  for (const Kind& kind : {Kind{"hash", BPF_MAP_TYPE_HASH, 0u},
                           Kind{"hash, not preallocated", BPF_MAP_TYPE_HASH, BPF_F_NO_PREALLOC},
                           Kind{"lru hash", BPF_MAP_TYPE_LRU_HASH, 0u}}) {
    SCOPED_TRACE(kind.name);
    bpf_map_create_opts opts{};
    opts.sz = sizeof(opts);
    opts.map_flags = kind.flags;
    const UniqueFd map(bpf_map_create(kind.type, "flow_count_t", 4, 8, 1024, &opts));
    ASSERT_TRUE(map) << "bpf_map_create";
    auto count = MapElementCount::LoadForFd(map.get());
    ASSERT_TRUE(count) << count.error().message();
    EXPECT_EQ((*count)->Read(), 0u);
    for (uint32_t k = 0; k < 100; ++k) {
      const uint64_t v = k;
      ASSERT_EQ(bpf_map_update_elem(map.get(), &k, &v, BPF_NOEXIST), 0);
    }
    for (uint32_t k = 0; k < 10; ++k) {  // overwriting adds nothing
      const uint64_t v = k + 1;
      ASSERT_EQ(bpf_map_update_elem(map.get(), &k, &v, BPF_EXIST), 0);
    }
    EXPECT_EQ((*count)->Read(), 100u);
    for (uint32_t k = 0; k < 30; ++k) ASSERT_EQ(bpf_map_delete_elem(map.get(), &k), 0);
    EXPECT_EQ((*count)->Read(), 70u);
  }
}

// A map the iterator never meets (no such id) is an error at load, not a count of 0 later: the
// caller then falls back to the walk.
TEST_F(FlowCountTest, NoSuchMapIsAnErrorAtLoad) {
  auto count = MapElementCount::Load(UINT32_MAX);
  ASSERT_FALSE(count);
  EXPECT_NE(count.error().message().find("no map with id"), std::string::npos)
      << count.error().message();
}

}  // namespace
}  // namespace xdpfwd::test
