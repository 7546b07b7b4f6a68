// Addresses and sockets for the load generator: IPv4/IPv6 "ADDR:PORT" parsing, a listening
// socket, and non-blocking connects from an optional source address.
#pragma once

#include <netinet/in.h>
#include <sys/socket.h>

#include <string>

#include "os/result.h"
#include "os/unique_fd.h"

namespace xdpfwd::loadgen {

// Not forwarder/rules.h's SocketAddress: the load generator must not link the forwarder it
// measures, and it needs port 0 (serve picks a free port) and addresses without a port (--source).
struct SockAddr {
  sockaddr_storage storage{};
  socklen_t length = 0;

  int family() const { return storage.ss_family; }
  uint16_t port() const;
  const sockaddr* get() const { return reinterpret_cast<const sockaddr*>(&storage); }
};

// "127.0.0.1:9000", "[::1]:9000"; port 0 only when allow_port_zero.
Result<SockAddr> ParseAddrPort(const std::string& text, bool allow_port_zero);
// "10.0.0.1", "::1" or "[::1]", port 0.
Result<SockAddr> ParseAddr(const std::string& text);
// "127.0.0.1:9000" or "[::1]:9000".
std::string ToString(const SockAddr& addr);

// Non-blocking listening TCP socket with TCP_NODELAY inherited by accepted sockets. reuse_port:
// SO_REUSEPORT, so several processes (each within its own open-file limit) share the port and
// the kernel spreads new connections over them.
Result<UniqueFd> Listen(const SockAddr& addr, int backlog, bool reuse_port = false);
Result<SockAddr> LocalAddress(int fd);

// A non-blocking TCP socket with TCP_NODELAY, bound to `source` (when not null) without picking
// a port yet (IP_BIND_ADDRESS_NO_PORT: the port is chosen at connect time for the whole 4-tuple,
// so each source address has its own ephemeral port space), and connect() started.
struct Connecting {
  UniqueFd fd;
  bool done = false;  // connected already; otherwise wait for EPOLLOUT and check SO_ERROR
};
Result<Connecting> StartConnect(const SockAddr& target, const SockAddr* source);
// The connect() outcome once the socket is writable or has an error: 0 or an errno.
int ConnectResult(int fd);

}  // namespace xdpfwd::loadgen
