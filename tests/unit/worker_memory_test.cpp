// The workers' shared-memory layout: regions page-aligned, back to back after the header, none
// overlapping, absent ones empty, and the header's bytes pinned (a reader of another build
// checks them).
#include "forwarder/worker_memory.h"

#include <gtest/gtest.h>

#include <cstddef>
#include <string>
#include <vector>

namespace xdpfwd {
namespace {

TEST(WorkerMemoryLayout, RegionsArePageAlignedAndDoNotOverlap) {
  WorkerMemoryPlan plan;
  plan.workers = 3;
  plan.slot_bytes = 5000;
  plan.handoff_bytes = 10000;
  plan.session_ring_bytes = 0;  // no access log
  plan.recorder_bytes = 8u << 20;
  plan.table_bytes = 4097;
  plan.rules_bytes = 1u << 20;
  const WorkerMemoryHeader h = plan.Layout(4096);
  EXPECT_EQ(h.magic, kWorkerMemoryMagic);
  EXPECT_EQ(h.version, kWorkerMemoryVersion);
  EXPECT_EQ(h.workers, 3);
  EXPECT_EQ(h.slots.offset, 4096u);  // the header's page first
  EXPECT_EQ(h.slots.bytes_each, 8192u);
  EXPECT_EQ(h.slots.count, 3u);
  EXPECT_EQ(h.handoff.offset, 4096u + 3 * 8192u);
  EXPECT_EQ(h.handoff.bytes_each, 12288u);
  EXPECT_FALSE(h.session_rings.present());
  EXPECT_EQ(h.recorders.bytes_each, 8u << 20);
  EXPECT_EQ(h.tables.bytes_each, 8192u);
  EXPECT_EQ(h.rules.bytes_each, 1u << 20);
  EXPECT_EQ(h.rules.count, 1u);
  EXPECT_EQ(h.total_bytes, h.rules.end());
  const std::vector<WorkerMemoryRegion> in_order = {h.slots,     h.handoff, h.session_rings,
                                                    h.recorders, h.tables,  h.rules};
  uint64_t at = 4096;
  for (const WorkerMemoryRegion& r : in_order) {
    EXPECT_EQ(r.offset % 4096, 0u);
    EXPECT_EQ(r.bytes_each % 4096, 0u);
    EXPECT_EQ(r.offset, at);  // back to back: nothing overlaps, nothing is lost between
    at = r.end();
  }
}

TEST(WorkerMemoryLayout, HeaderBytesArePinned) {
  static_assert(offsetof(WorkerMemoryHeader, magic) == 0);
  static_assert(offsetof(WorkerMemoryHeader, version) == 4);
  static_assert(offsetof(WorkerMemoryHeader, workers) == 6);
  static_assert(offsetof(WorkerMemoryHeader, total_bytes) == 8);
  static_assert(offsetof(WorkerMemoryHeader, slots) == 16);
  static_assert(offsetof(WorkerMemoryHeader, tables) == 16 + 4 * sizeof(WorkerMemoryRegion));
  static_assert(offsetof(WorkerMemoryHeader, rules) == 16 + 5 * sizeof(WorkerMemoryRegion));
  const WorkerMemoryHeader h;
  const auto* bytes = reinterpret_cast<const unsigned char*>(&h.magic);
  EXPECT_EQ(std::string(bytes, bytes + 4), "XDPW");
}

}  // namespace
}  // namespace xdpfwd
