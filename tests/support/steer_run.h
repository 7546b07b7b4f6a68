// What the steering program's BPF_PROG_TEST_RUN tests share: the fixtures' addresses (nothing
// is sent to them), a dotted quad as in_addr, the small AF_XDP socket whose presence in the
// XSKMAP lets a redirect resolve, and a run of one frame.
#pragma once

#include <netinet/in.h>

#include <cstdint>
#include <vector>

#include "stack/xsk_port.h"
#include "xdp/steer.h"

namespace xdpfwd::test {

inline constexpr const char* kClient = "198.18.0.2";
inline constexpr const char* kListen = "198.18.0.1";
inline constexpr const char* kBackend = "198.19.0.2";
inline constexpr const char* kLocal = "198.19.0.1";
inline constexpr uint16_t kListenPort = 9000;

in_addr Ip(const char* dotted);

// A socket on lo, where no program is attached, so that nothing is redirected for real; its
// UMEM is kept small.
XskPortConfig SmallPortOnLo();

// Runs `frame` through the program `repeat` times; the XDP action it returned, or -errno.
int RunFrame(int prog_fd, const std::vector<uint8_t>& frame, uint32_t repeat = 1);

// The same, with the kernel's mean time per run (BPF_PROG_TEST_RUN's `duration`, in ns).
struct TimedRun {
  int action = 0;  // or -errno
  uint32_t ns_per_run = 0;
};
TimedRun RunFrameTimed(int prog_fd, const std::vector<uint8_t>& frame, uint32_t repeat);

// Runs one frame through `prog` (gtest expectations): the action is `action`, and exactly
// `reason` counted it, one packet of the frame's bytes.
void ExpectDecision(SteerProgram& prog, const std::vector<uint8_t>& frame, int action,
                    SteerReason reason);

}  // namespace xdpfwd::test
