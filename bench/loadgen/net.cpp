// Addresses and sockets for the load generator; see net.h.
#include "bench/loadgen/net.h"
#include "os/parse_number.h"

#include <arpa/inet.h>
#include <netinet/tcp.h>

#include <cerrno>
#include <charconv>
#include <cstring>

namespace xdpfwd::loadgen {

uint16_t SockAddr::port() const {
  if (family() == AF_INET) return ntohs(reinterpret_cast<const sockaddr_in*>(&storage)->sin_port);
  return ntohs(reinterpret_cast<const sockaddr_in6*>(&storage)->sin6_port);
}

Result<SockAddr> ParseAddr(const std::string& text) {
  std::string host = text;
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  SockAddr a;
  auto* v4 = reinterpret_cast<sockaddr_in*>(&a.storage);
  auto* v6 = reinterpret_cast<sockaddr_in6*>(&a.storage);
  if (inet_pton(AF_INET, host.c_str(), &v4->sin_addr) == 1) {
    v4->sin_family = AF_INET;
    a.length = sizeof(sockaddr_in);
  } else if (inet_pton(AF_INET6, host.c_str(), &v6->sin6_addr) == 1) {
    v6->sin6_family = AF_INET6;
    a.length = sizeof(sockaddr_in6);
  } else {
    return Error{{}, "'" + text + "' is not an IPv4 or IPv6 address"};
  }
  return a;
}

Result<SockAddr> ParseAddrPort(const std::string& text, bool allow_port_zero) {
  const size_t colon = text.rfind(':');
  const std::string host = colon == std::string::npos ? "" : text.substr(0, colon);
  // A bare IPv6 address has colons of its own: require brackets so "::1:80" is not ambiguous.
  if (host.empty() || (host.find(':') != std::string::npos && host.front() != '[')) {
    return Error{{}, "'" + text + "' is not ADDR:PORT (for example 127.0.0.1:9000 or [::1]:9000)"};
  }
  auto addr = ParseAddr(host);
  if (!addr) return Error{{}, "'" + text + "': " + addr.error().message()};
  const std::string_view port_text = std::string_view(text).substr(colon + 1);
  const std::optional<uint16_t> port = ParsePortNumber(port_text, allow_port_zero);
  if (!port) {
    return Error{{},
                 "'" + text + "': '" + std::string(port_text) + "' is not a port number (" +
                     (allow_port_zero ? "0" : "1") + "-65535)"};
  }
  if (addr->family() == AF_INET) {
    reinterpret_cast<sockaddr_in*>(&addr->storage)->sin_port = htons(*port);
  } else {
    reinterpret_cast<sockaddr_in6*>(&addr->storage)->sin6_port = htons(*port);
  }
  return addr;
}

std::string ToString(const SockAddr& addr) {
  char buf[INET6_ADDRSTRLEN] = {};
  if (addr.family() == AF_INET) {
    inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in*>(&addr.storage)->sin_addr, buf,
              sizeof(buf));
    return std::string(buf) + ":" + std::to_string(addr.port());
  }
  inet_ntop(AF_INET6, &reinterpret_cast<const sockaddr_in6*>(&addr.storage)->sin6_addr, buf,
            sizeof(buf));
  return "[" + std::string(buf) + "]:" + std::to_string(addr.port());
}

Result<UniqueFd> Listen(const SockAddr& addr, int backlog, bool reuse_port) {
  UniqueFd fd(socket(addr.family(), SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  if (!fd) return SystemError("socket");
  const int one = 1;
  setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  if (reuse_port && setsockopt(fd.get(), SOL_SOCKET, SO_REUSEPORT, &one, sizeof(one)) != 0) {
    return SystemError("SO_REUSEPORT");
  }
  setsockopt(fd.get(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  if (bind(fd.get(), addr.get(), addr.length) != 0) return SystemError("bind " + ToString(addr));
  if (listen(fd.get(), backlog) != 0) return SystemError("listen " + ToString(addr));
  return fd;
}

Result<SockAddr> LocalAddress(int fd) {
  SockAddr a;
  a.length = sizeof(a.storage);
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&a.storage), &a.length) != 0) {
    return SystemError("getsockname");
  }
  return a;
}

Result<Connecting> StartConnect(const SockAddr& target, const SockAddr* source) {
  Connecting c;
  c.fd.reset(socket(target.family(), SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  if (!c.fd) return SystemError("socket");
  const int one = 1;
  if (setsockopt(c.fd.get(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one)) != 0) {
    return SystemError("TCP_NODELAY");
  }
  if (source != nullptr) {
    if (setsockopt(c.fd.get(), IPPROTO_IP, IP_BIND_ADDRESS_NO_PORT, &one, sizeof(one)) != 0) {
      return SystemError("IP_BIND_ADDRESS_NO_PORT");
    }
    if (bind(c.fd.get(), source->get(), source->length) != 0) {
      return SystemError("bind " + ToString(*source));
    }
  }
  if (connect(c.fd.get(), target.get(), target.length) == 0) {
    c.done = true;
  } else if (errno != EINPROGRESS) {
    return SystemError("connect " + ToString(target));
  }
  return c;
}

int ConnectResult(int fd) {
  int err = 0;
  socklen_t len = sizeof(err);
  if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0) return errno;
  return err;
}

}  // namespace xdpfwd::loadgen
