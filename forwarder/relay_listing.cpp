// What the relay shows of itself (see relay.h): `show sess` listings, `shutdown session`, and
// its state for the counters.
#include "forwarder/relay_internal.h"

extern "C" {
#include "lwip/tcp.h"
}

namespace xdpfwd {

void Relay::StartListing() {
  ++listing_;
  listing_next_ = live_.front();
}

bool Relay::ListConnections(RelayConnectionInfo* out, size_t max, size_t& written) {
  written = 0;
  // At most 2 * max looked at: listed ones that moved to the back are skipped, not copied.
  for (size_t looked = 0; listing_next_ != nullptr && written < max && looked < 2 * max; ++looked) {
    Connection& c = *listing_next_;
    listing_next_ = live_.Next(c);
    if (c.listed == listing_) continue;
    c.listed = listing_;
    RelayConnectionInfo& i = out[written++];
    i = RelayConnectionInfo{};
    i.id = c.trace_id;
    i.rule = c.rule->id;
    i.client_flow = c.flows.client_flow;
    i.backend_flow = c.flows.backend_flow;
    i.started_ms = c.started_ms;
    i.bytes_to_backend = c.client.relayed;
    i.bytes_to_client = c.backend.relayed;
    if (c.client.pcb != nullptr) i.client = lwip_pcb::InfoOf(c.client.pcb);
    i.backend_started = c.backend.pcb != nullptr || c.backend.connected;
    if (c.backend.pcb != nullptr) i.backend = lwip_pcb::InfoOf(c.backend.pcb);
  }
  return listing_next_ == nullptr;
}

bool Relay::Shutdown(uint32_t id) {
  for (Connection* c = live_.front(); c != nullptr; c = live_.Next(*c)) {
    if (c->trace_id != id) continue;
    Reset(*c, counters_.admin_shutdown);
    return true;
  }
  return false;
}

RelayState Relay::state() const {
  RelayState s;
  s.connections = live_.size();
  s.closing_flows = ledger_.lingering();
  s.backend_ports_in_use = ledger_.backend_ports_in_use();
  s.oow_acks = tcp_oow_acks_sent;
  s.oow_acks_limited = tcp_oow_acks_limited;
  s.ooseq_dropped = tcp_ooseq_dropped;
  s.bytes_referenced = bytes_referenced_;
  s.send_refs = refs_ != nullptr ? refs_->in_use() : 0;
  return s;
}

}  // namespace xdpfwd
