// Forwarding rules: "listen on this address and port, relay to that backend", from the command
// line (one rule) or a rinetd-style file (many). Addresses are IPv4 or IPv6; the fast path takes
// the IPv4 ones, the kernel path takes all.
#pragma once

#include <netinet/in.h>
#include <sys/socket.h>

#include <cstdint>
#include <string>
#include <vector>

#include "os/endpoint.h"
#include "os/result.h"

namespace xdpfwd {

// An IPv4 or IPv6 address and port, ready for bind/connect.
struct SocketAddress {
  sockaddr_storage storage{};
  socklen_t length = 0;

  int family() const { return storage.ss_family; }
  uint16_t port() const;
  bool is_ipv4() const { return family() == AF_INET; }
  // The IPv4 address and port (only when is_ipv4()).
  Endpoint ipv4() const;
  bool is_any() const;  // 0.0.0.0 or ::
  const sockaddr* get() const { return reinterpret_cast<const sockaddr*>(&storage); }
};

// "10.0.1.1:9000", "[2001:db8::1]:9000", "[::]:9000".
Result<SocketAddress> ParseSocketAddress(const std::string& text);
// Address and port as separate words (rinetd's "bindaddress bindport"); a bare IPv6 address
// needs no brackets here.
Result<SocketAddress> ParseSocketAddress(const std::string& address, const std::string& port);
SocketAddress FromEndpoint(const Endpoint& ep);
// "10.0.1.1:9000" or "[2001:db8::1]:9000".
std::string ToString(const SocketAddress& address);

struct Rule {
  uint32_t id = 0;  // index in the rule list; the steering program records it per flow
  SocketAddress listen;
  SocketAddress backend;
  int line = 0;  // line in the rules file, 0 for a command-line rule
};

// rinetd's format: one rule per line, "bindaddress bindport connectaddress connectport", '#'
// starts a comment, blank lines are ignored. Anything else (rinetd's allow/deny/logfile
// directives, a fifth word, a bad address) is an error naming the file and line. At least one
// rule is required, and two rules may not listen on the same address and port.
Result<std::vector<Rule>> ParseRules(const std::string& text, const std::string& source_name);
Result<std::vector<Rule>> LoadRulesFile(const std::string& path);

}  // namespace xdpfwd
