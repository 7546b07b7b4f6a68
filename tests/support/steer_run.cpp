#include "tests/support/steer_run.h"

#include <arpa/inet.h>
#include <bpf/bpf.h>
#include <errno.h>
#include <gtest/gtest.h>
#include <string.h>

namespace xdpfwd::test {

in_addr Ip(const char* dotted) {
  in_addr a{};
  inet_pton(AF_INET, dotted, &a);
  return a;
}

XskPortConfig SmallPortOnLo() {
  XskPortConfig cfg;
  cfg.ifname = "lo";
  cfg.frame_count = 256;
  cfg.ring_size = 64;
  return cfg;
}

int RunFrame(int prog_fd, const std::vector<uint8_t>& frame, uint32_t repeat) {
  return RunFrameTimed(prog_fd, frame, repeat).action;
}

TimedRun RunFrameTimed(int prog_fd, const std::vector<uint8_t>& frame, uint32_t repeat) {
  std::vector<uint8_t> data = frame;  // the program may write into it
  bpf_test_run_opts opts{};
  opts.sz = sizeof(opts);
  opts.data_in = data.data();
  opts.data_size_in = static_cast<__u32>(data.size());
  opts.repeat = repeat;
  if (bpf_prog_test_run_opts(prog_fd, &opts) != 0) return {-errno, 0};
  return {static_cast<int>(opts.retval), opts.duration};
}

void ExpectDecision(SteerProgram& prog, const std::vector<uint8_t>& frame, int action,
                    SteerReason reason) {
  const SteerCounters before = prog.ReadCounters();
  const int ran = RunFrame(prog.prog_fd(), frame);
  ASSERT_GE(ran, 0) << strerror(-ran);
  EXPECT_EQ(ran, action);
  const SteerCounters after = prog.ReadCounters();
  for (size_t r = 0; r < kSteerReasonCount; ++r) {
    const uint64_t moved = after[r].packets - before[r].packets;
    const bool expected = r == static_cast<size_t>(reason);
    EXPECT_EQ(moved, expected ? 1u : 0u) << ReasonName(static_cast<SteerReason>(r));
    if (expected) {
      EXPECT_EQ(after[r].bytes - before[r].bytes, frame.size());
    }
  }
}

}  // namespace xdpfwd::test
