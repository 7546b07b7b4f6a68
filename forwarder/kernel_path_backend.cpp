// Backend legs of the kernel-socket path: source address and local port (see
// kernel_path_backend.h and docs/kernel-path.md, "Backend ports and TIME_WAIT").
#include "forwarder/kernel_path_backend.h"

#include <netinet/tcp.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <fstream>
#include <sstream>

#include "os/log.h"
#include "os/parse_number.h"

namespace xdpfwd::kernel_path {
namespace {

// A thread chooses ports itself once this share of its slice of the range is taken towards
// a (source, backend) pair (live, or TIME_WAIT of the last minute), and gives the choice back
// to the kernel below the second share. Why so early: the kernel's choice tries even ports
// first, from a cursor, and checks each against the established and TIME_WAIT hash
// (__inet_hash_connect, __inet_check_established). Measured, one thread, client closing first,
// 16 at a time: 3,000 connections/s while the 28,232-port range filled, 300/s once 15,000 of
// its ports were TIME_WAIT (every even port), with 90 % of the forwarder's CPU in that scan.
// Below a quarter it is cheap; the gap between the two shares keeps a pair from flapping.
constexpr uint32_t kChooseAbove = 4;  // taken >= slice / 4
constexpr uint32_t kKernelBelow = 8;  // taken <= slice / 8
// Ports tried for one connection before the kernel is asked instead. With timestamps from the
// backend the first port is taken nearly always (it was released longest ago; a TIME_WAIT
// 4-tuple is taken over); a port is refused only while its 4-tuple is live (a kernel-chosen
// leg of ours, another program's) or in TIME_WAIT without timestamps.
constexpr int kOwnPortAttempts = 8;
// After the kernel's choice found no port at all (a scan of the whole range, 3.4 ms with
// 28,232 ports), it is not asked again for this pair for a second.
constexpr auto kKernelRetryAfter = std::chrono::seconds(1);
// TCP_TIMEWAIT_LEN on Linux (not a sysctl).
constexpr int64_t kTimeWaitSeconds = 60;

bool ReadFile(const char* path, std::string& out) {
  std::ifstream in(path);
  if (!in) return false;
  std::ostringstream s;
  s << in.rdbuf();
  out = s.str();
  return true;
}

bool ParsePort(std::string_view text, uint16_t& port) {
  const std::optional<uint16_t> value = ParsePortNumber(text, /*allow_zero=*/true);
  if (value) port = *value;
  return value.has_value();
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

Result<void> CheckSourceAddress(const SocketAddress& source) {
  const std::string where = HostText(source);  // no port: the connect chooses it
  UniqueFd fd(socket(source.family(), SOCK_STREAM | SOCK_CLOEXEC, IPPROTO_TCP));
  if (!fd) return SystemError(where);
  const int one = 1;
  setsockopt(fd.get(), IPPROTO_IP, IP_BIND_ADDRESS_NO_PORT, &one, sizeof(one));
  if (bind(fd.get(), source.get(), source.length) != 0) {
    return SystemError(where + (errno == EADDRNOTAVAIL ? " (not an address of this host)" : ""));
  }
  return {};
}

Result<void> CheckListenAddress(const SocketAddress& listen, bool ipv6_only) {
  const std::string where = "listen " + ToString(listen);
  UniqueFd fd(socket(listen.family(), SOCK_STREAM | SOCK_CLOEXEC, IPPROTO_TCP));
  if (!fd) return SystemError(where);
  const int one = 1;
  setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  setsockopt(fd.get(), SOL_SOCKET, SO_REUSEPORT, &one, sizeof(one));
  const int v6only = ipv6_only ? 1 : 0;
  if (listen.family() == AF_INET6) {
    setsockopt(fd.get(), IPPROTO_IPV6, IPV6_V6ONLY, &v6only, sizeof(v6only));
  }
  if (bind(fd.get(), listen.get(), listen.length) != 0) return SystemError(where);
  return {};
}

Result<void> CheckBackendSources(const std::vector<IpAddress>& sources) {
  for (const IpAddress& source : sources) {
    if (auto r = CheckSourceAddress(FromIpEndpoint(IpEndpoint{source, 0})); !r) {
      return Error{r.error().code, "--backend-source " + r.error().context};
    }
  }
  return {};
}

void BackendConnector::TimeWaitWindow::Advance(int64_t second) {
  if (second <= second_) return;
  if (second - second_ >= kTimeWaitSeconds) {
    by_second_.fill(0);
    total_ = 0;
  } else {
    for (int64_t s = second_ + 1; s <= second; ++s) {
      uint32_t& bucket = by_second_[static_cast<size_t>(s % kTimeWaitSeconds)];
      total_ -= bucket;
      bucket = 0;
    }
  }
  second_ = second;
}

void BackendConnector::TimeWaitWindow::Add(Clock::time_point now) {
  Advance(std::chrono::duration_cast<std::chrono::seconds>(now.time_since_epoch()).count());
  ++by_second_[static_cast<size_t>(second_ % kTimeWaitSeconds)];
  ++total_;
}

uint32_t BackendConnector::TimeWaitWindow::Count(Clock::time_point now) {
  Advance(std::chrono::duration_cast<std::chrono::seconds>(now.time_since_epoch()).count());
  return total_;
}

void BackendConnector::PortQueue::Assign(std::vector<uint16_t> ports) {
  ring_ = std::move(ports);
  head_ = 0;
  count_ = ring_.size();
}

uint16_t BackendConnector::PortQueue::Pop() {
  const uint16_t port = ring_[head_];
  head_ = head_ + 1 == ring_.size() ? 0 : head_ + 1;
  --count_;
  return port;
}

// Every port is either in the ring or held by one lease, so the ring never overflows.
void BackendConnector::PortQueue::Push(uint16_t port) {
  size_t tail = head_ + count_;
  if (tail >= ring_.size()) tail -= ring_.size();
  ring_[tail] = port;
  ++count_;
}

BackendConnector::BackendConnector(const KernelPathConfig& config, LocalPorts ports, int thread,
                                   int threads)
    : user_timeout_ms_(static_cast<int>(config.limits.stall_timeout.count())) {
  // This thread's slice: a contiguous share of the range, less the reserved ports.
  std::vector<uint16_t> slice;
  const uint64_t n = ports.size();
  const uint64_t begin = n * static_cast<uint64_t>(thread) / static_cast<uint64_t>(threads);
  const uint64_t end = n * static_cast<uint64_t>(thread + 1) / static_cast<uint64_t>(threads);
  for (uint64_t offset = begin; offset < end; ++offset) {
    if (!ports.reserved[offset]) slice.push_back(static_cast<uint16_t>(ports.low + offset));
  }
  slice_ = static_cast<uint32_t>(slice.size());

  slice_ports_ = std::move(slice);
  for (const IpAddress& s : config.backend_sources) {
    backend_sources_.push_back(FromIpEndpoint(IpEndpoint{s, 0}));
  }
  for (const Rule& rule : config.rules) RouteFor(rule, rule.backend);
}

// A rule's route: one (source, backend) pair per source address it uses. Pairs are shared by
// every rule (and every version of a rule across reloads) with the same source and backend,
// since those share the 4-tuple space and its TIME_WAIT.
BackendConnector::Route& BackendConnector::RouteFor(const Rule& rule,
                                                    const SocketAddress& backend) {
  if (auto it = routes_.find(&backend); it != routes_.end()) return it->second;
  std::vector<SocketAddress> sources;
  if (rule.source.family() != AF_UNSPEC) {
    // The rule's [src=ADDR] (its family is the backend's: the parser checks it).
    sources.push_back(rule.source);
  } else {
    // --backend-source's addresses of the backend's family; none: the route's source.
    for (const SocketAddress& s : backend_sources_) {
      if (s.family() == backend.family()) sources.push_back(s);
    }
  }
  if (sources.empty()) sources.push_back(SocketAddress{});
  Route route;
  for (const SocketAddress& source : sources) {
    uint32_t index = 0;
    while (index < pairs_.size() &&
           !(pairs_[index].source == source && pairs_[index].backend == backend)) {
      ++index;
    }
    if (index == pairs_.size()) {
      Pair& pair = pairs_.emplace_back();
      pair.backend = backend;
      pair.source = source;
      pair.own_source = source;
      pair.ports.Assign(slice_ports_);
    }
    route.pairs.push_back(index);
  }
  return routes_.emplace(&backend, std::move(route)).first->second;
}

BackendSocket BackendConnector::Connect(const Rule& rule, const SocketAddress& backend,
                                        Clock::time_point now) {
  Route& route = RouteFor(rule, backend);
  const uint32_t index = route.pairs[route.next];
  route.next = (route.next + 1) % route.pairs.size();
  Pair& pair = pairs_[index];
  Choose(pair, now);
  BackendSocket s = pair.choosing ? ConnectOwnPort(pair, now) : ConnectKernelPort(pair, now);
  if (s.err == 0) {
    // Once per pair, and again after a fallback to the kernel's choice (the route may have
    // changed: that is when a bound source would fail).
    const bool fallback = pair.choosing;
    if (s.lease.port == 0 && (pair.own_source.family() == AF_UNSPEC || fallback)) {
      LearnSource(pair, s.fd.get());
    }
    s.lease = BackendLease{index, s.lease.port};
    ++pair.live;
  } else if (s.err == EADDRNOTAVAIL && !pair.told_no_port) {
    pair.told_no_port = true;
    Log("kernel path: no local port left towards " + ToString(pair.backend) +
        (pair.source.family() == AF_UNSPEC ? "" : " from " + ToString(pair.source)) +
        " (every 4-tuple live, or in TIME_WAIT without TCP timestamps from the backend); "
        "connections end as backend_no_port");
  }
  return s;
}

void BackendConnector::Release(const BackendLease& lease, bool time_wait, Clock::time_point now) {
  if (!lease.held()) return;
  Pair& pair = pairs_[lease.pair];
  --pair.live;
  if (time_wait) pair.time_wait.Add(now);
  if (lease.port != 0) pair.ports.Push(lease.port);
}

void BackendConnector::Choose(Pair& pair, Clock::time_point now) {
  if (slice_ == 0) return;  // the range is unknown: the kernel's choice only
  const uint32_t taken = pair.live + pair.time_wait.Count(now);
  if (!pair.choosing && taken >= std::max(1u, slice_ / kChooseAbove)) {
    pair.choosing = true;
    if (!pair.told_choosing) {
      pair.told_choosing = true;
      Log("kernel path: " + std::to_string(taken) + " of this thread's " + std::to_string(slice_) +
          " local ports towards " + ToString(pair.backend) +
          (pair.source.family() == AF_UNSPEC ? "" : " from " + ToString(pair.source)) +
          " are live or in TIME_WAIT; choosing ports here (least recently used first, taking "
          "over TIME_WAIT 4-tuples) until fewer are");
    }
  } else if (pair.choosing && taken <= slice_ / kKernelBelow && now >= pair.kernel_again) {
    pair.choosing = false;
  }
}

BackendSocket BackendConnector::ConnectKernelPort(Pair& pair, Clock::time_point now) {
  BackendSocket s = Open(pair, 0);
  if (s.err != EADDRNOTAVAIL || slice_ == 0) return s;
  // The kernel found no port at all (the range is full of live or TIME_WAIT 4-tuples towards
  // this backend, some of them perhaps other programs'): choose here from now on.
  pair.choosing = true;
  pair.kernel_again = now + kKernelRetryAfter;
  BackendSocket own = ConnectOwnPort(pair, now);
  own.kernel_no_port = true;
  ++own.retries;
  return own;
}

BackendSocket BackendConnector::ConnectOwnPort(Pair& pair, Clock::time_point now) {
  BackendSocket s;
  s.err = EADDRNOTAVAIL;
  uint32_t refused = 0;
  for (int attempt = 0; attempt < kOwnPortAttempts && !pair.ports.empty(); ++attempt) {
    const uint16_t port = pair.ports.Pop();
    s = Open(pair, port);
    if (s.err == 0) {
      s.lease.port = port;
      s.retries = refused;
      return s;
    }
    pair.ports.Push(port);  // its turn comes again after every other port's
    // EADDRINUSE: bound by a socket without SO_REUSEADDR, or a listener. EADDRNOTAVAIL: the
    // 4-tuple is live, or in TIME_WAIT without timestamps. Both: another port may do.
    if (s.err != EADDRINUSE && s.err != EADDRNOTAVAIL) {
      s.retries = refused;
      return s;
    }
    ++refused;
  }
  // Every port tried was refused, or all of this slice's are live: the kernel may still find
  // one elsewhere in the range (other threads' slices).
  if (now >= pair.kernel_again) {
    s = Open(pair, 0);
    s.retries = refused;
    if (s.err == EADDRNOTAVAIL) {
      s.kernel_no_port = true;
      pair.kernel_again = now + kKernelRetryAfter;
    }
    return s;
  }
  s.fd.reset();
  s.err = EADDRNOTAVAIL;
  s.retries = refused;
  return s;
}

// Ports chosen here are bound to the route's source address, not the wildcard: a wildcard bind
// conflicts with every socket on that port from any local address that lacks SO_REUSEADDR
// (other programs' connections and their TIME_WAITs), a specific one only with those on the
// same address. Measured on this shared machine, where other benchmarks left 80,000 TIME_WAIT
// sockets in the namespace: the wildcard bind failed (EADDRINUSE) for half the ports.
void BackendConnector::LearnSource(Pair& pair, int fd) {
  if (pair.source.family() != AF_UNSPEC) return;  // --backend-source
  SocketAddress local;
  local.length = sizeof(local.storage);
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&local.storage), &local.length) != 0) return;
  if (local.family() == AF_INET) {
    reinterpret_cast<sockaddr_in*>(&local.storage)->sin_port = 0;
  } else if (local.family() == AF_INET6) {
    reinterpret_cast<sockaddr_in6*>(&local.storage)->sin6_port = 0;
  } else {
    return;
  }
  pair.own_source = local;
}

BackendSocket BackendConnector::Open(const Pair& pair, uint16_t port) {
  BackendSocket s;
  const SocketAddress& source = port != 0 ? pair.own_source : pair.source;
  const int family = pair.backend.family();
  s.fd.reset(socket(family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, IPPROTO_TCP));
  if (!s.fd) {
    s.err = errno;  // EMFILE, ENOBUFS
    return s;
  }
  const int fd = s.fd.get();
  const int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  if (user_timeout_ms_ > 0) {
    setsockopt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &user_timeout_ms_, sizeof(user_timeout_ms_));
  }
  // On every backend socket, also those whose port the kernel chooses: a TIME_WAIT socket
  // keeps its socket's SO_REUSEADDR, and a later bind to its port with SO_REUSEADDR succeeds
  // only if both have it (measured: EADDRINUSE otherwise). Without a bound port it changes
  // nothing: the kernel's own choice ignores it.
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  if (port != 0 || source.family() != AF_UNSPEC) {
    // With port 0, bind only fixes the address and the kernel picks the port at connect, per
    // 4-tuple: one port can serve many backends at once. Without this option bind would take
    // a port for this address alone.
    if (port == 0) setsockopt(fd, IPPROTO_IP, IP_BIND_ADDRESS_NO_PORT, &one, sizeof(one));
    const SocketAddress local = WithPort(source, family, port);
    if (bind(fd, local.get(), local.length) != 0) {
      s.err = errno;
      s.fd.reset();
      return s;
    }
  }
  if (connect(fd, pair.backend.get(), pair.backend.length) != 0 && errno != EINPROGRESS) {
    s.err = errno;  // EADDRNOTAVAIL (no local port left), ECONNREFUSED, ENETUNREACH, ...
    s.fd.reset();
  }
  return s;
}

}  // namespace xdpfwd::kernel_path
