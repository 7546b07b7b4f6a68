// The workers' handoff rings (see worker_handoff.h).
#include "stack/worker_handoff.h"

#include <cstring>
#include <string>

namespace xdpfwd {

uint32_t WorkerHandoff::SlotsPerRing(uint32_t workers) {
  constexpr size_t kBudget = size_t{64} << 20;
  const size_t rings = workers < 2 ? 1 : size_t{workers} * (workers - 1);
  uint32_t slots = 4096;
  while (slots > 256 && size_t{slots} * HandoffRing::kSlotBytes * rings > kBudget) slots /= 2;
  return slots;
}

// Each ring starts on a page, so every ring's control lines are 128-byte aligned as
// HandoffRing::Format requires.
size_t WorkerHandoff::RingBytes(uint32_t workers) {
  constexpr size_t kPage = 4096;
  return (HandoffRing::MemoryBytes(SlotsPerRing(workers)) + kPage - 1) / kPage * kPage;
}

// Rings of ordered pairs (from, to), from != to, packed: from's rings are contiguous.
size_t WorkerHandoff::RingIndex(uint32_t from, uint32_t to, uint32_t workers) {
  return size_t{from} * (workers - 1) + (to < from ? to : to - 1);
}

size_t WorkerHandoff::MemoryBytes(uint32_t workers) {
  return workers < 2 ? 0 : size_t{workers} * (workers - 1) * RingBytes(workers);
}

Result<void> WorkerHandoff::Format(void* memory, size_t bytes, uint32_t workers) {
  if (bytes < MemoryBytes(workers)) return Error{{}, "handoff rings: memory too short"};
  auto* base = static_cast<uint8_t*>(memory);
  const size_t ring = RingBytes(workers);
  for (size_t k = 0; k < MemoryBytes(workers) / ring; ++k) {
    if (auto r = HandoffRing::Format(base + k * ring, ring, SlotsPerRing(workers)); !r) {
      return r.error();
    }
  }
  return {};
}

Result<WorkerHandoff> WorkerHandoff::Attach(void* memory, size_t bytes, uint32_t workers,
                                            uint32_t self) {
  if (self >= workers || bytes < MemoryBytes(workers)) {
    return Error{{},
                 "handoff rings: worker " + std::to_string(self) + " of " +
                     std::to_string(workers) + ", or memory too short"};
  }
  auto* base = static_cast<uint8_t*>(memory);
  WorkerHandoff h;
  h.self_ = self;
  h.workers_ = workers;
  for (uint32_t other = 0; other < workers; ++other) {
    if (other == self) continue;
    auto out = HandoffRing::Attach(base + RingIndex(self, other, workers) * RingBytes(workers),
                                   RingBytes(workers));
    if (!out) return out.error();
    h.outgoing_.push_back(*out);
    auto in = HandoffRing::Attach(base + RingIndex(other, self, workers) * RingBytes(workers),
                                  RingBytes(workers));
    if (!in) return in.error();
    h.incoming_.push_back(*in);
  }
  return h;
}

HandoffTotals WorkerHandoff::Read(void* memory, size_t bytes, uint32_t workers, uint32_t self) {
  HandoffTotals t;
  if (self >= workers || bytes < MemoryBytes(workers)) return t;
  auto* base = static_cast<uint8_t*>(memory);
  for (uint32_t other = 0; other < workers; ++other) {
    if (other == self) continue;
    if (auto out = HandoffRing::Attach(base + RingIndex(self, other, workers) * RingBytes(workers),
                                       RingBytes(workers))) {
      const HandoffCounters c = out->counters();
      t.out += c.pushed;
      t.dropped += c.dropped_full + c.dropped_size;
    }
    if (auto in = HandoffRing::Attach(base + RingIndex(other, self, workers) * RingBytes(workers),
                                      RingBytes(workers))) {
      t.in += in->counters().popped;
    }
  }
  return t;
}

bool WorkerHandoff::Forward(uint32_t owner, const RxFrame* frames, uint32_t count, uint16_t tag) {
  if (owner >= workers_ || owner == self_ || count == 0 || count > kMaxRxChain) return false;
  std::span<const uint8_t> pieces[kMaxRxChain];
  for (uint32_t i = 0; i < count; ++i) pieces[i] = {frames[i].data, frames[i].len};
  return outgoing_[owner < self_ ? owner : owner - 1].PushGather({pieces, count}, tag);
}

}  // namespace xdpfwd
