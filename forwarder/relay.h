// The fast path's relay, on lwIP's raw API: accepts a client on lwIP, opens the backend leg from
// a port its FlowLedger leases (the leg's flow entry is in the steering map before the SYN
// leaves), and moves bytes both ways with end-to-end backpressure, half-close and reset
// propagation. Lives on the worker thread: every method is called there.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "forwarder/backend_ports.h"
#include "forwarder/balance.h"
#include "forwarder/flow_ledger.h"
#include "forwarder/health_board.h"
#include "forwarder/intrusive_list.h"
#include "forwarder/relay_counters.h"
#include "forwarder/rules.h"
#include "forwarder/session_log.h"
#include "os/endpoint.h"
#include "os/flight_recorder.h"
#include "os/log.h"
#include "os/result.h"
#include "stack/lwip_pcb.h"
#include "stack/write_ref.h"

struct tcp_pcb;
struct pbuf;

namespace xdpfwd {

// One more backend of a rule (its `backend` lines), reached like the rule's own backend: through
// the rule's backend-side interface, from its backend sources of its own family (a rule's
// backends may be of both families).
struct RelayBackend {
  IpEndpoint address;
  uint32_t weight = 1;
  bool backup = false;
};

// A rule as the relay serves it: the listener, and the route its flows and backend legs take.
struct RelayRule : FlowRoute {
  IpEndpoint listen;                         // either family; its backends may be of the other
  std::vector<AccessPattern> access;         // the rule's own allow/deny lines (forwarder/access.h)
  ProxyVersion proxy = ProxyVersion::kNone;  // a PROXY header first toward the backend
  AcceptProxy accept_proxy;                  // a PROXY header first from the client
  bool retry_empty_response = false;         // [retry-on=empty-response] (rules.h)
  // Several backends: FlowRoute::backend is the first (its weight here), then these; each
  // connection takes one (forwarder/balance.h) and fails over to another if its handshake
  // fails.
  uint32_t backend_weight = 1;
  std::vector<RelayBackend> more_backends;
  BalanceMethod balance = BalanceMethod::kRoundRobin;
};

struct RelayConfig {
  std::vector<RelayRule> rules;
  std::vector<AccessPattern> global_access;  // allow/deny lines before the first rule
  // The access log's events (opened, refused, ended), or nullptr: none are made.
  SessionSink* sessions = nullptr;
  RelayLimits limits;
  std::vector<PortRange> backend_ports;  // never empty (DefaultBackendPorts)
  uint32_t worker = 0;                   // the worker this relay runs on (flow owner)
  // FlowLedgerConfig's: this worker's share of backend_ports (N workers), empty for all.
  std::function<std::vector<uint16_t>(const IpAddress& source, const IpEndpoint& backend)>
      worker_ports;
  // How long a closed connection's flow entries stay. Legs leave no TIME_WAIT pcb behind
  // (lwip_pcb::Release), so a late segment meets a reset from lwIP or the kernel alike; the
  // linger only keeps segments still in flight at the close on one path. Short, because a
  // lingering client entry holds a --flow-capacity slot: at 20k connections/s a 4.5 s linger
  // held 90k slots.
  uint64_t flow_linger_ms = 1000;
  // Received data that fits the peer's window is queued on the other leg by reference to the
  // frame it arrived in (lwIP patch 0032) instead of copied; at most this many references at
  // once (a segment's worth of data each), so send queues can never pin more receive frames
  // than that. 0: always copy (xdpfwd --tune relay-copy=always).
  uint32_t zero_copy_refs = 2048;
  // The worker's flight recorder (os/flight_recorder.h): each connection's life, on the clock
  // Tick was last given. Not owned; nullptr: nothing recorded.
  FlightRecorder* recorder = nullptr;
  // The rules' backends as the control process sees them (forwarder/health_board.h: checks'
  // verdicts, states, weights) and their counters, in memory shared with it; nullptr: none.
  HealthBoard* health = nullptr;
};

struct RelayState {
  size_t connections = 0;    // live relay connections
  size_t closing_flows = 0;  // flow entries waiting for their linger time
  uint32_t backend_ports_in_use = 0;
  // lwIP's answers to unacceptable segments (spoofed RSTs and SYNs, bare segments outside the
  // window), sent and skipped by its per-connection rate limit (our lwIP patch 0020).
  uint64_t oow_acks = 0, oow_acks_limited = 0;
  // Segments lwIP did not queue out of order: their connection was at its limit, or the pool
  // that holds all out-of-order data was empty (patch 0022). Their peers send them again.
  uint64_t ooseq_dropped = 0;
  // Payload bytes queued by reference (RelayConfig::zero_copy_refs) rather than copied, and the
  // references lwIP's send queues hold now.
  uint64_t bytes_referenced = 0;
  uint32_t send_refs = 0;
};

// One connection as `show sess` lists it (forwarder/connection_table.h makes the row).
struct RelayConnectionInfo {
  uint32_t id = 0;  // the recorder's name for it too
  uint32_t rule = 0;
  FlowTuple client_flow;   // client -> listen address
  FlowTuple backend_flow;  // our address -> backend
  uint64_t started_ms = 0;
  uint64_t bytes_to_backend = 0, bytes_to_client = 0;
  bool backend_started = false;       // a backend pcb exists (or existed)
  lwip_pcb::PcbInfo client, backend;  // state CLOSED: that leg's pcb is gone
};

class Relay {
 public:
  // Listens on every rule's address (lwIP), on the calling (worker) thread.
  static Result<std::unique_ptr<Relay>> Create(const RelayConfig& config);
  // Serves `rules` from now on (a reload): a listen address that stays keeps its listener and
  // takes its new clients under the rule now given for it; one that goes stops accepting while
  // its connections finish; a new one is listened on. Open connections keep the rule they began
  // with. An error names the listen addresses lwIP refused; the other rules are served.
  Result<void> SetRules(const std::vector<RelayRule>& rules,
                        const std::vector<AccessPattern>& global_access);
  // Resets every open connection, closes the listeners and removes every flow entry the relay
  // is responsible for.
  ~Relay();
  Relay(const Relay&) = delete;
  Relay& operator=(const Relay&) = delete;

  // Called once per worker iteration: connect, idle and stall timeouts (the fronts of three
  // deadline lists), and every 100 ms the few connections waiting for something no lwIP callback
  // will announce, and delayed flow removals. Work in proportion to what is due, never to the
  // number of connections; does nothing but a few comparisons most of the time. Returns whether it
  // did more.
  // `now_ns`, the same instant in ns (0: now_ms's), stamps what the recorder records until the
  // next Tick.
  bool Tick(uint64_t now_ms, uint64_t now_ns = 0);

  // `show sess`: a listing copies every connection once, `max` per call, so that a large table
  // never stops the worker for long (ListConnections runs once per iteration until it says
  // done). A connection that comes or goes meanwhile may or may not be in it.
  void StartListing();
  // Appends at most `max` connections not listed yet to `out`; true once every one was.
  bool ListConnections(RelayConnectionInfo* out, size_t max, size_t& written);
  // `shutdown session`: resets both legs of connection `id` (counted as admin_shutdown);
  // false if it has no such connection. Walks the connections: for an operator, not a load.
  bool Shutdown(uint32_t id);

  const RelayCounters& counters() const { return counters_; }
  // Each rule's share of counters(), by Rule::id, in the order the rules came (a rule a reload
  // removed stays until its last connection has ended).
  const std::vector<std::pair<uint32_t, std::unique_ptr<RelayCounters>>>& rule_counters() const {
    return rule_counters_;
  }
  RelayState state() const;

  struct Connection;
  struct Leg;
  struct Callbacks;  // lwIP's C callbacks

 private:
  struct Listener;
  struct RuleVersion;  // a rule as served: how its connections choose among its backends
  struct ProxyOrigin;  // [accept-proxy]: the client's PROXY header, awaited or read
  struct RetryCopy;    // [retry-on=empty-response]: the client's bytes, kept to send again
  // The lists a connection is on (tags for IntrusiveList).
  struct ByActivity;  // every live connection, least recently active first: idle deadlines
  struct Connecting;  // backend handshake under way, oldest first: connect deadlines
  struct Watched;     // waiting for what no callback announces: a retry, or a close check
  struct Owed;        // legs with bytes waiting for their peer, least recent progress first
  struct Unmarked;    // client entry not yet marked accepted, in accept order (ServeMarks)

  explicit Relay(const RelayConfig& config);
  Result<void> Listen(RuleVersion& version, RelayCounters& counters);
  void CloseListener(Listener& listener);
  // Frees the rules no listener serves and no connection uses any more.
  void RetireRules();
  int Accept(Listener& listener, tcp_pcb* pcb);
  void CloseRefused(Connection& c);
  void OpenBackend(Connection& c);
  std::atomic<uint64_t>* StartBackend(Connection& c);
  // The backend for `c` (c.flows.backend), among its rule's healthy ones it has not tried; false
  // if none is left.
  bool PickBackend(Connection& c);
  // c's backend handshake failed (`reason`): another backend if one is left and the connect
  // timeout allows, else the reset the client would have had.
  void Failover(Connection& c, std::atomic<uint64_t>& reason);
  // [retry-on=empty-response] (relay_rules.cpp): c's established backend leg ended before it
  // answered; true if another backend takes the connection (the client's bytes sent again),
  // false if none is left or the bytes were not kept (the end goes to the client as without it).
  bool Retry(Connection& c);
  // Keeps the `n` bytes at `p` just sent to c's backend, or gives the copy up past kRetryBytes.
  static void KeepForRetry(Connection& c, const pbuf* p, uint16_t n);
  bool ResendForRetry(Connection& c);  // the kept bytes onto the new backend leg
  // The list c's handshake waits in: connecting_, or trying_ for rules with several backends.
  IntrusiveList<Connection, Connecting>& ConnectingOf(const Connection& c);
  bool SendProxyHeader(Connection& c);  // false: lwIP would not queue it
  // [accept-proxy] (relay_proxy.cpp): whether `peer` may send the rule's clients' headers; the
  // client's bytes `p` (nullptr: its FIN) while its header is awaited; a whole header read.
  static bool ProxyTrusted(const RelayRule& rule, const IpAddress& peer);
  void ReceiveProxyHeader(Connection& c, pbuf* p);
  void ProxyHeaderRead(Connection& c, const ProxyParse& header);
  void RefuseProxyHeader(Connection& c, std::atomic<uint64_t>& reason, const char* what);
  void LogProxyRefusal(const RelayRule& rule, const IpAddress& sender, const char* what);
  void Pump(Connection& c, Leg& from, Leg& to);
  void MaybeCloseLeg(Connection& c, Leg& leg);
  void CloseFinishedLegs(Connection& c);
  void Reset(Connection& c, std::atomic<uint64_t>& why);
  // `origin`: what the client's PROXY header said, which names the client where it has addresses.
  void RecordSession(const RelayRule& rule, const FlowTuple& client_flow, SessionResult result,
                     uint64_t bytes_in, uint64_t bytes_out, const ProxyOrigin* origin = nullptr);
  void AbortLeg(Leg& leg);
  void AbortPcb(tcp_pcb* pcb);  // a leg's pcb, taken from it: callbacks off, a reset to its peer
  void Finish(Connection& c);
  void Touch(Connection& c);
  void Watch(Connection& c);
  void UpdateOwed(Leg& leg);
  void Progress(Leg& leg);
  bool ExpireDeadlines();
  void ReportConnectTimeout(const Connection& c);
  void ServeWatched();
  // Marks the client entries of connections open kMarkAfterMs (unmarked_'s due front); true if
  // it marked any.
  bool ServeMarks();
  // Queues `n` bytes from the start of `p` on `to`: by reference where they fit the peer's
  // window and `p` is a receive frame, else copied. False: lwIP took nothing (queue full).
  bool Write(tcp_pcb* to, pbuf* p, uint16_t n);
  // One event of `c` on `leg`'s side, stamped with the iteration's clock.
  // The Nagle/delayed-ACK stall: `bytes` just received on `leg` may show its peer waiting for
  // our delayed ACKs; once it is clear, counts it, records it and ACKs the peer at once.
  void CheckNagle(const Connection& c, Leg& leg, uint32_t bytes);
  void Trace(const Connection& c, RecorderEvent kind, const Leg& leg, uint32_t arg0 = 0,
             uint32_t arg1 = 0);

  RelayConfig config_;
  RelayCounters counters_;
  // Every rule version still served or used, and its counters (same index).
  std::vector<std::unique_ptr<RuleVersion>> rules_;
  std::vector<std::pair<uint32_t, std::unique_ptr<RelayCounters>>> rule_counters_;
  bool retiring_ = false;  // some version waits for its last connection (Tick retires it)
  std::unique_ptr<WriteRefPool> refs_;  // declared before anything whose teardown frees pcbs
  uint64_t bytes_referenced_ = 0;
  FlowLedger ledger_;  // after the connections are reset, removes what they left lingering
  std::vector<std::unique_ptr<Listener>> listeners_;
  IntrusiveList<Connection, ByActivity> live_;
  IntrusiveList<Connection, Connecting> connecting_;
  // Handshakes of rules with several backends, each attempt given a third of the connect
  // timeout, so that a silent backend leaves time to fail over (ordered by attempt start).
  IntrusiveList<Connection, Connecting> trying_;
  static constexpr uint64_t kFailoverShare = 3;
  // [accept-proxy] connections whose header is not whole yet, by deadline (rules' timeouts differ).
  IntrusiveList<Connection, Connecting> awaiting_;
  IntrusiveList<Connection, Watched> watched_;
  IntrusiveList<Leg, Owed> owed_;  // stall deadlines
  IntrusiveList<Connection, Unmarked> unmarked_;
  std::vector<Connection*> finished_;  // freed in Tick, outside lwIP's callbacks
  // How often watched connections are served: not urgent, a fallback for lwIP's silence.
  static constexpr uint64_t kServiceIntervalMs = 100;
  // A connection's client entry is marked accepted (FlowLedger::MarkAccepted) once it has been
  // open this long, not at its accept: most connections of a busy forwarder end sooner and never
  // need the mark, a map syscall each. The mark only keeps the stray reaper away, which takes
  // entries 6 s after their SYN (TCP_SYN_RCVD_TIMEOUT + 1 s); a connection is accepted at most
  // ~5.1 s after it, so a mark at most ~0.3 s later still comes before the reaper.
  static constexpr uint64_t kMarkAfterMs = 250;
  // Lingering flow entries removed per Tick at most (a syscall or two each; Tick runs every
  // worker iteration, thousands of times a second).
  static constexpr size_t kRemovalsPerTick = 32;
  uint64_t now_ms_ = 0;  // the worker's clock as of the last Tick
  uint64_t now_ns_ = 0;
  uint32_t next_trace_id_ = 0;  // the recorder's name for the next connection (0: none)
  // The listing under way: its number (connections listed in it carry it) and the next live_
  // connection to look at (kept valid by Touch and Finish); null: done, or none started.
  uint64_t listing_ = 0;
  Connection* listing_next_ = nullptr;
  uint64_t next_service_ms_ = 0;
  LogThrottle connect_timeout_log_{1000};
  LogThrottle proxy_log_{1000};  // refused PROXY headers
  // The pcb whose callback is running, and whether the relay aborted it: lwIP's contract is to
  // return ERR_ABRT from that callback if and only if its pcb was aborted.
  tcp_pcb* in_callback_ = nullptr;
  bool in_callback_aborted_ = false;
};

}  // namespace xdpfwd
