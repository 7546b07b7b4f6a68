// The kernel-socket path's event loop: accept, non-blocking connect to the backend, relay
// with edge-triggered epoll, connect and idle deadlines, and how each connection ends.
#include "forwarder/kernel_path_loop.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <signal.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>
#include <optional>
#include <string>

#include "forwarder/access.h"
#include "forwarder/backend_choice.h"
#include "forwarder/kernel_path_connection.h"
#include "os/fork_gate.h"
#include "os/log.h"

namespace xdpfwd::kernel_path {

namespace {

uint16_t PeerPort(const sockaddr_storage& peer) {
  if (peer.ss_family == AF_INET) {
    return ntohs(reinterpret_cast<const sockaddr_in&>(peer).sin_port);
  }
  if (peer.ss_family == AF_INET6) {
    return ntohs(reinterpret_cast<const sockaddr_in6&>(peer).sin6_port);
  }
  return 0;
}

// The access log's word for how a connection ended: which side ended its stream first, or
// the reason it was cut short.
SessionResult SessionEnd(Loop::End why, std::optional<SessionResult> closed_first) {
  switch (why) {
    case Loop::End::kCompleted:
      return closed_first.value_or(SessionResult::kRemoteClosedFirst);
    case Loop::End::kClientReset:
      return closed_first.value_or(SessionResult::kRemoteClosedFirst);
    case Loop::End::kBackendReset:
      return closed_first.value_or(SessionResult::kLocalClosedFirst);
    case Loop::End::kBackendRefused:
    case Loop::End::kBackendTimeout:
      return SessionResult::kLocalConnectFailed;
    case Loop::End::kBackendNoPort:
      return SessionResult::kLocalBindFailed;
    case Loop::End::kBackendError:
      return SessionResult::kLocalSocketFailed;
    case Loop::End::kIdleTimeout:
      return SessionResult::kIdleTimeout;
    case Loop::End::kStallTimeout:
      return SessionResult::kStallTimeout;
    case Loop::End::kStopped:
    case Loop::End::kAdminShutdown:  // the access log's word for "xdpfwd reset it"
      return SessionResult::kShutdown;
    case Loop::End::kError:
      return SessionResult::kUnknownError;
    case Loop::End::kProxyInvalid:
    case Loop::End::kProxyTimeout:
      return SessionResult::kProxyRefused;
    case Loop::End::kDenied:
      return SessionResult::kDenied;
    case Loop::End::kNotAllowed:
      return SessionResult::kNotAllowed;
  }
  return SessionResult::kUnknownError;
}

constexpr int kEventBatch = 64;
constexpr int kAcceptBatch = 64;  // per listener event; more wait for the next iteration
// Capped by net.core.somaxconn (4096 by default since 5.4). A deep queue absorbs connection
// bursts while the loop is busy relaying.
constexpr int kListenBacklog = 4096;
// Bytes one direction may move per turn before the other connections of this thread get
// theirs (edge-triggered epoll would otherwise let one fast stream hold the thread).
constexpr uint64_t kTurnBudget = 1 << 20;
// Pipe per direction while it holds bytes. Measured with iperf3 through one loop thread over
// veth (offloads on, 4 s runs, 2 vCPU): 64 KiB (the kernel's default) 11.4-13.0 Gbit/s at
// ~33 splice calls and 350-400 ms of CPU per GiB; 256 KiB 13.4-14.5 Gbit/s at ~9 calls and
// 280-300 ms; 1 MiB no better than 256 KiB (13.2-14.2 Gbit/s, 8-12 calls, 285-300 ms), since a
// read rarely finds more than a few hundred KiB queued. Copy mode with 64 KiB buffers:
// 9.1-10.4 Gbit/s at 630-730 ms per GiB. For an unprivileged user, the pipe quota
// (fs.pipe-user-pages-soft, 64 MiB) covers 256 such pipes, busy or idle in the pools; beyond
// it the kernel refuses the resize and the pipe keeps a smaller size (Pipe::Create copes).
constexpr size_t kPipeBytes = 256 * 1024;

int SocketError(int fd) {
  int err = 0;
  socklen_t len = sizeof(err);
  if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0) return errno;
  return err;
}

Result<void> SetOption(int fd, int level, int name, int value, const std::string& where,
                       const char* option) {
  if (setsockopt(fd, level, name, &value, sizeof(value)) != 0) {
    return SystemError(where + ": " + option);
  }
  return {};
}

}  // namespace

Loop::Loop(const KernelPathConfig& config, const PlanBoard& board,
           std::atomic<uint32_t>& open_connections, PathCounters& counters,
           BackendConnector connector, int thread)
    : config_(config),
      board_(board),
      open_connections_(open_connections),
      thread_(thread),
      counters_(counters),
      pipes_(kPipeBytes, counters.pooled_pipes),
      buffers_(config.copy_buffer_bytes),
      // One byte more than is kept: a read that fills it says the request is too long.
      kept_buffers_(kRetryBytes + 1),
      pump_{pipes_, buffers_, kept_buffers_, counters_},
      connector_(std::move(connector)) {}

Loop::~Loop() = default;

Result<std::unique_ptr<Loop>> Loop::Create(const KernelPathConfig& config, const PlanBoard& board,
                                           std::atomic<uint32_t>& open_connections,
                                           PathCounters& counters, BackendConnector connector,
                                           int thread) {
  static_assert(alignof(Connection) > kTagMask && alignof(Listener) > kTagMask);
  std::unique_ptr<Loop> loop(
      new Loop(config, board, open_connections, counters, std::move(connector), thread));
  if (auto opened = loop->Open(); !opened) return opened.error();
  return loop;
}

Result<void> Loop::Open() {
  epoll_.reset(epoll_create1(EPOLL_CLOEXEC));
  if (!epoll_) return SystemError("kernel path: epoll_create1");
  wake_.reset(eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
  if (!wake_) return SystemError("kernel path: eventfd");
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.u64 = Tagged(nullptr, kWakeTag);
  if (epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, wake_.get(), &ev) != 0) {
    return SystemError("kernel path: epoll_ctl");
  }
  spare_fd_.reset(open("/dev/null", O_RDONLY | O_CLOEXEC));

  plan_ = board_.Current();
  for (const Rule* rule : plan_->rules) {
    auto listener = OpenListener(*rule);
    if (!listener) return listener.error();
    listeners_.push_back(std::move(*listener));
  }
  applied_.store(plan_->generation, std::memory_order_release);
  return {};
}

void Loop::RequestStop() {
  stop_.store(true, std::memory_order_release);
  const uint64_t one = 1;
  // Cannot fail short of a full counter (2^64 - 2 wake-ups); the loop re-reads stop_ anyway.
  [[maybe_unused]] const ssize_t n = write(wake_.get(), &one, sizeof(one));
}

Result<std::unique_ptr<Loop::Listener>> Loop::OpenListener(const Rule& rule) {
  const std::string where = "listen " + ToString(rule.listen);
  auto listener = std::make_unique<Listener>();
  listener->rule = &rule;
  listener->fd.reset(
      socket(rule.listen.family(), SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, IPPROTO_TCP));
  const int fd = listener->fd.get();
  if (fd < 0) return SystemError(where);
  // One listener per thread on the same address, the kernel spreading connections by hash.
  // (As with any SO_REUSEPORT server, another process of the same user that listens with
  // SO_REUSEPORT on this address joins the group instead of failing with EADDRINUSE.)
  for (auto set : {SetOption(fd, SOL_SOCKET, SO_REUSEADDR, 1, where, "SO_REUSEADDR"),
                   SetOption(fd, SOL_SOCKET, SO_REUSEPORT, 1, where, "SO_REUSEPORT"),
                   // Accepted sockets inherit Nagle-off from the listener (the kernel clones
                   // the listener's tcp_sock): one setsockopt per connection saved.
                   SetOption(fd, IPPROTO_TCP, TCP_NODELAY, 1, where, "TCP_NODELAY")}) {
    if (!set) return set.error();
  }
  // The stall timeout is the kernel's own: with TCP_USER_TIMEOUT a socket whose peer
  // acknowledges nothing that long while data waits, zero-window probes answered or not,
  // fails with ETIMEDOUT (Finish: kStallTimeout). Inherited by accepted sockets like
  // TCP_NODELAY; the backend connector sets it on its sockets.
  if (const auto stall = config_.limits.stall_timeout.count(); stall > 0) {
    if (auto set = SetOption(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, static_cast<int>(stall), where,
                             "TCP_USER_TIMEOUT");
        !set) {
      return set.error();
    }
  }
  if (rule.listen.family() == AF_INET6) {
    const int v6only = ListenIpv6Only(rule, board_.Current()->rules) ? 1 : 0;
    if (auto set = SetOption(fd, IPPROTO_IPV6, IPV6_V6ONLY, v6only, where, "IPV6_V6ONLY"); !set) {
      return set.error();
    }
  }
  if (bind(fd, rule.listen.get(), rule.listen.length) != 0) return SystemError(where);
  if (listen(fd, kListenBacklog) != 0) return SystemError(where);
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.u64 = Tagged(listener.get(), kListenerTag);
  if (epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, fd, &ev) != 0) {
    return SystemError(where + ": epoll_ctl");
  }
  return listener;
}

void Loop::Wake() {
  const uint64_t one = 1;
  [[maybe_unused]] const ssize_t n = write(wake_.get(), &one, sizeof(one));
}

// A new plan (reload, drain): listeners of listen addresses it keeps stay open and serve its
// version of their rule (no rebind; their connections keep the rule they began with); the
// others close, and new listen addresses get a listener of this thread's.
void Loop::ApplyPlan(std::shared_ptr<const ListenPlan> plan) {
  std::vector<std::unique_ptr<Listener>> next;
  if (plan->accepting) {
    for (const Rule* rule : plan->rules) {
      auto same = std::find_if(listeners_.begin(), listeners_.end(), [&](const auto& l) {
        return l != nullptr && l->rule->listen == rule->listen;
      });
      if (same != listeners_.end()) {
        (*same)->rule = rule;
        next.push_back(std::move(*same));
        continue;
      }
      auto opened = OpenListener(*rule);
      if (!opened) {
        Add(counters_.errors);
        Log("kernel path: " + opened.error().message() + " (this thread does not serve it)");
        continue;
      }
      next.push_back(std::move(*opened));
    }
  }
  listeners_ = std::move(next);  // closing a listener removes it from the epoll set
  plan_ = std::move(plan);
  applied_.store(plan_->generation, std::memory_order_release);
}

void Loop::Run() {
  // splice(2) into a socket whose peer has gone raises SIGPIPE on the calling thread (there is
  // no MSG_NOSIGNAL for splice). Blocked on this thread, it stays pending here and harms
  // nothing; the rest of the process keeps its own signal mask.
  sigset_t pipe_signal;
  sigemptyset(&pipe_signal);
  sigaddset(&pipe_signal, SIGPIPE);
  pthread_sigmask(SIG_BLOCK, &pipe_signal, nullptr);

  epoll_event events[kEventBatch];
  ForkGate& gate = ForkGate::OfProcess();
  while (!stop_.load(std::memory_order_acquire)) {
    // A batch's work is one stretch of the fork gate's (os/fork_gate.h): the fast path forks no
    // worker while this thread may hold a lock, and none while it waits for events either.
    ForkGate::Pass working = gate.Enter();
    // Here, between batches, no epoll event of this iteration can still name a listener.
    if (board_.generation() != plan_->generation) ApplyPlan(board_.Current());
    // Busy-polling never sleeps, so deadlines are checked on every spin (ExpireDeadlines).
    int timeout = config_.busy_poll ? 0 : NextTimeoutMs();
    // TCP events wait in the ring until a batch drains it (the programs wake nobody): an idle
    // thread still drains 4 times a second, so a trace dump misses at most the last 250 ms.
    constexpr int kTcpEventDrainMs = 250;
    if (tcp_ring_ && (timeout < 0 || timeout > kTcpEventDrainMs)) timeout = kTcpEventDrainMs;
    if (timeout != 0) working.Release();  // a fork may happen while this thread sleeps
    const int n = epoll_wait(epoll_.get(), events, kEventBatch, timeout);
    if (timeout != 0) working = gate.Enter();
    if (n < 0 && errno != EINTR) {
      Add(counters_.errors);
      Log(std::string("kernel path: epoll_wait: ") + std::strerror(errno) + "; thread stops");
      break;
    }
    if (n == 0) Add(counters_.empty_polls);
    // One clock read per batch: deadlines need no finer time than the batch takes.
    now_ = Clock::now();
    for (int i = 0; i < n; ++i) {
      const uint64_t data = events[i].data.u64;
      switch (data & kTagMask) {
        case kWakeTag:
          OnWake();
          break;
        case kListenerTag:
          OnListener(*Untagged<Listener>(data));
          break;
        case kClientTag:
          OnLegEvent(*Untagged<Connection>(data), true, events[i].events);
          break;
        case kBackendTag:
          OnLegEvent(*Untagged<Connection>(data), false, events[i].events);
          break;
      }
    }
    RunQueuedTurns();
    // The kernel's TCP events since the last batch: mapped memory, no syscall.
    if (tcp_ring_) tcp_ring_->Drain();
    if (!retries_.empty()) OpenRetries();  // before their deadlines are looked at
    ExpireDeadlines();
    if (desk_waiting_) AnswerDesk();
    // Nothing refers to these any more: their descriptors are closed (so out of the epoll
    // set) and this batch's events have been handled.
    ended_.clear();
  }
  const ForkGate::Pass ending = gate.Enter();
  ResetEverything();
}

void Loop::OnWake() {
  uint64_t count = 0;
  [[maybe_unused]] const ssize_t n = read(wake_.get(), &count, sizeof(count));
  // Answered once this batch's events are handled: a connection this batch ends is not listed.
  desk_waiting_ = true;
}

void Loop::OnListener(Listener& listener) {
  const bool check_access = HasAccessPatterns(plan_->global_access, listener.rule->access);
  for (int i = 0; i < kAcceptBatch; ++i) {
    sockaddr_storage peer{};
    socklen_t peer_length = sizeof(peer);
    UniqueFd client(accept4(listener.fd.get(), reinterpret_cast<sockaddr*>(&peer), &peer_length,
                            SOCK_NONBLOCK | SOCK_CLOEXEC));
    if (!client) {
      if (errno == EAGAIN) return;
      if (errno == EINTR || errno == ECONNABORTED) continue;
      if (errno == EMFILE || errno == ENFILE) {
        if (!ShedConnection(listener)) return;
        continue;
      }
      // ENOBUFS, ENOMEM, EPERM (a security module): the client stays queued for a retry.
      Add(counters_.errors);
      return;
    }
    if (listener.rule->accept_proxy.enabled) {
      // Allow/deny apply to the client the header names (TakeProxyHeader).
      if (!TrustsProxy(*listener.rule, client, peer)) continue;
    } else if (check_access) {
      const AccessVerdict verdict =
          CheckAccess(plan_->global_access, listener.rule->access,
                      ClientAddressText(reinterpret_cast<const sockaddr*>(&peer)));
      if (verdict != AccessVerdict::kAllowed) {
        // Closed (a FIN), as rinetd closes a refused client; no backend leg is opened.
        const bool denied = verdict == AccessVerdict::kDenied;
        Add(denied ? counters_.relay.denied : counters_.relay.not_allowed);
        RelayCounters& rule = counters_.ForRule(listener.rule->id);
        Add(denied ? rule.denied : rule.not_allowed);
        RecordSession(*listener.rule, peer,
                      denied ? SessionResult::kDenied : SessionResult::kNotAllowed, 0, 0);
        continue;
      }
    }
    if (BackendsOf(*listener.rule).Ready() == 0) {  // every backend in drain or maint
      Add(counters_.relay.no_backend);
      Add(counters_.ForRule(listener.rule->id).no_backend);
      ResetClose(client);
      continue;
    }
    // The one shared atomic on the path, once per connection. Like the fast path, a refused
    // client is counted in over_limit only, not in accepted.
    if (open_connections_.fetch_add(1, std::memory_order_relaxed) >=
        config_.limits.max_connections) {
      open_connections_.fetch_sub(1, std::memory_order_relaxed);
      Add(counters_.relay.over_limit);
      Add(counters_.ForRule(listener.rule->id).over_limit);
      ResetClose(client);
      continue;
    }
    // An [accept-proxy] client is accepted once its header is taken (TakeProxyHeader): one
    // refused for its header is, like one refused by allow/deny, not an accepted one.
    if (!listener.rule->accept_proxy.enabled) {
      Add(counters_.relay.accepted);
      Add(counters_.ForRule(listener.rule->id).accepted);
    }
    StartConnection(std::move(client), *listener.rule, peer);
  }
}

// accept(2) takes a descriptor before it looks at the queue, so EMFILE does not say whether a
// client is waiting: only the accept made with the spare's descriptor tells.
bool Loop::ShedConnection(Listener& listener) {
  if (!warned_fd_limit_) {
    warned_fd_limit_ = true;
    Log("kernel path: out of file descriptors, resetting new clients (raise ulimit -n or lower "
        "max_connections)");
  }
  // Without the spare (another thread took the descriptor it freed), a waiting client stays
  // queued and the listener fires again on the next iteration, until a connection ends.
  if (!spare_fd_) {
    Add(counters_.errors);
    spare_fd_.reset(open("/dev/null", O_RDONLY | O_CLOEXEC));
    return false;
  }
  spare_fd_.reset();
  UniqueFd client(accept4(listener.fd.get(), nullptr, nullptr, SOCK_CLOEXEC));
  const bool shed = static_cast<bool>(client);
  ResetClose(client);
  spare_fd_.reset(open("/dev/null", O_RDONLY | O_CLOEXEC));
  if (shed) Add(counters_.errors);
  return shed;
}

void Loop::StartConnection(UniqueFd client, const Rule& rule, const sockaddr_storage& peer) {
  const bool await_header = rule.accept_proxy.enabled;
  ConnectionList& list = await_header               ? HeaderWaits(rule)
                         : rule.backend_count() > 1 ? trying_
                                                    : connecting_;
  list.emplace_back(config_.use_splice);
  Connection& c = list.back();
  c.self = std::prev(list.end());
  c.list = &list;
  c.backends = &BackendsOf(rule);
  c.id = static_cast<uint64_t>(thread_) << kIdThreadShift | ++next_id_;
  c.since = now_;
  c.accepted = now_;
  c.opening = now_;
  c.rule = &rule;
  c.rule_counters = &counters_.ForRule(rule.id);
  c.client.fd = std::move(client);
  c.peer = peer;
  c.awaiting_header = await_header;
  if (rule.retry_empty_response) c.to_backend.Keep();
  Add(counters_.relay.active);
  Add(c.rule_counters->active);
  Trace(c, RecorderEvent::kClientEstablished, RecorderLeg::kClient, rule.id, PeerPort(peer));
  QueueTag(c);
  // The backend first: from here on Finish gives the pick back (least connections' counts).
  // [accept-proxy]: picked once the header names the client (TakeProxyHeader); until then
  // Finish gives nothing back.
  if (!await_header) {
    RecordSession(rule, peer, SessionResult::kOpened, 0, 0);
    PickBackend(c);
  }
  epoll_event ev{};
  ev.events = EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLET;
  ev.data.u64 = Tagged(&c, kClientTag);
  if (epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, c.client.fd.get(), &ev) != 0) {
    return Finish(c, End::kError);
  }
  if (!await_header) OpenBackend(c);
}

void Loop::OnLegEvent(Connection& c, bool client_leg, uint32_t events) {
  if (c.ended) return;  // ended earlier in this batch
  Leg& leg = client_leg ? c.client : c.backend;
  // Errors and hang-ups are found by the next syscall on the leg, so they count as ready.
  if (events & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR)) leg.readable = true;
  if (events & (EPOLLRDHUP | EPOLLHUP)) leg.hung_up = true;
  if (events & (EPOLLOUT | EPOLLHUP | EPOLLERR)) leg.writable = true;

  if (c.awaiting_header) return OnProxyHeaderEvent(c, events);  // no backend leg yet
  if (c.connecting) {
    // The client's bytes wait in its socket until the backend answers.
    if (client_leg) {
      if (events & (EPOLLERR | EPOLLHUP)) Finish(c, End::kClientReset);  // client gave up
      return;
    }
    if (!c.backend.fd) return;  // the old leg's, retried: OpenRetries opens the new one
    if (events & (EPOLLERR | EPOLLHUP)) {
      const int err = SocketError(c.backend.fd.get());
      if (err == ECONNREFUSED) return Failover(c, End::kBackendRefused);
      if (err == ETIMEDOUT) return Failover(c, End::kBackendTimeout);  // the kernel's SYN retries
      return Failover(c, End::kBackendError);  // EHOSTUNREACH, ENETUNREACH, ...
    }
    if (events & EPOLLOUT) OnConnected(c);
    return;
  }
  // A reset is final: relaying what is still queued would only delay telling the other side.
  if (events & EPOLLERR) {
    const int err = SocketError(leg.fd.get());
    if (err != 0 && !client_leg && Retry(c)) return;  // [retry-on=empty-response]
    if (err == ETIMEDOUT) return Finish(c, End::kStallTimeout);
    if (err != 0) return Finish(c, client_leg ? End::kClientReset : End::kBackendReset);
  }
  Relay(c);
}

void Loop::Relay(Connection& c) {
  // Which end to blame when a pump fails: the leg whose syscall failed.
  auto failure = [](const PumpResult& r, End source, End sink) -> std::optional<End> {
    if (r.status != PumpStatus::kFailed && r.err == ETIMEDOUT) return End::kStallTimeout;
    switch (r.status) {
      case PumpStatus::kSourceFailed:
        return source;
      case PumpStatus::kSinkFailed:
        return sink;
      case PumpStatus::kFailed:
        return End::kError;
      default:
        return std::nullopt;
    }
  };
  // A direction that ends after the other closes at once (Finish below): no shutdown first.
  if (c.to_client.finished() && !c.to_backend.keeping()) c.to_backend.OtherFinished();
  const bool backend_open = !c.to_backend.finished();
  const PumpResult up = c.to_backend.Pump(c.client, c.backend, pump_, kTurnBudget);
  Add(counters_.relay.bytes_to_backend, up.bytes);
  Add(c.rule_counters->bytes_to_backend, up.bytes);
  if (c.bytes_in == 0 && up.bytes > 0) {
    Trace(c, RecorderEvent::kFirstByteToBackend, RecorderLeg::kClient,
          static_cast<uint32_t>(up.bytes));
  }
  if (!c.client_fin && c.to_backend.source_ended()) {
    c.client_fin = true;
    Trace(c, RecorderEvent::kClientFin, RecorderLeg::kClient);
  }
  c.bytes_in += up.bytes;
  if (!c.closed_first && c.to_backend.source_ended()) {
    c.closed_first = SessionResult::kRemoteClosedFirst;
  }
  if (backend_open && c.to_backend.finished()) {
    // The backend's FIN announced (RDHUP) or read: it closed first, and its side keeps the
    // TIME_WAIT. Otherwise ours will (the client closed first).
    c.backend_closed_first = !c.backend.hung_up && !c.to_client.source_ended();
  }
  if (auto why = failure(up, End::kClientReset, End::kBackendReset)) {
    if (up.status == PumpStatus::kSinkFailed && Retry(c)) return;  // [retry-on=empty-response]
    return Finish(c, *why);
  }
  // While the client's bytes are kept, the backend is heard before anything is relayed from it.
  const bool answering = !c.to_backend.keeping() || BackendAnswering(c);
  if (c.ended || c.connecting) return;  // finished, or retried
  if (c.to_backend.finished() && !c.to_backend.keeping()) c.to_client.OtherFinished();
  const PumpResult down =
      answering ? c.to_client.Pump(c.backend, c.client, pump_, kTurnBudget) : PumpResult{};
  Add(counters_.relay.bytes_to_client, down.bytes);
  Add(c.rule_counters->bytes_to_client, down.bytes);
  if (c.bytes_out == 0 && down.bytes > 0) {
    const auto first_byte_ns = static_cast<uint64_t>(
        std::chrono::duration_cast<std::chrono::nanoseconds>(now_ - c.accepted).count());
    counters_.relay.first_byte.Observe(first_byte_ns);
    c.rule_counters->first_byte.Observe(first_byte_ns);
    Trace(c, RecorderEvent::kFirstByteToClient, RecorderLeg::kBackend,
          static_cast<uint32_t>(down.bytes));
  }
  if (!c.backend_fin && c.to_client.source_ended()) {
    c.backend_fin = true;
    Trace(c, RecorderEvent::kBackendFin, RecorderLeg::kBackend);
  }
  c.bytes_out += down.bytes;
  if (!c.closed_first && c.to_client.source_ended()) {
    c.closed_first = SessionResult::kLocalClosedFirst;
  }
  if (auto why = failure(down, End::kBackendReset, End::kClientReset)) return Finish(c, *why);

  if (up.bytes + down.bytes > 0) Touch(c);
  if (c.to_backend.finished() && c.to_client.finished()) return Finish(c, End::kCompleted);
  const bool more =
      up.status == PumpStatus::kBudgetSpent || down.status == PumpStatus::kBudgetSpent;
  if (more && !c.queued) {
    c.queued = true;
    turns_.push_back(&c);
  }
}

void Loop::Touch(Connection& c) {
  if (config_.limits.idle_timeout.count() == 0 || c.since == now_) return;
  c.since = now_;
  relaying_.splice(relaying_.end(), relaying_, c.self);  // keeps relaying_ ordered by activity
}

void Loop::Trace(const Connection& c, RecorderEvent kind, RecorderLeg leg, uint32_t arg0,
                 uint32_t arg1) {
  if (recorder_ == nullptr) return;
  const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(now_.time_since_epoch());
  // The id's per-thread number: the recorder's connection name (the thread is the ring's).
  recorder_->Record(static_cast<uint64_t>(ns.count()), kind, static_cast<uint32_t>(c.id), leg, arg0,
                    arg1);
}

void Loop::Finish(Connection& c, End why) {
  if (c.ended) return;
  c.ended = true;
  if (c.pending_tag > pending_tags_popped_) {
    pending_tags_[c.pending_tag - 1 - pending_tags_popped_].connection = nullptr;
  }
  if (why == End::kClientReset) Trace(c, RecorderEvent::kClientRst, RecorderLeg::kClient);
  if (why == End::kBackendReset) Trace(c, RecorderEvent::kBackendRst, RecorderLeg::kBackend);
  Trace(c, RecorderEvent::kConnectionEnd, RecorderLeg::kClient,
        static_cast<uint32_t>(SessionEnd(why, c.closed_first)));
  RelayCounters& r = counters_.relay;
  std::atomic<uint64_t>* reason = nullptr;  // the relay counter that says how it ended
  switch (why) {
    case End::kCompleted:
      reason = &r.completed;
      break;
    case End::kClientReset:
      reason = &r.client_reset;
      break;
    case End::kBackendReset:
      reason = &r.backend_reset;
      break;
    case End::kBackendRefused:
      reason = &r.backend_refused;
      break;
    case End::kBackendTimeout:
      reason = &r.backend_timeout;
      break;
    case End::kBackendError:
      reason = &r.backend_error;
      break;
    case End::kBackendNoPort:
      reason = &r.backend_no_port;  // the relay's end reason, shared with the fast path
      break;
    case End::kIdleTimeout:
      reason = &r.idle_timeout;
      break;
    case End::kStallTimeout:
      reason = &r.stall_timeout;
      break;
    case End::kError:
      Add(counters_.errors);
      break;
    case End::kStopped:
      reason = &r.shutdown_reset;
      break;
    case End::kAdminShutdown:
      reason = &r.admin_shutdown;
      break;
    case End::kProxyInvalid:
      reason = &r.proxy_invalid;
      break;
    case End::kProxyTimeout:
      reason = &r.proxy_timeout;
      break;
    case End::kDenied:
      reason = &r.denied;
      break;
    case End::kNotAllowed:
      reason = &r.not_allowed;
      break;
  }
  if (reason != nullptr) {
    Add(*reason);
    Add(c.rule_counters->Same(r, *reason));
  }
  // A leg that failed is already dead: close it quietly. The other learns with a reset.
  // A completed connection has sent both FINs. A client refused by allow/deny is closed, as
  // rinetd closes it.
  const bool client_failed =
      why == End::kClientReset || why == End::kDenied || why == End::kNotAllowed;
  const bool backend_failed = why == End::kBackendReset || why == End::kBackendRefused;
  if (why == End::kCompleted || client_failed) {
    c.client.fd.reset();
  } else {
    ResetClose(c.client.fd);
  }
  if (why == End::kCompleted || backend_failed) {
    c.backend.fd.reset();
  } else {
    ResetClose(c.backend.fd);
  }
  connector_.Release(c.lease, why == End::kCompleted && c.backend_closed_first, now_);
  c.lease = BackendLease{};
  c.to_backend.Release(pump_);
  c.to_client.Release(pump_);
  if (c.queued) {
    std::erase(turns_, &c);
    c.queued = false;
  }
  ended_.splice(ended_.end(), *c.list, c.self);
  c.list = &ended_;
  if (!c.awaiting_header) {
    c.backends->Closed(c.backend_index);
    c.backends->Abandoned(c.backend_index, c.handshake);  // a trial without a verdict
    if (!c.connecting) c.backends->Ended(c.backend_index, c.bytes_in, c.bytes_out);
  }
  RelayCounters::Sub(r.active);
  RelayCounters::Sub(c.rule_counters->active);
  open_connections_.fetch_sub(1, std::memory_order_relaxed);
  if (config_.sessions != nullptr) {
    RecordSession(*c.rule, c.peer, SessionEnd(why, c.closed_first), c.bytes_in, c.bytes_out);
  }
}

void Loop::RecordSession(const Rule& rule, const sockaddr_storage& peer, SessionResult result,
                         uint64_t bytes_in, uint64_t bytes_out) {
  if (config_.sessions == nullptr) return;
  SessionEvent e;
  e.rule_id = rule.id;
  e.client = peer;
  e.bytes_in = bytes_in;
  e.bytes_out = bytes_out;
  e.result = result;
  config_.sessions->Record(e);
}

void Loop::RunQueuedTurns() {
  if (turns_.empty()) return;
  turns_running_.swap(turns_);
  for (Connection* c : turns_running_) {
    c->queued = false;
    if (!c->ended) Relay(*c);  // may queue it again, for the next iteration
  }
  turns_running_.clear();
}

void Loop::ExpireDeadlines() {
  TagDue();
  const auto connect_timeout = config_.limits.connect_timeout;
  while (!connecting_.empty() && connecting_.front().since + connect_timeout <= now_) {
    ReportConnectTimeout(connecting_.front());
    connecting_.front().backends->Failed(connecting_.front().backend_index, NowMs(),
                                         connecting_.front().handshake);
    Finish(connecting_.front(), End::kBackendTimeout);
  }
  const auto share = connect_timeout / kFailoverShare;
  while (!trying_.empty() && trying_.front().since + share <= now_) {
    ReportConnectTimeout(trying_.front());
    Failover(trying_.front(), End::kBackendTimeout);  // moves it to the back, or ends it
  }
  ExpireHeaderWaits();
  const auto idle_timeout = config_.limits.idle_timeout;
  if (idle_timeout.count() == 0) return;
  while (!relaying_.empty() && relaying_.front().since + idle_timeout <= now_) {
    Finish(relaying_.front(), End::kIdleTimeout);
  }
}

// The epoll_wait timeout is the loop's only timer: the nearest deadline is at the front of
// connecting_, trying_, relaying_ or a list of header_waits_, so there is no timerfd and no
// periodic tick.
int Loop::NextTimeoutMs() const {
  if (!turns_.empty()) return 0;
  std::optional<Clock::time_point> next;
  if (!connecting_.empty()) next = connecting_.front().since + config_.limits.connect_timeout;
  if (!trying_.empty()) {
    const auto attempt = trying_.front().since + config_.limits.connect_timeout / kFailoverShare;
    next = next ? std::min(*next, attempt) : attempt;
  }
  if (config_.limits.idle_timeout.count() != 0 && !relaying_.empty()) {
    const auto idle = relaying_.front().since + config_.limits.idle_timeout;
    next = next ? std::min(*next, idle) : idle;
  }
  NextHeaderDeadline(next);
  if (!pending_tags_.empty()) {
    next = next ? std::min(*next, pending_tags_.front().due) : pending_tags_.front().due;
  }
  if (!next) return -1;
  const auto wait = *next - Clock::now();
  if (wait <= Clock::duration::zero()) return 0;
  // Rounded up: waking before the deadline would only cost another epoll_wait.
  const auto ms = std::chrono::ceil<std::chrono::milliseconds>(wait).count();
  return static_cast<int>(std::min<int64_t>(ms, INT_MAX));
}

void Loop::ResetEverything() {
  while (!connecting_.empty()) Finish(connecting_.front(), End::kStopped);
  while (!trying_.empty()) Finish(trying_.front(), End::kStopped);
  while (!relaying_.empty()) Finish(relaying_.front(), End::kStopped);
  for (auto& [timeout_ms, list] : header_waits_) {
    while (!list.empty()) Finish(list.front(), End::kStopped);
  }
  ended_.clear();
  turns_.clear();
  retries_.clear();
  pending_tags_popped_ += pending_tags_.size();  // all cleared by Finish
  pending_tags_.clear();
}

}  // namespace xdpfwd::kernel_path
