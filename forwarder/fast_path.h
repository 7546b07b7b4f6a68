// The fast path as one object: finds the interfaces from the kernel, attaches the steering
// program to each, and forks N worker processes (lwIP's state is global: one lwIP per
// process), each pinned to its CPU, with its own AF_XDP ports on the RX queues q with
// q mod N == its index, its own lwIP netif per interface and relay. This process stays the
// control plane: stray-flow reaping, stats summed from the workers' shared memory, restarting a
// worker that dies. Stopping it resets open connections, detaches XDP and removes every flow
// entry it made.
#pragma once

#include <netinet/in.h>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "forwarder/backend_ports.h"
#include "forwarder/connection_table.h"
#include "forwarder/health_board.h"
#include "forwarder/recorder_trace.h"
#include "forwarder/relay_counters.h"
#include "forwarder/rules.h"
#include "forwarder/session_log.h"
#include "os/result.h"
#include "stack/packet_tx.h"
#include "xdp/steer.h"

namespace xdpfwd {

struct FastPathConfig {
  std::vector<Rule> rules;                   // TCP rules with a concrete listen address
  std::vector<AccessPattern> global_access;  // allow/deny lines before the first rule
  // The rules' backends (forwarder/health_board.h: checks' verdicts, states, weights, counters),
  // in memory the workers inherit; nullptr: none.
  HealthBoard* health = nullptr;
  // Workers hand access log records to the control process (FastPath::DrainSessions).
  bool log_sessions = false;
  RelayLimits limits;
  // One worker per CPU, pinned; empty: as many workers as the interface with the fewest RX
  // queues has (one on single-queue devices), at most the CPUs usable, pinned to the least
  // busy of those.
  std::vector<int> cpus;
  // A worker whose loop makes no progress this long (stopped by a signal or a debugger,
  // wedged) is killed and restarted like one that died; 0: never.
  std::chrono::milliseconds watchdog{5000};
  std::string listen_iface;   // empty: the interface holding the listen address
  std::string backend_iface;  // empty: the kernel's route to the backend
  PortRange backend_ports;    // automatic: DefaultBackendPorts
  // --backend-source, either family; none of a backend's family: the route's source address.
  std::vector<IpAddress> backend_sources;
  SteerOptions steer;
  // Pick each interface's attach mode (forwarder/link_fit.h's PreferGenericXdp) unless the user
  // gave --generic or --native.
  bool choose_xdp_mode = true;
  bool multi_buffer = true;         // XskPortConfig's, for every port
  bool tx_checksum_offload = true;  // XskPortConfig's, for every port
  bool tx_budget = true;
  bool adaptive_fill = true;  // FillDepth on every port's fill ring; false: always all of it
  // Send through a packet socket with GSO (stack/packet_tx.h) rather than the AF_XDP socket;
  // unset: where the AF_XDP socket runs in copy mode.
  std::optional<bool> packet_tx;
  // With the packet socket: batches of single segments through the AF_XDP port (--tune tx-small).
  SmallBatchTx small_batches = SmallBatchTx::kAcksThroughPacket;
  // Relay bytes that leave at once by reference to their receive frame (RelayConfig::
  // zero_copy_refs); false: copy them all.
  bool zero_copy_relay = true;
  // Hold the ACK of out-of-order data one worker iteration (Worker::HoldOutOfOrderAcks);
  // false: send it at once, as lwIP does.
  bool ooseq_ack_hold = true;
  // Every worker keeps its newest events in a ring the control process can dump as a trace
  // (os/flight_recorder.h, docs/flight_recorder.md); false: no ring, nothing recorded.
  bool flight_recorder = true;
  // Every worker locks all its memory once it is set up (os/memory_lock.h: mlockall), so that
  // its loop never takes a page fault; false: only its AF_XDP frame areas (always locked).
  bool lock_memory = true;
  // --max-connections, over all workers (each takes its share, at most MaxConnections());
  // unset: DefaultConnections() per worker, the part of the pcb pool locked at start.
  std::optional<uint32_t> max_connections;
};

// Frames received on one RX queue of one interface (its AF_XDP port's count).
struct QueueRx {
  std::string ifname;
  uint32_t queue = 0;
  uint64_t packets = 0;
};

// X(field, name in the stats line). One list, so the worker's counters, the sum over workers
// and the formatter can never disagree. What each counts is said where it is filled
// (fast_path_worker.cpp); flows, client_flows, stray_flows_reaped, workers, worker_restarts and
// the handoffs come from the control process.
#define XDPFWD_FAST_PATH_COUNTERS(X)                                                               \
  X(connections, gauge, "connections")                 /* live relay connections */                \
  X(flows, gauge, "flows")                             /* entries in all steering maps */          \
  X(client_flows, gauge, "client_flows")               /* counted against --flow-capacity */       \
  X(stray_flows_reaped, counter, "stray_flows_reaped") /* handshakes that never completed */       \
  X(closing_flows, gauge, "closing_flows")             /* flow entries lingering after close */    \
  X(flow_map_syscalls, counter, "flow_map_syscalls")   /* the worker's bpf() calls on entries */   \
  X(flow_map_batches, counter, "flow_map_batches")     /* of those, batched removals */            \
  X(lwip_pcbs, gauge, "lwip_pcbs")                     /* lwIP connection pcbs in use */           \
  X(lwip_heap_bytes, gauge, "lwip_heap_bytes")                                                     \
  X(frames_held, gauge, "frames_held") /* UMEM frames held by lwIP */                              \
  X(rx_packets, counter, "rx_packets")                                                             \
  X(rx_frames, counter, "rx_frames")                 /* a chain's frames count one each */         \
  X(rx_chains, counter, "rx_chains")                 /* packets that came as a chain */            \
  X(rx_chains_dropped, counter, "rx_chains_dropped") /* longer than the kernel's longest */        \
  X(tx_packets, counter, "tx_packets")                                                             \
  X(tx_kicks, counter, "tx_kicks")                                                                 \
  X(tx_chains, counter, "tx_chains") /* longer than a TX frame */                                  \
  X(tx_checksum_offloaded, counter, "tx_checksum_offloaded")                                       \
  X(tx_no_neighbor, counter, "tx_no_neighbor") /* next hop's MAC unknown: resent */                \
  X(tx_socket_packets, counter,                                                                    \
    "tx_socket_packets") /* --tune tx=packet: packets sent, GSO ones once */                       \
  X(tx_socket_segments, counter, "tx_socket_segments") /* lwIP's packets in them */                \
  X(tx_socket_gso, counter, "tx_socket_gso")           /* packets of more than one segment */      \
  X(tx_socket_sends, counter, "tx_socket_sends")       /* sendmmsg calls */                        \
  X(tx_socket_deferred, counter, "tx_socket_deferred") /* refused for want of room: sent later */  \
  X(tx_socket_dropped, counter, "tx_socket_dropped")   /* refused by the kernel: TCP resends */    \
  X(tx_socket_full, counter,                                                                       \
    "tx_socket_full") /* not queued, batch full of deferred: lwIP resends */                       \
  X(tx_singles_af_xdp, counter, "tx_singles_af_xdp") /* batches without GSO: through AF_XDP */     \
  X(tx_singles_kept_to_packet, counter,                                                            \
    "tx_singles_kept_to_packet") /* their flow sent that way lately */                             \
  X(tx_refused_flows_retried, counter,                                                             \
    "tx_refused_flows_retried")                    /* tx_socket_full's flows, sent again */        \
  X(tx_refused_walks, counter, "tx_refused_walks") /* ...by a walk of every pcb: too many flows */ \
  X(tx_refused_retry_ns, counter, "tx_refused_retry_ns")                                           \
  X(next_hops, gauge, "next_hops")                                                                 \
  X(xsk_rx_dropped, counter, "xsk_rx_dropped") /* the kernel's XDP_STATISTICS */                   \
  X(xsk_rx_ring_full, counter, "xsk_rx_ring_full")                                                 \
  X(xsk_fill_ring_empty, counter, "xsk_fill_ring_empty")                                           \
  X(fill_depth, gauge, "fill_depth") /* frames the fill rings keep posted now (a gauge) */         \
  X(fill_ring_frames, gauge, "fill_ring_frames")   /* frames given to the kernel for RX now */     \
  X(tx_ring_frames, gauge, "tx_ring_frames")       /* frames sent, completion not reaped yet */    \
  X(rx_ring_waiting, gauge, "rx_ring_waiting")     /* received, not yet taken by the worker */     \
  X(fill_depth_grows, counter, "fill_depth_grows") /* the depth doubled: a ring ran low */         \
  X(lwip_retransmits, counter, "retransmits")                                                      \
  X(lwip_drops, counter, "lwip_drops")                                                             \
  X(lwip_pool_errors, counter, "lwip_pool_errors")                                                 \
  X(lwip_segment_errors, counter, "lwip_segment_errors")     /* of those: TCP segments (send) */   \
  X(lwip_pbuf_pool_errors, counter, "lwip_pbuf_pool_errors") /* and pool pbufs (out of order) */   \
  X(oow_acks, counter, "oow_acks") /* RelayState's: spoofed-segment storms */                      \
  X(oow_acks_limited, counter, "oow_acks_limited")                                                 \
  X(ooseq_dropped, counter, "ooseq_dropped") /* RelayState's: holes left by peers */               \
  X(ooseq_acks_held, counter,                                                                      \
    "ooseq_acks_held") /* out-of-order segments whose ACK waited (0033) */                         \
  X(ooseq_acks_sent_late, counter, "ooseq_acks_sent_late") /* of those ACKs, sent a round later */ \
  X(bytes_referenced, counter, "bytes_referenced") /* relayed without a copy (patch 0032) */       \
  X(send_refs, gauge, "send_refs")                 /* references on receive frames held now */     \
  X(workers, gauge, "workers")                     /* fast-path worker processes */                \
  X(worker_restarts, counter, "worker_restarts")   /* workers that died and were restarted */      \
  X(handoffs_out, counter, "handoffs_out")         /* packets handed to their flow's owner */      \
  X(handoffs_in, counter, "handoffs_in")                                                           \
  X(handoffs_dropped, counter, "handoffs_dropped") /* the owner's ring was full */                 \
  X(rx_copied, counter, "rx_copied")               /* handed-over packets fed to lwIP */           \
  X(rx_copy_no_pool, counter, "rx_copy_no_pool")   /* of those, dropped: no pool pbuf */           \
  X(worker_busy_ns, counter, "worker_busy_ns")     /* time in iterations that did work */          \
  X(worker_tx_syscall_ns, counter,                                                                 \
    "worker_tx_syscall_ns") /* of that, in TX syscalls: on veth the receivers' stacks */           \
  X(worker_iterations, counter, "worker_iterations")                                               \
  X(minor_faults, counter, "worker_minor_faults")                                                  \
  X(involuntary_switches, counter, "worker_involuntary_switches")

// The counters as plain memory: what a worker process publishes to the control process.
struct FastPathCounters {
  RelayTotals relay;
#define XDPFWD_FIELD(field, kind, name) uint64_t field = 0;
  XDPFWD_FAST_PATH_COUNTERS(XDPFWD_FIELD)
#undef XDPFWD_FIELD
  FastPathCounters& operator+=(const FastPathCounters& o);
};

// What the workers last published, summed (or one worker's); read from any thread.
struct FastPathSnapshot : FastPathCounters {
  std::vector<QueueRx> rx_by_queue;  // shown as rx_packets.IFNAME.qN=...
  std::vector<RuleTotals> rules;     // relay's counters per rule
  std::string Format() const;
  std::string RxByQueue() const;  // " rx_packets.veth-c.q0=12 rx_packets.veth-c.q1=7"
};

class FastPath {
 public:
  static Result<std::unique_ptr<FastPath>> Start(const FastPathConfig& config);
  // The most connections a worker can hold (lwIP's pcb pool).
  static uint32_t MaxConnections();
  // A worker's default --max-connections: the connections whose pcbs it locks at start
  // (stack/lwip_pools.h); more than that locks more of the pool as it is used.
  static uint32_t DefaultConnections();
  ~FastPath();  // Stop()
  FastPath(const FastPath&) = delete;
  FastPath& operator=(const FastPath&) = delete;

  void Stop();
  // "veth-c (198.18.0.1, XDP native, 2 RX queues, all served, copy mode), ...".
  const std::string& description() const { return description_; }
  // The workers' CPUs, one per worker (-1: not pinned), and process ids (-1: restarting).
  std::vector<int> worker_cpus() const;
  std::vector<int> worker_pids() const;
  // Each worker's memory lock (FastPathConfig::lock_memory), one per worker: 0 locked, or not
  // asked to lock; else the errno that refused it (the worker runs unlocked).
  std::vector<int> worker_lock_errors() const;
  // Whether a snapshot counts the steering maps' entries (`flows`, xdp/steer.h's FlowCount): the
  // kernel's count, a few syscalls per interface, where the kernel gives one (6.6+); else a walk
  // of every flow map, whose cost grows with the connections (seconds at a million). A reader
  // that does not show them (the control loop's periodic diagnosis, the drain's polls) leaves
  // `flows` at 0 and pays neither.
  enum class Flows { kCounted, kNotCounted };
  // Asks every worker for fresh numbers and waits for them (bounded; a worker that does not
  // answer contributes its last ones), and sums them; with `per_worker`, each worker's too, in
  // worker order, from the same round.
  FastPathSnapshot Snapshot(std::vector<FastPathSnapshot>* per_worker = nullptr,
                            Flows flows = Flows::kCounted);
  // Steering decisions summed over interfaces (after Stop(): the last reading).
  SteerCounters SteerDecisions() const;
  // The same as "redirect_new_flow=3 pass_not_ip=2" (reasons that counted nothing left out).
  std::string SteerCountersLine() const;
  // Removes every listener from the steering programs: a new client's SYN goes to the kernel
  // (refused there unless the kernel path listens), while the flows of open connections stay
  // steered to their workers.
  void StopAccepting();
  // The same for one listen address.
  void StopAccepting(const IpEndpoint& listen);
  // A reload (Service::Reload), in two steps. CheckRules: for each of `rules` (TCP rules
  // with a concrete listen address), empty if the running workers can take it, else why not (an
  // interface not attached at start, another gateway or a new source address there, more listen
  // addresses than a worker's lwIP holds; an interface's first IPv6 address they can take).
  // Changes nothing.
  std::vector<std::string> CheckRules(const std::vector<Rule>& rules);
  // SetRules: serves exactly `rules` (each one CheckRules took) and `global_access` from now on.
  // Listen addresses that go stop being steered first; every worker takes the new rules (a
  // bounded wait); then new listen addresses are steered to them. A listen address kept is never
  // rebound, and open connections keep the rule they began with. An error says what did not go
  // as planned; everything else is in place.
  Result<void> SetRules(const std::vector<Rule>& rules,
                        const std::vector<AccessPattern>& global_access);
  // The access log's events the workers recorded since the last call (log_sessions), appended
  // to `out`; from one thread at a time (the log's writer).
  void DrainSessions(std::vector<SessionEvent>& out);
  // Every worker's flight recorder as it is now, a dead worker's too (its ring outlives it);
  // empty when the recorder is off.
  std::vector<WorkerRecording> ReadRecorders() const;
  // `show sess`: every worker's connections (16,384 a worker at most; `notes` says what is
  // missing: a worker that did not answer in 1 s, connections beyond a table). The workers
  // copy their tables a slice per iteration, never stopping for it.
  std::vector<ConnectionRow> Connections(std::vector<std::string>* notes = nullptr);
  // `shutdown session ID`: resets that connection on its worker (admin_shutdown); an error
  // when no worker has it.
  Result<void> Shutdown(uint64_t id);
  uint64_t SessionRecordsDropped() const;  // rings full: the writer was behind

  struct Impl;

 private:
  explicit FastPath(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
  std::string description_;
};

}  // namespace xdpfwd
