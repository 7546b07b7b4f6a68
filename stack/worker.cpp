// Busy-poll worker loop; see worker.h.
#include "stack/worker.h"

#include <pthread.h>
#include <sched.h>
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <mutex>
#include <thread>

#include "os/clock.h"
#include "stack/lwip/ack_hold/ooseq_ack_hold.h"
#include "xdpfwd_lwip_hooks.h"

extern "C" {
#include "lwip/init.h"
#include "lwip/memp.h"
#include "lwip/stats.h"
#include "lwip/tcp.h"
#include "lwip/timeouts.h"
}

namespace xdpfwd {

void InitLwipOnce() {
  static std::once_flag once;
  std::call_once(once, [] { lwip_init(); });
}

uint32_t LwipConnectionCapacity() { return (MEMP_NUM_TCP_PCB - 1024) / 2; }

uint32_t LwipDefaultConnections() { return (XDPFWD_TCP_PCB_PRELOCKED - 1024) / 2; }

uint32_t LwipListenerCapacity() { return MEMP_NUM_TCP_PCB_LISTEN; }

void Worker::HoldOutOfOrderAcks(bool on) { tcp_ooseq_ack_hold = on ? 1 : 0; }

bool Worker::RunOnce() {
  uint32_t received = 0;
  uint64_t sent_before = 0;
  if (recorder_ != nullptr) {
    for (LwipNetif* n : netifs_) sent_before += n->packets_out();
  }
  for (LwipNetif* n : netifs_) received += n->Poll(64);
  if (handoff_ != nullptr) {
    received += handoff_->Poll(
        [this](uint16_t tag, std::span<const uint8_t> frame) {
          if (tag < netifs_.size()) netifs_[tag]->InputCopy(frame);
        },
        64);
  }
  // Cheap: sys_now() is the iteration's clock (Run) or a vDSO read, checked against the
  // timer list's head.
  const bool timers_due = sys_timeouts_sleeptime() == 0;
  sys_check_timeouts();
  // Held out-of-order ACKs from the iteration before (stack/lwip/ack_hold/, behind lwIP patch
  // 0033) join this one's TX.
  tcp_ooseq_ack_release();
  for (LwipNetif* n : netifs_) {
    n->FlushTx();
    for (XskPort* p : n->ports()) p->Flush();
  }
  ++stats_.iterations;
  received_ = received;
  if (recorder_ != nullptr) {
    uint64_t sent = 0;
    for (LwipNetif* n : netifs_) sent += n->packets_out();
    sent_ = static_cast<uint32_t>(sent - sent_before);
  }
  return received > 0 || timers_due;
}

Result<void> Worker::Run(const std::atomic<bool>& stop,
                         const std::function<bool(uint64_t now_ns)>& each_iteration) {
  if (cpu_ >= 0) {
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu_, &set);
    if (int err = pthread_setaffinity_np(pthread_self(), sizeof(set), &set); err != 0) {
      return SystemError("pinning the worker to CPU " + std::to_string(cpu_), err);
    }
  }
  // One clock read per iteration serves lwIP's timers (sys_now), the caller, and the busy
  // figure: an iteration's end is the next one's start. Measured: with a read per use (five
  // per iteration, one more per packet sent for the next-hop cache), __vdso_clock_gettime was
  // 7.6% of the worker's samples under a connection-rate load.
  uint64_t start = MonotonicNs();
  bool busy = false;
  if (recorder_ != nullptr) ReadGapBaseline();
  while (!stop.load(std::memory_order_relaxed)) {
    const uint64_t now = MonotonicNs();
    if (busy) stats_.busy_ns += now - start;
    if (recorder_ != nullptr) {
      // The iteration that just ended, stamped at its start, with its length; a gap when the
      // thread did not come round for kGapNs (the iteration itself counts: one that took that
      // long was preempted or faulted as often as it worked).
      if (busy) recorder_->Iteration(start, received_, sent_, now - start);
      if (now - start > kGapNs) RecordGap(now, now - start);
    }
    start = now;
    // 0 means "not driven" to sys_now(): the one millisecond in 49 days that reads 0 says 1.
    xdpfwd_lwip_set_now_ms(std::max<u32_t>(static_cast<u32_t>(now / 1'000'000u), 1));
    xdpfwd_lwip_set_now_us(std::max<u32_t>(static_cast<u32_t>(now / 1'000u), 1));
    const bool caller_worked = each_iteration && each_iteration(now);
    busy = RunOnce() || caller_worked;
    if (!busy) ++stats_.idle_iterations;
  }
  if (busy) stats_.busy_ns += MonotonicNs() - start;
  xdpfwd_lwip_set_now_ms(0);
  xdpfwd_lwip_set_now_us(0);
  return {};
}

void Worker::ReadGapBaseline() {
  rusage ru{};
  if (getrusage(RUSAGE_THREAD, &ru) != 0) return;
  gap_minor_ = static_cast<uint64_t>(ru.ru_minflt);
  gap_major_ = static_cast<uint64_t>(ru.ru_majflt);
  gap_switches_ = static_cast<uint64_t>(ru.ru_nivcsw);
}

void Worker::RecordGap(uint64_t now_ns, uint64_t gap_ns) {
  const uint64_t minor = gap_minor_, major = gap_major_, switches = gap_switches_;
  ReadGapBaseline();  // one syscall, only when a gap happened
  recorder_->Gap(now_ns, gap_ns, gap_minor_ - minor, gap_major_ - major, gap_switches_ - switches);
}

void Worker::Drain() {
  for (LwipNetif* n : netifs_) {
    // PacketTx gives refused packets up after kMaxDeferralMs without progress: this loop ends
    // by then at the latest (the bound only guards against a clock that does not move).
    for (uint32_t i = 0; i < 10'000 && n->tx_deferred(); ++i) {
      n->FlushTx();
      if (n->tx_deferred()) std::this_thread::sleep_for(std::chrono::microseconds(100));
    }
    for (XskPort* p : n->ports()) p->DrainTx();
  }
}

WorkerStats Worker::stats() const {
  WorkerStats s = stats_;
  rusage ru{};
  if (getrusage(RUSAGE_THREAD, &ru) == 0) {
    s.minor_faults = static_cast<uint64_t>(ru.ru_minflt);
    s.major_faults = static_cast<uint64_t>(ru.ru_majflt);
    s.voluntary_switches = static_cast<uint64_t>(ru.ru_nvcsw);
    s.involuntary_switches = static_cast<uint64_t>(ru.ru_nivcsw);
  }
  s.lwip_ip_drops = lwip_stats.ip.drop;
  s.lwip_tcp_drops = lwip_stats.tcp.drop;
  s.lwip_tcp_retransmits = lwip_stats.mib2.tcpretranssegs;
  s.ooseq_acks_held = tcp_ooseq_acks_held;
  s.ooseq_acks_sent_late = tcp_ooseq_acks_released;
  for (int i = 0; i < MEMP_MAX; ++i) s.lwip_memp_errors += lwip_stats.memp[i]->err;
  s.lwip_segment_errors = lwip_stats.memp[MEMP_TCP_SEG]->err;
  s.lwip_pbuf_pool_errors = lwip_stats.memp[MEMP_PBUF_POOL]->err;
  s.lwip_heap_errors = lwip_stats.mem.err;
  return s;
}

}  // namespace xdpfwd
