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
}

namespace xdpfwd {

LwipPoolTail UnusedPcbPoolTail() {
  const memp_desc* desc = memp_pools[MEMP_TCP_PCB];
  const uintptr_t page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  const uintptr_t base = reinterpret_cast<uintptr_t>(LWIP_MEM_ALIGN(desc->base));
  const size_t element = MEMP_SIZE + desc->size;
  // Elements are carved from index num - 1 down (patch 0002): [0, uncarved) was never handed
  // out, and the first XDPFWD_TCP_PCB_PRELOCKED carved are the top ones.
  const size_t beyond =
      desc->num > XDPFWD_TCP_PCB_PRELOCKED ? desc->num - XDPFWD_TCP_PCB_PRELOCKED : 0;
  const size_t unused = std::min<size_t>(*desc->uncarved, beyond);
  // Whole pages only: the first may hold other variables, the last a carved element.
  const uintptr_t begin = (base + page - 1) / page * page;
  const uintptr_t end = (base + unused * element) / page * page;
  if (end <= begin) return {};
  return {begin, end - begin};
}

Result<void> LockWorkerMemory(int* lock_error) {
  *lock_error = 0;
  const LwipPoolTail tail = UnusedPcbPoolTail();
  if (tail.bytes == 0) {
    if (auto r = LockAllMemory(); !r) *lock_error = r.error().code.value();
    return {};
  }
  void* const at = reinterpret_cast<void*>(tail.begin);
  // Out of the address space while mlockall(MCL_CURRENT) faults in everything else: its pages
  // were never touched, so nothing is lost.
  if (munmap(at, tail.bytes) != 0) {
    *lock_error = errno;
    return {};
  }
  if (auto r = LockAllMemory(); !r) *lock_error = r.error().code.value();
  // Mapped back with the lock taken on fault: under MCL_FUTURE alone the new mapping would be
  // populated (and locked) whole at once. MCL_FUTURE as LockAllMemory left it afterwards, for the
  // heap's growth.
  if (*lock_error == 0 && mlockall(MCL_FUTURE | MCL_ONFAULT) != 0) *lock_error = errno;
  auto map_back = [&] {
    return mmap(at, tail.bytes, PROT_READ | PROT_WRITE,
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
    return SystemError("lwIP's pcb pool: mapping its unused tail back (" +
                       std::to_string(tail.bytes >> 20) + " MiB) after locking memory");
  }
  if (*lock_error == 0 && mlockall(MCL_FUTURE) != 0) *lock_error = errno;
  return {};
}

}  // namespace xdpfwd
