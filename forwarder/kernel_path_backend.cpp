// Backend legs of the kernel-socket path: source address and local port (see
// kernel_path_backend.h and docs/kernel-path.md, "Backend ports and TIME_WAIT").
#include "forwarder/kernel_path_backend.h"

#include <netinet/tcp.h>
#include <sys/socket.h>

#include <cerrno>
#include <charconv>
#include <cstring>
#include <fstream>
#include <sstream>

#include "os/log.h"

namespace xdpfwd::kernel_path {
namespace {

// How long a TIME_WAIT socket lives on Linux (TCP_TIMEWAIT_LEN, not a sysctl). Once the
// kernel's choice has failed for a (source, backend) pair, its TIME_WAIT sockets of the last
// minute are what fills the range, so trying the kernel again sooner would fail again, and a
// failed choice is expensive: the kernel scans the whole range (3.4 ms per connect measured with
// 28,232 ports in TIME_WAIT).
constexpr auto kTimeWaitLength = std::chrono::seconds(60);
// Ports tried for one connection before it ends as backend_no_port. A port is refused only
// while its 4-tuple is connected or in TIME_WAIT without timestamps; the cursor visits the
// port used longest ago first, so with timestamps the first try is taken nearly always.
constexpr int kOwnPortAttempts = 64;

bool ReadFile(const char* path, std::string& out) {
  std::ifstream in(path);
  if (!in) return false;
  std::ostringstream s;
  s << in.rdbuf();
  out = s.str();
  return true;
}

bool ParsePort(std::string_view text, uint16_t& port) {
  unsigned value = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || end != text.data() + text.size() || value > 65535) return false;
  port = static_cast<uint16_t>(value);
  return true;
}

std::string Trim(std::string_view text) {
  const size_t b = text.find_first_not_of(" \t\n");
  if (b == std::string_view::npos) return "";
  const size_t e = text.find_last_not_of(" \t\n");
  return std::string(text.substr(b, e - b + 1));
}

SocketAddress WithPort(const SocketAddress& address, int family, uint16_t port) {
  SocketAddress a = address;
  if (a.family() == AF_UNSPEC) {  // the wildcard of the backend's family
    a = SocketAddress{};
    a.storage.ss_family = static_cast<sa_family_t>(family);
    a.length = family == AF_INET ? sizeof(sockaddr_in) : sizeof(sockaddr_in6);
  }
  if (family == AF_INET) {
    reinterpret_cast<sockaddr_in*>(&a.storage)->sin_port = htons(port);
  } else {
    reinterpret_cast<sockaddr_in6*>(&a.storage)->sin6_port = htons(port);
  }
  return a;
}

}  // namespace

Result<LocalPorts> ParseLocalPorts(const std::string& range, const std::string& reserved) {
  LocalPorts ports;
  std::istringstream words(range);
  std::string low, high;
  if (!(words >> low >> high) || !ParsePort(low, ports.low) || !ParsePort(high, ports.high) ||
      ports.low > ports.high) {
    return Error{{}, "ip_local_port_range: cannot read '" + Trim(range) + "'"};
  }
  ports.reserved.assign(ports.size(), false);
  const std::string list = Trim(reserved);
  size_t begin = 0;
  while (begin < list.size()) {
    size_t comma = list.find(',', begin);
    if (comma == std::string::npos) comma = list.size();
    const std::string item = list.substr(begin, comma - begin);
    const size_t dash = item.find('-');
    uint16_t a = 0, b = 0;
    const bool ok = dash == std::string::npos
                        ? ParsePort(item, a) && ParsePort(item, b)
                        : ParsePort(item.substr(0, dash), a) && ParsePort(item.substr(dash + 1), b);
    if (!ok || a > b) return Error{{}, "ip_local_reserved_ports: cannot read '" + list + "'"};
    for (uint32_t p = a; p <= b; ++p) {
      if (p >= ports.low && p <= ports.high) ports.reserved[p - ports.low] = true;
    }
    begin = comma + 1;
  }
  return ports;
}

Result<LocalPorts> ReadLocalPorts() {
  std::string range, reserved;
  if (!ReadFile("/proc/sys/net/ipv4/ip_local_port_range", range)) {
    return SystemError("read /proc/sys/net/ipv4/ip_local_port_range");
  }
  ReadFile("/proc/sys/net/ipv4/ip_local_reserved_ports", reserved);  // absent: none reserved
  return ParseLocalPorts(range, reserved);
}

Result<void> CheckBackendSources(const std::vector<in_addr>& sources) {
  for (const in_addr& source : sources) {
    const std::string where = "--backend-source " + ToString(source);
    UniqueFd fd(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, IPPROTO_TCP));
    if (!fd) return SystemError(where);
    const int one = 1;
    setsockopt(fd.get(), IPPROTO_IP, IP_BIND_ADDRESS_NO_PORT, &one, sizeof(one));
    const SocketAddress a = FromEndpoint(Endpoint{source, 0});
    if (bind(fd.get(), a.get(), a.length) != 0) {
      return SystemError(where + (errno == EADDRNOTAVAIL ? " (not an address of this host)" : ""));
    }
  }
  return {};
}

BackendConnector::BackendConnector(const KernelPathConfig& config, LocalPorts ports,
                                   uint32_t first_port_offset)
    : ports_(std::move(ports)), cursor_(ports_.size() ? first_port_offset % ports_.size() : 0) {
  for (const Rule& rule : config.rules) {
    Route route;
    route.rule = &rule;
    // --backend-source is IPv4: an IPv6 backend keeps the route's source.
    if (rule.backend.is_ipv4()) {
      for (const in_addr& s : config.backend_sources) {
        route.sources.push_back(Source{FromEndpoint(Endpoint{s, 0}), {}});
      }
    }
    if (route.sources.empty()) route.sources.push_back(Source{});
    routes_.push_back(std::move(route));
  }
}

BackendSocket BackendConnector::Connect(size_t rule_index, Clock::time_point now) {
  Route& route = routes_[rule_index];
  Source& source = route.sources[route.next_source];
  route.next_source = (route.next_source + 1) % route.sources.size();
  if (now < source.own_ports_until) return ConnectOwnPort(*route.rule, source);

  BackendSocket s = Open(*route.rule, source, 0);
  if (s.err != EADDRNOTAVAIL || ports_.size() == 0) return s;
  // Every port of the range is taken towards this backend: by live connections, or, in the
  // "client closes first" order where this side closes first towards the backend, by its
  // own TIME_WAIT sockets (60 s each).
  source.own_ports_until = now + kTimeWaitLength;
  if (!told_) {
    told_ = true;
    Log("kernel path: no local port left towards " + ToString(route.rule->backend) +
        (source.address.family() == AF_UNSPEC ? "" : " from " + ToString(source.address)) +
        "; choosing ports here and taking over TIME_WAIT 4-tuples for the next minute");
  }
  return ConnectOwnPort(*route.rule, source);
}

BackendSocket BackendConnector::ConnectOwnPort(const Rule& rule, const Source& source) {
  BackendSocket s;
  s.err = EADDRNOTAVAIL;
  const uint32_t n = ports_.size();
  for (int attempt = 0, skipped = 0; attempt < kOwnPortAttempts && skipped < int(n);) {
    const uint32_t offset = cursor_;
    cursor_ = cursor_ + 1 == n ? 0 : cursor_ + 1;
    if (ports_.reserved[offset]) {
      ++skipped;
      continue;
    }
    ++attempt;
    s = Open(rule, source, static_cast<uint16_t>(ports_.low + offset));
    s.own_port = true;
    // EADDRINUSE: bound by a socket without SO_REUSEADDR, or a listener. EADDRNOTAVAIL: the
    // 4-tuple is live, or in TIME_WAIT without timestamps. Both: another port may do.
    if (s.err != EADDRINUSE && s.err != EADDRNOTAVAIL) return s;
  }
  s.err = EADDRNOTAVAIL;
  return s;
}

BackendSocket BackendConnector::Open(const Rule& rule, const Source& source, uint16_t port) {
  BackendSocket s;
  const int family = rule.backend.family();
  s.fd.reset(socket(family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, IPPROTO_TCP));
  if (!s.fd) {
    s.err = errno;  // EMFILE, ENOBUFS
    return s;
  }
  const int fd = s.fd.get();
  const int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  // On every backend socket, also those whose port the kernel chooses: a TIME_WAIT socket
  // keeps its socket's SO_REUSEADDR, and a later bind to its port with SO_REUSEADDR succeeds
  // only if both have it (measured: EADDRINUSE otherwise). Without a bound port it changes
  // nothing: the kernel's own choice ignores it.
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  if (port != 0 || source.address.family() != AF_UNSPEC) {
    // With port 0, bind only fixes the address and the kernel picks the port at connect, per
    // 4-tuple: one port can serve many backends at once. Without this option bind would take
    // a port for this address alone.
    if (port == 0) setsockopt(fd, IPPROTO_IP, IP_BIND_ADDRESS_NO_PORT, &one, sizeof(one));
    const SocketAddress local = WithPort(source.address, family, port);
    if (bind(fd, local.get(), local.length) != 0) {
      s.err = errno;
      s.fd.reset();
      return s;
    }
  }
  if (connect(fd, rule.backend.get(), rule.backend.length) != 0 && errno != EINPROGRESS) {
    s.err = errno;  // EADDRNOTAVAIL (no local port left), ECONNREFUSED, ENETUNREACH, ...
    s.fd.reset();
  }
  return s;
}

}  // namespace xdpfwd::kernel_path
