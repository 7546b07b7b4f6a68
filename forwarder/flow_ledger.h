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
  // the backend-side netif's address, then any --backend-source aliases lwIP answers on. Of
  // each family the route's backends have: a leg takes those of its backend's family (a rule
  // may have backends of both).
  std::vector<IpAddress> backend_sources;
  // The ledger's turns over backend_sources, this route's own and one per family (IPv4, IPv6):
  // one turn shared by every route gave a rule whose connections alternate with another rule's
  // the same source each time (a 6 -> 6 rule beside a 4 -> 4 one: every IPv6 leg from the first
  // IPv6 source), and one turn shared by the families would do the same to a rule whose
  // connections alternate between an IPv4 and an IPv6 backend.
  mutable size_t next_source[2] = {0, 0};
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
  // Whether the worker's lwIP holds a pcb on a client flow's 4-tuple (lwip_pcb::TupleInUse):
  // asked when the old connection's entry is removed (FlowReuse). Null: always possible.
  std::function<bool(const FlowTuple& client_flow)> client_tuple_in_use;
};

class FlowLedger {
 public:
  explicit FlowLedger(FlowLedgerConfig config);
  // Removes every lingering entry at once.
  ~FlowLedger();
  FlowLedger(const FlowLedger&) = delete;
  FlowLedger& operator=(const FlowLedger&) = delete;

  // A client connection was taken: booked, and stamped with the time (accepted_ns). Its entry is
  // not touched: the program stamped it at the SYN, and a connection that ends within the stray
  // reaper's age needs no mark (MarkAccepted).
  FlowBooking Accept(const FlowRoute& route, const FlowTuple& client_flow);
  // A connection still open some time after its accept: its entry is marked accepted (stamped
  // with accepted_ns) so the stray-flow reaper leaves it alone, or put back should it be gone
  // (reaped after a handshake slower than the reaper's age), or the client's next packets would
  // reach the kernel. Only while the client leg is open: a client that has closed may reuse its
  // 4-tuple, and the mark would take the new connection's entry for this one's.
  void MarkAccepted(FlowBooking& booking);
  // A client refused at accept (reset): its entry goes after the linger.
  void Refuse(const FlowRoute& route, const FlowTuple& client_flow, uint64_t now_ms);

  // Leases a local source of the backend's family and a port toward the backend, sources in
  // turn, skipping a source whose ports toward this backend are all held; fills backend_flow.
  // False: none left (or the route has no source of the backend's family).
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
  // Removes entries whose linger is over; true if there were any. Client entries one call each,
  // at most `budget` of them (a map syscall each, two if the client may have reused the tuple);
  // backend entries in batches (FlowTable::RemoveFlows) of up to kRemovalBatch, taken once that
  // many are due or the first has waited kBatchWaitMs past its linger. The linger is a minimum:
  // what is left goes at a later call.
  bool RemoveDue(uint64_t now_ms, size_t budget = SIZE_MAX);
  // Backend entries per batch. The kernel deletes a batch's keys one by one, as it deletes one
  // per call, less a syscall's entry and exit each; the bound keeps one call short when many
  // fall due at once (14,000 connections once closed within 100 ms: Relay::Tick's comment says
  // what removing all of them in one go did). Not timed on its own.
  static constexpr size_t kRemovalBatch = 256;
  // How long a due backend removal may wait for others to share its batch: from 10 connections
  // a second up, a batch then holds more than one (at 9,000-10,000 a second, 256).
  static constexpr uint64_t kBatchWaitMs = 100;

  // Entries waiting for their linger (or for their batch).
  size_t lingering() const { return removals_.size() + backend_removals_.size(); }
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
  // Removes the first `n` of backend_removals_ whose port was not reused meanwhile, batched.
  void RemoveBackendEntries(size_t n);

  FlowLedgerConfig config_;
  // Per (source address, backend address, backend port): created on first use.
  std::map<std::tuple<IpAddress, IpAddress, uint16_t>, std::unique_ptr<BackendPorts>> ports_;
  // How many entries at the front of backend_removals_ an earlier RemoveDue saw due.
  size_t backend_due_ = 0;
  // Due times are increasing in each: a constant linger. Client entries, and refused clients';
  // backend legs' apart, for their batches.
  std::deque<PendingRemoval> removals_;
  std::deque<PendingRemoval> backend_removals_;
  std::vector<FlowTuple> batch_;  // RemoveBackendEntries' scratch, kept to allocate once
};

}  // namespace xdpfwd
