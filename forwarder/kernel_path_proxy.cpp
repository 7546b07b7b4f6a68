// [accept-proxy] on the kernel-socket path: a client of such a rule must come from a proxy-from
// address and send a PROXY header (v1 or v2) first, within the rule's accept-proxy-timeout;
// the header's source then is the client (allow/deny, balance=source, [proxy=], the access
// log), and only then is the backend leg opened. The fast path's relay does the same.
#include <sys/epoll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <string>

#include "forwarder/access.h"
#include "forwarder/kernel_path_connection.h"
#include "os/log.h"

namespace xdpfwd::kernel_path {

namespace {

bool FromProxy(const AcceptProxy& accept, const std::string& peer) {
  return std::any_of(accept.from.begin(), accept.from.end(),
                     [&](const AccessPattern& p) { return GlobMatch(peer, p.pattern); });
}

std::string AddressText(const sockaddr_storage& address) {
  return ClientAddressText(reinterpret_cast<const sockaddr*>(&address));
}

}  // namespace

// Reset rather than closed: to a proxy, a FIN would read as a backend that took the connection
// and ended it.
bool Loop::TrustsProxy(const Rule& rule, UniqueFd& client, const sockaddr_storage& peer) {
  const std::string text = AddressText(peer);
  if (FromProxy(rule.accept_proxy, text)) return true;
  ResetClose(client);
  Add(counters_.relay.proxy_untrusted);
  Add(counters_.ForRule(rule.id).proxy_untrusted);
  RecordSession(rule, peer, SessionResult::kProxyRefused, 0, 0);
  LogProxyRefusal(rule, text, "the sender is not of the rule's proxy-from lines");
  return false;
}

Loop::ConnectionList& Loop::HeaderWaits(const Rule& rule) {
  return header_waits_[rule.accept_proxy.timeout_ms];
}

// The client's socket is edge-triggered: an event comes when bytes (or its end) arrive, so the
// peek below sees something new on each, except on the registration's first EPOLLOUT edge.
// Peeked, not read: once the header is whole, exactly its bytes are read, and what the client
// sent after it stays queued for the relay.
void Loop::OnProxyHeaderEvent(Connection& c, uint32_t events) {
  if ((events & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR)) == 0) return;
  uint8_t bytes[kProxyHeaderMaxBytes];
  const ssize_t n = recv(c.client.fd.get(), bytes, sizeof bytes, MSG_PEEK | MSG_DONTWAIT);
  if (n < 0) {
    if (errno == EAGAIN || errno == EINTR) return;
    return RefuseProxyHeader(c, End::kProxyInvalid, "the client reset before a whole header");
  }
  if (n == 0) {
    return RefuseProxyHeader(c, End::kProxyInvalid, "the client closed before a whole header");
  }
  const auto size = static_cast<size_t>(n);
  if (size == c.header_peeked && !c.client.hung_up) return;  // nothing new to parse
  c.header_peeked = static_cast<uint16_t>(size);
  const ProxyParse header = ParseProxyHeader({bytes, size});
  switch (header.status) {
    case ProxyParse::Status::kComplete:
      return TakeProxyHeader(c, header, bytes);
    case ProxyParse::Status::kInvalid:
      return RefuseProxyHeader(c, End::kProxyInvalid, header.error);
    case ProxyParse::Status::kIncomplete:
      break;
  }
  // Once the client's FIN is announced, all it will send is queued: the header stays partial.
  // (The parser decides by kProxyHeaderMaxBytes; the size test only guards that promise.)
  if (c.client.hung_up || size == sizeof bytes) {
    RefuseProxyHeader(c, End::kProxyInvalid, "the client closed before a whole header");
  }
}

void Loop::TakeProxyHeader(Connection& c, const ProxyParse& header, uint8_t* bytes) {
  // The peek saw it whole and nothing else reads this socket: the read takes all of it.
  const ssize_t n = recv(c.client.fd.get(), bytes, header.length, MSG_DONTWAIT);
  if (n != static_cast<ssize_t>(header.length)) return Finish(c, End::kError);
  Add(counters_.relay.proxy_headers);
  Add(c.rule_counters->proxy_headers);
  if (header.has_addresses) {
    c.peer = header.source;
    const size_t length =
        header.destination.ss_family == AF_INET ? sizeof(sockaddr_in) : sizeof(sockaddr_in6);
    std::memcpy(&c.destination, &header.destination, length);
  }
  if (HasAccessPatterns(plan_->global_access, c.rule->access)) {
    const AccessVerdict verdict =
        CheckAccess(plan_->global_access, c.rule->access, AddressText(c.peer));
    if (verdict == AccessVerdict::kDenied) return Finish(c, End::kDenied);
    if (verdict == AccessVerdict::kNotAllowed) return Finish(c, End::kNotAllowed);
  }
  Add(counters_.relay.accepted);
  Add(c.rule_counters->accepted);
  c.awaiting_header = false;
  ConnectionList& list = c.rule->backend_count() > 1 ? trying_ : connecting_;
  list.splice(list.end(), *c.list, c.self);  // its connect start is the latest
  c.list = &list;
  c.since = now_;
  c.opening = now_;
  RecordSession(*c.rule, c.peer, SessionResult::kOpened, 0, 0);
  PickBackend(c);
  OpenBackend(c);  // the client's bytes after the header wait in its socket until connected
}

void Loop::RefuseProxyHeader(Connection& c, End why, const char* what) {
  LogProxyRefusal(*c.rule, AddressText(c.peer), what);
  Finish(c, why);  // reset, counted, logged "proxy-refused"
}

// One line a second at most: a misconfigured proxy (or a scan) would refuse every connection.
void Loop::LogProxyRefusal(const Rule& rule, const std::string& sender, const char* what) {
  uint64_t held_back = 0;
  if (!proxy_log_.Count(NowMs(), held_back)) return;
  std::string line = "kernel path: " + ToString(rule.listen) + ": PROXY header from " + sender +
                     " refused: " + what;
  if (held_back > 0) line += "; " + std::to_string(held_back) + " more since the last such line";
  Log(line);
}

void Loop::ExpireHeaderWaits() {
  for (auto& [timeout_ms, list] : header_waits_) {
    const auto timeout = std::chrono::milliseconds(timeout_ms);
    while (!list.empty() && list.front().since + timeout <= now_) {
      RefuseProxyHeader(list.front(), End::kProxyTimeout,
                        "no whole header within its accept-proxy-timeout");
    }
  }
}

void Loop::NextHeaderDeadline(std::optional<Clock::time_point>& next) const {
  for (const auto& [timeout_ms, list] : header_waits_) {
    if (list.empty()) continue;
    const auto deadline = list.front().since + std::chrono::milliseconds(timeout_ms);
    next = next ? std::min(*next, deadline) : deadline;
  }
}

}  // namespace xdpfwd::kernel_path
