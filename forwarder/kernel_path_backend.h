// How the kernel-socket path opens a backend leg: which local address (round robin over
// --backend-source) and which local port. The kernel chooses the port (IP_BIND_ADDRESS_NO_PORT,
// per 4-tuple at connect time) until it has none left for a (source, backend) pair; then this
// thread chooses ports itself for a while, binding with SO_REUSEADDR, which lets the kernel hand
// over a TIME_WAIT 4-tuple of ours when the backend sent timestamps. Private to the kernel path;
// docs/kernel-path.md ("Backend ports and TIME_WAIT") has the measurements behind it.
#pragma once

#include <netinet/in.h>

#include <chrono>
#include <cstdint>
#include <string>
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
Result<void> CheckBackendSources(const std::vector<in_addr>& sources);

struct BackendSocket {
  UniqueFd fd;            // connecting (or connected); empty when err != 0
  int err = 0;            // errno of the failed socket/bind/connect
  bool own_port = false;  // the port was chosen here, not by the kernel
};

// One per loop thread, no locks. Threads choosing ports themselves may pick the same port
// towards the same backend; the second connect then fails (EADDRNOTAVAIL) and the next port is
// tried, so no coordination is needed.
class BackendConnector {
 public:
  using Clock = std::chrono::steady_clock;
  // `first_port_offset` spreads the threads' cursors over the range.
  BackendConnector(const KernelPathConfig& config, LocalPorts ports, uint32_t first_port_offset);

  // A non-blocking socket connecting to rule `rule_index`'s backend, with TCP_NODELAY.
  BackendSocket Connect(size_t rule_index, Clock::time_point now);

 private:
  struct Source {
    SocketAddress address;  // port 0; family AF_UNSPEC: the route's source
    // Until then, ports are chosen here: the kernel had none left for this (source, backend).
    Clock::time_point own_ports_until{};
  };
  struct Route {
    const Rule* rule = nullptr;
    std::vector<Source> sources;
    size_t next_source = 0;
  };

  BackendSocket Open(const Rule& rule, const Source& source, uint16_t port);
  BackendSocket ConnectOwnPort(const Rule& rule, const Source& source);

  LocalPorts ports_;
  uint32_t cursor_;  // next port to try, as an offset from ports_.low
  std::vector<Route> routes_;
  bool told_ = false;  // logged the first switch to own ports
};

}  // namespace xdpfwd::kernel_path
