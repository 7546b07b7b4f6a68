// See memory_flow_table.h.
#include "tests/support/memory_flow_table.h"

#include <cerrno>

#include "os/clock.h"

namespace xdpfwd::test {

MemoryFlowTable::MemoryFlowTable(uint64_t (*clock_ns)())
    : clock_ns_(clock_ns != nullptr ? clock_ns : MonotonicNs) {}

Result<void> MemoryFlowTable::AddFlow(const FlowTuple& tuple, uint32_t owner, uint32_t rule_id) {
  if (full_) return SystemError("memory flow table: adding flow", E2BIG);
  ++adds_;
  entries_[KeyOf(tuple)] = Entry{owner, rule_id, clock_ns_(), false, false};
  return {};
}

Result<void> MemoryFlowTable::MarkAccepted(const FlowTuple& tuple, uint32_t owner, uint32_t rule_id,
                                           uint64_t stamp_ns) {
  const auto it = entries_.find(KeyOf(tuple));
  if (it == entries_.end()) return SystemError("memory flow table: marking accepted", ENOENT);
  it->second = Entry{owner, rule_id, stamp_ns, true, it->second.from_syn};
  return {};
}

Result<void> MemoryFlowTable::RemoveFlow(const FlowTuple& tuple) {
  if (entries_.erase(KeyOf(tuple)) == 0) return SystemError("memory flow table: removing", ENOENT);
  ++removes_;
  return {};
}

size_t MemoryFlowTable::RemoveFlows(std::span<const FlowTuple> tuples) {
  ++removal_batches_;
  size_t n = 0;
  for (const FlowTuple& t : tuples) n += entries_.erase(KeyOf(t));
  removes_ += n;
  return n;
}

bool MemoryFlowTable::RemoveFlowStampedBy(const FlowTuple& tuple, uint64_t stamp_ns,
                                          FlowReuse reuse) {
  if (reuse == FlowReuse::kPossible) ++removals_reuse_possible_;
  const auto it = entries_.find(KeyOf(tuple));
  if (it == entries_.end() || it->second.created_ns > stamp_ns) return false;
  entries_.erase(it);
  ++removes_;
  return true;
}

std::optional<uint64_t> MemoryFlowTable::FlowCreatedNs(const FlowTuple& tuple) const {
  const auto it = entries_.find(KeyOf(tuple));
  if (it == entries_.end()) return std::nullopt;
  return it->second.created_ns;
}

void MemoryFlowTable::InsertFromSyn(const FlowTuple& tuple, uint32_t rule_id) {
  entries_[KeyOf(tuple)] = Entry{0, rule_id, clock_ns_(), false, true};
}

std::optional<MemoryFlowTable::Entry> MemoryFlowTable::Find(const FlowTuple& tuple) const {
  const auto it = entries_.find(KeyOf(tuple));
  if (it == entries_.end()) return std::nullopt;
  return it->second;
}

}  // namespace xdpfwd::test
