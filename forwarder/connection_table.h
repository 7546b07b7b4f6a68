// One relayed connection as `show sess` lists it, whichever path carries it: its two legs, how
// long it has lived, bytes each way, and what its TCP stack says of the client leg and the
// backend leg (lwIP's pcb on the fast path, TCP_INFO on the kernel path).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace xdpfwd {

// One leg's TCP state as its stack keeps it; 0 where a stack has no such number.
struct LegTcpInfo {
  std::string state;         // "ESTABLISHED", "SYN_SENT", "FIN_WAIT1", ...
  uint32_t srtt_us = 0;      // smoothed round-trip time
  uint32_t rto_ms = 0;       // retransmission timeout now
  uint32_t cwnd_bytes = 0;   // congestion window
  uint32_t in_flight = 0;    // bytes sent, not yet acknowledged
  uint32_t retransmits = 0;  // segments retransmitted over the leg's life
  uint32_t send_queue = 0;   // bytes queued to send (not yet sent)
  uint32_t peer_window = 0;  // the peer's advertised receive window, bytes
};

struct ConnectionRow {
  // Unique within its path while the process lives: `shutdown session ID` takes it. The fast
  // path's are (worker << 48 | its number), the kernel path's (thread << 48 | its number).
  uint64_t id = 0;
  std::string path;             // "fast", "kernel"
  int worker = 0;               // fast-path worker or kernel-path thread
  uint32_t rule = 0;            // Rule::id
  std::string client, backend;  // "10.0.1.2:40000", the peers' addresses
  uint64_t age_ms = 0;
  uint64_t bytes_to_backend = 0, bytes_to_client = 0;
  LegTcpInfo client_leg, backend_leg;
};

// `show sess`: a header line and one CSV row per connection (forwarder/exposition.cpp).
std::string FormatConnections(const std::vector<ConnectionRow>& rows);

}  // namespace xdpfwd
