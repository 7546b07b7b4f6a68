// Process set-up shared by every mode: CPU pinning, the open-file limit, and SIGINT/SIGTERM
// delivered through a file descriptor an epoll loop can wait on.
#pragma once

#include <cstddef>
#include <cstdint>

#include "os/clock.h"
#include "os/result.h"
#include "os/unique_fd.h"

namespace xdpfwd::loadgen {

Result<void> PinToCpu(int cpu);
// Raises RLIMIT_NOFILE so `needed` descriptors fit (the hard limit too when allowed).
Result<void> EnsureFileLimit(uint64_t needed);
// Raises the soft RLIMIT_NOFILE to the hard one; the resulting soft limit.
uint64_t RaiseFileLimitToHard();

// Blocks SIGINT and SIGTERM and returns a signalfd that becomes readable when one arrives, so
// the event loop stops between events rather than in the middle of one. Also ignores SIGPIPE.
Result<UniqueFd> StopSignalFd();

}  // namespace xdpfwd::loadgen
