// See proxy_header_bytes.h.
#include "tests/support/proxy_header_bytes.h"

#include <arpa/inet.h>

#include "os/endpoint.h"

namespace xdpfwd::test {

namespace {

// The 12-byte signature, the version and command byte, the family byte, the length.
std::string V2Preamble(char command, char family, uint16_t length) {
  std::string h("\r\n\r\n\0\r\nQUIT\n", 12);
  h += command;
  h += family;
  h += static_cast<char>(length >> 8);
  h += static_cast<char>(length & 0xff);
  return h;
}

std::string V2Addresses(char family, const void* from, const void* to, size_t size,
                        uint16_t from_port, uint16_t to_port) {
  std::string h = V2Preamble('\x21', family, static_cast<uint16_t>(2 * size + 4));
  h.append(static_cast<const char*>(from), size);
  h.append(static_cast<const char*>(to), size);
  const uint16_t fp = htons(from_port), tp = htons(to_port);
  h.append(reinterpret_cast<const char*>(&fp), 2);
  h.append(reinterpret_cast<const char*>(&tp), 2);
  return h;
}

}  // namespace

std::string ProxyV1(in_addr from, uint16_t from_port, in_addr to, uint16_t to_port) {
  return "PROXY TCP4 " + ToString(from) + " " + ToString(to) + " " + std::to_string(from_port) +
         " " + std::to_string(to_port) + "\r\n";
}

std::string ProxyV2(in_addr from, uint16_t from_port, in_addr to, uint16_t to_port) {
  return V2Addresses('\x11', &from.s_addr, &to.s_addr, 4, from_port, to_port);  // AF_INET, STREAM
}

std::string ProxyV2(const in6_addr& from, uint16_t from_port, const in6_addr& to,
                    uint16_t to_port) {
  return V2Addresses('\x21', &from, &to, 16, from_port, to_port);  // AF_INET6, STREAM
}

std::string ProxyV2Local() { return V2Preamble('\x20', '\0', 0); }

}  // namespace xdpfwd::test
