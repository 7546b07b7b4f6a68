// Local ports for the relay's backend legs. lwIP's own picker walks every pcb per connect and
// ignores the remote end, so the relay keeps its own: one space per backend (a port may serve
// two backends at once, the 4-tuples differ), a rotating cursor so a port is reused as late as
// possible, and a generation per port so a delayed flow removal can tell that the port has
// since been reused for a new connection.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

namespace xdpfwd {

struct PortRange {
  uint16_t first = 61000;  // lwIP's range in lwipopts.h: above the kernel's ephemeral ports
  uint16_t last = 65535;
  uint32_t size() const { return uint32_t{last} - first + 1; }
};

class BackendPorts {
 public:
  explicit BackendPorts(PortRange range);

  struct Lease {
    uint16_t port;
    uint32_t generation;
  };
  // The next port not held by a live connection, or nullopt when every port is. A port whose
  // last connection is in TIME_WAIT is fair game: the cursor reaches it last, and the new
  // connection's ISN (clock-based) is beyond anything the old one sent.
  std::optional<Lease> Acquire();
  void Release(uint16_t port);
  // True if `lease` is still the port's latest use and no live connection holds the port.
  bool IsIdleSince(const Lease& lease) const;
  uint32_t in_use() const { return in_use_; }

 private:
  PortRange range_;
  std::vector<uint32_t> generation_;
  std::vector<bool> live_;
  uint32_t cursor_ = 0;
  uint32_t in_use_ = 0;
};

}  // namespace xdpfwd
