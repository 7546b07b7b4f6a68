// The fast path's flow and backend-port bookkeeping (see flow_ledger.h).
#include "forwarder/flow_ledger.h"

#include <algorithm>
#include <utility>

#include "os/clock.h"

namespace xdpfwd {

FlowLedger::FlowLedger(FlowLedgerConfig config) : config_(std::move(config)) {
  if (config_.clock_ns == nullptr) config_.clock_ns = MonotonicNs;
}

FlowLedger::~FlowLedger() {
  for (const PendingRemoval& r : removals_) Remove(r);
  while (!backend_removals_.empty()) {
    RemoveBackendEntries(std::min(backend_removals_.size(), kRemovalBatch));
  }
}

FlowBooking FlowLedger::Accept(const FlowRoute& route, const FlowTuple& client_flow) {
  FlowBooking b;
  b.route = &route;
  b.backend = route.backend;
  b.client_flow = client_flow;
  b.accepted_ns = config_.clock_ns();
  return b;
}

void FlowLedger::MarkAccepted(FlowBooking& b) {
  FlowTable& table = *b.route->client_side;
  if (!table.MarkAccepted(b.client_flow, config_.worker, b.route->id, b.accepted_ns)) {
    (void)table.AddFlow(b.client_flow, config_.worker, b.route->id);
    b.accepted_ns = table.FlowCreatedNs(b.client_flow).value_or(0);  // rare: reaped meanwhile
  }
}

void FlowLedger::Refuse(const FlowRoute& route, const FlowTuple& client_flow, uint64_t now_ms) {
  removals_.push_back(PendingRemoval{now_ms + config_.flow_linger_ms,
                                     route.client_side,
                                     client_flow,
                                     nullptr,
                                     {},
                                     config_.clock_ns()});
}

BackendPorts& FlowLedger::PortsFor(const IpAddress& source, const IpEndpoint& backend) {
  auto& slot = ports_[{source, backend.addr, backend.port}];
  if (!slot) {
    slot = config_.worker_ports
               ? std::make_unique<BackendPorts>(config_.worker_ports(source, backend))
               : std::make_unique<BackendPorts>(config_.backend_ports);
  }
  return *slot;
}

bool FlowLedger::LeaseBackendPort(FlowBooking& b) {
  const FlowRoute& route = *b.route;
  // The sources of the backend's family, in this family's turn: a few addresses at most, so a
  // scan per lease costs less than keeping a list per family in every route.
  const sa_family_t family = b.backend.addr.family;
  size_t& turn = route.next_source[family == AF_INET6 ? 1 : 0];
  const size_t all = route.backend_sources.size();
  size_t sources = 0;
  for (const IpAddress& s : route.backend_sources) sources += s.family == family ? 1 : 0;
  for (size_t tried = 0; tried < sources; ++tried) {
    // The (turn % sources)-th address of the family.
    size_t nth = turn++ % sources;
    size_t at = 0;
    for (; at < all; ++at) {
      if (route.backend_sources[at].family != family) continue;
      if (nth == 0) break;
      --nth;
    }
    const IpAddress& source = route.backend_sources[at];
    BackendPorts& ports = PortsFor(source, b.backend);
    if (const auto lease = ports.Acquire()) {
      b.ports = &ports;
      b.lease = *lease;
      b.backend_flow = FlowTuple{b.backend.addr, source, b.backend.port, lease->port};
      return true;
    }
  }
  return false;
}

bool FlowLedger::AddBackendFlow(FlowBooking& b) {
  if (b.route->backend_side->AddFlow(b.backend_flow, config_.worker, b.route->id)) return true;
  ReleaseBackendPort(b);
  return false;
}

void FlowLedger::ReleaseBackendPort(FlowBooking& b) {
  if (b.ports == nullptr) return;
  b.ports->Release(b.lease.port);
  b.ports = nullptr;
}

void FlowLedger::Close(FlowBooking& b, uint64_t now_ms) {
  const uint64_t due = now_ms + config_.flow_linger_ms;
  removals_.push_back(
      PendingRemoval{due, b.route->client_side, b.client_flow, nullptr, {}, b.accepted_ns});
  CloseBackendLeg(b, now_ms);
}

void FlowLedger::CloseBackendLeg(FlowBooking& b, uint64_t now_ms) {
  if (b.ports == nullptr) return;
  b.ports->Release(b.lease.port);
  backend_removals_.push_back(PendingRemoval{now_ms + config_.flow_linger_ms, b.route->backend_side,
                                             b.backend_flow, b.ports, b.lease, 0});
  b.ports = nullptr;
}

bool FlowLedger::RemoveDue(uint64_t now_ms, size_t budget) {
  bool removed = false;
  for (; budget > 0 && !removals_.empty() && removals_.front().due_ms <= now_ms; --budget) {
    const PendingRemoval r = removals_.front();
    removals_.pop_front();
    Remove(r);
    removed = true;
  }
  // Backend entries wait for company: one call removes a batch, where one each was a fifth of the
  // worker's map calls (docs/relay.md, "What the entries cost the worker").
  // The queue is in due order, so the due ones are a prefix: each call looks only past the part
  // of it an earlier call saw due (rescanning it every iteration while a batch filled was 17%
  // of the worker's samples under a connection-rate load).
  const size_t limit = std::min(backend_removals_.size(), kRemovalBatch);
  while (backend_due_ < limit && backend_removals_[backend_due_].due_ms <= now_ms) ++backend_due_;
  if (backend_due_ > 0 && (backend_due_ == kRemovalBatch ||
                           backend_removals_.front().due_ms + kBatchWaitMs <= now_ms)) {
    RemoveBackendEntries(backend_due_);
    removed = true;
  }
  return removed;
}

void FlowLedger::RemoveBackendEntries(size_t n) {
  backend_due_ -= std::min(backend_due_, n);
  batch_.clear();
  FlowTable* table = nullptr;
  for (size_t i = 0; i < n; ++i) {
    const PendingRemoval r = backend_removals_.front();
    backend_removals_.pop_front();
    // A backend port reused since: the entry now belongs to the new connection.
    if (!r.ports->IsIdleSince(r.lease)) continue;
    if (table != nullptr && r.table != table) {  // another interface's map: its own batch
      (void)table->RemoveFlows(batch_);
      batch_.clear();
    }
    table = r.table;
    batch_.push_back(r.tuple);
  }
  if (table != nullptr && !batch_.empty()) (void)table->RemoveFlows(batch_);
  batch_.clear();
}

void FlowLedger::Remove(const PendingRemoval& r) {
  // A client that reused its 4-tuple since this connection was accepted (or refused) has a
  // newer entry: its SYN stamped it. Whether it may have is lwIP's to say (a pcb on the tuple).
  const FlowReuse reuse = config_.client_tuple_in_use && !config_.client_tuple_in_use(r.tuple)
                              ? FlowReuse::kNone
                              : FlowReuse::kPossible;
  (void)r.table->RemoveFlowStampedBy(r.tuple, r.stamp_ns, reuse);
}

uint32_t FlowLedger::backend_ports_in_use() const {
  uint32_t n = 0;
  for (const auto& [key, ports] : ports_) n += ports->in_use();
  return n;
}

}  // namespace xdpfwd
