// Rule parsing: rinetd's file format and ADDRESS:PORT words.
#include "forwarder/rules.h"
#include "os/parse_number.h"

#include <arpa/inet.h>

#include <charconv>
#include <cstring>
#include <fstream>
#include <sstream>

namespace xdpfwd {
namespace {

Result<uint16_t> ParsePort(const std::string& text, const std::string& whole) {
  const std::optional<uint16_t> port = ParsePortNumber(text);
  if (!port) return Error{{}, "'" + text + "' in '" + whole + "' is not a port number (1-65535)"};
  return *port;
}

}  // namespace

uint16_t SocketAddress::port() const {
  if (family() == AF_INET) return ntohs(reinterpret_cast<const sockaddr_in*>(&storage)->sin_port);
  if (family() == AF_INET6) {
    return ntohs(reinterpret_cast<const sockaddr_in6*>(&storage)->sin6_port);
  }
  return 0;
}

Endpoint SocketAddress::ipv4() const {
  const auto* sin = reinterpret_cast<const sockaddr_in*>(&storage);
  return Endpoint{sin->sin_addr, ntohs(sin->sin_port)};
}

IpEndpoint SocketAddress::ip() const {
  if (is_ipv4()) {
    const Endpoint e = ipv4();
    return IpEndpoint{e.addr, e.port};
  }
  const auto* sin6 = reinterpret_cast<const sockaddr_in6*>(&storage);
  return IpEndpoint{IpAddress::V6(sin6->sin6_addr), ntohs(sin6->sin6_port)};
}

bool SocketAddress::is_any() const {
  if (family() == AF_INET) {
    return reinterpret_cast<const sockaddr_in*>(&storage)->sin_addr.s_addr == INADDR_ANY;
  }
  const auto* sin6 = reinterpret_cast<const sockaddr_in6*>(&storage);
  return IN6_IS_ADDR_UNSPECIFIED(&sin6->sin6_addr);
}

SocketAddress FromEndpoint(const Endpoint& ep) {
  SocketAddress out;
  auto* sin = reinterpret_cast<sockaddr_in*>(&out.storage);
  sin->sin_family = AF_INET;
  sin->sin_addr = ep.addr;
  sin->sin_port = htons(ep.port);
  out.length = sizeof(sockaddr_in);
  return out;
}

SocketAddress FromIpEndpoint(const IpEndpoint& ep) {
  if (!ep.addr.is_v6()) return FromEndpoint(Endpoint{ep.addr.v4(), ep.port});
  SocketAddress out;
  auto* sin6 = reinterpret_cast<sockaddr_in6*>(&out.storage);
  sin6->sin6_family = AF_INET6;
  sin6->sin6_addr = ep.addr.v6();
  sin6->sin6_port = htons(ep.port);
  out.length = sizeof(sockaddr_in6);
  return out;
}

Result<SocketAddress> ParseSocketAddress(const std::string& address, const std::string& port) {
  const std::string whole = address + " " + port;
  auto p = ParsePort(port, whole);
  if (!p) return p.error();
  SocketAddress out;
  in_addr v4{};
  in6_addr v6{};
  if (inet_pton(AF_INET, address.c_str(), &v4) == 1) {
    return FromEndpoint(Endpoint{v4, *p});
  }
  std::string bare = address;
  if (bare.size() >= 2 && bare.front() == '[' && bare.back() == ']') {
    bare = bare.substr(1, bare.size() - 2);
  }
  if (inet_pton(AF_INET6, bare.c_str(), &v6) == 1) {
    auto* sin6 = reinterpret_cast<sockaddr_in6*>(&out.storage);
    sin6->sin6_family = AF_INET6;
    sin6->sin6_addr = v6;
    sin6->sin6_port = htons(*p);
    out.length = sizeof(sockaddr_in6);
    return out;
  }
  return Error{{},
               "'" + address + "' is not an IPv4 or IPv6 address (host names are not looked up)"};
}

Result<SocketAddress> ParseSocketAddress(const std::string& text) {
  const size_t colon = text.rfind(':');
  if (colon == std::string::npos || colon == 0) {
    return Error{{},
                 "'" + text + "' is not ADDRESS:PORT (for example 10.0.1.1:9000 or [::1]:9000)"};
  }
  std::string host = text.substr(0, colon);
  if (host.find(':') != std::string::npos && host.front() != '[') {
    return Error{{},
                 "'" + text + "': write an IPv6 address in brackets, as [" + host +
                     "]:" + text.substr(colon + 1)};
  }
  auto p = ParsePort(text.substr(colon + 1), text);
  if (!p) return p.error();
  return ParseSocketAddress(host, text.substr(colon + 1));
}

std::string ToString(const SocketAddress& address) {
  char buf[INET6_ADDRSTRLEN] = {};
  if (address.family() == AF_INET) return ToString(address.ipv4());
  if (address.family() == AF_INET6) {
    const auto* sin6 = reinterpret_cast<const sockaddr_in6*>(&address.storage);
    inet_ntop(AF_INET6, &sin6->sin6_addr, buf, sizeof(buf));
    return "[" + std::string(buf) + "]:" + std::to_string(address.port());
  }
  return "(no address)";
}

std::string HostText(const SocketAddress& address) {
  std::string text = ToString(address);
  if (const size_t colon = text.rfind(':'); colon != std::string::npos) text.resize(colon);
  return text;
}

bool operator==(const SocketAddress& a, const SocketAddress& b) {
  return a.length == b.length && std::memcmp(&a.storage, &b.storage, a.length) == 0;
}

std::string_view ProtocolName(Protocol p) { return p == Protocol::kUdp ? "udp" : "tcp"; }

std::string_view BackendAdminName(BackendAdmin a) {
  switch (a) {
    case BackendAdmin::kDrain:
      return "drain";
    case BackendAdmin::kMaint:
      return "maint";
    case BackendAdmin::kReady:
      break;
  }
  return "ready";
}

std::vector<RuleBackend> AllBackends(const Rule& rule) {
  std::vector<RuleBackend> all;
  RuleBackend first;
  first.address = rule.backend;
  first.host = rule.backend_host;
  first.weight = rule.backend_weight;
  first.admin = rule.backend_admin;
  first.line = rule.line;
  all.push_back(std::move(first));
  all.insert(all.end(), rule.more_backends.begin(), rule.more_backends.end());
  return all;
}

}  // namespace xdpfwd
