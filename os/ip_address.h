// An IPv4 or IPv6 address as one value: what the fast path's next hops and the kernel's
// neighbour entries are keyed by, whatever the family (issue #31).
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <cstdint>
#include <cstring>
#include <string>

namespace xdpfwd {

struct IpAddress {
  sa_family_t family = AF_INET;
  in6_addr addr{};  // AF_INET: the IPv4 address in the first 4 bytes, the rest zero

  static IpAddress V4(in_addr a) {
    IpAddress out;
    std::memcpy(&out.addr, &a, sizeof(a));
    return out;
  }
  static IpAddress V6(const in6_addr& a) {
    IpAddress out;
    out.family = AF_INET6;
    out.addr = a;
    return out;
  }
  bool is_v6() const { return family == AF_INET6; }
  in_addr v4() const {
    in_addr a;
    std::memcpy(&a, &addr, sizeof(a));
    return a;
  }
  const in6_addr& v6() const { return addr; }
  // The address's bytes as the kernel takes them (4 or 16).
  const void* data() const { return &addr; }
  size_t size() const { return is_v6() ? sizeof(in6_addr) : sizeof(in_addr); }

  bool operator==(const IpAddress& o) const {
    return family == o.family && std::memcmp(&addr, &o.addr, sizeof(addr)) == 0;
  }
};

struct IpAddressHash {
  size_t operator()(const IpAddress& a) const {
    uint64_t w[2];
    std::memcpy(w, &a.addr, sizeof(w));
    // Odd multipliers: the high bits of each product mix every bit of its word.
    const uint64_t h = (w[0] * 0x9e3779b97f4a7c15ULL) ^ (w[1] * 0xff51afd7ed558ccdULL) ^ a.family;
    return static_cast<size_t>(h ^ (h >> 29));
  }
};

// "198.18.0.1", "2001:db8::1".
inline std::string ToString(const IpAddress& a) {
  char buf[INET6_ADDRSTRLEN] = {};
  inet_ntop(a.family, &a.addr, buf, sizeof(buf));
  return buf;
}

}  // namespace xdpfwd
