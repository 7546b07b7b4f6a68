// The loss injector (xdp/lossy.bpf.c) attached to the namespace end of a topology's veth: it
// drops that share of the TCP frames (IPv4 and IPv6) the namespace receives. Detached when
// destroyed (and gone with the namespace in any case).
#pragma once

#include <cstdint>
#include <string>

struct lossy;

namespace xdpfwd::test {

class LossyLink {
 public:
  // Throws if the program cannot be loaded or attached.
  LossyLink(const std::string& ns, uint32_t drop_per_million);
  ~LossyLink();
  LossyLink(const LossyLink&) = delete;
  LossyLink& operator=(const LossyLink&) = delete;

  uint64_t dropped() const;

 private:
  std::string ns_;
  lossy* skel_ = nullptr;
  int ifindex_ = 0;
};

}  // namespace xdpfwd::test
