// An IPv4 or IPv6 address as one value: what the fast path's next hops and the kernel's
// neighbour entries are keyed by, whatever the family (issue #31).
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

namespace xdpfwd {

struct IpAddress {
  sa_family_t family = AF_INET;
  in6_addr addr{};  // AF_INET: the IPv4 address in the first 4 bytes, the rest zero

  IpAddress() = default;
  // An IPv4 address is one: code written for IPv4 keeps passing in_addr.
  IpAddress(in_addr a) { std::memcpy(&addr, &a, sizeof(a)); }  // NOLINT: implicit by design

  static IpAddress V4(in_addr a) { return IpAddress(a); }
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

  bool is_unspecified() const { return IN6_IS_ADDR_UNSPECIFIED(&addr); }  // 0.0.0.0 or ::

  bool operator==(const IpAddress& o) const {
    return family == o.family && std::memcmp(&addr, &o.addr, sizeof(addr)) == 0;
  }
  // Any strict order (map keys): by family, then by the address's bytes.
  bool operator<(const IpAddress& o) const {
    if (family != o.family) return family < o.family;
    return std::memcmp(&addr, &o.addr, sizeof(addr)) < 0;
  }
};

// An address of either family and a port (host order): the fast path's listen addresses,
// backends and flow ends.
struct IpEndpoint {
  IpAddress addr;
  uint16_t port = 0;

  bool operator==(const IpEndpoint& o) const { return addr == o.addr && port == o.port; }
};

// The addresses of `family` among `addresses`, in their order (--backend-source's for a leg).
inline std::vector<IpAddress> OfFamily(const std::vector<IpAddress>& addresses,
                                       sa_family_t family) {
  std::vector<IpAddress> out;
  for (const IpAddress& a : addresses) {
    if (a.family == family) out.push_back(a);
  }
  return out;
}

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

// "198.18.0.1:9000", "[2001:db8::1]:9000".
inline std::string ToString(const IpEndpoint& e) {
  const std::string host = ToString(e.addr);
  return (e.addr.is_v6() ? "[" + host + "]" : host) + ":" + std::to_string(e.port);
}

// As a socket address (sockaddr_in or sockaddr_in6), for what takes one.
inline sockaddr_storage ToSockaddr(const IpEndpoint& e) {
  sockaddr_storage out{};
  if (e.addr.is_v6()) {
    auto* sin6 = reinterpret_cast<sockaddr_in6*>(&out);
    sin6->sin6_family = AF_INET6;
    sin6->sin6_addr = e.addr.v6();
    sin6->sin6_port = htons(e.port);
  } else {
    auto* sin = reinterpret_cast<sockaddr_in*>(&out);
    sin->sin_family = AF_INET;
    sin->sin_addr = e.addr.v4();
    sin->sin_port = htons(e.port);
  }
  return out;
}

}  // namespace xdpfwd
