// Process set-up shared by every mode; see process.h.
#include "bench/loadgen/process.h"

#include <sched.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/signalfd.h>

#include <ctime>
#include <string>

namespace xdpfwd::loadgen {

Result<void> PinToCpu(int cpu) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  if (sched_setaffinity(0, sizeof(set), &set) != 0) {
    return SystemError("pin to CPU " + std::to_string(cpu));
  }
  return {};
}

Result<void> EnsureFileLimit(uint64_t needed) {
  rlimit lim{};
  if (getrlimit(RLIMIT_NOFILE, &lim) != 0) return SystemError("getrlimit(RLIMIT_NOFILE)");
  if (lim.rlim_cur >= needed) return {};
  rlimit raised{needed, lim.rlim_max < needed ? needed : lim.rlim_max};
  if (setrlimit(RLIMIT_NOFILE, &raised) != 0) {
    return SystemError("need " + std::to_string(needed) + " open files but RLIMIT_NOFILE is " +
                       std::to_string(lim.rlim_cur) + " (hard " + std::to_string(lim.rlim_max) +
                       ") and cannot be raised; raise it with 'ulimit -n " +
                       std::to_string(needed) + "' (as root, or above fs.nr_open)");
  }
  return {};
}

uint64_t RaiseFileLimitToHard() {
  rlimit lim{};
  if (getrlimit(RLIMIT_NOFILE, &lim) != 0) return 0;
  lim.rlim_cur = lim.rlim_max;
  setrlimit(RLIMIT_NOFILE, &lim);
  getrlimit(RLIMIT_NOFILE, &lim);
  return lim.rlim_cur;
}

Result<UniqueFd> StopSignalFd() {
  signal(SIGPIPE, SIG_IGN);
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  if (sigprocmask(SIG_BLOCK, &set, nullptr) != 0) return SystemError("sigprocmask");
  UniqueFd fd(signalfd(-1, &set, SFD_NONBLOCK | SFD_CLOEXEC));
  if (!fd) return SystemError("signalfd");
  return fd;
}

}  // namespace xdpfwd::loadgen
