// Locking a busy-polling process's memory so that its loop never waits for the kernel to map a
// page (mlockall), and reading how much a process has locked (VmLck).
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

#include "os/result.h"

namespace xdpfwd {

// Stack below the caller that LockAllMemory maps before it locks.
inline constexpr size_t kStackTouchBytes = 256 * 1024;
// Free heap LockAllMemory leaves at the heap's top, locked, for the allocations to come, and the
// step the heap grows by once that is used (each step a brk that maps all of it at once).
inline constexpr size_t kHeapReserveBytes = 32u << 20;
inline constexpr size_t kHeapGrowthBytes = 8u << 20;

// Touches kStackTouchBytes of the calling thread's stack below where it is now, sets malloc up to
// keep its heap (kHeapReserveBytes free at its top, never trimmed, no block mmap'd apart), then
// locks every page mapped now and every page mapped later (mlockall(MCL_CURRENT | MCL_FUTURE)):
// each is faulted in here, once, and never reclaimed. The stack and the heap first because with
// MCL_FUTURE a later mapping is still mapped when it comes, a fault a page: the stack as it
// grows, the heap in the brk that grows it (measured: 25 brks, 730 faults on a fresh worker's
// first 200 connections without the reserve, none with it). The stack did not grow past its
// 132 KiB in that load; the touch is insurance for deeper paths, 124 KiB more locked. The error is
// mlockall's (EPERM, ENOMEM: RLIMIT_MEMLOCK without CAP_IPC_LOCK); nothing is locked then.
Result<void> LockAllMemory();

// A "Field:    123 kB" line's number of /proc/PID/status text, in bytes; nothing without it.
std::optional<uint64_t> StatusBytes(std::string_view status, std::string_view field);

// Memory process `pid` has locked (VmLck of /proc/PID/status), in bytes; nothing when the
// process is gone or the file unreadable.
std::optional<uint64_t> LockedBytes(pid_t pid);

}  // namespace xdpfwd
