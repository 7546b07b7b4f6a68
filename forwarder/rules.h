// Forwarding rules: "listen on this address and port, relay to that backend", from the command
// line (one rule) or a rinetd-style file (many). Addresses are IPv4 or IPv6; the fast path takes
// the IPv4 ones, the kernel path takes all.
#pragma once

#include <netinet/in.h>
#include <sys/socket.h>

#include <cstdint>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "forwarder/balance.h"
#include "forwarder/proxy_protocol.h"
#include "os/endpoint.h"
#include "os/ip_address.h"
#include "os/result.h"

namespace xdpfwd {

// An IPv4 or IPv6 address and port, ready for bind/connect.
struct SocketAddress {
  sockaddr_storage storage{};
  socklen_t length = 0;

  int family() const { return storage.ss_family; }
  uint16_t port() const;
  bool is_ipv4() const { return family() == AF_INET; }
  // The IPv4 address and port (only when is_ipv4()).
  Endpoint ipv4() const;
  // The address (either family) and port; an IPv4-mapped IPv6 address stays IPv6.
  IpEndpoint ip() const;
  bool is_any() const;  // 0.0.0.0 or ::
  const sockaddr* get() const { return reinterpret_cast<const sockaddr*>(&storage); }
};

// "10.0.1.1:9000", "[2001:db8::1]:9000", "[::]:9000".
Result<SocketAddress> ParseSocketAddress(const std::string& text);
// Address and port as separate words (rinetd's "bindaddress bindport"); a bare IPv6 address
// needs no brackets here.
Result<SocketAddress> ParseSocketAddress(const std::string& address, const std::string& port);
SocketAddress FromEndpoint(const Endpoint& ep);
SocketAddress FromIpEndpoint(const IpEndpoint& ep);  // either family
// "10.0.1.1:9000" or "[2001:db8::1]:9000".
std::string ToString(const SocketAddress& address);
// The address alone: "10.0.1.1", "[2001:db8::1]" (a source address, whose port is chosen later).
std::string HostText(const SocketAddress& address);
// Same family, address and port (what a bind or connect would see alike).
bool operator==(const SocketAddress& a, const SocketAddress& b);

enum class Protocol : uint8_t { kTcp, kUdp };
std::string_view ProtocolName(Protocol p);  // "tcp", "udp"

// One rinetd "allow PATTERN" or "deny PATTERN" line (forwarder/access.h evaluates them).
struct AccessPattern {
  bool allow = true;
  std::string pattern;  // '*' and '?' globs over the client's numeric address text
  int line = 0;
};

// [accept-proxy]: every client connection of the rule starts with a PROXY header (v1 or v2)
// naming the client behind the proxy that sent it, read within `timeout_ms`, and only from the
// addresses of the `proxy-from` lines after the rule (docs/configuration.md).
struct AcceptProxy {
  bool enabled = false;
  uint32_t timeout_ms = 3000;
  std::vector<AccessPattern> from;  // `proxy-from PATTERN` lines (allow is true in each)
};

// How much of a [retry-on=empty-response] client's stream is kept to be sent again: its first
// bytes, until the backend answers (a request, not a stream).
inline constexpr size_t kRetryBytes = 16 * 1024;

// rinetd's UDP association idle limit when a rule has no [timeout=N] (rinetd.8).
inline constexpr uint32_t kDefaultUdpTimeoutS = 72;

// An operator's say over a backend (HAProxy's server states): ready takes new connections;
// drain and maint take none, while the connections they have carry on; maint also stops its
// health checks. Set by a rule's [state=] and a `backend` line's, or at run time by `set backend`.
enum class BackendAdmin : uint8_t { kReady, kDrain, kMaint };
std::string_view BackendAdminName(BackendAdmin a);  // "ready", "drain", "maint"

// The most a backend's weight can be (HAProxy's limit), from the file or `set weight`.
inline constexpr uint32_t kMaxWeight = 256;

// One more backend of a rule (a `backend` line after it, docs/configuration.md).
struct RuleBackend {
  SocketAddress address;
  std::string host;  // as written
  uint32_t weight = 1;
  bool backup = false;                        // used only while none of the others is usable
  BackendAdmin admin = BackendAdmin::kReady;  // [state=]
  int line = 0;
};

struct Rule {
  uint32_t id = 0;  // index in the rule list; the steering program records it per flow
  SocketAddress listen;
  SocketAddress backend;
  int line = 0;  // line in the rules file, 0 for a command-line rule
  Protocol listen_protocol = Protocol::kTcp;
  Protocol backend_protocol = Protocol::kTcp;
  // The addresses as written (an address or a host name): rinetd's access log shows these.
  std::string listen_host, backend_host;
  // [src=ADDR]: the local address of this rule's backend legs (AF_UNSPEC: the path's choice).
  SocketAddress source;
  // [timeout=N]: seconds a UDP association may be idle before it is closed.
  uint32_t udp_timeout_s = kDefaultUdpTimeoutS;
  // [weight=N, state=drain|maint]: `backend`'s weight among the rule's backends, and its state.
  uint32_t backend_weight = 1;
  BackendAdmin backend_admin = BackendAdmin::kReady;
  // `backend` lines after the rule: more backends, and how a connection picks among them all.
  std::vector<RuleBackend> more_backends;
  BalanceMethod balance = BalanceMethod::kRoundRobin;
  // [check=DURATION, fall=N, rise=N]: active health checks of its backends every DURATION
  // (0: none); fall failed checks in a row mark a backend down, rise passed ones up.
  uint32_t check_ms = 0;
  uint32_t check_fall = 3;
  uint32_t check_rise = 2;
  // [proxy=v1|v2]: a PROXY protocol header first on every backend connection (TCP backends).
  ProxyVersion proxy = ProxyVersion::kNone;
  AcceptProxy accept_proxy;
  // [retry-on=empty-response]: a backend connection that ends (reset or closed) before the
  // backend sent a byte, while the client has sent at most kRetryBytes, is made again to another
  // backend of the rule and the client's bytes are sent again; the client never learns. For
  // protocols whose requests may be sent twice: the backend that died may have acted on it.
  bool retry_empty_response = false;
  // allow/deny lines after this rule and before the next: the rule's own access list.
  std::vector<AccessPattern> access;

  // TCP on both sides: the fast path and the kernel path's stream relay serve it. Anything
  // with UDP on a side is the datagram relay's (forwarder/datagram_path.h).
  bool is_stream() const {
    return listen_protocol == Protocol::kTcp && backend_protocol == Protocol::kTcp;
  }
  // Backend i: 0 is `backend`, then the `backend` lines in order.
  size_t backend_count() const { return 1 + more_backends.size(); }
  const SocketAddress& backend_address(size_t i) const {
    return i == 0 ? backend : more_backends[i - 1].address;
  }
};

// Every backend of `rule`: its connect address (and weight) first, then its `backend` lines.
std::vector<RuleBackend> AllBackends(const Rule& rule);

// Whether a listener for `rule` must serve IPv6 only (IPV6_V6ONLY). A [::] listener serves IPv4
// clients too, as rinetd's does under Linux's default net.ipv6.bindv6only=0, unless an IPv4
// rule of `others` listens on the same port and protocol: a dual-stack socket would collide
// with it. `others` holds Rule or const Rule* elements.
template <typename Rules>
bool ListenIpv6Only(const Rule& rule, const Rules& others) {
  if (rule.listen.family() != AF_INET6 || !rule.listen.is_any()) return true;
  for (const auto& element : others) {
    const Rule& other = [&]() -> const Rule& {
      if constexpr (std::is_pointer_v<std::decay_t<decltype(element)>>) {
        return *element;
      } else {
        return element;
      }
    }();
    if (other.listen.is_ipv4() && other.listen.port() == rule.listen.port() &&
        other.listen_protocol == rule.listen_protocol) {
      return true;
    }
  }
  return false;
}

// A whole configuration: rinetd's file (forwarder/config.h) or one command-line rule.
struct Config {
  std::vector<Rule> rules;
  std::vector<AccessPattern> access;  // global allow/deny lines (before the first rule)
  std::string logfile;                // logfile PATH; empty: no access log
  bool log_common = false;            // logcommon: web-server style lines
  std::string pidfile;                // pidlogfile PATH; empty: none written
};

}  // namespace xdpfwd
