// The handoff ring between fast-path workers (see handoff_ring.h).
#include "stack/handoff_ring.h"

#include <cstring>
#include <new>
#include <string>

namespace xdpfwd {

namespace {

// 128, not 64: Intel's adjacent-line prefetcher fetches 64-byte lines in pairs, so two hot
// indices 64 bytes apart would still bounce between the two cores.
constexpr size_t kLine = 128;
constexpr uint64_t kMagic = 0x78646677'68616e64;  // "xdfwhand"

// In front of each packet, in its first slot; 16 bytes keep the packet 16-byte aligned.
struct SlotHeader {
  uint32_t len;    // kPadding: the slots from here to the ring's end, skipped so that a
                   // packet never wraps
  uint32_t slots;  // slots this record spans
  uint16_t tag;
  uint16_t unused16;
  uint32_t unused32;
};
static_assert(sizeof(SlotHeader) == 16);
constexpr uint32_t kPadding = UINT32_MAX;

uint32_t SlotsFor(uint32_t len) {
  return static_cast<uint32_t>((sizeof(SlotHeader) + len + HandoffRing::kSlotBytes - 1) /
                               HandoffRing::kSlotBytes);
}

}  // namespace

// Shared by both ends. Each index sits on its own line with the counters only its writer
// touches, so the producer's stores never invalidate the consumer's line and vice versa.
struct HandoffRing::Control {
  // Written by Format, read-only after.
  alignas(kLine) uint64_t magic;
  uint32_t slot_count;
  uint32_t slot_bytes;
  // Producer's line. head counts slots ever published (padding included).
  alignas(kLine) std::atomic<uint64_t> head;
  std::atomic<uint64_t> pushed;
  std::atomic<uint64_t> dropped_full;
  std::atomic<uint64_t> dropped_size;
  // Consumer's line. tail counts slots ever given back.
  alignas(kLine) std::atomic<uint64_t> tail;
  std::atomic<uint64_t> popped;
};
// Across processes the atomics must be plain memory operations, not a lock kept elsewhere.
static_assert(std::atomic<uint64_t>::is_always_lock_free);

size_t HandoffRing::MemoryBytes(uint32_t slots) {
  return sizeof(Control) + size_t{slots} * kSlotBytes;
}

Result<void> HandoffRing::Format(void* memory, size_t bytes, uint32_t slots) {
  // Slots stay line-aligned, so a packet never shares a line with the control block.
  static_assert(kSlotBytes % kLine == 0 && sizeof(Control) % kLine == 0);
  if (slots < 2 || (slots & (slots - 1)) != 0 || slots > (1u << 24)) {
    return Error{{},
                 "handoff ring: " + std::to_string(slots) +
                     " slots (a power of two from 2 to 2^24 is needed)"};
  }
  if (reinterpret_cast<uintptr_t>(memory) % kLine != 0 || bytes < MemoryBytes(slots)) {
    return Error{{},
                 "handoff ring: memory not 128-byte aligned or shorter than " +
                     std::to_string(MemoryBytes(slots)) + " bytes"};
  }
  auto* control = new (memory) Control{};
  control->slot_count = slots;
  control->slot_bytes = kSlotBytes;
  control->head.store(0, std::memory_order_relaxed);
  control->tail.store(0, std::memory_order_relaxed);
  // Publishes the layout to whoever attaches next in this process; a forked child sees it
  // because the fork comes after.
  std::atomic_ref(control->magic).store(kMagic, std::memory_order_release);
  return {};
}

Result<HandoffRing> HandoffRing::Attach(void* memory, size_t bytes) {
  if (reinterpret_cast<uintptr_t>(memory) % kLine != 0 || bytes < sizeof(Control)) {
    return Error{{}, "handoff ring: memory not 128-byte aligned or too short"};
  }
  auto* control = std::launder(static_cast<Control*>(memory));
  if (std::atomic_ref(control->magic).load(std::memory_order_acquire) != kMagic ||
      control->slot_bytes != kSlotBytes || bytes < MemoryBytes(control->slot_count)) {
    return Error{{}, "handoff ring: memory holds no ring of this build's layout"};
  }
  return HandoffRing(control, static_cast<uint8_t*>(memory) + sizeof(Control), control->slot_count);
}

HandoffRing::HandoffRing(Control* control, uint8_t* slots, uint32_t slot_count)
    : control_(control), slots_(slots), slot_count_(slot_count), mask_(slot_count - 1) {
  // A view may attach to a ring in use (a restarted worker): start from where it is.
  head_ = reserved_head_ = control_->head.load(std::memory_order_acquire);
  tail_ = control_->tail.load(std::memory_order_acquire);
  tail_cache_ = tail_;
  head_cache_ = head_;
}

uint32_t HandoffRing::max_packet() const {
  return (slot_count_ / 2) * kSlotBytes - static_cast<uint32_t>(sizeof(SlotHeader));
}

std::span<uint8_t> HandoffRing::Reserve(uint32_t len, uint16_t tag) {
  if (len == 0 || len > max_packet()) return {};
  const uint32_t need = SlotsFor(len);
  const uint64_t pos = head_ & mask_;
  const uint32_t padding = pos + need > slot_count_ ? static_cast<uint32_t>(slot_count_ - pos) : 0;
  const uint64_t total = uint64_t{padding} + need;
  if (head_ + total - tail_cache_ > slot_count_) {
    // Acquire: the consumer is done reading the slots it gave back before we overwrite them.
    tail_cache_ = control_->tail.load(std::memory_order_acquire);
    if (head_ + total - tail_cache_ > slot_count_) return {};
  }
  if (padding != 0) {
    auto* pad = reinterpret_cast<SlotHeader*>(Slot(head_));
    *pad = SlotHeader{kPadding, padding, 0, 0, 0};
  }
  const uint64_t start = head_ + padding;
  auto* header = reinterpret_cast<SlotHeader*>(Slot(start));
  *header = SlotHeader{len, need, tag, 0, 0};
  reserved_head_ = start + need;
  return {reinterpret_cast<uint8_t*>(header + 1), len};
}

void HandoffRing::Commit() {
  if (reserved_head_ == head_) return;
  head_ = reserved_head_;
  control_->pushed.store(control_->pushed.load(std::memory_order_relaxed) + 1,
                         std::memory_order_relaxed);
  // Release: the packet's bytes and header are visible before the head that covers them.
  control_->head.store(head_, std::memory_order_release);
}

bool HandoffRing::Push(std::span<const uint8_t> packet, uint16_t tag) {
  const std::span<const uint8_t> pieces[] = {packet};
  return PushGather(pieces, tag);
}

bool HandoffRing::PushGather(std::span<const std::span<const uint8_t>> pieces, uint16_t tag) {
  size_t len = 0;
  for (const auto& piece : pieces) len += piece.size();
  if (len == 0 || len > max_packet()) {
    control_->dropped_size.fetch_add(1, std::memory_order_relaxed);
    return false;
  }
  std::span<uint8_t> room = Reserve(static_cast<uint32_t>(len), tag);
  if (room.empty()) {
    control_->dropped_full.fetch_add(1, std::memory_order_relaxed);
    return false;
  }
  size_t at = 0;
  for (const auto& piece : pieces) {
    if (piece.empty()) continue;
    std::memcpy(room.data() + at, piece.data(), piece.size());
    at += piece.size();
  }
  Commit();
  return true;
}

std::optional<HandoffPacket> HandoffRing::Peek() {
  uint32_t skipped = 0;
  for (;;) {
    if (tail_ + skipped == head_cache_) {
      // Acquire: pairs with Commit's release, so the packet's bytes are visible.
      head_cache_ = control_->head.load(std::memory_order_acquire);
      if (tail_ + skipped == head_cache_) {
        if (skipped != 0) {  // give the padding back now rather than at the next Pop
          tail_ += skipped;
          control_->tail.store(tail_, std::memory_order_release);
        }
        return std::nullopt;
      }
    }
    const auto* header = reinterpret_cast<const SlotHeader*>(Slot(tail_ + skipped));
    if (header->len == kPadding) {
      skipped += header->slots;  // padding up to the ring's end
      continue;
    }
    peeked_slots_ = skipped + header->slots;
    return HandoffPacket{{reinterpret_cast<const uint8_t*>(header + 1), header->len}, header->tag};
  }
}

void HandoffRing::Pop() {
  if (peeked_slots_ == 0) return;
  tail_ += peeked_slots_;
  peeked_slots_ = 0;
  control_->popped.store(control_->popped.load(std::memory_order_relaxed) + 1,
                         std::memory_order_relaxed);
  // Release: our reads of the slots are done before the producer may reuse them.
  control_->tail.store(tail_, std::memory_order_release);
}

HandoffCounters HandoffRing::counters() const {
  HandoffCounters c;
  c.pushed = control_->pushed.load(std::memory_order_relaxed);
  c.popped = control_->popped.load(std::memory_order_relaxed);
  c.dropped_full = control_->dropped_full.load(std::memory_order_relaxed);
  c.dropped_size = control_->dropped_size.load(std::memory_order_relaxed);
  return c;
}

}  // namespace xdpfwd
