// Per-flow TX path memory; see packet_path_flows.h.
#include "stack/packet_path_flows.h"

namespace xdpfwd {

namespace {

// The slot of `flow` in its set of two, or null.
template <typename SlotT>
SlotT* InSet(SlotT* set, uint32_t flow) {
  if (set[0].flow == flow) return &set[0];
  if (set[1].flow == flow) return &set[1];
  return nullptr;
}

}  // namespace

const PacketPathFlows::Slot* PacketPathFlows::Find(uint32_t flow) const {
  return flow == 0 ? nullptr : InSet(&slots_[2 * (flow % kSets)], flow);
}

void PacketPathFlows::Sent(uint32_t flow, bool bare_ack, bool through_packet, uint64_t now_ns) {
  if (flow == 0) return;
  Slot* set = &slots_[2 * (flow % kSets)];
  Slot* slot = InSet(set, flow);
  if (slot == nullptr) {
    const bool held0 = set[0].held_until_ns > now_ns, held1 = set[1].held_until_ns > now_ns;
    if (held0 != held1) {
      slot = held0 ? &set[1] : &set[0];
    } else if (held0) {
      slot = set[0].held_until_ns <= set[1].held_until_ns ? &set[0] : &set[1];
    } else {
      slot = set[0].last_ns <= set[1].last_ns ? &set[0] : &set[1];
    }
    *slot = Slot{flow, 0, 0, 0};
  }
  slot->acks_in_row =
      bare_ack ? static_cast<uint8_t>(slot->acks_in_row < kAckRun ? slot->acks_in_row + 1 : kAckRun)
               : 0;
  if (through_packet) slot->held_until_ns = now_ns + kHoldNs;
  slot->last_ns = now_ns;
}

bool PacketPathFlows::Held(uint32_t flow, uint64_t now_ns) const {
  const Slot* slot = Find(flow);
  return slot != nullptr && now_ns < slot->held_until_ns;
}

bool PacketPathFlows::InAckRun(uint32_t flow) const {
  const Slot* slot = Find(flow);
  return slot != nullptr && slot->acks_in_row >= kAckRun;
}

}  // namespace xdpfwd
