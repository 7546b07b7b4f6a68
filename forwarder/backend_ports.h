// Local ports for the relay's backend legs. lwIP's own picker walks every pcb per connect and
// ignores the remote end, so the relay keeps its own: one space per (local source address,
// backend address and port) — a port may serve many backends at once, the 4-tuples differ —
// handed out in FIFO order (O(1), and a released port is reused as late as possible), with a
// generation per port so a delayed flow removal can tell that the port has since been reused.
#pragma once

#include <netinet/in.h>

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "os/ip_address.h"
#include "os/result.h"
#include "stack/rss.h"

namespace xdpfwd {

struct PortRange {
  uint16_t first = 0;  // 0-0: automatic (DefaultBackendPorts)
  uint16_t last = 0;
  bool automatic() const { return first == 0 && last == 0; }
  uint32_t size() const { return automatic() ? 0 : uint32_t{last} - first + 1; }
};

// The default space: every port from 1024 up that is outside the kernel's ephemeral range
// (`ephemeral`, from net.ipv4.ip_local_port_range), so that no kernel socket connecting to the
// same backend — the kernel path's, in auto mode — can pick one of our 4-tuples. With Linux's
// default 32768-60999 that is 1024-32767 and 61000-65535: 36,280 ports per source and backend.
std::vector<PortRange> DefaultBackendPorts(PortRange ephemeral);
// The kernel's ephemeral range, or an error saying why it could not be read.
Result<PortRange> KernelEphemeralPorts();
// An error naming the overlap if `ours` shares a port with `ephemeral`.
Result<void> CheckOutsideEphemeral(const PortRange& ours, const PortRange& ephemeral);
std::string ToString(const std::vector<PortRange>& ranges);  // "1024-32767,61000-65535"

// N fast-path workers (docs/stack.md, "N worker processes"). The ports of `ranges` a worker
// owning rx queues `queues` of the backend-side device should use toward `backend` from
// `local` (both IPv4 or both IPv6; an in_addr converts): those whose return traffic
// (backend → local:port) the device's RSS puts on one of its queues, ascending. Ports for
// different workers' queues are disjoint, so workers need no shared allocator. The Toeplitz
// hash is linear in its input, so each port costs two table lookups, not a hash: the default
// 36,280-port space took 0.3 ms here (docs/stack.md). Addresses of two families: none.
std::vector<uint16_t> PortsLandingOn(const RssTable& rss, std::span<const uint32_t> queues,
                                     const IpAddress& local, const IpAddress& backend,
                                     uint16_t backend_port, const std::vector<PortRange>& ranges);
// Where the device has no readable RSS table (veth): worker `worker` of `workers` takes every
// workers-th port of `ranges`, so the slices are disjoint and as large as can be.
std::vector<uint16_t> SliceOfPorts(const std::vector<PortRange>& ranges, uint32_t worker,
                                   uint32_t workers);

class BackendPorts {
 public:
  explicit BackendPorts(const std::vector<PortRange>& ranges);
  // Exactly these ports (PortsLandingOn, SliceOfPorts); duplicates count once.
  explicit BackendPorts(std::vector<uint16_t> ports);

  struct Lease {
    uint16_t port;
    uint32_t generation;
  };
  // The port free the longest, or nullopt when every port is held. A port whose last connection
  // ended is fair game: it was released last, so it comes out last, and a new connection's ISN
  // (clock-based) is beyond anything the old one sent.
  std::optional<Lease> Acquire();
  void Release(uint16_t port);
  // True if `lease` is still the port's latest use and no live connection holds the port.
  bool IsIdleSince(const Lease& lease) const;
  uint32_t in_use() const { return in_use_; }
  uint32_t size() const { return static_cast<uint32_t>(free_.size()); }

 private:
  std::optional<uint32_t> IndexOf(uint16_t port) const;

  std::vector<uint16_t> ports_;  // every port of the space, ascending: index = position
  std::vector<uint16_t> free_;   // a ring of free ports: pop at head_, push at the tail
  uint32_t head_ = 0;
  uint32_t free_count_ = 0;
  std::vector<uint32_t> generation_;  // per port index
  std::vector<bool> live_;
  uint32_t in_use_ = 0;
};

}  // namespace xdpfwd
