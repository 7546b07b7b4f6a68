// PROXY protocol headers byte for byte as HAProxy's doc/proxy-protocol.txt lays them out,
// built by hand (not by the forwarder's own writer), for the tests that send or expect them.
#pragma once

#include <netinet/in.h>

#include <cstdint>
#include <string>

namespace xdpfwd::test {

// v1: "PROXY TCP4 <from> <to> <from_port> <to_port>\r\n".
std::string ProxyV1(in_addr from, uint16_t from_port, in_addr to, uint16_t to_port);
// v2's PROXY command over TCP4 or TCP6.
std::string ProxyV2(in_addr from, uint16_t from_port, in_addr to, uint16_t to_port);
std::string ProxyV2(const in6_addr& from, uint16_t from_port, const in6_addr& to, uint16_t to_port);
// v2's LOCAL command: no addresses.
std::string ProxyV2Local();

}  // namespace xdpfwd::test
