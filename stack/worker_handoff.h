// The handoff rings of N fast-path workers as one worker uses them: a packet that arrived on
// this worker's rx queue but belongs to another worker's flow (the steering program's metadata
// names the owner) is copied into the ring toward its owner, and the packets other workers
// handed to this one are taken out here. One single-producer single-consumer ring per ordered
// pair of workers, all in one SharedMemory the control process formats before it forks.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "os/result.h"
#include "stack/handoff_ring.h"
#include "stack/xsk_port.h"

namespace xdpfwd {

struct HandoffTotals {
  uint64_t out = 0;      // packets this worker copied toward their owner
  uint64_t in = 0;       // packets other workers handed to this one
  uint64_t dropped = 0;  // handoffs lost: the owner's ring was full (TCP resends them)
};

class WorkerHandoff {
 public:
  // Slots per ring: 64 MiB shared out over the N(N-1) rings, 4,096 slots (8 MiB) at most and
  // 256 (512 KiB) at least, a power of two. A ring that fills drops (counted, TCP resends)
  // rather than stall the worker that forwards. Measured: with 512 slots (1 MiB, 15 TSO
  // super-segments of 64 KiB in generic mode) 2.6% of handoffs were dropped while two workers
  // shared this 2-core machine with the load, and the resends' backoff stalled a connection
  // for 30 s; 4,096 slots hold a scheduler tick of a consumer's absence at several Gbit/s.
  static uint32_t SlotsPerRing(uint32_t workers);

  // Memory for the rings of `workers` workers (one per ordered pair).
  static size_t MemoryBytes(uint32_t workers);
  // Lays out every ring; once, before the workers fork.
  static Result<void> Format(void* memory, size_t bytes, uint32_t workers);
  // Worker `self`'s view: its outgoing rings (producer) and incoming ones (consumer).
  static Result<WorkerHandoff> Attach(void* memory, size_t bytes, uint32_t workers, uint32_t self);
  // Totals of worker `self` read from the shared rings by any process (the control process).
  static HandoffTotals Read(void* memory, size_t bytes, uint32_t workers, uint32_t self);

  uint32_t self() const { return self_; }
  uint32_t workers() const { return workers_; }

  // Copies a received packet, its frames in order (Ethernet header first), into the ring
  // toward `owner` with `tag` (the interface index in the workers' netif list). The caller
  // still releases the frames. False: dropped (ring full, or longer than a ring takes).
  bool Forward(uint32_t owner, const RxFrame* frames, uint32_t count, uint16_t tag);

  // Hands up to `budget` waiting packets to deliver(tag, bytes), oldest first, each ring in
  // turn; returns how many. The bytes are valid only during the call.
  template <typename Deliver>
  uint32_t Poll(Deliver&& deliver, uint32_t budget) {
    uint32_t done = 0;
    for (HandoffRing& ring : incoming_) {
      while (done < budget) {
        auto packet = ring.Peek();
        if (!packet) break;
        deliver(packet->tag, packet->bytes);
        ring.Pop();
        ++done;
      }
    }
    return done;
  }

 private:
  static size_t RingBytes(uint32_t workers);
  static size_t RingIndex(uint32_t from, uint32_t to, uint32_t workers);

  uint32_t self_ = 0;
  uint32_t workers_ = 1;
  // One per other worker, in worker order with this one left out.
  std::vector<HandoffRing> outgoing_;
  std::vector<HandoffRing> incoming_;
};

}  // namespace xdpfwd
