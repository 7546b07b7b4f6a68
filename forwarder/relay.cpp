// The relay state machine on lwIP's raw API (see relay.h). Every lwIP callback lands in
// Relay::Callbacks, a noexcept trampoline into the connection it belongs to.
#include "forwarder/relay.h"
#include "forwarder/relay_internal.h"

#include <time.h>

#include <algorithm>
#include <string>

#include "forwarder/access.h"
#include "os/clock.h"
#include "os/log.h"
#include "stack/lwip_pcb.h"

extern "C" {
#include "lwip/pbuf.h"
#include "lwip/tcp.h"
#include "xdpfwd_lwip_hooks.h"
}

namespace xdpfwd {
namespace {

// UMEM frames (custom pbufs), and the pbuf pool that lwIP's out-of-order queues copy into
// (patch 0022): both are shared by every connection.
bool HoldsSharedPool(const pbuf* p) {
  for (; p != nullptr; p = p->next) {
    if (p->flags & PBUF_FLAG_IS_CUSTOM) return true;
    if (pbuf_match_allocsrc(p, PBUF_POOL)) return true;
  }
  return false;
}

// Data that cannot go out at once is copied out of its UMEM frames (or pool pbufs) into lwIP's
// heap, so a slow reader holds heap (bounded by its window) and never the frames every
// connection receives into. If the heap is exhausted the frames are kept: slower for everyone,
// but nothing is lost.
pbuf* Compact(pbuf* p) {
  if (!HoldsSharedPool(p)) return p;
  pbuf* copy = pbuf_clone(PBUF_RAW, PBUF_RAM, p);
  if (copy == nullptr) return p;
  pbuf_free(p);
  return copy;
}

// The ledger's question at a client entry's removal: has a newer connection on the tuple reached
// lwIP (FlowReuse)? The client flow's tuple is as its packets arrive: the client is the remote.
bool ClientTupleInUse(const FlowTuple& f) {
  return lwip_pcb::TupleInUse(f.daddr, f.dport, f.saddr, f.sport);
}

}  // namespace

namespace {

// Marks which pcb's callback is running, so the relay can tell lwIP it aborted that pcb.
class CallbackScope {
 public:
  CallbackScope(tcp_pcb*& slot, bool& aborted, tcp_pcb* pcb)
      : slot_(slot), aborted_(aborted), saved_slot_(slot), saved_aborted_(aborted) {
    slot_ = pcb;
    aborted_ = false;
  }
  ~CallbackScope() {
    slot_ = saved_slot_;
    aborted_ = saved_aborted_;
  }
  err_t result() const { return aborted_ ? ERR_ABRT : ERR_OK; }

 private:
  tcp_pcb*& slot_;
  bool& aborted_;
  tcp_pcb* saved_slot_;
  bool saved_aborted_;
};

void DetachCallbacks(tcp_pcb* pcb) {
  tcp_arg(pcb, nullptr);
  tcp_recv(pcb, nullptr);
  tcp_sent(pcb, nullptr);
  tcp_err(pcb, nullptr);
}

}  // namespace

struct Relay::Callbacks {
  static err_t Accept(void* arg, tcp_pcb* pcb, err_t err) noexcept {
    auto* listener = static_cast<Listener*>(arg);
    if (listener == nullptr || err != ERR_OK || pcb == nullptr) return ERR_VAL;
    return static_cast<err_t>(listener->relay->Accept(*listener, pcb));
  }

  static err_t Connected(void* arg, tcp_pcb* pcb, err_t) noexcept {
    auto* leg = static_cast<Leg*>(arg);
    if (leg == nullptr) return ERR_OK;
    Connection& c = *leg->conn;
    Relay& r = *c.relay;
    CallbackScope scope(r.in_callback_, r.in_callback_aborted_, pcb);
    leg->connected = true;
    c.version->backends.Connected(c.backend_index, c.handshake);  // Finish ends its session
    if (c.rule->proxy != ProxyVersion::kNone && !r.SendProxyHeader(c)) {
      r.Reset(c, r.counters_.backend_error);
      return scope.result();
    }
    if (c.retry != nullptr && c.retry->resend && !r.ResendForRetry(c)) {
      r.Reset(c, r.counters_.backend_error);
      return scope.result();
    }
    r.counters_.connect.Observe(r.now_ns_ - c.accepted_ns);
    c.rule_counters->connect.Observe(r.now_ns_ - c.accepted_ns);
    r.Trace(c, RecorderEvent::kBackendEstablished, *leg);
    r.ConnectingOf(c).Remove(c);
    r.Touch(c);
    r.Pump(c, c.client, c.backend);
    return scope.result();
  }

  static err_t Recv(void* arg, tcp_pcb* pcb, pbuf* p, err_t) noexcept {
    auto* leg = static_cast<Leg*>(arg);
    if (leg == nullptr) {  // cannot happen (callbacks are detached with the arg); be safe
      if (p != nullptr) {
        tcp_recved(pcb, p->tot_len);
        pbuf_free(p);
      }
      return ERR_OK;
    }
    Connection& c = *leg->conn;
    Relay& r = *c.relay;
    CallbackScope scope(r.in_callback_, r.in_callback_aborted_, pcb);
    if (c.awaiting_header()) {  // only the client leg exists yet
      r.ReceiveProxyHeader(c, p);
      return scope.result();
    }
    Leg& to = c.other(*leg);
    if (!leg->is_client && c.retry != nullptr) {
      // The backend answers: nothing will be sent twice. Or it ends with no answer: retried.
      if (p != nullptr) {
        c.retry.reset();
      } else if (r.Retry(c)) {
        return scope.result();
      }
    }
    if (p == nullptr) {
      leg->fin_received = true;
      r.Trace(c, leg->is_client ? RecorderEvent::kClientFin : RecorderEvent::kBackendFin, *leg);
      if (!c.end_known) {
        c.end_known = true;
        c.end =
            leg->is_client ? SessionResult::kRemoteClosedFirst : SessionResult::kLocalClosedFirst;
      }
      r.Pump(c, *leg, to);
      return scope.result();
    }
    r.Touch(c);
    r.CheckNagle(c, *leg, p->tot_len);
    if (leg->received == 0) {
      if (!leg->is_client) {
        r.counters_.first_byte.Observe(r.now_ns_ - c.accepted_ns);
        c.rule_counters->first_byte.Observe(r.now_ns_ - c.accepted_ns);
      }
      r.Trace(
          c,
          leg->is_client ? RecorderEvent::kFirstByteToBackend : RecorderEvent::kFirstByteToClient,
          *leg, p->tot_len);
    }
    leg->received += p->tot_len;
    // The pbuf is always taken (DESIGN.md: lwIP parks refused data until its next timer); the
    // window this leg advertises opens only as the other leg accepts the bytes.
    const bool blocked = !leg->backlog.empty();
    leg->backlog.push(blocked ? Compact(p) : p);
    r.Pump(c, *leg, to);
    if (!c.finished && !leg->backlog.empty() && !blocked) {
      pbuf*& rest = leg->backlog.front();
      rest = Compact(rest);
    }
    return scope.result();
  }

  static err_t Sent(void* arg, tcp_pcb* pcb, u16_t) noexcept {
    auto* leg = static_cast<Leg*>(arg);
    if (leg == nullptr) return ERR_OK;
    Connection& c = *leg->conn;
    Relay& r = *c.relay;
    CallbackScope scope(r.in_callback_, r.in_callback_aborted_, pcb);
    r.Touch(c);
    r.Progress(*leg);
    Leg& from = c.other(*leg);
    if (!from.backlog.empty() || (from.fin_received && !leg->fin_sent)) {
      r.Pump(c, from, *leg);
    } else {
      r.CloseFinishedLegs(c);  // the ACK may have been the last one this leg waited for
    }
    if (!c.finished) r.UpdateOwed(*leg);
    return scope.result();
  }

  // lwIP's TCP trouble on a leg (LWIP_HOOK_TCP_TRACE, lwIP patch 0036) onto the recorder. Only
  // a pcb whose callbacks are ours carries a Leg: other code may share the stack (the tests').
  static void TcpTrace(tcp_pcb* pcb, u8_t what, u32_t arg0, u32_t arg1) noexcept {
    if (pcb->recv != Recv || pcb->callback_arg == nullptr) return;
    auto* leg = static_cast<Leg*>(pcb->callback_arg);
    Connection& c = *leg->conn;
    RecorderEvent kind;
    switch (what) {
      case LWIP_TCP_TRACE_DELAYED_ACK:
        leg->held_ack_ns = c.relay->now_ns_;  // not recorded: CheckNagle reads it
        return;
      case LWIP_TCP_TRACE_RETRANSMIT:
        kind = RecorderEvent::kRetransmit;
        break;
      case LWIP_TCP_TRACE_RTO:
        kind = RecorderEvent::kRto;
        break;
      case LWIP_TCP_TRACE_FAST_RECOVERY:
        kind = RecorderEvent::kFastRecovery;
        break;
      case LWIP_TCP_TRACE_ZERO_WINDOW_IN:
        kind = RecorderEvent::kZeroWindowIn;
        break;
      case LWIP_TCP_TRACE_ZERO_WINDOW_OUT:
        kind = RecorderEvent::kZeroWindowOut;
        break;
      default:
        return;
    }
    c.relay->Trace(c, kind, *leg, arg0, arg1);
  }

  // The pcb is already freed by lwIP: a reset from the peer (ERR_RST), lwIP giving up on
  // retransmissions or the handshake (ERR_ABRT), or a close completed behind our back (ERR_CLSD).
  static void Err(void* arg, err_t err) noexcept {
    auto* leg = static_cast<Leg*>(arg);
    if (leg == nullptr) return;
    Connection& c = *leg->conn;
    Relay& r = *c.relay;
    leg->pcb = nullptr;
    RelayCounters& n = r.counters_;
    if (err == ERR_CLSD) {
      // Both FINs were through and acknowledged, but what this leg received may still wait
      // for the other leg's window: it is ours to deliver, and the other leg's FIN follows it.
      leg->fin_received = leg->fin_sent = true;
      r.owed_.Remove(*leg);  // its peer has everything
      r.Pump(c, *leg, c.other(*leg));
      return;
    }
    if (err == ERR_RST) {
      r.Trace(c, leg->is_client ? RecorderEvent::kClientRst : RecorderEvent::kBackendRst, *leg);
    }
    leg->backlog.FreeAll();
    if (!leg->is_client && !leg->connected) {
      r.Failover(c, err == ERR_RST ? n.backend_refused : n.backend_timeout);
    } else if (!leg->is_client && r.Retry(c)) {
      // another backend has the client's bytes
    } else {
      r.Reset(c, leg->is_client ? n.client_reset : n.backend_reset);
    }
  }
};

Relay::Relay(const RelayConfig& config)
    : config_(config),
      ledger_(FlowLedgerConfig{config.backend_ports, config.worker, config.worker_ports,
                               config.flow_linger_ms, nullptr, ClientTupleInUse}) {
  if (config.zero_copy_refs > 0) refs_ = std::make_unique<WriteRefPool>(config.zero_copy_refs);
  // Any relay's: the function finds its relay from the pcb.
  xdpfwd_lwip_set_tcp_trace(Callbacks::TcpTrace);
}

Result<std::unique_ptr<Relay>> Relay::Create(const RelayConfig& config) {
  std::unique_ptr<Relay> relay(new Relay(config));
  relay->now_ns_ = MonotonicNs();
  relay->now_ms_ = relay->now_ns_ / 1'000'000u;
  relay->config_.rules.clear();  // rules_ holds them from here on
  if (auto r = relay->SetRules(config.rules, config.global_access); !r) return r.error();
  return relay;
}

Result<void> Relay::Listen(RuleVersion& version, RelayCounters& counters) {
  const RelayRule& rule = version.rule;
  tcp_pcb* pcb = tcp_new_ip_type(rule.listen.addr.is_v6() ? IPADDR_TYPE_V6 : IPADDR_TYPE_V4);
  if (pcb == nullptr) return Error{{}, "lwIP: no pcb for a listener (MEMP_NUM_TCP_PCB)"};
  // Not tcp_bind: it refuses a port that connections still use (lwIP has no SO_REUSEADDR in
  // our build), and a reload that gives back a listen address it removed finds that address's
  // connections still open, or in TIME_WAIT. Listen addresses are unique among the relay's
  // listeners (SetRules closes what goes first), and segments of open connections find their
  // own pcbs before any listener, as a Linux listener with SO_REUSEADDR.
  lwip_pcb::SetLocalEndpoint(pcb, rule.listen.addr, rule.listen.port);
  err_t e = ERR_OK;
  tcp_pcb* listening = tcp_listen_with_backlog_and_err(pcb, TCP_DEFAULT_LISTEN_BACKLOG, &e);
  if (listening == nullptr) {
    tcp_close(pcb);
    return Error{{},
                 "lwIP: listen " + ToString(rule.listen) + ": " + lwip_strerr(e) +
                     " (at most MEMP_NUM_TCP_PCB_LISTEN listen addresses a worker)"};
  }
  auto listener = std::make_unique<Listener>();
  listener->relay = this;
  listener->version = &version;
  listener->rule = &rule;
  listener->rule_counters = &counters;
  listener->pcb = listening;
  tcp_arg(listening, listener.get());
  tcp_accept(listening, Callbacks::Accept);
  listeners_.push_back(std::move(listener));
  return {};
}

int Relay::Accept(Listener& listener, tcp_pcb* pcb) {
  CallbackScope scope(in_callback_, in_callback_aborted_, pcb);
  const lwip_pcb::Endpoints ends = lwip_pcb::EndpointsOf(pcb);
  const FlowTuple client_flow{ends.remote, ends.local, ends.remote_port, ends.local_port};
  if (live_.size() >= config_.limits.max_connections) {
    RelayCounters::Add(counters_.over_limit);
    RelayCounters::Add(listener.rule_counters->over_limit);
    tcp_abort(pcb);  // RST: the client learns at once
    ledger_.Refuse(*listener.rule, client_flow, now_ms_);
    return ERR_ABRT;
  }
  if (listener.version->backends.Ready() == 0) {  // every backend in drain or maint
    RelayCounters::Add(counters_.no_backend);
    RelayCounters::Add(listener.rule_counters->no_backend);
    tcp_abort(pcb);
    ledger_.Refuse(*listener.rule, client_flow, now_ms_);
    return ERR_ABRT;
  }
  const bool accept_proxy = listener.rule->accept_proxy.enabled;
  if (accept_proxy && !ProxyTrusted(*listener.rule, ends.remote)) {
    LogProxyRefusal(*listener.rule, ends.remote,
                    "the sender is not of the rule's proxy-from lines");
    RelayCounters::Add(counters_.proxy_untrusted);
    RelayCounters::Add(listener.rule_counters->proxy_untrusted);
    RecordSession(*listener.rule, client_flow, SessionResult::kProxyRefused, 0, 0);
    ledger_.Refuse(*listener.rule, client_flow, now_ms_);
    tcp_abort(pcb);
    return ERR_ABRT;
  }
  // With [accept-proxy] the allow/deny lines judge the client the header names (relay_proxy.cpp).
  if (!accept_proxy && HasAccessPatterns(config_.global_access, listener.rule->access)) {
    const AccessVerdict verdict =
        CheckAccess(config_.global_access, listener.rule->access, ToString(ends.remote));
    if (verdict != AccessVerdict::kAllowed) {
      RelayCounters::Add(verdict == AccessVerdict::kDenied ? counters_.denied
                                                           : counters_.not_allowed);
      RelayCounters::Add(verdict == AccessVerdict::kDenied ? listener.rule_counters->denied
                                                           : listener.rule_counters->not_allowed);
      RecordSession(
          *listener.rule, client_flow,
          verdict == AccessVerdict::kDenied ? SessionResult::kDenied : SessionResult::kNotAllowed,
          0, 0);
      ledger_.Refuse(*listener.rule, client_flow, now_ms_);
      // Closed, as rinetd closes a refused client: a FIN, no byte read or relayed. The flow
      // entry lingers long enough for the close handshake; lwIP ends the pcb's life itself.
      if (tcp_close(pcb) == ERR_OK) return ERR_OK;
      tcp_abort(pcb);
      return ERR_ABRT;
    }
  }
  auto* c = new Connection();
  c->relay = this;
  c->rule = listener.rule;
  c->version = listener.version;
  c->started_ms = c->last_active_ms = c->attempt_ms = now_ms_;
  c->accepted_ns = now_ns_;
  c->rule_counters = listener.rule_counters;
  c->client.conn = c->backend.conn = c;
  c->client.is_client = true;
  c->client.connected = true;
  c->client.pcb = pcb;
  if (accept_proxy) {
    c->origin = std::make_unique<ProxyOrigin>();
    // One more ms: the iteration's clock is up to a ms behind, and a timeout is never early.
    c->origin->deadline_ms = now_ms_ + listener.rule->accept_proxy.timeout_ms + 1;
  }
  live_.PushBack(*c);
  if (accept_proxy) {
    awaiting_.InsertOrdered(*c, [](const Connection& a, const Connection& b) {
      return a.origin->deadline_ms < b.origin->deadline_ms;
    });
  } else {
    ConnectingOf(*c).PushBack(*c);
  }
  // Active from here; accepted once the PROXY header (if the rule takes one) let it in.
  if (!accept_proxy) {
    RelayCounters::Add(counters_.accepted);
    RelayCounters::Add(c->rule_counters->accepted);
  }
  RelayCounters::Add(counters_.active);
  RelayCounters::Add(c->rule_counters->active);

  c->flows = ledger_.Accept(*listener.rule, client_flow);
  c->mark_ms = now_ms_ + kMarkAfterMs;
  unmarked_.PushBack(*c);
  c->trace_id = ++next_trace_id_ != 0 ? next_trace_id_ : ++next_trace_id_;
  Trace(*c, RecorderEvent::kClientEstablished, c->client, c->rule->id, ends.remote_port);
  tcp_arg(pcb, &c->client);
  tcp_recv(pcb, Callbacks::Recv);
  tcp_sent(pcb, Callbacks::Sent);
  tcp_err(pcb, Callbacks::Err);
  tcp_nagle_disable(pcb);
  if (!accept_proxy) OpenBackend(*c);  // else once its header is read
  return scope.result();
}

// A client refused once its connection was taken (by the allow/deny lines, judged on what its
// PROXY header said): closed with a FIN, as a refused client is, nothing relayed; c.end says why.
void Relay::CloseRefused(Connection& c) {
  c.client.backlog.FreeAll();
  if (tcp_pcb* pcb = c.client.pcb) {
    c.client.pcb = nullptr;
    DetachCallbacks(pcb);
    if (lwip_pcb::Release(pcb) && pcb == in_callback_) in_callback_aborted_ = true;
  }
  c.end_known = true;
  Finish(c);
}

// The backend leg of a client connection taken: the access log's "opened", a backend picked,
// its handshake started.
void Relay::OpenBackend(Connection& c) {
  if (c.rule->retry_empty_response) c.retry = std::make_unique<RetryCopy>();
  PickBackend(c);  // never fails here: nothing is tried yet, and down marks are only a guess
  RecordSession(*c.rule, c.flows.client_flow, SessionResult::kOpened, 0, 0, c.origin.get());
  if (std::atomic<uint64_t>* failed = StartBackend(c)) Reset(c, *failed);
}

// The PROXY header names the client and the address it connected to (the client leg's ends),
// queued before any of the client's bytes: they wait in the client leg's backlog until now.
bool Relay::SendProxyHeader(Connection& c) {
  if (c.origin != nullptr && c.origin->has_addresses) {  // the client behind the proxy in front
    const ProxyHeader h =
        MakeProxyHeader(c.rule->proxy, reinterpret_cast<const sockaddr*>(&c.origin->source),
                        reinterpret_cast<const sockaddr*>(&c.origin->destination));
    return tcp_write(c.backend.pcb, h.bytes, static_cast<u16_t>(h.size), TCP_WRITE_FLAG_COPY) ==
           ERR_OK;
  }
  // The client leg's own ends, of the client's family whatever the backend's: MakeProxyHeader
  // names them TCP4 or TCP6 (docs/configuration.md).
  const lwip_pcb::Endpoints ends = lwip_pcb::EndpointsOf(c.client.pcb);
  const sockaddr_storage client = ToSockaddr(IpEndpoint{ends.remote, ends.remote_port});
  const sockaddr_storage listen = ToSockaddr(IpEndpoint{ends.local, ends.local_port});
  const ProxyHeader h = MakeProxyHeader(c.rule->proxy, reinterpret_cast<const sockaddr*>(&client),
                                        reinterpret_cast<const sockaddr*>(&listen));
  return tcp_write(c.backend.pcb, h.bytes, static_cast<u16_t>(h.size), TCP_WRITE_FLAG_COPY) ==
         ERR_OK;
}

// nullptr when the backend leg is on its way, else the counter saying why it is not.
std::atomic<uint64_t>* Relay::StartBackend(Connection& c) {
  if (!ledger_.LeaseBackendPort(c.flows)) return &counters_.backend_no_port;
  // The backend's family, which may not be the client's (a 4-to-6 or 6-to-4 rule).
  tcp_pcb* pcb = tcp_new_ip_type(c.flows.backend.addr.is_v6() ? IPADDR_TYPE_V6 : IPADDR_TYPE_V4);
  if (pcb == nullptr) {
    ledger_.ReleaseBackendPort(c.flows);
    return &counters_.backend_error;
  }
  // The local port comes from the ledger, so lwIP's bind (which walks every pcb to check for a
  // conflict) is skipped: the 4-tuple is unique by construction.
  lwip_pcb::SetLocalEndpoint(pcb, c.flows.backend_flow.daddr, c.flows.backend_flow.dport);
  // The flow entry must exist before the SYN leaves, or the SYN-ACK reaches the kernel, which
  // knows no such connection and resets it.
  if (!ledger_.AddBackendFlow(c.flows)) {
    tcp_close(pcb);
    return &counters_.backend_error;
  }
  c.backend.pcb = pcb;
  tcp_arg(pcb, &c.backend);
  tcp_recv(pcb, Callbacks::Recv);
  tcp_sent(pcb, Callbacks::Sent);
  tcp_err(pcb, Callbacks::Err);
  tcp_nagle_disable(pcb);
  const ip_addr_t backend = LwipAddress(c.flows.backend.addr);
  if (tcp_connect(pcb, &backend, c.flows.backend.port, Callbacks::Connected) != ERR_OK) {
    DetachCallbacks(pcb);
    tcp_close(pcb);  // still CLOSED: this frees it
    c.backend.pcb = nullptr;
    return &counters_.backend_error;  // Finish gives the port and the flow back to the ledger
  }
  Trace(c, RecorderEvent::kBackendSynSent, c.backend, c.flows.backend_flow.dport);
  return nullptr;
}

void Relay::Pump(Connection& c, Leg& from, Leg& to) {
  if (to.pcb == nullptr || !to.connected || to.fin_sent) {
    CloseFinishedLegs(c);
    return;
  }
  uint32_t written = 0;
  while (!from.backlog.empty()) {
    pbuf*& head = from.backlog.front();
    while (head != nullptr) {
      if (head->len == 0) {  // an empty pbuf inside a chain: drop it, keep the rest
        pbuf* next = head->next;
        head->next = nullptr;  // the chain's reference on `next` passes to us
        pbuf_free(head);
        head = next;
        continue;
      }
      const uint32_t space = tcp_sndbuf(to.pcb);
      if (space == 0) break;
      const u16_t n = static_cast<u16_t>(std::min<uint32_t>(head->len, space));
      if (!Write(to.pcb, head, n)) break;
      if (c.retry != nullptr && !to.is_client) KeepForRetry(c, head, n);
      written += n;
      head = pbuf_free_header(head, n);
    }
    if (head != nullptr) break;
    from.backlog.pop();
  }
  if (written > 0) {
    from.relayed += written;
    tcp_output(to.pcb);
    RelayCounters::Add(to.is_client ? counters_.bytes_to_client : counters_.bytes_to_backend,
                       written);
    RelayCounters::Add(
        to.is_client ? c.rule_counters->bytes_to_client : c.rule_counters->bytes_to_backend,
        written);
    Touch(c);
    if (from.pcb != nullptr) {
      for (uint32_t left = written; left > 0;) {
        const u16_t chunk = static_cast<u16_t>(std::min<uint32_t>(left, 0xffff));
        tcp_recved(from.pcb, chunk);
        left -= chunk;
      }
    }
  }
  if (from.backlog.empty() == from.backpressured) {
    from.backpressured = !from.backpressured;
    Trace(c, from.backpressured ? RecorderEvent::kBackpressureOn : RecorderEvent::kBackpressureOff,
          from,
          static_cast<uint32_t>(std::min<uint64_t>(from.received - from.relayed, UINT32_MAX)));
  }
  // Stuck with nothing in flight toward the other leg: no ACK will come to call Pump again.
  if (!from.backlog.empty() && lwip_pcb::AllAcknowledged(to.pcb)) Watch(c);
  if (from.backlog.empty() && from.fin_received && !to.fin_sent) {
    tcp_shutdown(to.pcb, 0, 1);  // half-close: the other direction keeps flowing
    to.fin_sent = true;
  }
  UpdateOwed(to);
  CloseFinishedLegs(c);
}

bool Relay::Write(tcp_pcb* to, pbuf* p, uint16_t n) {
  // A receive frame (custom pbuf) whose bytes fit the window the peer offers is pinned only
  // until the peer acknowledges them, a round trip or so; bytes that would wait for the peer
  // to open its window are copied, so a slow reader never pins frames (docs/relay.md,
  // "Zero-copy relay").
  if (refs_ != nullptr && (p->flags & PBUF_FLAG_IS_CUSTOM) != 0 &&
      refs_->in_use() < refs_->capacity() && lwip_pcb::FitsPeerWindow(to, n) &&
      refs_->Write(to, p, p->payload, n) == ERR_OK) {
    bytes_referenced_ += n;
    return true;
  }
  return tcp_write(to, p->payload, n, TCP_WRITE_FLAG_COPY) == ERR_OK;
}

void Relay::CloseFinishedLegs(Connection& c) {
  if (!c.finished) MaybeCloseLeg(c, c.client);
  if (!c.finished) MaybeCloseLeg(c, c.backend);
}

// A leg is closed once both FINs have passed and the peer has acknowledged everything it was
// sent, our FIN included. Closing earlier hands lwIP a pcb with data still in flight and
// TF_RXCLOSED set: lwIP then stops refreshing the pcb's activity timer, drops it 2 * TCP_MSL
// (4 s) after the close even while ACKs keep arriving, and the peer's next segment meets a
// reset. Under loss that truncated a stream (seen in CI). Until then the leg keeps its
// callbacks; if lwIP ends the pcb itself (the last ACK in LAST_ACK), the err callback says
// ERR_CLSD.
void Relay::MaybeCloseLeg(Connection& c, Leg& leg) {
  const bool acknowledged = leg.pcb != nullptr && lwip_pcb::AllAcknowledged(leg.pcb);
  if (acknowledged && leg.fin_received && leg.fin_sent && leg.backlog.empty()) {
    tcp_pcb* pcb = leg.pcb;
    DetachCallbacks(pcb);
    leg.pcb = nullptr;
    owed_.Remove(leg);
    // A leg in TIME_WAIT leaves lwIP at its next slow-timer tick rather than after 2 * MSL
    // (lwip_pcb.h says what that gives up): at a sustained rate TIME_WAIT pcbs would fill the pool.
    if (lwip_pcb::Release(pcb) && pcb == in_callback_) in_callback_aborted_ = true;
  } else if (leg.pcb != nullptr && leg.fin_received && leg.fin_sent && leg.backlog.empty()) {
    Watch(c);  // the ACK of our FIN may come with no callback (CLOSING -> TIME_WAIT)
  }
  if (c.client.pcb == nullptr && c.backend.pcb == nullptr) {
    if (c.client.fin_sent && c.backend.fin_sent) {
      RelayCounters::Add(counters_.completed);
      RelayCounters::Add(c.rule_counters->completed);
      // Both FINs went through, so every byte received must have been relayed.
      for (const Leg* l : {&c.client, &c.backend}) {
        if (l->received != l->relayed) {
          Log(std::string("relay: BUG: a completed connection relayed ") +
              std::to_string(l->relayed) + " of the " + std::to_string(l->received) +
              " bytes received from its " + (l->is_client ? "client" : "backend"));
        }
      }
    }
    Finish(c);
  }
}

void Relay::RecordSession(const RelayRule& rule, const FlowTuple& client_flow, SessionResult result,
                          uint64_t bytes_in, uint64_t bytes_out, const ProxyOrigin* origin) {
  if (config_.sessions == nullptr) return;
  SessionEvent e;
  e.rule_id = rule.id;
  if (origin != nullptr && origin->has_addresses) {
    e.client = origin->source;
  } else {
    e.client = ToSockaddr(IpEndpoint{client_flow.saddr, client_flow.sport});
  }
  e.bytes_in = bytes_in;
  e.bytes_out = bytes_out;
  e.result = result;
  config_.sessions->Record(e);
}

void Relay::Trace(const Connection& c, RecorderEvent kind, const Leg& leg, uint32_t arg0,
                  uint32_t arg1) {
  if (config_.recorder == nullptr) return;
  config_.recorder->Record(now_ns_, kind, c.trace_id,
                           leg.is_client ? RecorderLeg::kClient : RecorderLeg::kBackend, arg0,
                           arg1);
}

void Relay::CheckNagle(const Connection& c, Leg& leg, uint32_t bytes) {
  // A peer with Nagle on holds a small write back while an earlier small segment of its own is
  // not acknowledged. lwIP acknowledges every second segment at once and a lone one at its next
  // fast tick (TCP_TMR_INTERVAL, 10 ms), unless data going back carries the ACK first. Bytes
  // that arrive within kAnswerNs of such a held-back ACK of a small segment may have waited for
  // it; three times in a row, the peer did (one that paused by chance is seldom that punctual:
  // a few percent each time). From then on this leg's small segments are ACKed at once, which
  // costs one ACK each and saves the peer the wait; the user is told to fix the peer.
  constexpr uint64_t kAnswerNs = 1'000'000;
  constexpr uint8_t kRun = 3;
  if (!leg.quick_ack && leg.last_data_small && leg.held_ack_ns > leg.last_data_ns) {
    if (now_ns_ - leg.held_ack_ns > kAnswerNs) {
      leg.nagle_run = 0;
    } else if (++leg.nagle_run == kRun) {
      leg.quick_ack = true;
      for (RelayCounters* n : {&counters_, c.rule_counters}) {
        RelayCounters::Add(leg.is_client ? n->client_nagle_peers : n->backend_nagle_peers);
      }
      const uint64_t stall_us = (now_ns_ - leg.last_data_ns) / 1000;
      Trace(c, RecorderEvent::kNaglePeer, leg,
            static_cast<uint32_t>(std::min<uint64_t>(stall_us, UINT32_MAX)));
    }
  }
  leg.last_data_ns = now_ns_;
  leg.last_data_small = leg.pcb != nullptr && bytes < tcp_mss(leg.pcb);
  // lwIP sends it when this segment's tcp_input ends (its tcp_output).
  if (leg.quick_ack && leg.last_data_small) tcp_ack_now(leg.pcb);
}

void Relay::AbortLeg(Leg& leg) {
  leg.backlog.FreeAll();
  if (leg.pcb == nullptr) return;
  tcp_pcb* pcb = leg.pcb;
  leg.pcb = nullptr;
  AbortPcb(pcb);
}

void Relay::AbortPcb(tcp_pcb* pcb) {
  DetachCallbacks(pcb);  // tcp_abort calls the err callback; this connection is going anyway
  tcp_abort(pcb);
  if (pcb == in_callback_) in_callback_aborted_ = true;
}

void Relay::Reset(Connection& c, std::atomic<uint64_t>& why) {
  if (c.finished) return;
  // A connection whose PROXY header is not whole is not counted accepted: whatever ends it, it
  // ends as a refusal, proxy_timeout or (a reset, a stop) proxy_invalid.
  std::atomic<uint64_t>& reason =
      !c.awaiting_header() || &why == &counters_.proxy_timeout ? why : counters_.proxy_invalid;
  RelayCounters::Add(reason);
  RelayCounters::Add(c.rule_counters->Same(counters_, reason));
  const RelayCounters& n = counters_;
  if (&reason == &n.client_reset || &reason == &n.backend_reset) {
    if (!c.end_known) {
      c.end = &reason == &n.client_reset ? SessionResult::kRemoteClosedFirst
                                         : SessionResult::kLocalClosedFirst;
    }
  } else if (&reason == &n.backend_refused || &reason == &n.backend_timeout) {
    c.end = SessionResult::kLocalConnectFailed;
  } else if (&reason == &n.backend_no_port) {
    c.end = SessionResult::kLocalBindFailed;
  } else if (&reason == &n.backend_error) {
    c.end = SessionResult::kLocalSocketFailed;
  } else if (&reason == &n.idle_timeout) {
    c.end = SessionResult::kIdleTimeout;
  } else if (&reason == &n.stall_timeout) {
    c.end = SessionResult::kStallTimeout;
  } else if (&reason == &n.shutdown_reset || &reason == &n.admin_shutdown) {
    c.end = SessionResult::kShutdown;
  } else if (&reason == &n.proxy_invalid || &reason == &n.proxy_timeout) {
    c.end = SessionResult::kProxyRefused;
  }
  c.end_known = true;
  AbortLeg(c.client);
  AbortLeg(c.backend);
  Finish(c);
}

void Relay::Finish(Connection& c) {
  if (c.finished) return;
  c.finished = true;
  c.client.backlog.FreeAll();
  c.backend.backlog.FreeAll();
  if (listing_next_ == &c) listing_next_ = live_.Next(c);
  live_.Remove(c);
  if (c.awaiting_header()) {
    awaiting_.Remove(c);  // nothing picked yet
  } else {
    ConnectingOf(c).Remove(c);
    c.version->backends.Closed(c.backend_index);
    c.version->backends.Abandoned(c.backend_index, c.handshake);  // a trial without a verdict
    if (c.backend.connected) {  // its session's bytes, to the backend's counters
      c.version->backends.Ended(c.backend_index, c.client.relayed, c.backend.relayed);
    }
  }
  RelayCounters::Sub(counters_.active);
  RelayCounters::Sub(c.rule_counters->active);
  watched_.Remove(c);
  unmarked_.Remove(c);
  owed_.Remove(c.client);
  owed_.Remove(c.backend);
  Trace(c, RecorderEvent::kConnectionEnd, c.client, static_cast<uint32_t>(c.end));
  // Bytes in: received from the client; out: queued toward the client (rinetd's counts).
  RecordSession(*c.rule, c.flows.client_flow, c.end, c.client.received, c.backend.relayed,
                c.origin.get());
  ledger_.Close(c.flows, now_ms_);
  finished_.push_back(&c);  // freed in Tick: lwIP may still be inside one of its callbacks
}

Relay::~Relay() {
  while (!live_.empty()) Reset(*live_.front(), counters_.shutdown_reset);
  for (Connection* c : finished_) delete c;
  finished_.clear();
  for (auto& l : listeners_) CloseListener(*l);
  listeners_.clear();
  // ledger_'s destructor removes the flow entries still lingering.
}

}  // namespace xdpfwd
