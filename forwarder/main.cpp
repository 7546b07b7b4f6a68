// xdpfwd: the command. Starts the chosen path(s), logs one "ready" line, prints counters on
// SIGUSR1 and every --stats-interval, and on SIGINT/SIGTERM stops cleanly (connections reset,
// XDP detached, flow entries removed) with a summary.
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "forwarder/fast_path.h"
#include "forwarder/kernel_path.h"
#include "forwarder/options.h"
#include "os/isolation.h"
#include "os/log.h"
#include "xdpfwd_lwip_hooks.h"

namespace xdpfwd {
namespace {

std::string RulesLine(const std::vector<Rule>& rules) {
  std::string out;
  for (const Rule& r : rules) {
    if (!out.empty()) out += ", ";
    out += ToString(r.listen) + " -> " + ToString(r.backend);
  }
  return out;
}

// Whether each spinning thread has its core to itself (docs/tuning.md). Kernel-path threads are
// never pinned; they spin only with --busy-poll.
void LogIsolation(const FastPath* fast, const KernelPath* kernel) {
  std::vector<SpinningThread> spinning;
  if (fast != nullptr) {
    const std::vector<int> cpus = fast->worker_cpus();
    for (size_t w = 0; w < cpus.size(); ++w) {
      spinning.push_back({"fast-path worker " + std::to_string(w), cpus[w]});
    }
  }
  if (kernel != nullptr && kernel->busy_poll()) {
    spinning.push_back(
        {std::to_string(kernel->threads()) + " busy-polling kernel-path thread(s)", -1});
  }
  if (spinning.empty()) return;
  std::vector<int> own{static_cast<int>(getpid())};
  if (fast != nullptr) {
    for (int pid : fast->worker_pids()) own.push_back(pid);
  }
  const IsolationReport r = ReportIsolation(ReadIsolationFacts(own), spinning);
  for (const std::string& line : r.lines) Log("isolation: " + line);
  for (const std::string& warning : r.warnings) Log("isolation warning: " + warning);
}

void PrintStats(FastPath* fast, KernelPath* kernel) {
  if (fast != nullptr) {
    // One round of requests to the workers: the sum and each worker's from the same numbers.
    std::vector<FastPathSnapshot> each;
    Log("fast path: " + fast->Snapshot(&each).Format());
    const std::vector<int> pids = fast->worker_pids();
    if (each.size() > 1) {
      for (size_t w = 0; w < each.size(); ++w) {
        const FastPathSnapshot& s = each[w];
        Log("fast path worker " + std::to_string(w) +
            ": accepted=" + std::to_string(s.relay.accepted) +
            " pid=" + std::to_string(w < pids.size() ? pids[w] : -1) + " connections=" +
            std::to_string(s.connections) + " rx_packets=" + std::to_string(s.rx_packets) +
            " tx_packets=" + std::to_string(s.tx_packets) + " handoffs_out=" +
            std::to_string(s.handoffs_out) + " handoffs_in=" + std::to_string(s.handoffs_in) +
            " handoffs_dropped=" + std::to_string(s.handoffs_dropped) +
            " worker_busy_ns=" + std::to_string(s.worker_busy_ns) + s.RxByQueue());
      }
    }
    Log("steering: " + fast->SteerCountersLine());
  }
  if (kernel != nullptr) Log("kernel path: " + kernel->Totals().Format());
}

int Run(const Options& o) {
  // Signals are taken synchronously by this thread; every thread started below inherits the
  // mask. A relay must never die of SIGPIPE.
  sigset_t signals;
  sigemptyset(&signals);
  for (int s : {SIGINT, SIGTERM, SIGUSR1, SIGHUP}) sigaddset(&signals, s);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  signal(SIGPIPE, SIG_IGN);

  std::vector<Rule> fast_rules;
  for (const Rule& r : o.rules) {
    if (r.listen.is_ipv4() && r.backend.is_ipv4() && !r.listen.is_any()) fast_rules.push_back(r);
  }

  // The fast path first: it forks its workers, best before the kernel path starts threads.
  std::unique_ptr<FastPath> fast;
  std::string fast_status;
  if (o.path != PathChoice::kKernel) {
    FastPathConfig fc;
    fc.rules = fast_rules;
    fc.limits = o.limits;
    fc.max_connections = o.max_connections;
    fc.cpus = o.cpus;
    fc.watchdog = o.watchdog;
    fc.listen_iface = o.listen_iface;
    fc.backend_iface = o.backend_iface;
    fc.backend_ports = o.backend_ports;
    fc.backend_sources = o.backend_sources;
    if (o.flow_capacity) fc.steer.flow_capacity = o.flow_capacity;
    fc.steer.force_generic = o.force_generic;
    fc.steer.allow_generic = !o.force_native;
    fc.choose_xdp_mode = !o.force_generic && !o.force_native;
    fc.multi_buffer = o.multi_buffer;
    fc.tx_checksum_offload = o.tx_checksum_offload;
    fc.tx_budget = o.tx_budget;
    fc.adaptive_fill = o.adaptive_fill;
    fc.packet_tx = o.packet_tx;
    fc.small_batches = o.small_batches;
    fc.zero_copy_relay = o.zero_copy_relay;
    fc.ooseq_ack_hold = o.ooseq_ack_hold;
    xdpfwd_lwip_set_bbr(o.bbr);  // read by each lwIP pcb as it is created, on the worker
    if (o.path == PathChoice::kXdp && fast_rules.size() != o.rules.size()) {
      Log("--path xdp: the fast path takes IPv4 rules with a concrete listen address only; use "
          "--path auto or kernel for the others");
      return 1;
    }
    auto f = fast_rules.empty() ? Result<std::unique_ptr<FastPath>>(
                                      Error{{}, "no IPv4 rule with a concrete listen address"})
                                : FastPath::Start(fc);
    if (f) {
      fast = std::move(*f);
    } else if (o.path == PathChoice::kXdp) {
      Log("fast path cannot start: " + f.error().message());
      return 1;
    } else {
      // Auto mode: one line on why, then everything on the kernel path.
      Log("fast path unavailable, serving everything on the kernel path: " + f.error().message());
    }
  }

  std::unique_ptr<KernelPath> kernel;
  if (o.path != PathChoice::kXdp) {
    KernelPathConfig kc;
    kc.rules = o.rules;
    kc.limits = o.limits;
    if (o.max_connections) kc.limits.max_connections = *o.max_connections;
    kc.threads = o.kernel_threads;
    kc.copy_buffer_bytes = o.kernel_buffer;
    kc.use_splice = !o.kernel_copy;
    kc.busy_poll = o.kernel_busy_poll;
    kc.backend_sources = o.backend_sources;
    auto k = KernelPath::Start(kc);
    if (!k) {
      Log("kernel path cannot start: " + k.error().message());
      return 1;
    }
    kernel = std::move(*k);
  }

  std::string ready =
      "ready: path=" + std::string(PathName(o.path)) + " rules: " + RulesLine(o.rules);
  if (fast) ready += "; fast path on " + fast->description();
  if (kernel) {
    ready += "; kernel path on " + std::to_string(kernel->threads()) + " thread(s)";
    if (kernel->busy_poll()) ready += ", busy-polling";
  }
  Log(ready);
  if (!o.cpus.empty() && !fast) {
    Log("--cpus: no fast-path worker runs, so nothing is pinned (the kernel path's threads are "
        "not pinned)");
  }
  LogIsolation(fast.get(), kernel.get());

  const timespec tick{o.stats_interval_s > 0 ? o.stats_interval_s : 3600, 0};
  for (;;) {
    siginfo_t info{};
    const int sig = sigtimedwait(&signals, &info, &tick);
    if (sig == SIGINT || sig == SIGTERM) {
      Log(std::string("stopping on ") + (sig == SIGINT ? "SIGINT" : "SIGTERM"));
      break;
    }
    if (sig == SIGUSR1 || sig == SIGHUP || (sig < 0 && o.stats_interval_s > 0)) {
      PrintStats(fast.get(), kernel.get());
    }
  }
  if (fast) {
    fast->Stop();
  }
  if (kernel) kernel->Stop();
  PrintStats(fast.get(), kernel.get());
  return 0;
}

}  // namespace
}  // namespace xdpfwd

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  auto options = xdpfwd::ParseCommandLine(args);
  if (!options) {
    std::fprintf(stderr, "xdpfwd: %s\n%s", options.error().message().c_str(), xdpfwd::Usage());
    return 2;
  }
  if (options->help) {
    std::fputs(xdpfwd::Usage(), stdout);
    return 0;
  }
  xdpfwd::LogVerbosity() = options->verbosity;
  return xdpfwd::Run(*options);
}
