// One thread of the kernel-socket path: an epoll loop with its own SO_REUSEPORT listener per
// rule, the connections it accepted, their connect and idle deadlines, and its pipe and buffer
// pools. Nothing here is shared with other loops except the path-wide connection count.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "forwarder/backend_choice.h"
#include "forwarder/kernel_path.h"
#include "forwarder/kernel_path_backend.h"
#include "forwarder/kernel_path_pump.h"
#include "forwarder/kernel_path_sessions.h"
#include "forwarder/proxy_protocol.h"
#include "os/flight_recorder.h"
#include "os/log.h"
#include "os/result.h"
#include "os/unique_fd.h"
#include "xdp/tcp_events.h"

namespace xdpfwd::kernel_path {

// What the loops' listeners serve: published by KernelPath (start, reload, drain) and taken up
// by each loop between two epoll batches.
struct ListenPlan {
  uint64_t generation = 0;
  bool accepting = true;
  std::vector<const Rule*> rules;  // a listener each (one listen address per rule)
  std::vector<AccessPattern> global_access;
};

class PlanBoard {
 public:
  void Publish(std::shared_ptr<const ListenPlan> plan) {
    std::lock_guard lock(mu_);
    generation_.store(plan->generation, std::memory_order_release);
    plan_ = std::move(plan);
  }
  std::shared_ptr<const ListenPlan> Current() const {
    std::lock_guard lock(mu_);
    return plan_;
  }
  // One load per loop iteration: whether a new plan waits.
  uint64_t generation() const { return generation_.load(std::memory_order_acquire); }

 private:
  mutable std::mutex mu_;
  std::shared_ptr<const ListenPlan> plan_;
  std::atomic<uint64_t> generation_{0};
};

class Loop {
 public:
  // Why a connection ended; each has its counter.
  enum class End : uint8_t {
    kCompleted,
    kClientReset,
    kBackendReset,
    kBackendRefused,
    kBackendTimeout,
    kBackendError,
    kBackendNoPort,  // connect: EADDRNOTAVAIL, no local port left (counted by the path)
    kIdleTimeout,
    kStallTimeout,  // a peer acknowledged nothing for the stall timeout (TCP_USER_TIMEOUT)
    kError,
    kStopped,
    kAdminShutdown,  // `shutdown session ID` (KernelPath::Shutdown)
    // [accept-proxy], before any backend leg: a malformed header or the client's end before a
    // whole one; no whole header in time; the header's client refused by allow/deny.
    kProxyInvalid,
    kProxyTimeout,
    kDenied,
    kNotAllowed,
  };
  // Creates the epoll set, the wake-up eventfd and a listener for every rule. `config`,
  // `open_connections` and `counters` must outlive the loop; the counters may also outlive it,
  // so totals survive Stop(). `thread` numbers the loop: its connections' ids begin with it.
  static Result<std::unique_ptr<Loop>> Create(const KernelPathConfig& config,
                                              const PlanBoard& board,
                                              std::atomic<uint32_t>& open_connections,
                                              PathCounters& counters, BackendConnector connector,
                                              int thread);
  ~Loop();
  Loop(const Loop&) = delete;
  Loop& operator=(const Loop&) = delete;

  // Serves until RequestStop(), then resets every connection. Call once, on the loop's own
  // thread. Destroying the loop closes every descriptor it owns.
  // From any thread: the loop looks at the board's plan now (it also does once per iteration).
  void Wake();
  // The plan generation this loop serves (its listeners follow it).
  uint64_t applied_generation() const { return applied_.load(std::memory_order_acquire); }
  void Run();
  // Any thread, while the loop exists.
  void RequestStop();
  // Before Run: each connection's life goes into `recorder` (not owned; nullptr: none).
  void SetRecorder(FlightRecorder* recorder) { recorder_ = recorder; }
  // Before Run, with a recorder: this thread tags its sockets in `events` (not owned) and
  // drains `ring`, its own, into the recorder between two epoll batches.
  void SetTcpEvents(TcpEvents* events, std::unique_ptr<TcpEventRing> ring) {
    tcp_events_ = events;
    tcp_ring_ = std::move(ring);
  }
  // A TcpEventRing handler: `loop` is the Loop whose ring it is, on its own thread.
  static void OnTcpEvent(void* loop, const tcp_event& event);
  // Any thread: ask here (SessionDesk::Ask), then Wake(); answered at the end of the loop's
  // next iteration.
  SessionDesk& desk() { return desk_; }
  // A connection's id: the thread in the top 16 bits, a number of the loop's below.
  static constexpr int kIdThreadShift = 48;

 private:
  using Clock = std::chrono::steady_clock;
  struct Listener {
    UniqueFd fd;
    const Rule* rule = nullptr;
  };
  struct Connection;
  using ConnectionList = std::list<Connection>;

  Loop(const KernelPathConfig& config, const PlanBoard& board,
       std::atomic<uint32_t>& open_connections, PathCounters& counters, BackendConnector connector,
       int thread);
  Result<void> Open();
  Result<std::unique_ptr<Listener>> OpenListener(const Rule& rule);
  void ApplyPlan(std::shared_ptr<const ListenPlan> plan);

  void OnWake();
  void OnListener(Listener& listener);
  bool ShedConnection(Listener& listener);  // true: a waiting client was reset
  void StartConnection(UniqueFd client, const Rule& rule, const sockaddr_storage& peer);
  // The backend for c.peer, taken before anything can end c (Finish gives the pick back).
  void PickBackend(Connection& c);
  void RecordSession(const Rule& rule, const sockaddr_storage& peer, SessionResult result,
                     uint64_t bytes_in, uint64_t bytes_out);
  void OnLegEvent(Connection& c, bool client_leg, uint32_t events);
  // The backend leg toward c.backend_index: connecting, or failed over, or c finished.
  void OpenBackend(Connection& c);
  // A handshake with the backend failed (`why`): another backend of the rule, if one is left
  // and there is time, else the end.
  void Failover(Connection& c, End why);
  // [retry-on=empty-response] (kernel_path_connect.cpp). Retry: c's backend leg ended before
  // the backend answered; true: it is made again to another backend (after this batch's
  // events, OpenRetries), the client's bytes sent again; false: none left, or c's bytes were
  // not kept, and c goes on as without the option (its bytes are no longer kept).
  bool Retry(Connection& c);
  void OpenRetries();
  // While c keeps its client's bytes, before relaying toward the client: true once the backend
  // has begun its answer (the bytes are kept no more) or ended with no retry left (c relays
  // as without the option); false: nothing from it yet, or c was retried or finished.
  bool BackendAnswering(Connection& c);
  BackendChoice& BackendsOf(const Rule& rule);
  // [accept-proxy] (kernel_path_proxy.cpp). At accept: false, and the client reset and
  // counted, when `peer` is not of the rule's proxy-from lines.
  bool TrustsProxy(const Rule& rule, UniqueFd& client, const sockaddr_storage& peer);
  ConnectionList& HeaderWaits(const Rule& rule);  // c waits here until its header or deadline
  void OnProxyHeaderEvent(Connection& c, uint32_t events);
  void TakeProxyHeader(Connection& c, const ProxyParse& header, uint8_t* bytes);
  void RefuseProxyHeader(Connection& c, End why, const char* what);
  void LogProxyRefusal(const Rule& rule, const std::string& sender, const char* what);
  void ExpireHeaderWaits();
  void NextHeaderDeadline(std::optional<Clock::time_point>& next) const;
  void OnConnected(Connection& c);
  bool SendProxyHeader(Connection& c);  // false: the backend did not take it whole
  void Relay(Connection& c);
  void Finish(Connection& c, End why);
  void RunQueuedTurns();
  void ExpireDeadlines();
  void ReportConnectTimeout(const Connection& c);
  int NextTimeoutMs() const;
  void Touch(Connection& c);
  // One event of `c` into the recorder, stamped with the batch's clock.
  void Trace(const Connection& c, RecorderEvent kind, RecorderLeg leg, uint32_t arg0 = 0,
             uint32_t arg1 = 0);
  // The kernel's TCP events of this thread's sockets (xdp/tcp_events.h): c's sockets are
  // tagged once it has lived kTagDelay (QueueTag at the accept, TagDue), a backend leg opened
  // after that at once; each event drained lands in the recorder on its leg.
  void TagSocket(const Connection& c, const UniqueFd& fd, RecorderLeg leg);
  void QueueTag(Connection& c);
  void TagDue();
  void ResetEverything();
  void AnswerDesk();
  void CopyTable(std::vector<SessionRecord>& table) const;
  bool EndById(uint64_t id);

  const KernelPathConfig& config_;
  const PlanBoard& board_;
  std::atomic<uint32_t>& open_connections_;
  std::atomic<bool> stop_{false};
  std::shared_ptr<const ListenPlan> plan_;  // what the listeners serve now
  std::atomic<uint64_t> applied_{0};
  UniqueFd epoll_, wake_;
  // Kept open so that, when accept fails with EMFILE, closing it frees one descriptor to
  // accept and reset the waiting client (otherwise the level-triggered listener would spin).
  UniqueFd spare_fd_;
  bool warned_fd_limit_ = false;
  LogThrottle connect_timeout_log_{1000};
  LogThrottle proxy_log_{1000};  // refused PROXY headers
  std::vector<std::unique_ptr<Listener>> listeners_;

  // Connections live in these lists and move between them with splice (no allocation, no
  // address change). connecting_ is ordered by connect start, relaying_ by last activity, so
  // the front of each is the next deadline. trying_ holds the handshakes of rules with several
  // backends, each given a share of the connect timeout (kFailoverShare) so that a silent
  // backend leaves time to fail over. ended_ holds connections finished during this iteration
  // until its epoll events can no longer name them.
  ConnectionList connecting_, trying_, relaying_, ended_;
  static constexpr int kFailoverShare = 3;
  // [accept-proxy] connections waiting for their header, a list per accept-proxy-timeout (in
  // ms): each list in accept order, so its front is its next deadline whatever the rules'
  // timeouts. A list lives as long as the loop (as many as distinct timeouts ever served).
  std::map<uint32_t, ConnectionList> header_waits_;
  // How each rule's connections choose among its backends, made on its first connection here.
  std::unordered_map<const Rule*, std::unique_ptr<BackendChoice>> backends_;
  std::vector<Connection*> turns_;          // spent their budget; continue next iteration
  std::vector<Connection*> turns_running_;  // turns_ being served (kept for its capacity)
  // Retried connections whose new backend leg opens once this batch's events are handled: an
  // event of the old leg still in the batch would name the connection (kBackendTag) and be
  // taken for the new leg's.
  std::vector<Connection*> retries_;
  Clock::time_point now_;
  uint64_t NowMs() const {
    return static_cast<uint64_t>(
        std::chrono::duration_cast<std::chrono::milliseconds>(now_.time_since_epoch()).count());
  }
  const int thread_;
  uint64_t next_id_ = 0;  // the last connection's number on this thread
  FlightRecorder* recorder_ = nullptr;
  TcpEvents* tcp_events_ = nullptr;
  std::unique_ptr<TcpEventRing> tcp_ring_;
  // Why tagging waits: a tag is a bpf syscall per socket and socket storage to allocate and
  // free, about 3 µs of a connection's 37 (notes/kernel-tcp-events-cost.md), and most
  // connections of a rate load are over before 10 ms. What a connection's first 10 ms can hold
  // is little: the RTO is at least 200 ms, a SYN's first retransmission comes after 1 s, and a
  // tail loss probe of a lone segment (a request's, an answer's) 200 ms plus two RTTs after it;
  // what goes unrecorded is a fast retransmit, a fast recovery, or the loss probe of a flight of
  // several segments (two RTTs and 2 jiffies: a few ms on a LAN) in a connection's first 10 ms,
  // and a window that closes and opens again in them (one still closed at the tag is recorded
  // at the next segment).
  static constexpr auto kTagDelay = std::chrono::milliseconds(10);
  // Connections to tag, in accept order, so the front is due first. Finish clears the entry
  // of a connection that ends before it is due: nothing here points at a freed one.
  struct PendingTag {
    Clock::time_point due;
    Connection* connection;
  };
  std::deque<PendingTag> pending_tags_;
  uint64_t pending_tags_popped_ = 0;  // entries taken from the front so far
  bool warned_tag_ = false;
  // Set by any wake-up (a plan, a stop, a question); the desk is looked at only then, so an
  // iteration nobody asked anything of pays one test of this flag.
  bool desk_waiting_ = false;
  SessionDesk desk_;

  PathCounters& counters_;
  PipePool pipes_;
  BufferPool buffers_;
  BufferPool kept_buffers_;  // [retry-on=empty-response]'s client bytes (Direction::Keep)
  PumpContext pump_;
  BackendConnector connector_;
};

}  // namespace xdpfwd::kernel_path
