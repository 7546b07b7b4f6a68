// The relay's backend port allocator (see backend_ports.h).
#include "forwarder/backend_ports.h"

namespace xdpfwd {

BackendPorts::BackendPorts(PortRange range)
    : range_(range), generation_(range.size(), 0), live_(range.size(), false) {}

std::optional<BackendPorts::Lease> BackendPorts::Acquire() {
  const uint32_t n = range_.size();
  if (in_use_ == n) return std::nullopt;
  for (uint32_t tried = 0; tried < n; ++tried) {
    const uint32_t i = cursor_;
    cursor_ = cursor_ + 1 == n ? 0 : cursor_ + 1;
    if (live_[i]) continue;
    live_[i] = true;
    ++in_use_;
    return Lease{static_cast<uint16_t>(range_.first + i), ++generation_[i]};
  }
  return std::nullopt;
}

void BackendPorts::Release(uint16_t port) {
  const uint32_t i = port - range_.first;
  if (i < live_.size() && live_[i]) {
    live_[i] = false;
    --in_use_;
  }
}

bool BackendPorts::IsIdleSince(const Lease& lease) const {
  const uint32_t i = lease.port - range_.first;
  return i < live_.size() && !live_[i] && generation_[i] == lease.generation;
}

}  // namespace xdpfwd
