// The fast path as one object: finds the interfaces from the kernel, attaches the steering
// program to each, opens an AF_XDP port per RX queue and an lwIP netif per interface, and runs
// the relay on one pinned busy-polling worker thread that serves every queue. Stopping it resets
// open connections, detaches XDP and removes every flow entry it made.
#pragma once

#include <netinet/in.h>
#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "forwarder/backend_ports.h"
#include "forwarder/relay_counters.h"
#include "forwarder/rules.h"
#include "os/result.h"
#include "xdp/steer.h"

namespace xdpfwd {

struct FastPathConfig {
  std::vector<Rule> rules;  // IPv4 rules with a concrete listen address
  RelayLimits limits;
  int cpu = -1;                          // worker core; -1: not pinned
  std::string listen_iface;              // empty: the interface holding the listen address
  std::string backend_iface;             // empty: the kernel's route to the backend
  PortRange backend_ports;               // automatic: DefaultBackendPorts
  std::vector<in_addr> backend_sources;  // empty: the route's source address
  SteerOptions steer;
  // Pick each interface's attach mode (forwarder/link_fit.h's PreferGenericXdp) unless the user
  // gave --generic or --native.
  bool choose_xdp_mode = true;
  bool multi_buffer = true;         // XskPortConfig's, for every port
  bool tx_checksum_offload = true;  // XskPortConfig's, for every port
  bool tx_budget = true;
};

// Frames received on one RX queue of one interface (its AF_XDP port's count).
struct QueueRx {
  std::string ifname;
  uint32_t queue = 0;
  uint64_t packets = 0;
};

// What the worker last published; read from any thread.
struct FastPathSnapshot {
  RelayTotals relay;
  uint64_t connections = 0;         // live relay connections
  uint64_t closing_flows = 0;       // flow entries lingering after close
  uint64_t flows = 0;               // entries in all steering maps
  uint64_t client_flows = 0;        // of those, client flows (counted against --flow-capacity)
  uint64_t stray_flows_reaped = 0;  // client flows whose handshake never completed, removed
  uint64_t lwip_pcbs = 0;           // lwIP connection pcbs in use (TIME_WAIT included)
  uint64_t lwip_heap_bytes = 0;     // lwIP heap in use
  uint64_t frames_held = 0;         // UMEM frames held by lwIP (received data not yet released)
  uint64_t rx_packets = 0, tx_packets = 0, tx_kicks = 0;
  // Multi-buffer RX: frames received (a chain's count as one each), packets that came as a
  // chain, and chains dropped for being longer than the kernel's longest (never expected).
  uint64_t rx_frames = 0, rx_chains = 0, rx_chains_dropped = 0;
  uint64_t tx_chains = 0;              // packets longer than a TX frame, sent as a chain of frames
  std::vector<QueueRx> rx_by_queue;    // shown as rx_packets.IFNAME.qN=...
  uint64_t tx_checksum_offloaded = 0;  // frames whose TCP checksum the kernel completed
  // Segments lwIP had to keep because their next hop's MAC was unknown (it sends them again),
  // and the next hops known or being resolved (learned from SYNs, or from the kernel).
  uint64_t tx_no_neighbor = 0, next_hops = 0;
  // The kernel's XDP_STATISTICS for our sockets: frames it dropped (for any reason), and how
  // often it found the RX ring full or no frame in the fill ring. The peer retransmits them.
  uint64_t xsk_rx_dropped = 0, xsk_rx_ring_full = 0, xsk_fill_ring_empty = 0;
  uint64_t minor_faults = 0, involuntary_switches = 0;
  uint64_t worker_busy_ns = 0;     // time in worker iterations that did work (cumulative)
  uint64_t worker_iterations = 0;  // all iterations, busy or idle (cumulative)
  uint64_t lwip_retransmits = 0, lwip_drops = 0, lwip_pool_errors = 0;
  uint64_t oow_acks = 0, oow_acks_limited = 0;  // RelayState's: storms of spoofed segments
  uint64_t ooseq_dropped = 0;                   // RelayState's: holes left by peers
  std::string Format() const;
  std::string RxByQueue() const;  // " rx_packets.veth-c.q0=12 rx_packets.veth-c.q1=7"
};

class FastPath {
 public:
  static Result<std::unique_ptr<FastPath>> Start(const FastPathConfig& config);
  // The most connections it can hold (lwIP's pcb pool); the default --max-connections.
  static uint32_t MaxConnections();
  ~FastPath();  // Stop()
  FastPath(const FastPath&) = delete;
  FastPath& operator=(const FastPath&) = delete;

  void Stop();
  // "veth-c (198.18.0.1, XDP native, 2 RX queues, all served, copy mode), ...".
  const std::string& description() const { return description_; }
  // Asks the worker for fresh numbers and waits for them (bounded); falls back to the last ones.
  FastPathSnapshot Snapshot();
  // Steering decisions summed over interfaces, as "redirect_new_flow=3 pass_not_ipv4=2".
  std::string SteerCountersLine() const;

  struct Impl;

 private:
  explicit FastPath(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
  std::string description_;
};

}  // namespace xdpfwd
