// The one monotonic clock of the project: CLOCK_MONOTONIC, the clock bpf_ktime_get_ns() reads,
// so times taken here compare with the steering program's flow timestamps.
#pragma once

#include <time.h>

#include <cstdint>

namespace xdpfwd {

inline uint64_t MonotonicNs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);  // vDSO: no syscall
  return static_cast<uint64_t>(ts.tv_sec) * 1'000'000'000u + static_cast<uint64_t>(ts.tv_nsec);
}

inline uint64_t MonotonicMs() { return MonotonicNs() / 1'000'000u; }

}  // namespace xdpfwd
