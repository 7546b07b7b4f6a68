// The relay's clock and deadlines (see relay.h): Tick, and the lists whose fronts are the next
// connect, header, idle and stall deadlines; what no lwIP callback announces (ServeWatched).
#include <string>

#include "forwarder/relay_internal.h"
#include "os/log.h"

extern "C" {
#include "lwip/tcp.h"
}

namespace xdpfwd {

bool Relay::Tick(uint64_t now_ms, uint64_t now_ns) {
  now_ms_ = now_ms;
  now_ns_ = now_ns != 0 ? now_ns : now_ms * 1'000'000u;
  bool worked = false;
  if (!finished_.empty()) {
    for (Connection* c : finished_) delete c;
    finished_.clear();
    worked = true;
  }
  if (ExpireDeadlines()) worked = true;
  if (ServeMarks()) worked = true;
  // A few lingering flow entries per iteration, not all that fell due at once: 14,000
  // connections closing together (bench/run's idle test) left ~28,000 removals due in the same
  // 100 ms, a stall of tens of ms in which the AF_XDP RX ring overflowed (xsk_rx_dropped in the
  // hundreds of thousands) and some clients' retransmissions backed off past 5 s.
  if (ledger_.RemoveDue(now_ms, kRemovalsPerTick)) worked = true;
  if (now_ms >= next_service_ms_) {
    next_service_ms_ = now_ms + kServiceIntervalMs;
    ServeWatched();
    if (retiring_) RetireRules();  // after finished_: no connection of theirs is left
    worked = true;
  }
  return worked;
}

bool Relay::ServeMarks() {
  bool marked = false;
  while (!unmarked_.empty() && now_ms_ >= unmarked_.front()->mark_ms) {
    Connection& c = *unmarked_.front();
    unmarked_.Remove(c);
    // A client leg that has ended may mean a client free to reuse its 4-tuple: no mark then
    // (FlowLedger::MarkAccepted); the connection's end is near, and its removal needs none.
    if (c.client.pcb != nullptr) ledger_.MarkAccepted(c.flows);
    marked = true;
  }
  return marked;
}

// Activity moves a connection to the back of live_, which so stays ordered by last activity:
// its front is the next idle deadline.
void Relay::Touch(Connection& c) {
  if (c.last_active_ms == now_ms_) return;  // already at or tied with the back
  c.last_active_ms = now_ms_;
  if (config_.limits.idle_timeout.count() != 0) {
    // The listing's place moves on first: the connection goes to the back, where the listing
    // meets it again (and skips it if it was listed).
    if (listing_next_ == &c) listing_next_ = live_.Next(c);
    live_.MoveToBack(c);
  }
}

// Bytes wait for a leg's peer while the relay's send queue toward it holds any (unsent, or
// unacknowledged, our FIN included) or the other leg's backlog waits for room in it. Such a leg is
// on owed_ from the moment they start waiting until none do; only the peer's acknowledgements
// (Progress) move it to the back. Called wherever either may have changed: after a Pump toward
// the leg, after an ACK from its peer.
void Relay::UpdateOwed(Leg& leg) {
  if (config_.limits.stall_timeout.count() == 0) return;
  const Leg& from = leg.conn->other(leg);
  const bool owed = leg.pcb != nullptr && leg.connected &&
                    (!from.backlog.empty() || !lwip_pcb::AllAcknowledged(leg.pcb));
  if (!owed) {
    owed_.Remove(leg);
  } else if (!owed_.Contains(leg)) {
    leg.progress_ms = now_ms_;
    owed_.PushBack(leg);
  }
}

// The peer acknowledged bytes: its stall deadline starts over.
void Relay::Progress(Leg& leg) {
  if (!owed_.Contains(leg) || leg.progress_ms == now_ms_) return;
  leg.progress_ms = now_ms_;
  owed_.MoveToBack(leg);
}

// The timeouts are constants, so each list's front is its earliest deadline: the work is in
// proportion to what expired.
bool Relay::ExpireDeadlines() {
  bool expired = false;
  while (!awaiting_.empty() && now_ms_ >= awaiting_.front()->origin->deadline_ms) {
    RefuseProxyHeader(*awaiting_.front(), counters_.proxy_timeout,
                      "no whole header within its accept-proxy-timeout");  // unlinks it
    expired = true;
  }
  const auto connect_ms = static_cast<uint64_t>(config_.limits.connect_timeout.count());
  while (!connecting_.empty() && now_ms_ - connecting_.front()->started_ms >= connect_ms) {
    ReportConnectTimeout(*connecting_.front());
    connecting_.front()->version->backends.Failed(connecting_.front()->backend_index, now_ms_,
                                                  connecting_.front()->handshake);
    Reset(*connecting_.front(), counters_.backend_timeout);  // unlinks it
    expired = true;
  }
  while (!trying_.empty() && now_ms_ - trying_.front()->attempt_ms >= connect_ms / kFailoverShare) {
    ReportConnectTimeout(*trying_.front());
    Failover(*trying_.front(), counters_.backend_timeout);  // to the back, or unlinked
    expired = true;
  }
  const auto idle_ms = static_cast<uint64_t>(config_.limits.idle_timeout.count());
  while (idle_ms > 0 && !live_.empty() && now_ms_ - live_.front()->last_active_ms >= idle_ms) {
    Reset(*live_.front(), counters_.idle_timeout);
    expired = true;
  }
  const auto stall_ms = static_cast<uint64_t>(config_.limits.stall_timeout.count());
  while (!owed_.empty() && now_ms_ - owed_.front()->progress_ms >= stall_ms) {
    Reset(*owed_.front()->conn, counters_.stall_timeout);  // unlinks both legs
    expired = true;
  }
  return expired;
}

// A backend that does not answer is the first thing a user needs to hear about, with what lwIP
// tried (a SYN never answered, or a handshake lwIP thinks is still going); one line a second at
// most, so a dead backend under load costs no syscall per connection.
void Relay::ReportConnectTimeout(const Connection& c) {
  uint64_t held_back = 0;
  if (!connect_timeout_log_.Count(now_ms_, held_back)) return;
  std::string line = "relay: backend " + ToString(c.flows.backend) + " did not complete the " +
                     "handshake of a connection from " + ToString(c.flows.client_flow.saddr) + ":" +
                     std::to_string(c.flows.client_flow.sport) + " within " +
                     std::to_string(config_.limits.connect_timeout.count() /
                                    (&ConnectingOf(c) == &trying_ ? kFailoverShare : 1)) +
                     " ms";
  if (const tcp_pcb* pcb = c.backend.pcb) {
    line += std::string(" (lwIP ") + tcp_debug_state_str(pcb->state) + ", SYN sent " +
            std::to_string(pcb->nrtx + 1) + " times, from port " + std::to_string(pcb->local_port) +
            ")";
  }
  if (held_back > 0) line += "; " + std::to_string(held_back) + " more since the last such line";
  Log(line);
}

void Relay::Watch(Connection& c) {
  if (!c.finished && !watched_.Contains(c)) watched_.PushBack(c);
}

// What no lwIP callback will announce. Data that could not be queued while the other leg had
// nothing in flight (lwIP's heap or segment pool was exhausted, so no ACK is coming to retry
// it); and a leg whose last ACK, of a bare FIN, took it from CLOSING to TIME_WAIT silently.
// Each connection served leaves the list, and comes back (at the back) if still stuck.
void Relay::ServeWatched() {
  for (size_t n = watched_.size(); n > 0 && !watched_.empty(); --n) {
    Connection& c = *watched_.front();
    watched_.Remove(c);
    if (!c.client.backlog.empty()) Pump(c, c.client, c.backend);
    if (!c.finished && !c.backend.backlog.empty()) Pump(c, c.backend, c.client);
    if (!c.finished) CloseFinishedLegs(c);
  }
}

}  // namespace xdpfwd
