// The datagram path's thread: UDP listeners that open an association per client address, TCP
// listeners whose connections each get a UDP backend leg, idle deadlines and the access log.
#include "forwarder/datagram_path_loop.h"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <time.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <climits>
#include <cstring>
#include <list>
#include <string_view>
#include <unordered_map>

#include "forwarder/access.h"
#include "forwarder/intrusive_list.h"
#include "os/clock.h"
#include "os/fork_gate.h"
#include "os/log.h"
#include "os/unique_fd.h"

namespace xdpfwd::datagram_path {
namespace {

constexpr int kEventBatch = 64;
// Datagrams (or accepts) taken from one socket per readiness event. Every socket is
// level-triggered, so what is left is picked up on the next iteration, after the other sockets
// had their turn.
constexpr int kSocketBatch = 32;
// The largest UDP payload over IPv4 (65535 - 20 - 8): each read of a stream leg becomes one
// datagram of at most this, which both families can send.
constexpr size_t kMaxDatagram = 65507;
// Bytes an association may hold for a stream leg that is connecting or slow. Beyond it whole
// datagrams are dropped (never a part of one, so the stream carries only whole payloads): a
// UDP sender expects loss, and 8192 stalled associations then pin at most 2 GiB.
constexpr size_t kStreamQueueBytes = 256 * 1024;
// Capped by net.core.somaxconn; as the kernel path's listeners.
constexpr int kListenBacklog = 4096;
// After accept failed for want of descriptors or memory, the listener rests this long (or until
// an association ends) instead of waking the level-triggered loop for the same client again.
constexpr uint64_t kAcceptRestNs = 100'000'000;

// epoll_event.data: a pointer with what it points to in its low bits.
enum : uint64_t { kWakeTag = 0, kListenerTag = 1, kBackendTag = 2, kClientTag = 3, kTagMask = 3 };

uint64_t Tagged(const void* p, uint64_t tag) { return reinterpret_cast<uintptr_t>(p) | tag; }
template <typename T>
T* Untagged(uint64_t data) {
  return reinterpret_cast<T*>(static_cast<uintptr_t>(data & ~kTagMask));
}

int64_t RealtimeNs() {
  timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

int SocketError(int fd) {
  int err = 0;
  socklen_t len = sizeof(err);
  if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0) return errno;
  return err;
}

bool WouldBlock(int err) { return err == EAGAIN || err == EWOULDBLOCK; }

ClientKey KeyOf(const sockaddr_storage& from) {
  ClientKey key;
  key.family = from.ss_family;
  if (from.ss_family == AF_INET) {
    const auto& in = reinterpret_cast<const sockaddr_in&>(from);
    std::memcpy(key.address.data(), &in.sin_addr, sizeof(in.sin_addr));
    key.port = in.sin_port;
  } else if (from.ss_family == AF_INET6) {
    const auto& in6 = reinterpret_cast<const sockaddr_in6&>(from);
    std::memcpy(key.address.data(), &in6.sin6_addr, sizeof(in6.sin6_addr));
    key.port = in6.sin6_port;
    key.scope_id = in6.sin6_scope_id;
  }
  return key;
}

// Bytes waiting for a stream leg that would not take them yet (connecting, or its send buffer
// full). Holds whole datagrams only, up to kStreamQueueBytes.
class StreamQueue {
 public:
  bool empty() const { return head_ == bytes_.size(); }
  bool Fits(size_t n) const { return bytes_.size() - head_ + n <= kStreamQueueBytes; }
  void Append(const uint8_t* p, size_t n) {
    if (head_ > 0 && head_ * 2 >= bytes_.size()) {  // reuse the front once half is spent
      bytes_.erase(bytes_.begin(), bytes_.begin() + static_cast<std::ptrdiff_t>(head_));
      head_ = 0;
    }
    bytes_.insert(bytes_.end(), p, p + n);
  }
  // Sends what the socket takes: the bytes sent, or -1 with errno set.
  ssize_t Flush(int fd) {
    size_t sent = 0;
    while (!empty()) {
      const ssize_t n = send(fd, bytes_.data() + head_, bytes_.size() - head_, MSG_NOSIGNAL);
      if (n < 0) {
        if (errno == EINTR) continue;
        if (WouldBlock(errno)) break;
        return -1;
      }
      head_ += static_cast<size_t>(n);
      sent += static_cast<size_t>(n);
    }
    if (empty()) Release();  // a drained queue gives its memory back: most associations idle
    return static_cast<ssize_t>(sent);
  }
  void Release() {
    std::vector<uint8_t>().swap(bytes_);
    head_ = 0;
  }

 private:
  std::vector<uint8_t> bytes_;
  size_t head_ = 0;
};

}  // namespace

// One client's association. A UDP client's leg is the rule's listener (replies go out with
// sendto from it, so the client sees them come from the address it sent to); a TCP client has
// its own socket. The backend leg is a connected UDP socket or a TCP stream.
struct Loop::Association : ListHook<Association, IdleTag> {
  Listener* listener = nullptr;
  sockaddr_storage client{};
  socklen_t client_length = 0;
  UniqueFd backend;
  UniqueFd client_stream;  // TCP client (tcp->udp rules) only
  // For the association's stream leg, whichever it is: the TCP backend or the TCP client.
  StreamQueue queue;
  AssociationList::iterator self;
  uint64_t bytes_in = 0, bytes_out = 0;
  uint64_t last_active_ns = 0;
  bool connecting = false;   // TCP backend handshake under way
  bool want_output = false;  // EPOLLOUT armed on the stream leg
  bool ended = false;

  bool udp_client() const { return !client_stream; }
  bool tcp_backend() const { return listener->rule->backend_protocol == Protocol::kTcp; }
  int stream_fd() const { return tcp_backend() ? backend.get() : client_stream.get(); }
};

Loop::Loop(const DatagramPathConfig& config, Counters& counters)
    : config_(config), counters_(counters) {}

Loop::~Loop() = default;

Result<std::unique_ptr<Loop>> Loop::Create(const DatagramPathConfig& config, Counters& counters) {
  static_assert(alignof(Association) > kTagMask && alignof(Listener) > kTagMask);
  std::unique_ptr<Loop> loop(new Loop(config, counters));
  if (auto opened = loop->Open(); !opened) return opened.error();
  return loop;
}

Result<void> Loop::Open() {
  epoll_.reset(epoll_create1(EPOLL_CLOEXEC));
  if (!epoll_) return SystemError("datagram path: epoll_create1");
  wake_.reset(eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
  if (!wake_) return SystemError("datagram path: eventfd");
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.u64 = Tagged(nullptr, kWakeTag);
  if (epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, wake_.get(), &ev) != 0) {
    return SystemError("datagram path: epoll_ctl");
  }
  uint64_t seed = 0;
  if (getrandom(&seed, sizeof(seed), GRND_NONBLOCK) != sizeof(seed)) seed = MonotonicNs();
  for (const Rule& rule : config_.rules) {
    if (auto opened = OpenListener(rule, seed); !opened) return opened;
  }
  return {};
}

Result<void> Loop::OpenListener(const Rule& rule, uint64_t seed) {
  const bool udp = rule.listen_protocol == Protocol::kUdp;
  const std::string where =
      "listen " + ToString(rule.listen) + "/" + std::string(ProtocolName(rule.listen_protocol));
  auto l = std::make_unique<Listener>();
  l->rule = &rule;
  l->clients = std::unordered_map<ClientKey, Association*, ClientKeyHash>(0, ClientKeyHash{seed});
  l->fd.reset(socket(rule.listen.family(),
                     (udp ? SOCK_DGRAM : SOCK_STREAM) | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  const int fd = l->fd.get();
  if (fd < 0) return SystemError(where);
  const int one = 1;
  // TCP only: SO_REUSEADDR on a UDP socket would let a second forwarder bind the same port and
  // silently split its clients, where the user needs "Address already in use".
  if (!udp && setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) != 0) {
    return SystemError(where + ": SO_REUSEADDR");
  }
  // [::]:port serves IPv4 clients too unless an IPv4 rule of this path takes the port.
  const int v6only = ListenIpv6Only(rule, config_.rules) ? 1 : 0;
  if (rule.listen.family() == AF_INET6 &&
      setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &v6only, sizeof(v6only)) != 0) {
    return SystemError(where + ": IPV6_V6ONLY");
  }
  if (bind(fd, rule.listen.get(), rule.listen.length) != 0) return SystemError(where);
  if (!udp && listen(fd, kListenBacklog) != 0) return SystemError(where);
  l->bound.length = sizeof(l->bound.storage);
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&l->bound.storage), &l->bound.length) != 0) {
    return SystemError(where + ": getsockname");
  }
  if (udp && rule.udp_timeout_s != 0) {
    const uint64_t timeout_ns = uint64_t{rule.udp_timeout_s} * 1'000'000'000u;
    auto same = std::find_if(idle_.begin(), idle_.end(),
                             [&](const auto& d) { return d->timeout_ns == timeout_ns; });
    if (same == idle_.end()) {
      idle_.push_back(std::make_unique<IdleDeadlines>());
      idle_.back()->timeout_ns = timeout_ns;
      same = std::prev(idle_.end());
    }
    l->idle = same->get();
  }
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.u64 = Tagged(l.get(), kListenerTag);
  if (epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, fd, &ev) != 0) {
    return SystemError(where + ": epoll_ctl");
  }
  listeners_.push_back(std::move(l));
  return {};
}

void Loop::RequestStop() {
  stop_.store(true, std::memory_order_release);
  const uint64_t one = 1;
  // Cannot fail short of a full counter (2^64 - 2 wake-ups); the loop re-reads stop_ anyway.
  [[maybe_unused]] const ssize_t n = write(wake_.get(), &one, sizeof(one));
}

void Loop::Run() {
  epoll_event events[kEventBatch];
  ForkGate& gate = ForkGate::OfProcess();
  while (!stop_.load(std::memory_order_acquire)) {
    const int n = epoll_wait(epoll_.get(), events, kEventBatch, NextTimeoutMs());
    // The batch's work is one stretch of the fork gate's (os/fork_gate.h).
    const ForkGate::Pass working = gate.Enter();
    if (n < 0 && errno != EINTR) {
      Add(counters_.errors);
      Log(std::string("datagram path: epoll_wait: ") + std::strerror(errno) + "; thread stops");
      break;
    }
    now_ns_ = MonotonicNs();
    for (int i = 0; i < n; ++i) {
      const uint64_t data = events[i].data.u64;
      switch (data & kTagMask) {
        case kWakeTag:
          OnWake();
          break;
        case kListenerTag: {
          Listener& l = *Untagged<Listener>(data);
          if (l.rule->listen_protocol == Protocol::kUdp) {
            OnDatagramListener(l);
          } else {
            OnStreamListener(l);
          }
          break;
        }
        case kBackendTag:
          OnBackendEvent(*Untagged<Association>(data), events[i].events);
          break;
        case kClientTag: {
          Association& a = *Untagged<Association>(data);
          if (!a.ended) OnStreamLeg(a, false, events[i].events);
          break;
        }
      }
    }
    ExpireDeadlines();
    // Their descriptors are closed (so out of the epoll set) and this batch is handled.
    ended_.clear();
  }
  while (!live_.empty()) Finish(live_.front(), End::kStopped);
  ended_.clear();
}

void Loop::OnWake() {
  uint64_t count = 0;
  [[maybe_unused]] const ssize_t n = read(wake_.get(), &count, sizeof(count));
}

// One recvfrom per datagram: the datagrams of a batch go to different backend sockets, one
// send each, so recvmmsg would save at most half the syscalls for kSocketBatch times the buffer.
// This path carries rinetd's UDP rules (DNS, syslog, games), not bulk transfer.
void Loop::OnDatagramListener(Listener& l) {
  for (int i = 0; i < kSocketBatch; ++i) {
    sockaddr_storage from{};
    socklen_t from_length = sizeof(from);
    const ssize_t n = recvfrom(l.fd.get(), buffer_.data(), buffer_.size(), MSG_TRUNC,
                               reinterpret_cast<sockaddr*>(&from), &from_length);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (!WouldBlock(errno)) Add(counters_.errors);  // ENOMEM; the next event retries
      return;
    }
    if (static_cast<size_t>(n) > buffer_.size()) {
      Add(counters_.dropped);  // a jumbogram: more than any backend leg could carry
      continue;
    }
    Association* a = nullptr;
    if (auto known = l.clients.find(KeyOf(from)); known != l.clients.end()) {
      a = known->second;
    } else {
      a = OpenAssociation(l, from, UniqueFd());
      if (a == nullptr) continue;  // refused or failed: the datagram is dropped, as rinetd does
    }
    const auto bytes = static_cast<size_t>(n);
    a->bytes_in += bytes;
    Add(counters_.datagrams_in);
    Add(counters_.bytes_in, bytes);
    Touch(*a);
    if (!SendToBackend(*a, buffer_.data(), bytes)) Finish(*a, End::kBackend);
  }
}

void Loop::OnStreamListener(Listener& l) {
  for (int i = 0; i < kSocketBatch; ++i) {
    sockaddr_storage from{};
    socklen_t from_length = sizeof(from);
    UniqueFd client(accept4(l.fd.get(), reinterpret_cast<sockaddr*>(&from), &from_length,
                            SOCK_NONBLOCK | SOCK_CLOEXEC));
    if (!client) {
      if (WouldBlock(errno)) return;
      if (errno == EINTR || errno == ECONNABORTED) continue;
      // EMFILE, ENFILE, ENOBUFS, ENOMEM: the client stays queued; a level-triggered listener
      // would report it again at once, so it rests until something is freed.
      const int err = errno;
      Add(counters_.errors);
      Report(*l.rule, sockaddr_storage{}, SessionResult::kAcceptFailed);
      LogBackendFailure(*l.rule, "accept", err);
      RestListener(l);
      return;
    }
    OpenAssociation(l, from, std::move(client));
  }
}

Loop::Association* Loop::OpenAssociation(Listener& l, const sockaddr_storage& client,
                                         UniqueFd stream) {
  const Rule& rule = *l.rule;
  const auto* client_address = reinterpret_cast<const sockaddr*>(&client);
  // Before any backend socket exists: a refused client costs nothing but this event. A refused
  // UDP client is judged again on every datagram, as rinetd does (no state kept for it).
  if (HasAccessPatterns(config_.global_access, rule.access)) {
    const AccessVerdict verdict =
        CheckAccess(config_.global_access, rule.access, ClientAddressText(client_address));
    if (verdict != AccessVerdict::kAllowed) {
      const bool denied = verdict == AccessVerdict::kDenied;
      Add(denied ? counters_.refused_denied : counters_.refused_not_allowed);
      Report(rule, client, denied ? SessionResult::kDenied : SessionResult::kNotAllowed);
      return nullptr;  // closes a TCP client's `stream`
    }
  }
  if (open_ >= config_.max_associations) {
    Add(counters_.refused_full);
    uint64_t held_back = 0;
    if (full_log_.Count(now_ns_ / 1'000'000u, held_back)) {
      std::string line = "datagram path: " + std::to_string(open_) +
                         " associations open (max_associations); refusing new clients";
      if (held_back > 0) line += "; " + std::to_string(held_back) + " more since the last line";
      Log(line);
    }
    return nullptr;
  }

  const bool tcp = rule.backend_protocol == Protocol::kTcp;
  UniqueFd backend(socket(rule.backend.family(),
                          (tcp ? SOCK_STREAM : SOCK_DGRAM) | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  if (!backend) {
    LogBackendFailure(rule, "socket", errno);
    Add(counters_.backend_failed);
    Report(rule, client, SessionResult::kLocalSocketFailed);
    return nullptr;
  }
  const int one = 1;
  if (rule.source.family() != AF_UNSPEC) {
    // The port is the connect's to choose: with bind alone the kernel would reserve a port for
    // the source address whatever the backend, and run out after ~28,000 of them.
    if (tcp) setsockopt(backend.get(), IPPROTO_IP, IP_BIND_ADDRESS_NO_PORT, &one, sizeof(one));
    if (bind(backend.get(), rule.source.get(), rule.source.length) != 0) {
      LogBackendFailure(rule, "bind", errno);
      Add(counters_.backend_failed);
      Report(rule, client, SessionResult::kLocalBindFailed);
      return nullptr;
    }
  }
  // Each datagram is a message someone waits for: no Nagle delay on either stream leg.
  if (tcp) setsockopt(backend.get(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  if (stream) setsockopt(stream.get(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  // A UDP backend leg is connected too: the backend sees one source port per client, replies
  // from anyone else are filtered by the kernel, and ICMP unreachable comes back as an error.
  bool connecting = false;
  if (connect(backend.get(), rule.backend.get(), rule.backend.length) != 0) {
    if (!(tcp && errno == EINPROGRESS)) {
      LogBackendFailure(rule, "connect", errno);
      Add(counters_.backend_failed);
      Report(rule, client, SessionResult::kLocalConnectFailed);
      return nullptr;
    }
    connecting = true;
  }

  live_.emplace_back();
  Association& a = live_.back();
  a.self = std::prev(live_.end());
  a.listener = &l;
  a.client = client;
  a.client_length = client.ss_family == AF_INET6 ? sizeof(sockaddr_in6) : sizeof(sockaddr_in);
  a.backend = std::move(backend);
  a.client_stream = std::move(stream);
  a.connecting = connecting;
  a.want_output = connecting;  // the handshake's outcome comes as EPOLLOUT or EPOLLERR
  epoll_event ev{};
  ev.events = EPOLLIN | (tcp ? EPOLLRDHUP : 0u) | (connecting ? EPOLLOUT : 0u);
  ev.data.u64 = Tagged(&a, kBackendTag);
  bool added = epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, a.backend.get(), &ev) == 0;
  if (added && a.client_stream) {
    ev.events = EPOLLIN | EPOLLRDHUP;
    ev.data.u64 = Tagged(&a, kClientTag);
    added = epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, a.client_stream.get(), &ev) == 0;
  }
  if (!added) {  // ENOMEM, or the user's epoll watch limit
    Add(counters_.errors);
    Report(rule, client, SessionResult::kUnknownError);
    live_.erase(a.self);  // its descriptors close, leaving the epoll set with them
    return nullptr;
  }
  if (a.udp_client()) l.clients.emplace(KeyOf(client), &a);
  a.last_active_ns = now_ns_;
  if (l.idle != nullptr) l.idle->list.PushBack(a);
  ++open_;
  Add(counters_.associations_opened);
  Add(counters_.associations_open);
  Report(rule, client, SessionResult::kOpened);
  return &a;
}

void Loop::OnBackendEvent(Association& a, uint32_t events) {
  if (a.ended) return;  // ended earlier in this batch
  if (a.tcp_backend()) return OnStreamLeg(a, true, events);
  OnDatagramBackend(a);
}

// Replies of a UDP backend. Its pending ICMP error (EPOLLERR) is what the next recv returns.
void Loop::OnDatagramBackend(Association& a) {
  for (int i = 0; i < kSocketBatch; ++i) {
    const ssize_t n = recv(a.backend.get(), buffer_.data(), buffer_.size(), MSG_TRUNC);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (WouldBlock(errno)) return;
      // ECONNREFUSED (port unreachable), EHOSTUNREACH, ...: the backend side is gone.
      return Finish(a, End::kBackend);
    }
    Touch(a);
    if (static_cast<size_t>(n) > buffer_.size()) {
      Add(counters_.dropped);
      continue;
    }
    const auto bytes = static_cast<size_t>(n);
    if (a.udp_client()) {
      SendToClient(a, buffer_.data(), bytes);
    } else if (!WriteStream(a, false, buffer_.data(), bytes)) {
      return Finish(a, End::kClient);
    }
  }
}

// The TCP leg of an association: the backend of a udp->tcp rule or the client of a tcp->udp
// rule. Level-triggered; EPOLLOUT is armed only while its queue holds bytes (or it connects).
void Loop::OnStreamLeg(Association& a, bool backend_leg, uint32_t events) {
  const End leg_ended = backend_leg ? End::kBackend : End::kClient;
  const int fd = backend_leg ? a.backend.get() : a.client_stream.get();
  if (a.connecting) {
    if (!(events & (EPOLLOUT | EPOLLERR | EPOLLHUP))) return;
    if (SocketError(fd) != 0 || (events & (EPOLLERR | EPOLLHUP))) {
      return Finish(a, End::kConnectFailed);  // refused, unreachable, the SYNs went unanswered
    }
    a.connecting = false;
    events |= EPOLLOUT;  // what arrived meanwhile goes out now
  }
  // A reset is final: there is nothing to deliver to a leg that is gone.
  if ((events & EPOLLERR) && SocketError(fd) != 0) return Finish(a, leg_ended);
  if (events & EPOLLOUT) {
    const ssize_t sent = a.queue.Flush(fd);
    if (sent < 0) return Finish(a, leg_ended);
    if (!backend_leg) {
      a.bytes_out += static_cast<size_t>(sent);
      Add(counters_.bytes_out, static_cast<size_t>(sent));
    }
    if (a.queue.empty() && !WantOutput(a, false)) return;
  }
  if (events & (EPOLLIN | EPOLLRDHUP | EPOLLHUP)) ReadStream(a, backend_leg);
}

void Loop::ReadStream(Association& a, bool backend_leg) {
  const int fd = backend_leg ? a.backend.get() : a.client_stream.get();
  for (int i = 0; i < kSocketBatch; ++i) {
    const ssize_t n = recv(fd, buffer_.data(), kMaxDatagram, 0);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (WouldBlock(errno)) return;
    }
    if (n <= 0) return Finish(a, backend_leg ? End::kBackend : End::kClient);  // EOF or reset
    const auto bytes = static_cast<size_t>(n);
    Touch(a);
    if (backend_leg) {
      SendToClient(a, buffer_.data(), bytes);
      continue;
    }
    a.bytes_in += bytes;
    Add(counters_.bytes_in, bytes);
    if (!SendToBackend(a, buffer_.data(), bytes)) return Finish(a, End::kBackend);
  }
}

// Client to backend, as one datagram (UDP backend) or into the stream (TCP backend). False:
// the backend side is gone.
bool Loop::SendToBackend(Association& a, const uint8_t* p, size_t n) {
  if (a.tcp_backend()) return WriteStream(a, true, p, n);
  for (;;) {
    if (send(a.backend.get(), p, n, 0) >= 0) return true;
    if (errno == EINTR) continue;
    // A full socket buffer, or a payload above the backend path's limit: UDP may lose it.
    if (WouldBlock(errno) || errno == ENOBUFS || errno == EMSGSIZE) {
      Add(counters_.dropped);
      return true;
    }
    return false;  // ECONNREFUSED from an earlier ICMP unreachable, EHOSTUNREACH, ...
  }
}

// Backend to a UDP client, from the rule's listener. A failure loses this datagram only.
void Loop::SendToClient(Association& a, const uint8_t* p, size_t n) {
  for (;;) {
    if (sendto(a.listener->fd.get(), p, n, 0, reinterpret_cast<const sockaddr*>(&a.client),
               a.client_length) >= 0) {
      a.bytes_out += n;
      Add(counters_.datagrams_out);
      Add(counters_.bytes_out, n);
      return;
    }
    if (errno == EINTR) continue;
    if (!WouldBlock(errno) && errno != ENOBUFS) Add(counters_.errors);  // EPERM (a firewall), ...
    Add(counters_.dropped);
    return;
  }
}

// One datagram's payload into the stream leg: straight to the socket when nothing waits, else
// queued whole, or dropped when the queue cannot take it whole. False: the leg failed.
bool Loop::WriteStream(Association& a, bool backend_leg, const uint8_t* p, size_t n) {
  if (a.connecting || !a.queue.empty()) {
    if (!a.queue.Fits(n)) {
      Add(counters_.dropped);
      return true;
    }
    a.queue.Append(p, n);
    return true;
  }
  ssize_t sent = 0;
  do {
    sent = send(a.stream_fd(), p, n, MSG_NOSIGNAL);
  } while (sent < 0 && errno == EINTR);
  if (sent < 0) {
    if (!WouldBlock(errno)) return false;
    sent = 0;
  }
  if (!backend_leg) {
    a.bytes_out += static_cast<size_t>(sent);
    Add(counters_.bytes_out, static_cast<size_t>(sent));
  }
  if (static_cast<size_t>(sent) < n) {
    // The rest of a datagram that has begun: kept whatever the bound (the queue was empty, so
    // it holds one datagram at most), since the stream must not carry a part of one.
    a.queue.Append(p + sent, n - static_cast<size_t>(sent));
    return WantOutput(a, true);
  }
  return true;
}

// Arms or disarms EPOLLOUT on the stream leg; false when epoll failed and `a` has ended.
bool Loop::WantOutput(Association& a, bool want) {
  if (a.want_output == want) return true;
  epoll_event ev{};
  ev.events = EPOLLIN | EPOLLRDHUP | (want ? EPOLLOUT : 0u);
  ev.data.u64 = Tagged(&a, a.tcp_backend() ? kBackendTag : kClientTag);
  if (epoll_ctl(epoll_.get(), EPOLL_CTL_MOD, a.stream_fd(), &ev) != 0) {
    Add(counters_.errors);
    Finish(a, End::kError);
    return false;
  }
  a.want_output = want;
  return true;
}

void Loop::Touch(Association& a) {
  if (a.last_active_ns == now_ns_) return;
  a.last_active_ns = now_ns_;
  if (a.listener->idle != nullptr) a.listener->idle->list.MoveToBack(a);  // stays ordered
}

void Loop::Finish(Association& a, End why) {
  if (a.ended) return;
  a.ended = true;
  SessionResult result = SessionResult::kRemoteClosedFirst;
  switch (why) {
    case End::kClient:
      Add(counters_.closed_client);
      break;
    case End::kBackend:
      Add(counters_.closed_backend);
      result = SessionResult::kLocalClosedFirst;
      break;
    case End::kIdle:
      // rinetd logs a timed-out association as done-remote-closed. One whose backend never
      // answered the handshake in all that time failed to connect, though.
      if (a.connecting) {
        Add(counters_.backend_failed);
        result = SessionResult::kLocalConnectFailed;
      } else {
        Add(counters_.closed_idle);
      }
      break;
    case End::kConnectFailed:
      Add(counters_.backend_failed);
      result = SessionResult::kLocalConnectFailed;
      break;
    case End::kStopped:
      Add(counters_.closed_stopped);
      result = SessionResult::kShutdown;  // as the stream paths log theirs
      break;
    case End::kError:  // counted in errors where it happened
      result = SessionResult::kUnknownError;
      break;
  }
  Report(*a.listener->rule, a.client, result, a.bytes_in, a.bytes_out);
  // Closing takes each descriptor out of the epoll set (none is ever duplicated).
  a.backend.reset();
  a.client_stream.reset();
  a.queue.Release();
  Listener& l = *a.listener;
  if (l.idle != nullptr) l.idle->list.Remove(a);
  if (l.rule->listen_protocol == Protocol::kUdp) l.clients.erase(KeyOf(a.client));
  ended_.splice(ended_.end(), live_, a.self);
  --open_;
  Counters::Sub(counters_.associations_open);
  WakeListeners();  // a descriptor was freed
}

void Loop::ExpireDeadlines() {
  for (const auto& idle : idle_) {
    while (!idle->list.empty() &&
           idle->list.front()->last_active_ns + idle->timeout_ns <= now_ns_) {
      Finish(*idle->list.front(), End::kIdle);
    }
  }
  if (!resting_.empty() && rest_until_ns_ <= now_ns_) WakeListeners();
}

// epoll_wait's timeout is the loop's only timer: the next deadline is the front of one of the
// idle lists (one per distinct timeout, a handful), or a resting listener's.
int Loop::NextTimeoutMs() const {
  uint64_t next = UINT64_MAX;
  for (const auto& idle : idle_) {
    if (!idle->list.empty()) {
      next = std::min(next, idle->list.front()->last_active_ns + idle->timeout_ns);
    }
  }
  if (!resting_.empty()) next = std::min(next, rest_until_ns_);
  if (next == UINT64_MAX) return -1;
  const uint64_t now = MonotonicNs();
  if (next <= now) return 0;
  // Rounded up: waking before the deadline would only cost another epoll_wait.
  const uint64_t ms = (next - now + 999'999) / 1'000'000;
  return static_cast<int>(std::min<uint64_t>(ms, INT_MAX));
}

void Loop::RestListener(Listener& l) {
  if (l.resting) return;
  epoll_event ev{};
  ev.data.u64 = Tagged(&l, kListenerTag);
  if (epoll_ctl(epoll_.get(), EPOLL_CTL_MOD, l.fd.get(), &ev) != 0) return;  // keeps polling
  l.resting = true;
  resting_.push_back(&l);
  rest_until_ns_ = now_ns_ + kAcceptRestNs;
}

void Loop::WakeListeners() {
  for (Listener* l : resting_) {
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.u64 = Tagged(l, kListenerTag);
    if (epoll_ctl(epoll_.get(), EPOLL_CTL_MOD, l->fd.get(), &ev) != 0) Add(counters_.errors);
    l->resting = false;
  }
  resting_.clear();
}

void Loop::Report(const Rule& rule, const sockaddr_storage& client, SessionResult result,
                  uint64_t bytes_in, uint64_t bytes_out) const {
  if (!config_.on_session) return;
  SessionEvent event;
  event.unix_ns = RealtimeNs();
  event.rule_id = rule.id;
  event.client = client;
  event.bytes_in = bytes_in;
  event.bytes_out = bytes_out;
  event.result = result;
  config_.on_session(event);
}

// Backend legs fail together (a dead route, no descriptors left): one line a second at most.
void Loop::LogBackendFailure(const Rule& rule, const char* what, int err) {
  uint64_t held_back = 0;
  if (!backend_log_.Count(now_ns_ / 1'000'000u, held_back)) return;
  std::string line =
      "datagram path: " + ToString(rule.listen) + "/" +
      std::string(ProtocolName(rule.listen_protocol)) + " -> " + ToString(rule.backend) + "/" +
      std::string(ProtocolName(rule.backend_protocol)) + ": " + what + ": " + std::strerror(err);
  if (held_back > 0) line += "; " + std::to_string(held_back) + " more since the last line";
  Log(line);
}

}  // namespace xdpfwd::datagram_path
