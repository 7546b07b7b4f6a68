// A single-producer single-consumer ring of packet copies from one fast-path worker to another:
// the worker whose rx queue a packet arrived on copies it in and frees its UMEM frame at once;
// the flow's owner takes it out and feeds it to its own lwIP. The ring lives in memory the
// caller gives (a SharedMemory made before the workers fork), so it works between processes
// as between threads. stack/worker_handoff.h keeps one per ordered pair of workers.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>

#include "os/result.h"

namespace xdpfwd {

struct HandoffPacket {
  std::span<const uint8_t> bytes;
  uint16_t tag;  // what the producer said of it (the interface it arrived on)
};

struct HandoffCounters {
  uint64_t pushed = 0;
  uint64_t popped = 0;
  uint64_t dropped_full = 0;  // no room: the ring's consumer is behind (TCP resends it)
  uint64_t dropped_size = 0;  // empty, or longer than max_packet(): no ring this size takes it
};

class HandoffRing {
 public:
  // One Ethernet frame at MTU 1500 (1514 bytes) and its 16-byte slot header fit one slot;
  // a longer packet takes consecutive slots, so its bytes stay contiguous for the consumer.
  static constexpr uint32_t kSlotBytes = 2048;

  // Bytes of memory a ring of `slots` slots takes, control lines included.
  static size_t MemoryBytes(uint32_t slots);
  // Lays out an empty ring of `slots` slots (a power of two, at least 2) in `memory`, which
  // must be 128-byte aligned (a page is) and MemoryBytes(slots) long. Once, before either end
  // uses it; both ends then Attach.
  static Result<void> Format(void* memory, size_t bytes, uint32_t slots);
  // A view of a formatted ring. Each end (thread or process) uses its own view: a view caches
  // the other end's index, and only one producer and one consumer may exist at a time.
  static Result<HandoffRing> Attach(void* memory, size_t bytes);

  uint32_t slot_count() const { return slot_count_; }
  // The longest packet Push takes: half the ring, so that one always fits an empty ring
  // whatever padding the wrap costs.
  uint32_t max_packet() const;

  // Producer. Room for a packet of `len` bytes (1 to max_packet()), written by the caller and
  // made visible by Commit(); an empty span (nothing counted) when the ring has no room or
  // `len` is out of range. Lets a caller copy straight into the ring, or wait for room.
  std::span<uint8_t> Reserve(uint32_t len, uint16_t tag);
  void Commit();  // publishes what Reserve handed out
  // Copies `packet` in and publishes it; false when it was dropped (counted: no room, or
  // empty or too long). What the worker calls: a full ring must never stall a polling worker.
  bool Push(std::span<const uint8_t> packet, uint16_t tag);
  // The same for a packet in pieces (a chain of UMEM frames), copied in one after another.
  bool PushGather(std::span<const std::span<const uint8_t>> pieces, uint16_t tag);

  // Consumer. The oldest packet, valid until Pop(); nullopt when the ring is empty.
  std::optional<HandoffPacket> Peek();
  void Pop();  // gives the packet's slots back to the producer

  // Either end, or a third process reading statistics.
  HandoffCounters counters() const;

 private:
  struct Control;
  HandoffRing(Control* control, uint8_t* slots, uint32_t slot_count);
  uint8_t* Slot(uint64_t index) const { return slots_ + (index & mask_) * kSlotBytes; }

  Control* control_ = nullptr;
  uint8_t* slots_ = nullptr;
  uint32_t slot_count_ = 0;
  uint64_t mask_ = 0;
  // Producer's view: where the next packet goes, what Reserve handed out, and the consumer's
  // tail as last read (reading it only when the cached one says full keeps the consumer's
  // cache line where it is).
  uint64_t head_ = 0;
  uint64_t reserved_head_ = 0;
  uint64_t tail_cache_ = 0;
  // Consumer's view: the next slot to read, and the producer's head as last read.
  uint64_t tail_ = 0;
  uint64_t head_cache_ = 0;
  uint32_t peeked_slots_ = 0;  // slots the packet Peek returned spans (with any padding)
};

}  // namespace xdpfwd
