// xdpfwd-xdp: the steering program on its own, for operators and tests. `attach` holds the
// program on an interface until SIGINT/SIGTERM; `status` shows what is attached and its
// per-reason counters; `detach` removes a stale xdpfwd program left by a killed process.
#include <signal.h>
#include <unistd.h>

#include <charconv>
#include <cstdio>
#include <string>
#include <vector>

#include "os/endpoint.h"
#include "os/log.h"
#include "os/parse_number.h"
#include "xdp/steer.h"

namespace xdpfwd {
namespace {

constexpr const char* kUsage =
    "usage: xdpfwd-xdp attach IFACE [--listen ADDR:PORT]... [--generic] [--flow-capacity N]\n"
    "                  [--no-kernel-check] [-v]\n"
    "       xdpfwd-xdp status IFACE\n"
    "       xdpfwd-xdp detach IFACE\n";

int Usage(const std::string& problem) {
  std::fprintf(stderr, "xdpfwd-xdp: %s\n%s", problem.c_str(), kUsage);
  return 2;
}

void PrintCounters(const SteerCounters& counters) {
  std::printf("  %-22s %14s %16s\n", "reason", "packets", "bytes");
  for (size_t r = 0; r < kSteerReasonCount; ++r) {
    std::printf("  %-22s %14llu %16llu\n",
                std::string(ReasonName(static_cast<SteerReason>(r))).c_str(),
                static_cast<unsigned long long>(counters[r].packets),
                static_cast<unsigned long long>(counters[r].bytes));
  }
}

int Attach(const std::string& ifname, const std::vector<std::string>& args) {
  SteerOptions options;
  std::vector<Endpoint> listeners;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "--listen" && i + 1 < args.size()) {
      auto ep = ParseEndpoint(args[++i]);
      if (!ep) return Usage(ep.error().message());
      listeners.push_back(*ep);
    } else if (a == "--flow-capacity" && i + 1 < args.size()) {
      const std::string& v = args[++i];
      const auto capacity = ParseDecimal<decltype(options.flow_capacity)>(v, 1);
      if (!capacity) return Usage("--flow-capacity wants a positive number, not '" + v + "'");
      options.flow_capacity = *capacity;
    } else if (a == "--generic") {
      options.force_generic = true;
    } else if (a == "--no-kernel-check") {
      options.check_kernel_sockets = false;
    } else if (a == "-v") {
      LogVerbosity() = 1;
    } else {
      return Usage("unknown or incomplete option '" + a + "'");
    }
  }

  // Block the stop signals before attaching, so one arriving at any point ends in sigwait
  // and the normal return path (destructors detach the program).
  sigset_t stop;
  sigemptyset(&stop);
  sigaddset(&stop, SIGINT);
  sigaddset(&stop, SIGTERM);
  sigprocmask(SIG_BLOCK, &stop, nullptr);

  auto prog = SteerProgram::Attach(ifname, options);
  if (!prog) {
    Log(prog.error().message());
    return 1;
  }
  for (size_t i = 0; i < listeners.size(); ++i) {
    if (auto r =
            (*prog)->AddListener(listeners[i].addr, listeners[i].port, static_cast<uint32_t>(i));
        !r) {
      Log(r.error().message());
      return 1;
    }
  }
  std::printf("ready: %s, %s mode, program id %u, %zu listener(s), pid %d\n", ifname.c_str(),
              std::string(ModeName((*prog)->mode())).c_str(), (*prog)->prog_id(), listeners.size(),
              getpid());
  std::fflush(stdout);

  int sig = 0;
  sigwait(&stop, &sig);
  std::printf("stopping on %s; counters for %s:\n", sig == SIGINT ? "SIGINT" : "SIGTERM",
              ifname.c_str());
  PrintCounters((*prog)->ReadCounters());
  (*prog)->Detach();
  std::printf("detached from %s\n", ifname.c_str());
  return 0;
}

int Status(const std::string& ifname) {
  auto st = InspectSteer(ifname);
  if (!st) {
    Log(st.error().message());
    return 1;
  }
  std::printf("%s: xdpfwd steering program id %u, %s mode, owner pid %u (%s), %zu flow(s)\n",
              ifname.c_str(), st->prog_id, std::string(ModeName(st->mode)).c_str(), st->owner.pid,
              st->owner_alive ? "running" : "gone: stale", st->flows);
  PrintCounters(st->counters);
  return 0;
}

int Detach(const std::string& ifname) {
  auto st = InspectSteer(ifname);
  if (!st) {
    Log(st.error().message());
    return 1;
  }
  if (auto r = DetachStaleSteer(ifname); !r) {
    Log(r.error().message());
    return 1;
  }
  return 0;
}

}  // namespace
}  // namespace xdpfwd

int main(int argc, char** argv) {
  using namespace xdpfwd;
  if (argc < 3) return Usage(argc < 2 ? "missing command" : "missing interface");
  const std::string cmd = argv[1];
  const std::string ifname = argv[2];
  std::vector<std::string> rest(argv + 3, argv + argc);
  if (cmd == "attach") return Attach(ifname, rest);
  if (!rest.empty()) return Usage("unexpected argument '" + rest[0] + "'");
  if (cmd == "status") return Status(ifname);
  if (cmd == "detach") return Detach(ifname);
  return Usage("unknown command '" + cmd + "'");
}
