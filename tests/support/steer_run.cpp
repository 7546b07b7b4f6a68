#include "tests/support/steer_run.h"

#include <arpa/inet.h>
#include <bpf/bpf.h>
#include <errno.h>

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

}  // namespace xdpfwd::test
