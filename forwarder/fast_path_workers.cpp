// The control process's side of the fast-path workers (see fast_path_impl.h): forking them,
// waiting for them to be ready, collecting their numbers, watching them, restarting one that
// died or stopped, and stopping them all.
#include <signal.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <thread>
#include <tuple>

#include "forwarder/fast_path_impl.h"
#include "os/clock.h"
#include "os/fork_gate.h"
#include "os/log.h"
#include "stack/worker_handoff.h"

extern "C" {
#include "lwip/opt.h"  // TCP_SYN_RCVD_TIMEOUT
}

namespace xdpfwd {
namespace {

std::string ExitStatus(int status) {
  if (WIFSIGNALED(status)) {
    return std::string("killed by signal ") + std::to_string(WTERMSIG(status)) + " (" +
           strsignal(WTERMSIG(status)) + ")";
  }
  if (WIFEXITED(status)) return "exited with status " + std::to_string(WEXITSTATUS(status));
  return "stopped";
}

// The gauges of a worker that is gone: what it held went with it.
void DropGauges(FastPathCounters& c) {
#define XDPFWD_DROP_counter(field)
#define XDPFWD_DROP_gauge(field) field = 0;
#define XDPFWD_DROP(field, kind, what) XDPFWD_DROP_##kind(c.relay.field)
  XDPFWD_RELAY_COUNTERS(XDPFWD_DROP)
#undef XDPFWD_DROP
#define XDPFWD_DROP(field, kind, name) XDPFWD_DROP_##kind(c.field)
  XDPFWD_FAST_PATH_COUNTERS(XDPFWD_DROP)
#undef XDPFWD_DROP
#undef XDPFWD_DROP_gauge
#undef XDPFWD_DROP_counter
}

}  // namespace

FastPathCounters& FastPathCounters::operator+=(const FastPathCounters& o) {
  relay += o.relay;
#define XDPFWD_ADD(field, kind, name) field += o.field;
  XDPFWD_FAST_PATH_COUNTERS(XDPFWD_ADD)
#undef XDPFWD_ADD
  return *this;
}

Result<void> FastPath::Impl::Spawn(uint32_t w) {
  WorkerSlot& slot = Slot(w);
  slot.state.store(WorkerState::kStarting, std::memory_order_relaxed);
  slot.stop.store(false, std::memory_order_relaxed);
  slot.error[0] = '\0';
  slot.lock_error.store(0, std::memory_order_relaxed);
  slot.heartbeat.store(0, std::memory_order_relaxed);
  slot.published.store(slot.wanted.load(std::memory_order_relaxed), std::memory_order_relaxed);
  std::fflush(stderr);
  // Only while no other thread works (os/fork_gate.h): the child would keep any lock one held.
  const std::optional<pid_t> forked = ForkGate::OfProcess().Fork(kForkPatience);
  if (!forked) {
    return Error{{},
                 "fast path: worker " + std::to_string(w) + " not forked: other threads of the " +
                     "control process stayed at work for " + std::to_string(kForkPatience.count()) +
                     " ms"};
  }
  const pid_t pid = *forked;
  if (pid < 0) return SystemError("fast path: forking worker " + std::to_string(w));
  if (pid == 0) RunWorkerProcess(*this, w);  // never returns: it ends in _exit
  std::lock_guard lock(mu);
  children[w].pid = pid;
  children[w].heartbeat = 0;  // the watchdog counts from the start
  children[w].moved = std::chrono::steady_clock::now();
  return {};
}

Result<void> FastPath::Impl::WaitReady(uint32_t w, std::chrono::milliseconds limit) {
  WorkerSlot& slot = Slot(w);
  const pid_t pid = children[w].pid;
  const auto deadline = std::chrono::steady_clock::now() + limit;
  for (;;) {
    const WorkerState state = slot.state.load(std::memory_order_acquire);
    if (state == WorkerState::kReady) return {};
    int status = 0;
    const bool gone = waitpid(pid, &status, WNOHANG) == pid;
    if (state == WorkerState::kFailed || gone) {
      if (!gone) waitpid(pid, &status, 0);
      std::lock_guard lock(mu);
      children[w].pid = -1;
      std::string why = state == WorkerState::kFailed ? std::string(slot.error) : std::string();
      if (why.empty()) why = "it " + ExitStatus(status) + " while starting";
      return Error{{}, "fast-path worker " + std::to_string(w) + ": " + why};
    }
    if (std::chrono::steady_clock::now() > deadline) {
      return Error{{},
                   "fast-path worker " + std::to_string(w) + " (pid " + std::to_string(pid) +
                       ") not ready after " + std::to_string(limit.count()) + " ms"};
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

void FastPath::Impl::StopWorkers() {
  for (uint32_t w = 0; w < workers; ++w) Slot(w).stop.store(true, std::memory_order_relaxed);
  // A worker resets its connections and sends the resets before it exits: give it time, then
  // make sure (a wedged worker must not keep its sockets, or the next start cannot bind).
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  for (uint32_t w = 0; w < workers; ++w) {
    pid_t pid;
    {
      std::lock_guard lock(mu);
      pid = children[w].pid;
      children[w].pid = -1;
    }
    if (pid <= 0) continue;
    int status = 0;
    while (waitpid(pid, &status, WNOHANG) == 0) {
      if (std::chrono::steady_clock::now() > deadline) {
        Log("fast path: worker " + std::to_string(w) + " (pid " + std::to_string(pid) +
            ") did not stop in 5 s; killing it");
        kill(pid, SIGKILL);
        waitpid(pid, &status, 0);
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
  }
}

// A worker that died took its connections with it (they lived in its lwIP). The others keep
// theirs: its queues' packets of their flows are dropped while nobody serves the queues
// (drop_no_socket) and resent by the peers once the new worker is there. Its flow entries go,
// so its clients' next packets meet a reset instead of silence.
void FastPath::Impl::Restart(uint32_t w, int status) {
  size_t removed = 0;
  for (auto& i : ifaces) removed += i->steer->RemoveFlowsOwnedBy(w);
  uint64_t lost = 0;
  {
    std::lock_guard lock(mu);
    lost = children[w].last.connections;
    FastPathCounters gone = children[w].last;
    DropGauges(gone);
    retired += gone;
    for (RuleTotals r : children[w].last_rules) {
      r.totals.active = 0;  // its connections went with it
      AddRuleTotals(retired_rules, r.rule_id, r.totals);
    }
    children[w].last = FastPathCounters{};
    children[w].last_queues.clear();
    children[w].last_rules.clear();
    ++restarts;
  }
  Log("fast path: worker " + std::to_string(w) + " " + ExitStatus(status) + "; its connections (" +
      std::to_string(lost) + " at the last stats) are lost, " + std::to_string(removed) +
      " flow entries removed; restarting it");
  Respawn(w);
}

void FastPath::Impl::Respawn(uint32_t w) {
  children[w].respawn = false;
  if (auto r = Spawn(w); !r) {
    // Not forked (the other threads stayed at work, or fork failed): the next round tries again.
    Log(r.error().message() + "; trying again");
    children[w].respawn = true;
    return;
  }
  if (auto r = WaitReady(w, std::chrono::seconds(10)); !r) {
    Log("fast path: restarting worker " + std::to_string(w) + " failed: " + r.error().message());
    return;
  }
  Log("fast path: worker " + std::to_string(w) + " serves its queues again");
}

// A stopped worker (SIGSTOP, a debugger) or a wedged one serves nothing, and the other
// workers' packets that land on its queues wait with it: killed, it is restarted like a dead
// one and only its own connections are lost.
void FastPath::Impl::Watch(uint32_t w) {
  if (config.watchdog.count() == 0) return;
  pid_t pid;
  {
    std::lock_guard lock(mu);
    pid = children[w].pid;
  }
  if (pid <= 0 || Slot(w).state.load(std::memory_order_acquire) != WorkerState::kReady) return;
  const uint64_t beat = Slot(w).heartbeat.load(std::memory_order_relaxed);
  const auto now = std::chrono::steady_clock::now();
  Child& c = children[w];  // heartbeat and moved: this thread's only
  if (beat != c.heartbeat) {
    c.heartbeat = beat;
    c.moved = now;
    return;
  }
  if (now - c.moved < config.watchdog) return;
  Log("fast path: worker " + std::to_string(w) + " (pid " + std::to_string(pid) +
      ") made no progress for " + std::to_string(config.watchdog.count()) +
      " ms (stopped or wedged; --watchdog): killing it");
  kill(pid, SIGKILL);
  c.moved = now;  // reaped and restarted by the next round
}

// A client flow whose handshake has not completed within lwIP's SYN_RCVD timeout never will:
// lwIP has dropped its half-open pcb (a later SYN from the client starts over). One second of
// margin keeps the reaper from racing a handshake that completes at the last moment.
constexpr uint64_t kStrayFlowAgeNs = (TCP_SYN_RCVD_TIMEOUT + 1000) * 1'000'000ull;

// The stray reaper walks each interface's flow map in slices of this many entries, one slice
// per monitor round (100 ms), and starts a new pass at most once a second. A pass over a whole
// map at once took ~56 ms of CPU every second with 200,000 entries, on whatever CPU the control
// process shares (bench/run: the worker's), and cost a bulk transfer 7% with 100,000 idle
// connections held (docs/relay.md); in slices a pass over that map takes 5 s, and a stray lives
// 6-12 s instead of 6-7.
constexpr uint32_t kReapSliceEntries = 4096;
constexpr uint64_t kReapPassNs = 1'000'000'000ull;

void FastPath::Impl::Monitor() {
  std::vector<uint64_t> next_pass_ns(ifaces.size(), 0);
  std::vector<bool> in_pass(ifaces.size(), false);
  std::unique_lock lock(monitor_mu);
  while (
      !monitor_cv.wait_for(lock, std::chrono::milliseconds(100), [this] { return monitor_stop; })) {
    lock.unlock();
    for (uint32_t w = 0; w < workers; ++w) {
      pid_t pid;
      {
        std::lock_guard l(mu);
        pid = children[w].pid;
      }
      int status = 0;
      if (pid > 0 && waitpid(pid, &status, WNOHANG) == pid) {
        {
          std::lock_guard l(mu);
          children[w].pid = -1;
        }
        Restart(w, status);
      } else if (pid <= 0 && children[w].respawn) {
        Respawn(w);
      } else {
        Watch(w);
      }
    }
    const uint64_t now = MonotonicNs();
    for (size_t k = 0; k < ifaces.size() && now >= kStrayFlowAgeNs; ++k) {
      if (!in_pass[k] && now < next_pass_ns[k]) continue;
      if (!in_pass[k]) next_pass_ns[k] = now + kReapPassNs;  // a pass starts
      const auto slice =
          ifaces[k]->steer->ReapStrayFlowsSlice(now - kStrayFlowAgeNs, kReapSliceEntries);
      stray_flows_reaped.fetch_add(slice.reaped, std::memory_order_relaxed);
      in_pass[k] = !slice.pass_done;
    }
    lock.lock();
  }
}

// On the caller's thread: map reads do not belong on a worker. `flows` is each flow map's
// FlowCount (the kernel's count, or a walk where the kernel gives none); client_flows and
// stray_flows_reaped are counters.
void FastPath::Impl::CountFlows(FastPathSnapshot& s, FastPath::Flows flows) const {
  s.flows = s.client_flows = 0;
  for (const auto& i : ifaces) {
    if (flows == FastPath::Flows::kCounted) s.flows += i->steer->FlowCount();
    s.client_flows += i->steer->ClientFlowCount();
  }
  s.stray_flows_reaped = stray_flows_reaped.load(std::memory_order_relaxed);
}

FastPathSnapshot FastPath::Impl::Collect(std::vector<FastPathSnapshot>* each,
                                         FastPath::Flows flows) {
  std::vector<uint64_t> asked(workers, 0);
  {
    std::lock_guard lock(mu);
    if (stopped) {
      if (each != nullptr) each->clear();
      return final_snapshot;
    }
    for (uint32_t w = 0; w < workers; ++w) {
      if (children[w].pid > 0) asked[w] = Slot(w).wanted.fetch_add(1) + 1;
    }
  }
  // Waited for without the lock: a stopped worker keeps this waiting up to the deadline, and
  // the monitor must meanwhile be free to restart it (it takes the lock to do so).
  // A worker answers within an iteration (microseconds); one that has not in 250 ms is stopped
  // or wedged (the watchdog's business) and keeps its last numbers.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(250);
  for (uint32_t w = 0; w < workers; ++w) {
    if (asked[w] == 0) continue;
    while (Slot(w).published.load(std::memory_order_acquire) != asked[w] &&
           std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
  }
  std::lock_guard lock(mu);
  if (stopped) {
    if (each != nullptr) each->clear();
    return final_snapshot;
  }
  for (uint32_t w = 0; w < workers; ++w) {
    if (asked[w] == 0) continue;
    WorkerSlot& slot = Slot(w);
    if (slot.published.load(std::memory_order_acquire) != asked[w]) continue;  // keeps its last
    children[w].last = slot.counters;
    children[w].last_rules.assign(slot.rules,
                                  slot.rules + std::min(slot.rule_count, kMaxWorkerRules));
    children[w].last_queues.clear();
    for (uint32_t k = 0; k < std::min(slot.queue_count, kMaxWorkerQueues); ++k) {
      const auto& q = slot.queues[k];
      if (q.iface < ifaces.size()) {
        children[w].last_queues.push_back(QueueRx{ifaces[q.iface]->name, q.queue, q.packets});
      }
    }
  }
  FastPathSnapshot sum;
  static_cast<FastPathCounters&>(sum) = retired;
  sum.rules = retired_rules;
  if (each != nullptr) each->clear();
  for (uint32_t w = 0; w < workers; ++w) {
    FastPathSnapshot one;
    static_cast<FastPathCounters&>(one) = children[w].last;
    one.rx_by_queue = children[w].last_queues;
    one.rules = children[w].last_rules;
    for (const RuleTotals& r : one.rules) AddRuleTotals(sum.rules, r.rule_id, r.totals);
    if (workers > 1) {
      const HandoffTotals h = WorkerHandoff::Read(Rings(), RingsBytes(), workers, w);
      one.handoffs_out = h.out;
      one.handoffs_in = h.in;
      one.handoffs_dropped = h.dropped;
    }
    sum += one;
    sum.rx_by_queue.insert(sum.rx_by_queue.end(), one.rx_by_queue.begin(), one.rx_by_queue.end());
    if (each != nullptr) each->push_back(std::move(one));
  }
  std::sort(sum.rx_by_queue.begin(), sum.rx_by_queue.end(), [](const QueueRx& a, const QueueRx& b) {
    return std::tie(a.ifname, a.queue) < std::tie(b.ifname, b.queue);
  });
  sum.workers = workers;
  sum.worker_restarts = restarts;
  CountFlows(sum, flows);
  return sum;
}

}  // namespace xdpfwd
