// A kernel-path connection's backend leg (see kernel_path_loop.h): the pick among the rule's
// backends, the connect, failover when a handshake fails, the PROXY header it starts with, and
// [retry-on=empty-response]'s second leg when one ends before answering.
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstring>
#include <string>

#include "forwarder/kernel_path_connection.h"
#include "os/log.h"

namespace xdpfwd::kernel_path {

// With nothing tried yet, the pick always finds one (BackendChoice::Pick).
void Loop::PickBackend(Connection& c) {
  BackendChoice& backends = *c.backends;
  uint8_t address[16];
  const size_t n = ClientAddressBytes(reinterpret_cast<const sockaddr*>(&c.peer), address);
  c.backend_index = backends.Pick(NowMs(), 0, {address, n}).value_or(0);
  backends.Opened(c.backend_index);
}

BackendChoice& Loop::BackendsOf(const Rule& rule) {
  auto& slot = backends_[&rule];
  if (!slot) {
    slot = std::make_unique<BackendChoice>(rule.id, rule.balance, PickerBackends(AllBackends(rule)),
                                           config_.health);
  }
  return *slot;
}

void Loop::OpenBackend(Connection& c) {
  c.handshake = c.backends->Began(c.backend_index, NowMs());
  BackendSocket backend =
      connector_.Connect(*c.rule, c.rule->backend_address(c.backend_index), now_);
  if (backend.lease.port != 0) Add(counters_.own_port_connects);
  if (backend.retries != 0) Add(counters_.port_retries, backend.retries);
  if (backend.kernel_no_port) Add(counters_.kernel_no_port);
  if (backend.err != 0) {
    if (backend.err == EADDRNOTAVAIL) return Finish(c, End::kBackendNoPort);
    // ECONNREFUSED, ENETUNREACH (no route), EMFILE, ENOBUFS, ...
    return Failover(c, backend.err == ECONNREFUSED ? End::kBackendRefused : End::kBackendError);
  }
  c.backend.fd = std::move(backend.fd);
  c.lease = backend.lease;
  Trace(c, RecorderEvent::kBackendSynSent, RecorderLeg::kBackend, backend.lease.port);
  if (c.tagged) TagSocket(c, c.backend.fd, RecorderLeg::kBackend);  // failover, retry
  // The backend's first EPOLLOUT (or EPOLLERR) says how the handshake went.
  epoll_event ev{};
  ev.events = EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLET;
  ev.data.u64 = Tagged(&c, kBackendTag);
  if (epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, c.backend.fd.get(), &ev) != 0) {
    return Finish(c, End::kError);
  }
}

// Nothing has gone to the failed backend (the client's bytes wait in its socket until a
// handshake completes), so the client never learns: another backend takes the connection, as
// long as the rule has one left, untried, and the connect timeout since the accept has not run
// out. The failure counts toward that backend's passive health.
void Loop::Failover(Connection& c, End why) {
  BackendChoice& b = *c.backends;
  if (b.Failed(c.backend_index, NowMs(), c.handshake)) Add(counters_.relay.backends_marked_down);
  b.Closed(c.backend_index);
  c.tried |= uint64_t{1} << c.backend_index;
  std::optional<size_t> next;
  if (now_ - c.opening < config_.limits.connect_timeout) {
    uint8_t address[16];
    const size_t n = ClientAddressBytes(reinterpret_cast<const sockaddr*>(&c.peer), address);
    next = b.Pick(NowMs(), c.tried, {address, n});
  }
  if (!next) {
    b.Opened(c.backend_index);  // Finish closes it
    return Finish(c, why);
  }
  Add(counters_.relay.backend_failovers);
  Add(c.rule_counters->backend_failovers);
  // The failed leg: its socket is closed (and leaves the epoll set), its port given back.
  c.backend = Leg{};
  connector_.Release(c.lease, false, now_);
  c.lease = BackendLease{};
  c.backend_index = *next;
  b.Opened(c.backend_index);
  c.since = now_;
  c.list->splice(c.list->end(), *c.list, c.self);  // its new attempt's deadline is the latest
  OpenBackend(c);
}

// [retry-on=empty-response]: the backend leg ended (reset or FIN) before the backend sent a
// byte, and c still keeps every byte the client sent it (c.to_backend). As Failover does for a
// handshake, a backend of the rule not tried yet takes the connection and the client never
// learns: the new leg gets the kept bytes first, then the client's FIN if it was read. The old
// backend's session (Connected) ends here, as Finish would end it.
bool Loop::Retry(Connection& c) {
  if (!c.to_backend.keeping()) return false;
  // Bytes that came before its reset are still read first: it had begun to answer.
  uint8_t byte = 0;
  if (recv(c.backend.fd.get(), &byte, 1, MSG_PEEK | MSG_DONTWAIT) > 0) {
    c.to_backend.StopKeeping();
    return false;
  }
  BackendChoice& b = *c.backends;
  c.tried |= uint64_t{1} << c.backend_index;
  uint8_t address[16];
  const size_t n = ClientAddressBytes(reinterpret_cast<const sockaddr*>(&c.peer), address);
  const std::optional<size_t> next = b.Pick(NowMs(), c.tried, {address, n});
  if (!next) {
    c.to_backend.StopKeeping();  // each backend is tried once: no later retry either
    return false;
  }
  Add(counters_.relay.backend_retries);
  Add(c.rule_counters->backend_retries);
  b.Closed(c.backend_index);
  b.Ended(c.backend_index, c.bytes_in, 0);
  c.bytes_in = 0;  // the client's bytes count once: the new leg sends them all again
  ResetClose(c.backend.fd);
  c.backend = Leg{};
  connector_.Release(c.lease, false, now_);
  c.lease = BackendLease{};
  c.to_backend.Rewind();
  c.backend_closed_first = false;
  c.handshake = HealthAttempt{};
  c.backend_index = *next;
  b.Opened(c.backend_index);
  c.connecting = true;
  c.since = now_;
  c.opening = now_;  // the retry has the whole connect timeout
  if (c.queued) {
    std::erase(turns_, &c);
    c.queued = false;
  }
  trying_.splice(trying_.end(), *c.list, c.self);  // a rule with several backends
  c.list = &trying_;
  retries_.push_back(&c);
  return true;
}

void Loop::OpenRetries() {
  for (Connection* c : retries_) {
    if (!c->ended) OpenBackend(*c);
  }
  retries_.clear();
}

// A peek, so the first byte of an answer is still relayed by the pump (one recv more per
// connection, only with the option). Its end or its reset is taken here: a reset's error is
// gone from the socket once read, so c is ended here as the pump would have ended it.
bool Loop::BackendAnswering(Connection& c) {
  if (!c.backend.readable) return false;
  uint8_t byte = 0;
  ssize_t n = 0;
  do {
    n = recv(c.backend.fd.get(), &byte, 1, MSG_PEEK | MSG_DONTWAIT);
  } while (n < 0 && errno == EINTR);
  if (n > 0) {
    c.to_backend.StopKeeping();  // an answer: the request is not sent again from here on
    return true;
  }
  if (n == 0) return !Retry(c);  // its FIN; none left: relayed to the client as ever
  if (errno == EAGAIN) {
    c.backend.readable = false;
    return false;
  }
  const int err = errno;
  if (!Retry(c)) Finish(c, err == ETIMEDOUT ? End::kStallTimeout : End::kBackendReset);
  return false;
}

void Loop::OnConnected(Connection& c) {
  c.connecting = false;
  c.since = now_;
  const auto connect_ns = static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(now_ - c.opening).count());
  counters_.relay.connect.Observe(connect_ns);
  c.rule_counters->connect.Observe(connect_ns);
  c.backends->Connected(c.backend_index, c.handshake);  // Finish ends the session it begins
  Trace(c, RecorderEvent::kBackendEstablished, RecorderLeg::kBackend);
  relaying_.splice(relaying_.end(), *c.list, c.self);
  c.list = &relaying_;
  if (c.rule->proxy != ProxyVersion::kNone && !SendProxyHeader(c)) {
    return Finish(c, End::kBackendError);
  }
  Relay(c);  // bytes the client sent meanwhile
}

// The PROXY header names the client and the address it connected to (the client socket's own
// address: a wildcard listener's rule does not say it; or what a received header said), before
// any of the client's bytes, which wait in the client's socket until now. A fresh connection's
// send buffer takes it whole.
bool Loop::SendProxyHeader(Connection& c) {
  sockaddr_storage local{};
  socklen_t length = sizeof local;
  if (c.destination.sin6_family != AF_UNSPEC) {
    std::memcpy(&local, &c.destination, sizeof c.destination);
  } else if (getsockname(c.client.fd.get(), reinterpret_cast<sockaddr*>(&local), &length) != 0) {
    return false;
  }
  const ProxyHeader h = MakeProxyHeader(c.rule->proxy, reinterpret_cast<const sockaddr*>(&c.peer),
                                        reinterpret_cast<const sockaddr*>(&local));
  return send(c.backend.fd.get(), h.bytes, h.size, MSG_NOSIGNAL) == static_cast<ssize_t>(h.size);
}

// As the fast path's relay says it (Relay::ReportConnectTimeout): one line a second at most,
// with what the kernel tried (TCP_INFO's SYN retransmissions).
void Loop::ReportConnectTimeout(const Connection& c) {
  const auto now_ms = static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::milliseconds>(now_.time_since_epoch()).count());
  uint64_t held_back = 0;
  if (!connect_timeout_log_.Count(now_ms, held_back)) return;
  std::string line = "kernel path: backend " + ToString(c.rule->backend_address(c.backend_index)) +
                     " did not complete the handshake within " +
                     std::to_string(config_.limits.connect_timeout.count()) + " ms";
  tcp_info info{};
  socklen_t len = sizeof(info);
  if (getsockopt(c.backend.fd.get(), IPPROTO_TCP, TCP_INFO, &info, &len) == 0) {
    line += " (SYN sent " + std::to_string(info.tcpi_retransmits + 1) + " times)";
  }
  if (held_back > 0) line += "; " + std::to_string(held_back) + " more since the last such line";
  Log(line);
}

}  // namespace xdpfwd::kernel_path
