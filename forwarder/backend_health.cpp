// Passive health and the pickers' inputs (see backend_health.h).
#include "forwarder/backend_health.h"

#include <netinet/in.h>

#include <cstring>

namespace xdpfwd {

uint64_t PassiveHealth::Up(uint64_t now_ms) const {
  uint64_t up = 0;
  for (size_t i = 0; i < backends_.size(); ++i) {
    const Backend& b = backends_[i];
    if (b.down_until == 0 || (b.down_until <= now_ms && !b.trying)) up |= uint64_t{1} << i;
  }
  return up;
}

HealthAttempt PassiveHealth::Began(size_t i, uint64_t now_ms) {
  Backend& b = backends_[i];
  HealthAttempt a{now_ms, false};
  if (b.down_until != 0 && b.down_until <= now_ms && !b.trying) {
    b.trying = true;
    a.trial = true;
  }
  return a;
}

bool PassiveHealth::Failed(size_t i, uint64_t now_ms, HealthAttempt& a) {
  Backend& b = backends_[i];
  if (a.trial) b.trying = false;
  a.trial = false;
  b.failed_ms = now_ms;
  if (b.failures < fall_) ++b.failures;
  // A failed trial finds the failures at fall_ already (only a success lowers them).
  if (b.failures < fall_) return false;
  const bool was_up = b.down_until <= now_ms;
  b.down_until = now_ms + down_ms_;
  return was_up;
}

void PassiveHealth::Succeeded(size_t i, HealthAttempt& a) {
  Backend& b = backends_[i];
  if (a.trial) b.trying = false;
  a.trial = false;
  // Begun in the same millisecond as the failure counts as after it: both paths read their
  // clock once per loop iteration, and a pick that follows a failure in one iteration comes
  // after it.
  if (a.began_ms < b.failed_ms) return;
  b.failures = 0;
  b.down_until = 0;
}

void PassiveHealth::Abandoned(size_t i, HealthAttempt& a) {
  if (a.trial) backends_[i].trying = false;
  a.trial = false;
}

std::vector<PickerBackend> PickerBackends(const std::vector<RuleBackend>& backends) {
  std::vector<PickerBackend> out;
  for (const RuleBackend& b : backends) {
    PickerBackend p;
    p.key = ToString(b.address);
    p.weight = b.weight;
    p.backup = b.backup;
    out.push_back(std::move(p));
  }
  return out;
}

size_t ClientAddressBytes(const sockaddr* client, uint8_t* out) {
  if (client->sa_family == AF_INET) {
    std::memcpy(out, &reinterpret_cast<const sockaddr_in*>(client)->sin_addr, 4);
    return 4;
  }
  if (client->sa_family == AF_INET6) {
    const in6_addr& a = reinterpret_cast<const sockaddr_in6*>(client)->sin6_addr;
    if (IN6_IS_ADDR_V4MAPPED(&a)) {
      std::memcpy(out, &a.s6_addr[12], 4);
      return 4;
    }
    std::memcpy(out, &a, 16);
    return 16;
  }
  return 0;
}

}  // namespace xdpfwd
