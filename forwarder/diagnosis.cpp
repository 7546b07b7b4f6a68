// Warnings about the host from the workers' counters over an interval (diagnosis.h).
#include "forwarder/diagnosis.h"

#include <cstdio>
#include <cstring>
#include <string_view>

namespace xdpfwd {
namespace {

// What grew between two readings of one counter; nothing when it went back (the worker was
// restarted and counts from zero again).
uint64_t Grew(uint64_t before, uint64_t after) { return after > before ? after - before : 0; }

std::string Seconds(std::chrono::steady_clock::duration d) {
  char text[32];
  std::snprintf(text, sizeof text, "%.1f s",
                std::chrono::duration_cast<std::chrono::milliseconds>(d).count() / 1000.0);
  return text;
}

std::string CpuText(int cpu) {
  return cpu < 0 ? "no CPU of its own" : "CPU " + std::to_string(cpu);
}

}  // namespace

std::vector<HostWarning> HostDiagnosis::Check(const ServiceReport& now,
                                              std::chrono::steady_clock::time_point t) {
  std::vector<HostWarning> fresh;
  // A state, not a change: raised at every look while it holds (logged at the first).
  for (const WorkerReport& w : now.workers) {
    if (w.lock_error == 0) continue;
    Raise({"worker_memory_unlocked", static_cast<int>(w.index),
           "worker " + std::to_string(w.index) + " (" + CpuText(w.cpu) +
               ") runs with its memory unlocked: mlockall refused (" + std::strerror(w.lock_error) +
               "), so its loop takes a page fault wherever it touches a page for the first time "
               "or one the kernel reclaimed. Lift the locked-memory limit (LimitMEMLOCK=infinity "
               "in the unit, ulimit -l unlimited) or give xdpfwd CAP_IPC_LOCK; --tune "
               "memory-lock=off runs unlocked on purpose"},
          t, fresh);
  }
  if (last_ && now.fast && last_->fast) {
    const std::string over = " in the last " + Seconds(t - last_time_);
    for (const WorkerReport& w : now.workers) {
      const WorkerReport* before = nullptr;
      for (const WorkerReport& b : last_->workers) {
        if (b.index == w.index && b.pid == w.pid) before = &b;
      }
      if (before == nullptr) continue;  // new or restarted: its numbers start again
      const FastPathSnapshot& a = before->counters;
      const FastPathSnapshot& c = w.counters;
      const std::string who = "worker " + std::to_string(w.index) + " (" + CpuText(w.cpu) + ")";
      // A busy-polling thread alone on its CPU is never preempted: each switch is another task
      // or an interrupt's thread taking the CPU, and the worker's packets wait meanwhile.
      if (const uint64_t n = Grew(a.involuntary_switches, c.involuntary_switches); n > 0) {
        Raise({"worker_preempted", static_cast<int>(w.index),
               who + " was preempted " + std::to_string(n) + " time(s)" + over +
                   ": other tasks or interrupt threads run on its CPU and its packets wait "
                   "meanwhile. Give it a CPU of its own: --cpus with a CPU listed in isolcpus= "
                   "and nohz_full= on the kernel command line, and IRQ affinity away from it "
                   "(docs/tuning.md)"},
              t, fresh);
      }
      // After its start a worker touches no new memory in steady state; a fault is memory
      // touched for the first time (a pool growing) or swapped out, each a stall of its loop.
      if (const uint64_t n = Grew(a.minor_faults, c.minor_faults); n > 0) {
        Raise({"worker_page_faults", static_cast<int>(w.index),
               who + " took " + std::to_string(n) + " page fault(s)" + over +
                   ": each stops its loop while the kernel maps a page. A worker with its memory "
                   "locked (--tune memory-lock=on, the default) takes none; unlocked, memory "
                   "touched for the first time (lwIP's pools growing with the connections) does "
                   "this once, and if it goes on, the host is short of memory or swapping"},
              t, fresh);
      }
      const uint64_t dropped = Grew(a.xsk_rx_dropped, c.xsk_rx_dropped);
      const uint64_t ring_full = Grew(a.xsk_rx_ring_full, c.xsk_rx_ring_full);
      const uint64_t fill_empty = Grew(a.xsk_fill_ring_empty, c.xsk_fill_ring_empty);
      if (dropped + ring_full + fill_empty > 0) {
        Raise({"xsk_drops", static_cast<int>(w.index),
               who + "'s AF_XDP sockets lost packets" + over + " (dropped " +
                   std::to_string(dropped) + ", RX ring full " + std::to_string(ring_full) +
                   ", fill ring empty " + std::to_string(fill_empty) +
                   "): the worker did not take them in time (it was not running, or had more "
                   "than it could do); TCP resends them, late. Give it a CPU of its own, or "
                   "more workers (--cpus)"},
              t, fresh);
      }
      // lwIP's pools are fixed at build time (stack/lwip/lwipopts.h), per worker. A failed
      // allocation is a segment not queued or not kept: the relay retries it, the peer resends.
      if (const uint64_t n = Grew(a.lwip_pool_errors, c.lwip_pool_errors); n > 0) {
        const uint64_t segments = Grew(a.lwip_segment_errors, c.lwip_segment_errors);
        const uint64_t pbufs = Grew(a.lwip_pbuf_pool_errors, c.lwip_pbuf_pool_errors);
        Raise({"lwip_pool_exhausted", static_cast<int>(w.index),
               who + ": lwIP's pools ran dry " + std::to_string(n) + " time(s)" + over +
                   " (TCP segments " + std::to_string(segments) +
                   ": send queues, held by peers that read slowly or not at all; pool pbufs " +
                   std::to_string(pbufs) + ": out-of-order data; others " +
                   std::to_string(n - segments - pbufs) +
                   "); its connections wait for memory meanwhile. More workers (--cpus) each "
                   "have pools of their own; --stall-timeout resets connections whose peer "
                   "takes nothing, which frees what they hold; the pool sizes are in "
                   "stack/lwip/lwipopts.h"},
              t, fresh);
      }
    }
  }
  if (last_) {
    const std::string over = " in the last " + Seconds(t - last_time_);
    const std::vector<RuleTotals> none;
    if (now.fast) {
      CheckPeers(now, now.fast->rules, last_->fast ? last_->fast->rules : none, "fast", over, t,
                 fresh);
    }
    if (now.kernel) {
      CheckPeers(now, now.kernel->rules, last_->kernel ? last_->kernel->rules : none, "kernel",
                 over, t, fresh);
    }
  }
  last_ = now;
  last_time_ = t;
  return fresh;
}

// Per rule and path, the Nagle peers: a peer that holds each small write back until its
// previous one is acknowledged waited for our delayed ACK three times in a row, up to lwIP's
// 10 ms fast tick each on the fast path (forwarder/relay.cpp, Relay::CheckNagle), Linux's
// 40 ms on the kernel path (xdp/tcp_events.bpf.c). The fast path ACKs such a peer at once
// since; the kernel path cannot make the kernel's delayed ACK go away, and says so.
void HostDiagnosis::CheckPeers(const ServiceReport& now, const std::vector<RuleTotals>& rules,
                               const std::vector<RuleTotals>& last_rules, const char* path,
                               const std::string& over, std::chrono::steady_clock::time_point t,
                               std::vector<HostWarning>& fresh) {
  const bool fast = std::string_view(path) == "fast";
  for (const RuleTotals& r : rules) {
    const RuleTotals zero{};
    // A rule not in the last report had no connection then (a path lists a rule from its
    // first connection on): its counts began at 0 since.
    const RuleTotals* before = &zero;
    for (const RuleTotals& b : last_rules) {
      if (b.rule_id == r.rule_id) before = &b;
    }
    if (r.rule_id == RuleTotals::kOtherRules) continue;
    const RuleReport* rule = nullptr;
    for (const RuleReport& rr : now.rules) {
      if (rr.id == r.rule_id) rule = &rr;
    }
    const std::string listen = rule ? rule->listen : "?", backend = rule ? rule->backend : "?";
    const std::string which = "rule " + std::to_string(r.rule_id) + ", " + listen + " -> " +
                              backend + ", " + path + " path";
    const std::string why =
        " waited for our delayed ACK" + over +
        " (the Nagle/delayed-ACK stall: with Nagle on, a small write is held back until the "
        "previous small segment is acknowledged; the fast path's ACK waits up to 10 ms, a Linux "
        "receiver's, the kernel path's too, 40 ms). " +
        std::string(fast ? "The fast path ACKs those connections' small segments at once now;"
                         : "The kernel path's ACKs are the kernel's and stay delayed, unless "
                           "the route toward the peer says `quickack 1` (ip route change ...);");
    if (const uint64_t n = Grew(before->totals.backend_nagle_peers, r.totals.backend_nagle_peers);
        n > 0) {
      Raise({"backend_nagle_stall", -1,
             "backend " + backend + " (" + which + "): on " + std::to_string(n) +
                 " connection(s) its small segments" + why +
                 " set TCP_NODELAY on the backend's sockets, or have it write each message in "
                 "one call",
             r.rule_id},
            t, fresh);
    }
    if (const uint64_t n = Grew(before->totals.client_nagle_peers, r.totals.client_nagle_peers);
        n > 0) {
      Raise({"client_nagle_stall", -1,
             "clients of " + listen + " (" + which + "): on " + std::to_string(n) +
                 " connection(s) their small segments" + why +
                 " set TCP_NODELAY in the client, or have it write each request in one call",
             r.rule_id},
            t, fresh);
    }
  }
}

void HostDiagnosis::Raise(HostWarning w, std::chrono::steady_clock::time_point t,
                          std::vector<HostWarning>& fresh) {
  ++raised_[w.kind];
  auto key = std::make_tuple(w.kind, w.worker, w.rule);
  auto it = seen_.find(key);
  const bool already = it != seen_.end() && t - it->second.last < kKeep;
  seen_[key] = Seen{w, t};
  if (!already) fresh.push_back(std::move(w));
}

std::vector<HostWarning> HostDiagnosis::active(std::chrono::steady_clock::time_point t) const {
  std::vector<HostWarning> out;
  for (const auto& [key, seen] : seen_) {
    if (t - seen.last < kKeep) out.push_back(seen.warning);
  }
  return out;
}

}  // namespace xdpfwd
