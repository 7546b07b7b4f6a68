// A FlowTable in memory, for testing the relay and its ledger without BPF: entries keyed by
// 4-tuple, stamped with a clock the test may control.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <tuple>

#include "xdp/flow_table.h"

namespace xdpfwd::test {

class MemoryFlowTable final : public FlowTable {
 public:
  struct Entry {
    uint32_t owner = 0;
    uint32_t rule_id = 0;
    uint64_t created_ns = 0;
    bool accepted = false;  // MarkAccepted ran on it
    bool from_syn = false;  // entered by InsertFromSyn, as the program does on a client SYN
  };

  explicit MemoryFlowTable(uint64_t (*clock_ns)() = nullptr);  // null: MonotonicNs

  Result<void> AddFlow(const FlowTuple& tuple, uint32_t owner, uint32_t rule_id) override;
  Result<void> MarkAccepted(const FlowTuple& tuple, uint32_t owner, uint32_t rule_id,
                            uint64_t stamp_ns) override;
  Result<void> RemoveFlow(const FlowTuple& tuple) override;
  bool RemoveFlowStampedBy(const FlowTuple& tuple, uint64_t stamp_ns, FlowReuse reuse) override;
  size_t RemoveFlows(std::span<const FlowTuple> tuples) override;
  std::optional<uint64_t> FlowCreatedNs(const FlowTuple& tuple) const override;

  // What the steering program does on a client SYN to a listener.
  void InsertFromSyn(const FlowTuple& tuple, uint32_t rule_id);
  // AddFlow fails while this is set (a full flow map).
  void set_full(bool full) { full_ = full; }

  std::optional<Entry> Find(const FlowTuple& tuple) const;
  size_t size() const { return entries_.size(); }
  uint64_t adds() const { return adds_; }
  uint64_t removes() const { return removes_; }
  uint64_t removal_batches() const { return removal_batches_; }  // RemoveFlows calls
  // RemoveFlowStampedBy calls told that a newer connection may hold the entry.
  uint64_t removals_reuse_possible() const { return removals_reuse_possible_; }

 private:
  using Key = std::tuple<IpAddress, IpAddress, uint16_t, uint16_t>;
  static Key KeyOf(const FlowTuple& t) { return {t.saddr, t.daddr, t.sport, t.dport}; }

  uint64_t (*clock_ns_)();
  std::map<Key, Entry> entries_;
  bool full_ = false;
  uint64_t adds_ = 0, removes_ = 0, removal_batches_ = 0, removals_reuse_possible_ = 0;
};

}  // namespace xdpfwd::test
