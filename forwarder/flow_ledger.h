// The fast path's books on its flows: which steering entries and backend ports each relay
// connection holds, when they are taken and when they go back. The relay asks the ledger and
// relays bytes; the ledger never touches lwIP. Worker thread only.
#pragma once

#include <netinet/in.h>

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <tuple>
#include <vector>

#include "forwarder/backend_ports.h"
#include "os/ip_address.h"
#include "xdp/flow_table.h"

namespace xdpfwd {

// Where one rule's flows are entered and where its backend legs go.
struct FlowRoute {
  uint32_t id = 0;
  IpEndpoint backend;
  // Local addresses of backend legs, used in turn (each adds a port space toward the backend):
  // the backend-side netif's address, then any --backend-source aliases lwIP answers on. Of the
  // backend's family.
  std::vector<IpAddress> backend_sources;
  FlowTable* client_side = nullptr;   // holds the clients' flows (the program inserts them)
  FlowTable* backend_side = nullptr;  // the ledger enters the backend legs' flows here
};

// What one connection holds: its client flow, and once leased, its backend leg's source, port
// and flow (source and port are backend_flow.daddr and .dport).
struct FlowBooking {
  const FlowRoute* route = nullptr;
  FlowTuple client_flow{};
  // Where the backend leg goes: the route's backend, or another the relay chose for this
  // connection (a rule with several backends).
  IpEndpoint backend{};
  FlowTuple backend_flow{};
  BackendPorts* ports = nullptr;  // null while no backend port is held
  BackendPorts::Lease lease{};
  // The client entry's stamp when this connection took it (MarkAccepted): a newer one at the
  // close means the client's next connection on the same 4-tuple has it since.
  uint64_t accepted_ns = 0;
};

struct FlowLedgerConfig {
  std::vector<PortRange> backend_ports;  // never empty (DefaultBackendPorts)
  uint32_t worker = 0;                   // the worker entries are owned by (steer_flow.owner)
  // N workers: the ports of backend_ports this worker may use from `source` toward `backend`
  // (disjoint from every other worker's, so no allocator is shared). Empty: all of them.
  std::function<std::vector<uint16_t>(const IpAddress& source, const IpEndpoint& backend)>
      worker_ports;
  uint64_t flow_linger_ms = 1000;  // RelayConfig::flow_linger_ms says why
  // The clock flow tables stamp entries with (CLOCK_MONOTONIC, as bpf_ktime_get_ns reads).
  uint64_t (*clock_ns)() = nullptr;  // null: MonotonicNs
};

class FlowLedger {
 public:
  explicit FlowLedger(FlowLedgerConfig config);
  // Removes every lingering entry at once.
  ~FlowLedger();
  FlowLedger(const FlowLedger&) = delete;
  FlowLedger& operator=(const FlowLedger&) = delete;

  // A client connection was taken: its entry is marked accepted so the stray-flow reaper leaves
  // it alone, or put back should it be gone (reaped after a handshake slower than the reaper's
  // age), or the client's next packets would reach the kernel.
  FlowBooking Accept(const FlowRoute& route, const FlowTuple& client_flow);
  // A client refused at accept (reset): its entry goes after the linger.
  void Refuse(const FlowRoute& route, const FlowTuple& client_flow, uint64_t now_ms);

  // Leases a local source and port toward the route's backend, sources in turn, skipping a
  // source whose ports toward this backend are all held; fills backend_flow. False: none left.
  bool LeaseBackendPort(FlowBooking& booking);
  // Enters the leased leg's flow, which must happen before its SYN leaves (or the SYN-ACK
  // reaches the kernel, which resets it). On failure the port goes back at once.
  bool AddBackendFlow(FlowBooking& booking);
  // Gives back a leased port whose flow was never entered.
  void ReleaseBackendPort(FlowBooking& booking);
  // The backend leg failed before it carried a byte (a refused or silent handshake: the
  // connection tries another backend): its port goes back now, its flow entry after the
  // linger, as at Close.
  void CloseBackendLeg(FlowBooking& booking, uint64_t now_ms);

  // The connection ended: its port goes back now (reused last, FIFO), its entries after the
  // linger — the backend entry only if its port was not leased again meanwhile, the client
  // entry only if no SYN has come on its 4-tuple since this connection was accepted (a client
  // that reused its port, even before this connection ended; docs/relay.md).
  void Close(FlowBooking& booking, uint64_t now_ms);
  // Removes entries whose linger is over, at most `budget` of them (each is a map syscall or
  // two); true if there were any. The linger is a minimum: what is left goes at the next call.
  bool RemoveDue(uint64_t now_ms, size_t budget = SIZE_MAX);

  size_t lingering() const { return removals_.size(); }  // entries waiting for their linger
  uint32_t backend_ports_in_use() const;

 private:
  struct PendingRemoval {
    uint64_t due_ms;
    FlowTable* table;
    FlowTuple tuple;
    BackendPorts* ports;  // backend flow: only if the port was not reused meanwhile
    BackendPorts::Lease lease;
    uint64_t stamp_ns;  // client flow: only if the entry's stamp is not newer than this
  };
  BackendPorts& PortsFor(const IpAddress& source, const IpEndpoint& backend);
  void Remove(const PendingRemoval& r);

  FlowLedgerConfig config_;
  // Per (source address, backend address, backend port): created on first use.
  std::map<std::tuple<IpAddress, IpAddress, uint16_t>, std::unique_ptr<BackendPorts>> ports_;
  size_t next_source_ = 0;               // round robin over a route's backend sources
  std::deque<PendingRemoval> removals_;  // due times are increasing: a constant linger
};

}  // namespace xdpfwd
