// lwIP's pcb pool and a worker's memory lock: the pool is sized for the most connections a
// worker may hold (--max-connections up to LwipConnectionCapacity), but only the part the
// default cap uses is locked at start; the rest is locked as it is first used.
#pragma once

#include <cstddef>
#include <cstdint>

#include "os/result.h"

namespace xdpfwd {

// The part of lwIP's pcb pool that no pcb has used yet and that lies beyond the first
// XDPFWD_TCP_PCB_PRELOCKED pcbs the pool hands out (it carves from its top down): page-aligned,
// [begin, begin + bytes); bytes is 0 when there is none.
struct LwipPoolTail {
  uintptr_t begin = 0;
  size_t bytes = 0;
};
LwipPoolTail UnusedPcbPoolTail();
// The same for the pool of BBR's state (stack/lwip/lwippools.h), one element per pcb: only a
// pcb that runs BBR takes one, so as many elements as pcbs are locked at start when new pcbs
// run BBR (xdpfwd_tcp_cc, set before the worker locks its memory: --tune congestion-control,
// bbr by default), none when they run CUBIC.
LwipPoolTail UnusedBbrPoolTail();

// Locks all of the calling process's memory (os/memory_lock.h: LockAllMemory) but the pcb pool's
// and the BBR pool's unused tails, which come back as a fresh mapping locked page by page as pcbs
// are first carved in it (MCL_ONFAULT): a worker that never holds more than the default cap locks
// what it locked before the pool grew (~110 MiB of pcbs, not ~970), and one that does takes one
// minor fault per page of pcbs (13 pcbs), once. Single-threaded callers only: between its unmap and
// its map the tail is a hole in the address space that another thread's mmap could take.
// *lock_error: mlockall's errno, the process then runs unlocked (as LockAllMemory's error); 0
// when locked. The error returned is fatal: the tail could not be mapped back, and the first
// pcb carved there would crash the process.
Result<void> LockWorkerMemory(int* lock_error);

}  // namespace xdpfwd
