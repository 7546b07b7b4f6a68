// How the kernel-socket path opens a backend leg: which local address (round robin over
// --backend-source) and which local port. The kernel chooses the port (IP_BIND_ADDRESS_NO_PORT,
// per 4-tuple at connect time) while few of a (source, backend) pair's 4-tuples are taken; once
// many are (live, or in TIME_WAIT after the client closed first), its choice scans them one by
// one and this thread hands out ports itself, least recently used first, binding with
// SO_REUSEADDR so that the kernel hands over a TIME_WAIT 4-tuple of ours when the backend sent
// timestamps. Private to the kernel path; docs/kernel-path.md ("Backend ports and TIME_WAIT")
// has the measurements behind it.
#pragma once

#include <netinet/in.h>

#include <array>
#include <chrono>
#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "forwarder/kernel_path.h"
#include "os/result.h"
#include "os/unique_fd.h"

namespace xdpfwd::kernel_path {

// net.ipv4.ip_local_port_range less net.ipv4.ip_local_reserved_ports, as this process's network
// namespace sees them.
struct LocalPorts {
  uint16_t low = 0, high = 0;  // inclusive; low > high: none known
  std::vector<bool> reserved;  // indexed by port - low
  uint32_t size() const { return low <= high ? uint32_t{high} - low + 1u : 0u; }
};

// Parses the two sysctl files' contents ("32768\t60999\n", "8080,9000-9010\n").
Result<LocalPorts> ParseLocalPorts(const std::string& range, const std::string& reserved);
// Reads them from /proc/sys/net/ipv4.
Result<LocalPorts> ReadLocalPorts();

// Checks once, at start, that every source address can be bound here (an address the host
// does not have fails every connect later with the same EADDRNOTAVAIL as port exhaustion).
Result<void> CheckBackendSources(const std::vector<IpAddress>& sources);
// The same for one address of either family (a rule's [src=ADDR]).
Result<void> CheckSourceAddress(const SocketAddress& source);
// Whether a listener can be bound to `listen` (SO_REUSEPORT, as the loops bind theirs): a
// reload's new listen address is checked before any thread is told to serve it.
Result<void> CheckListenAddress(const SocketAddress& listen, bool ipv6_only);

// A backend leg's hold on its (source, backend) pair, given back with Release.
struct BackendLease {
  static constexpr uint32_t kNone = UINT32_MAX;
  uint32_t pair = kNone;
  uint16_t port = 0;  // chosen here; 0: chosen by the kernel
  bool held() const { return pair != kNone; }
};

struct BackendSocket {
  UniqueFd fd;         // connecting (or connected); empty when err != 0
  int err = 0;         // errno of the failed socket/bind/connect
  BackendLease lease;  // held when err == 0
  // What this connect cost, for the counters: ports tried in vain before the last attempt
  // (a live 4-tuple, a TIME_WAIT without timestamps, a port held by another program), and
  // whether the kernel's choice said it had no port left (a scan of the whole range).
  uint32_t retries = 0;
  bool kernel_no_port = false;
};

// One per loop thread, no locks. The threads share the range, each handing out its own slice,
// so two threads never choose the same port; the kernel's choice takes from the whole range.
class BackendConnector {
 public:
  using Clock = std::chrono::steady_clock;
  // Thread `thread` of `threads` (slice `thread` of the range).
  BackendConnector(const KernelPathConfig& config, LocalPorts ports, int thread, int threads);

  // A non-blocking socket connecting to `backend`, one of `rule`'s backends (its address is
  // stored with the rule: its address is the route's key), with TCP_NODELAY (and
  // TCP_USER_TIMEOUT at the stall timeout, see Loop). A backend seen for the first time (a rule
  // added or changed by a reload) gets its route here; both must outlive the connector.
  BackendSocket Connect(const Rule& rule, const SocketAddress& backend, Clock::time_point now);
  // The leg is closed. `time_wait`: it closed first, so its 4-tuple stays in TIME_WAIT for
  // the next 60 s. Its port goes to the back of the queue: handed out again last.
  void Release(const BackendLease& lease, bool time_wait, Clock::time_point now);

 private:
  // Our TIME_WAIT 4-tuples of the last 60 s, in one-second buckets (O(1) per connection).
  class TimeWaitWindow {
   public:
    void Add(Clock::time_point now);
    uint32_t Count(Clock::time_point now);
    uint32_t count() const { return total_; }

   private:
    void Advance(int64_t second);
    std::array<uint32_t, 60> by_second_{};  // TCP_TIMEWAIT_LEN, one bucket per second
    int64_t second_ = 0;
    uint32_t total_ = 0;
  };
  // Ports free the longest first: a ring popped at the front, pushed at the back.
  class PortQueue {
   public:
    void Assign(std::vector<uint16_t> ports);
    bool empty() const { return count_ == 0; }
    uint16_t Pop();
    void Push(uint16_t port);

   private:
    std::vector<uint16_t> ring_;
    size_t head_ = 0, count_ = 0;
  };
  struct Pair {
    SocketAddress backend;
    SocketAddress source;  // port 0; family AF_UNSPEC: the route's source
    // What ports chosen here are bound to: `source`, or the route's source address as a
    // kernel-chosen leg showed it (AF_UNSPEC until one did: the wildcard).
    SocketAddress own_source;
    uint32_t live = 0;  // this thread's legs of the pair, open now
    TimeWaitWindow time_wait;
    PortQueue ports;                   // this thread's slice of the range
    bool choosing = false;             // ports chosen here rather than by the kernel
    Clock::time_point kernel_again{};  // not before then: the kernel had no port left
    bool told_choosing = false, told_no_port = false;  // logged once per pair
  };
  struct Route {
    std::vector<uint32_t> pairs;  // indices into pairs_, one per source
    size_t next = 0;
  };

  BackendSocket Open(const Pair& pair, uint16_t port);
  int user_timeout_ms_ = 0;  // TCP_USER_TIMEOUT: the stall timeout; 0 leaves the kernel's
  static void LearnSource(Pair& pair, int fd);
  BackendSocket ConnectOwnPort(Pair& pair, Clock::time_point now);
  BackendSocket ConnectKernelPort(Pair& pair, Clock::time_point now);
  void Choose(Pair& pair, Clock::time_point now);

  Route& RouteFor(const Rule& rule, const SocketAddress& backend);

  uint32_t slice_ = 0;  // ports in this thread's slice
  std::vector<uint16_t> slice_ports_;
  std::vector<SocketAddress> backend_sources_;  // --backend-source, either family
  std::vector<Pair> pairs_;
  std::unordered_map<const SocketAddress*, Route> routes_;  // by the backend's address
};

}  // namespace xdpfwd::kernel_path
