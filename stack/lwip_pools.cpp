// lwIP's pcb pool and a worker's memory lock; see lwip_pools.h.
#include "stack/lwip_pools.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <string>

#include "os/memory_lock.h"

extern "C" {
#include "lwip/memp.h"
#include "lwip/priv/memp_priv.h"
#include "lwip/tcp.h"
}

namespace xdpfwd {

namespace {

// The part of `pool` no element has used yet beyond the first `prelocked` elements it hands out.
LwipPoolTail UnusedPoolTail(memp_t pool, size_t prelocked) {
  const memp_desc* desc = memp_pools[pool];
  const uintptr_t page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  const uintptr_t base = reinterpret_cast<uintptr_t>(LWIP_MEM_ALIGN(desc->base));
  const size_t element = MEMP_SIZE + desc->size;
  // Elements are carved from index num - 1 down (patch 0002): [0, uncarved) was never handed
  // out, and the first `prelocked` carved are the top ones.
  const size_t beyond = desc->num > prelocked ? desc->num - prelocked : 0;
  const size_t unused = std::min<size_t>(*desc->uncarved, beyond);
  // Whole pages only: the first may hold other variables, the last a carved element.
  const uintptr_t begin = (base + page - 1) / page * page;
  const uintptr_t end = (base + unused * element) / page * page;
  if (end <= begin) return {};
  return {begin, end - begin};
}

}  // namespace

LwipPoolTail UnusedPcbPoolTail() { return UnusedPoolTail(MEMP_TCP_PCB, XDPFWD_TCP_PCB_PRELOCKED); }

LwipPoolTail UnusedBbrPoolTail() {
  // A BBR worker's pcbs each take an element: as many are locked at start as pcbs are.
  return UnusedPoolTail(MEMP_TCP_BBR, xdpfwd_tcp_cc == TCP_CC_BBR ? XDPFWD_TCP_PCB_PRELOCKED : 0);
}

Result<void> LockWorkerMemory(int* lock_error) {
  *lock_error = 0;
  struct Named {
    LwipPoolTail tail;
    const char* pool;
  };
  const Named tails[] = {{UnusedPcbPoolTail(), "pcb"}, {UnusedBbrPoolTail(), "BBR state"}};
  // Out of the address space while mlockall(MCL_CURRENT) faults in everything else: their
  // pages were never touched, so nothing is lost.
  for (const Named& t : tails) {
    if (t.tail.bytes != 0 && munmap(reinterpret_cast<void*>(t.tail.begin), t.tail.bytes) != 0) {
      *lock_error = errno;
      for (const Named& done : tails) {
        if (&done == &t) break;
        if (done.tail.bytes == 0) continue;
        // Back unlocked, as nothing was locked yet.
        void* const at = reinterpret_cast<void*>(done.tail.begin);
        if (mmap(at, done.tail.bytes, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0) != at) {
          return SystemError(std::string("lwIP's ") + done.pool +
                             " pool: mapping its unused tail back after a failed unmap");
        }
      }
      return {};
    }
  }
  if (auto r = LockAllMemory(); !r) *lock_error = r.error().code.value();
  // Mapped back with the lock taken on fault: under MCL_FUTURE alone the new mappings would be
  // populated (and locked) whole at once. MCL_FUTURE as LockAllMemory left it afterwards, for the
  // heap's growth.
  if (*lock_error == 0 && mlockall(MCL_FUTURE | MCL_ONFAULT) != 0) *lock_error = errno;
  for (const Named& t : tails) {
    if (t.tail.bytes == 0) continue;
    void* const at = reinterpret_cast<void*>(t.tail.begin);
    auto map_back = [&] {
      return mmap(at, t.tail.bytes, PROT_READ | PROT_WRITE,
                  MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
    };
    void* back = map_back();
    if (back != at && *lock_error == 0 && (errno == EAGAIN || errno == ENOMEM)) {
      // A locked mapping counts whole against RLIMIT_MEMLOCK (without CAP_IPC_LOCK), touched or
      // not: past the limit, the worker runs unlocked, as when mlockall itself is refused.
      *lock_error = errno;
      munlockall();
      back = map_back();
    }
    if (back != at) {
      return SystemError(std::string("lwIP's ") + t.pool + " pool: mapping its unused tail back (" +
                         std::to_string(t.tail.bytes >> 20) + " MiB) after locking memory");
    }
  }
  if (*lock_error == 0 && mlockall(MCL_FUTURE) != 0) *lock_error = errno;
  return {};
}

}  // namespace xdpfwd
