// The fast path's busy-poll loop: one thread, pinned to a core, that moves received frames of
// every port (every RX queue of every interface) into lwIP, runs lwIP's timers and flushes
// every port once per iteration. It owns lwIP:
// every lwIP call happens on this thread.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <vector>

#include "os/flight_recorder.h"
#include "os/result.h"
#include "stack/lwip_netif.h"
#include "stack/worker_handoff.h"

namespace xdpfwd {

struct WorkerStats {
  uint64_t iterations = 0;
  uint64_t idle_iterations = 0;  // nothing received, no timer due, nothing for the caller
  // Time spent in iterations that did work. A busy-polling thread is always at 100% CPU, so
  // this is its real load (DPDK's "busy percent"): busy_ns / wall time, or per connection.
  uint64_t busy_ns = 0;
  // The worker thread's own, from getrusage(RUSAGE_THREAD): faults and context switches on
  // the polling core are the usual cause of tail latency.
  uint64_t minor_faults = 0, major_faults = 0;
  uint64_t voluntary_switches = 0, involuntary_switches = 0;
  // lwIP's own counters (lwip_stats): segments dropped (bad checksum, no pcb, no memory, ...),
  // retransmissions, and pool allocation failures.
  uint64_t lwip_ip_drops = 0, lwip_tcp_drops = 0, lwip_tcp_retransmits = 0;
  uint64_t lwip_memp_errors = 0, lwip_heap_errors = 0;
  // Of lwip_memp_errors: the TCP segment pool (send queues) and the pbuf pool (out-of-order
  // data), the two that traffic can drain.
  uint64_t lwip_segment_errors = 0, lwip_pbuf_pool_errors = 0;
  // HoldOutOfOrderAcks: out-of-order segments whose ACK waited, and the held ACKs sent a
  // round later (the rest were said by an ACK that went out meanwhile, or owed nothing).
  uint64_t ooseq_acks_held = 0, ooseq_acks_sent_late = 0;
};

class Worker {
 public:
  // cpu < 0: do not pin.
  explicit Worker(int cpu) : cpu_(cpu) {}
  void Add(LwipNetif* netif) { netifs_.push_back(netif); }
  // N workers: packets other workers hand over are taken from `handoff` every iteration and
  // fed to the netif their tag names (its index in Add's order, the same in every worker).
  void SetHandoff(WorkerHandoff* handoff) { handoff_ = handoff; }
  // Whether lwIP holds the ACK of out-of-order data for one iteration (lwIP patch 0033): a
  // segment that was only late then fills the hole first, and the peer does not resend it.
  // Off until set.
  void HoldOutOfOrderAcks(bool on);
  // Each iteration that did work is recorded (packets received and sent, time taken), and
  // each gap longer than kGapNs between two iterations, with the faults and context switches
  // the thread had meanwhile. Not owned; nullptr: nothing recorded.
  void SetRecorder(FlightRecorder* recorder) { recorder_ = recorder; }
  // A worker that did not start an iteration for this long was not running (preempted,
  // faulting, stopped): 20 times a loaded iteration's time (docs/flight_recorder.md).
  static constexpr uint64_t kGapNs = 1'000'000;

  // Pins the calling thread, then loops until `stop` is set. `each_iteration` (may be empty)
  // runs once per iteration on this thread, for work that must touch lwIP, with the
  // iteration's MonotonicNs(); it returns whether it did any (for the busy figure).
  Result<void> Run(const std::atomic<bool>& stop,
                   const std::function<bool(uint64_t now_ns)>& each_iteration = {});
  // One iteration: RX into lwIP, timers, TX flush. Returns whether it received a frame or ran
  // a timer.
  bool RunOnce();
  // Flushes and waits for every port's TX to complete, and for the packets the kernel refused
  // to the packet socket to go out (within PacketTx's deferral limit); for a clean stop.
  void Drain();

  // Faults and switches are those of the calling thread: call it on the worker thread.
  WorkerStats stats() const;

 private:
  void ReadGapBaseline();
  void RecordGap(uint64_t now_ns, uint64_t gap_ns);

  int cpu_;
  std::vector<LwipNetif*> netifs_;
  WorkerHandoff* handoff_ = nullptr;
  WorkerStats stats_;
  FlightRecorder* recorder_ = nullptr;
  uint32_t received_ = 0, sent_ = 0;  // RunOnce's last packets, for the recorder
  // The thread's faults and switches when a gap was last recorded: a gap reports what changed
  // since (getrusage is read only when a gap happened).
  uint64_t gap_minor_ = 0, gap_major_ = 0, gap_switches_ = 0;
};

// lwip_init() once per process (lwIP's state is global: one instance per process).
void InitLwipOnce();

// Relayed connections lwIP's pcb pool holds (two pcbs each, MEMP_NUM_TCP_PCB in lwipopts.h,
// less a margin for legs released at the next slow tick).
uint32_t LwipConnectionCapacity();
// Relayed connections whose pcbs a worker that locks its memory locks at start
// (XDPFWD_TCP_PCB_PRELOCKED, stack/lwip_pools.h), the same margin less.
uint32_t LwipDefaultConnections();
// Listen addresses one lwIP holds (MEMP_NUM_TCP_PCB_LISTEN).
uint32_t LwipListenerCapacity();

}  // namespace xdpfwd
