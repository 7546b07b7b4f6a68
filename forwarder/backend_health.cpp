// Passive health and the pickers' inputs (see backend_health.h).
#include "forwarder/backend_health.h"

#include <netinet/in.h>

#include <cstring>

namespace xdpfwd {

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
