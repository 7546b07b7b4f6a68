// The relay's rules (see relay.h): the listeners a reload keeps, opens and closes, the rule
// versions connections keep, and each connection's backend among its rule's several, with the
// failover to another when a handshake fails.
#include <algorithm>
#include <span>
#include <string>

#include "forwarder/relay.h"
#include "forwarder/relay_internal.h"
#include "os/log.h"
#include "stack/lwip_pcb.h"

namespace xdpfwd {

// A listen address kept keeps its lwIP listener (no rebind, no SYN lost): it serves the rule's
// new version from its next client on, while its open connections keep the version they began
// with. Versions no listener serves go once their last connection has ended (RetireRules).
Result<void> Relay::SetRules(const std::vector<RelayRule>& rules,
                             const std::vector<AccessPattern>& global_access) {
  config_.global_access = global_access;
  auto same_address = [](const IpEndpoint& a, const IpEndpoint& b) { return a == b; };
  // Listen addresses no rule has any more: closed first, so that a rule may move between them.
  for (auto it = listeners_.begin(); it != listeners_.end();) {
    const bool kept = std::any_of(rules.begin(), rules.end(), [&](const RelayRule& r) {
      return same_address(r.listen, (*it)->rule->listen);
    });
    if (kept) {
      ++it;
      continue;
    }
    CloseListener(**it);
    it = listeners_.erase(it);
  }
  std::string failed;
  for (const RelayRule& rule : rules) {
    auto listener = std::find_if(listeners_.begin(), listeners_.end(), [&](const auto& l) {
      return same_address(l->rule->listen, rule.listen);
    });
    if (listener != listeners_.end() && (*listener)->rule->id == rule.id) continue;
    rules_.push_back(std::make_unique<RuleVersion>(rule, config_.health));
    rule_counters_.push_back({rule.id, std::make_unique<RelayCounters>()});
    if (listener != listeners_.end()) {
      (*listener)->version = rules_.back().get();
      (*listener)->rule = &rules_.back()->rule;
      (*listener)->rule_counters = rule_counters_.back().second.get();
    } else if (auto r = Listen(*rules_.back(), *rule_counters_.back().second); !r) {
      failed += (failed.empty() ? "" : "; ") + r.error().message();
    }
  }
  RetireRules();
  if (!failed.empty()) return Error{{}, failed};
  return {};
}

void Relay::CloseListener(Listener& l) {
  tcp_arg(l.pcb, nullptr);
  tcp_accept(l.pcb, nullptr);
  tcp_close(l.pcb);
  l.pcb = nullptr;
}

void Relay::RetireRules() {
  size_t kept = 0;
  for (size_t i = 0; i < rules_.size(); ++i) {
    const RuleVersion* version = rules_[i].get();
    const bool listened = std::any_of(listeners_.begin(), listeners_.end(),
                                      [&](const auto& l) { return l->version == version; });
    if (!listened && rule_counters_[i].second->active.load(std::memory_order_relaxed) == 0) {
      continue;  // freed below, with its counters
    }
    if (kept != i) {
      rules_[kept] = std::move(rules_[i]);
      rule_counters_[kept] = std::move(rule_counters_[i]);
    }
    ++kept;
  }
  rules_.resize(kept);
  rule_counters_.resize(kept);
  retiring_ = rules_.size() > listeners_.size();
}

IntrusiveList<Relay::Connection, Relay::Connecting>& Relay::ConnectingOf(const Connection& c) {
  return c.version->backend_count() > 1 ? trying_ : connecting_;
}

bool Relay::PickBackend(Connection& c) {
  RuleVersion& v = *c.version;
  // The source hash's client: the one a PROXY header named, if it did.
  uint8_t origin[16];
  const std::span<const uint8_t> client =
      c.origin != nullptr && c.origin->has_addresses
          ? std::span<const uint8_t>(
                origin,
                ClientAddressBytes(reinterpret_cast<const sockaddr*>(&c.origin->source), origin))
          : std::span<const uint8_t>(static_cast<const uint8_t*>(c.flows.client_flow.saddr.data()),
                                     c.flows.client_flow.saddr.size());
  const auto pick = v.backends.Pick(now_ms_, c.tried, client);
  if (!pick) return false;
  c.backend_index = *pick;
  c.flows.backend = v.backend(*pick);
  v.backends.Opened(*pick);
  c.handshake = v.backends.Began(*pick, now_ms_);
  return true;
}

// Nothing has gone to the failed backend (the client's bytes wait in the client leg's backlog
// until a handshake completes, the PROXY header is queued only then), so the client never
// learns: another backend takes the connection, as long as the rule has one left untried and the
// connect timeout since the accept has not run out. The failure counts toward that backend's
// passive health. Called from lwIP's err callback (the failed pcb is already freed there) or
// from the connect deadline (the pcb still lives: aborted here).
void Relay::Failover(Connection& c, std::atomic<uint64_t>& reason) {
  if (c.finished) return;
  RuleVersion& v = *c.version;
  if (v.backends.Failed(c.backend_index, now_ms_, c.handshake)) {
    RelayCounters::Add(counters_.backends_marked_down);
    RelayCounters::Add(c.rule_counters->backends_marked_down);
  }
  v.backends.Closed(c.backend_index);
  c.tried |= uint64_t{1} << c.backend_index;
  const auto connect_ms = static_cast<uint64_t>(config_.limits.connect_timeout.count());
  const size_t failed = c.backend_index;
  if (now_ms_ - c.started_ms >= connect_ms || !PickBackend(c)) {
    v.backends.Opened(failed);  // Finish closes it again
    return Reset(c, reason);
  }
  RelayCounters::Add(counters_.backend_failovers);
  RelayCounters::Add(c.rule_counters->backend_failovers);
  AbortLeg(c.backend);  // a silent backend's pcb: gone, with a reset toward it
  ledger_.CloseBackendLeg(c.flows, now_ms_);
  IntrusiveList<Connection, Connecting>& list = ConnectingOf(c);
  list.Remove(c);
  c.attempt_ms = now_ms_;
  list.PushBack(c);  // its deadline is the latest: the list stays in deadline order
  if (std::atomic<uint64_t>* error = StartBackend(c)) Reset(c, *error);
}

// The backend that died with the client's request (a reset, or a FIN with no answer) is given
// up as a handshake that failed would be, its session ended; another backend the connection has
// not tried gets a new leg, on which the kept bytes go first (Callbacks::Connected). The client's
// FIN, if it came, follows them there. The connect timeout counts from here.
bool Relay::Retry(Connection& c) {
  if (c.retry == nullptr || c.finished || c.backend.received != 0 || c.client.pcb == nullptr) {
    return false;
  }
  RuleVersion& v = *c.version;
  const size_t old = c.backend_index;
  c.tried |= uint64_t{1} << old;
  if (!PickBackend(c)) return false;  // nothing changed: the end reaches the client
  v.backends.Closed(old);
  v.backends.Ended(old, c.retry->bytes.size(), 0);
  RelayCounters::Add(counters_.backend_retries);
  RelayCounters::Add(c.rule_counters->backend_retries);
  // The FIN's pcb (a reset's is gone already) is aborted only once the new leg has its own:
  // freed first, its memory would go to the new leg while lwIP's input still names it, and lwIP
  // holds back output of the pcb it is delivering to (the SYN would wait for a timer that never
  // sends it; found by RelayRetryWireTest when it runs first in its process).
  tcp_pcb* dying = c.backend.pcb;
  c.backend.pcb = nullptr;
  c.backend.backlog.FreeAll();
  ledger_.CloseBackendLeg(c.flows, now_ms_);
  owed_.Remove(c.backend);
  Leg& b = c.backend;
  b.connected = b.fin_received = b.fin_sent = b.backpressured = false;
  b.last_data_small = b.quick_ack = false;
  b.nagle_run = 0;
  b.received = b.relayed = 0;
  c.retry->resend = true;
  IntrusiveList<Connection, Connecting>& list = ConnectingOf(c);
  list.Remove(c);
  c.started_ms = c.attempt_ms = now_ms_;
  list.PushBack(c);
  std::atomic<uint64_t>* error = StartBackend(c);
  if (dying != nullptr) AbortPcb(dying);
  if (error != nullptr) Reset(c, *error);
  return true;
}

void Relay::KeepForRetry(Connection& c, const pbuf* p, uint16_t n) {
  if (c.retry->bytes.size() + n > kRetryBytes) {
    c.retry.reset();  // a stream, not a request: not sent twice
    return;
  }
  c.retry->bytes.append(static_cast<const char*>(p->payload), n);
}

bool Relay::ResendForRetry(Connection& c) {
  c.retry->resend = false;
  const std::string& bytes = c.retry->bytes;
  for (size_t at = 0; at < bytes.size();) {
    const auto n = static_cast<u16_t>(std::min<size_t>(bytes.size() - at, 0xffff));
    if (tcp_write(c.backend.pcb, bytes.data() + at, n, TCP_WRITE_FLAG_COPY) != ERR_OK) return false;
    at += n;
  }
  return true;
}

}  // namespace xdpfwd
