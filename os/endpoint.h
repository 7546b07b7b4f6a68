// IPv4 "address:port" endpoints as users type them on command lines and in rule files.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>

#include <charconv>
#include <string>

#include "os/parse_number.h"
#include "os/result.h"

namespace xdpfwd {

struct Endpoint {
  in_addr addr{};
  uint16_t port = 0;
};

inline Result<Endpoint> ParseEndpoint(const std::string& text) {
  const size_t colon = text.rfind(':');
  if (colon == std::string::npos) {
    return Error{{}, "'" + text + "' is not ADDRESS:PORT (for example 10.0.1.1:9000)"};
  }
  Endpoint ep;
  const std::string host = text.substr(0, colon);
  if (inet_pton(AF_INET, host.c_str(), &ep.addr) != 1) {
    return Error{{}, "'" + host + "' in '" + text + "' is not an IPv4 address"};
  }
  const std::optional<uint16_t> port = ParsePortNumber(std::string_view(text).substr(colon + 1));
  if (!port) {
    return Error{
        {}, "'" + text.substr(colon + 1) + "' in '" + text + "' is not a port number (1-65535)"};
  }
  ep.port = *port;
  return ep;
}

// Dotted quad ("198.18.0.1").
inline std::string ToString(const in_addr& addr) {
  char buf[INET_ADDRSTRLEN] = {};
  inet_ntop(AF_INET, &addr, buf, sizeof(buf));
  return buf;
}

inline std::string ToString(const Endpoint& ep) {
  return ToString(ep.addr) + ":" + std::to_string(ep.port);
}

}  // namespace xdpfwd
