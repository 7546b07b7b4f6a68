// Blocking TCP helpers for tests; see tcp.h.
#include "tests/support/tcp.h"

#include <arpa/inet.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <future>
#include <stdexcept>
#include <thread>
#include <vector>

#include "tests/support/netns_topology.h"

namespace xdpfwd::test {
namespace {

[[noreturn]] void Fail(const std::string& what) {
  throw std::runtime_error(what + ": " + std::strerror(errno));
}

sockaddr_in SockAddr(const in_addr& addr, uint16_t port) {
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_addr = addr;
  sa.sin_port = htons(port);
  return sa;
}

constexpr size_t kChunk = 256 * 1024;

void WriteAll(int fd, const uint8_t* p, size_t len) {
  while (len > 0) {
    const ssize_t n = send(fd, p, len, MSG_NOSIGNAL);
    if (n < 0) {
      if (errno == EINTR) continue;
      Fail("send");
    }
    p += n;
    len -= static_cast<size_t>(n);
  }
}

}  // namespace

UniqueFd TcpListen(const std::string& ns, const in_addr& addr, uint16_t port) {
  UniqueFd fd;
  RunInNamespace(ns, [&] {
    fd.reset(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
    if (!fd) Fail("socket");
    const int one = 1;
    setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    sockaddr_in sa = SockAddr(addr, port);
    if (bind(fd.get(), reinterpret_cast<sockaddr*>(&sa), sizeof(sa)) != 0) {
      Fail("bind " + ToString(addr) + ":" + std::to_string(port));
    }
    if (listen(fd.get(), 1024) != 0) Fail("listen");
  });
  return fd;
}

UniqueFd TcpConnect(const std::string& ns, const in_addr& addr, uint16_t port) {
  UniqueFd fd;
  RunInNamespace(ns, [&] {
    fd.reset(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
    if (!fd) Fail("socket");
    sockaddr_in sa = SockAddr(addr, port);
    if (connect(fd.get(), reinterpret_cast<sockaddr*>(&sa), sizeof(sa)) != 0) {
      Fail("connect " + ToString(addr) + ":" + std::to_string(port));
    }
    const int one = 1;
    setsockopt(fd.get(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  });
  return fd;
}

UniqueFd TcpConnect(const std::string& ns, const in6_addr& addr, uint16_t port) {
  UniqueFd fd;
  RunInNamespace(ns, [&] {
    fd.reset(socket(AF_INET6, SOCK_STREAM | SOCK_CLOEXEC, 0));
    if (!fd) Fail("socket");
    sockaddr_in6 sa{};
    sa.sin6_family = AF_INET6;
    sa.sin6_addr = addr;
    sa.sin6_port = htons(port);
    if (connect(fd.get(), reinterpret_cast<sockaddr*>(&sa), sizeof(sa)) != 0) {
      char text[INET6_ADDRSTRLEN] = {};
      inet_ntop(AF_INET6, &addr, text, sizeof(text));
      Fail(std::string("connect [") + text + "]:" + std::to_string(port));
    }
    const int one = 1;
    setsockopt(fd.get(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  });
  return fd;
}

uint16_t LocalPort(int fd) {
  sockaddr_in sa{};
  socklen_t len = sizeof(sa);
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&sa), &len) != 0) Fail("getsockname");
  return ntohs(sa.sin_port);
}

void SetLinger0(int fd) {
  const linger l{1, 0};
  setsockopt(fd, SOL_SOCKET, SO_LINGER, &l, sizeof(l));
}

int64_t DrainUntilClosed(int fd, std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  char buf[65536];
  int64_t total = 0;
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) return -ETIMEDOUT;
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, static_cast<int>(left.count())) <= 0) continue;
    const ssize_t n = recv(fd, buf, sizeof(buf), 0);
    if (n == 0) return total;
    if (n < 0) {
      if (errno == EINTR || errno == EAGAIN) continue;
      return -errno;
    }
    total += n;
  }
}

void Fnv1a::Update(const void* data, size_t len) {
  const auto* p = static_cast<const uint8_t*>(data);
  for (size_t i = 0; i < len; ++i) {
    h_ ^= p[i];
    h_ *= 1099511628211ull;
  }
}

void PatternStream::Fill(uint8_t* out, size_t len) {
  for (size_t i = 0; i < len; i += 8) {
    state_ ^= state_ >> 12;
    state_ ^= state_ << 25;
    state_ ^= state_ >> 27;
    const uint64_t word = state_ * 2685821657736338717ull;
    std::memcpy(out + i, &word, std::min<size_t>(8, len - i));
  }
}

StreamStats SendPattern(int fd, uint64_t seed, uint64_t total) {
  PatternStream pattern(seed);
  Fnv1a hash;
  std::vector<uint8_t> buf(kChunk);
  StreamStats stats;
  while (stats.bytes < total) {
    const size_t len = static_cast<size_t>(std::min<uint64_t>(kChunk, total - stats.bytes));
    pattern.Fill(buf.data(), len);
    hash.Update(buf.data(), len);
    WriteAll(fd, buf.data(), len);
    stats.bytes += len;
  }
  if (shutdown(fd, SHUT_WR) != 0) Fail("shutdown");
  stats.hash = hash.value();
  return stats;
}

StreamStats ReceiveAll(int fd) {
  Fnv1a hash;
  std::vector<uint8_t> buf(kChunk);
  StreamStats stats;
  for (;;) {
    const ssize_t n = recv(fd, buf.data(), buf.size(), 0);
    if (n < 0) {
      if (errno == EINTR) continue;
      Fail("recv");
    }
    if (n == 0) break;
    hash.Update(buf.data(), static_cast<size_t>(n));
    stats.bytes += static_cast<uint64_t>(n);
  }
  stats.hash = hash.value();
  return stats;
}

StreamStats EchoUntilEof(int fd) {
  Fnv1a hash;
  std::vector<uint8_t> buf(kChunk);
  StreamStats stats;
  for (;;) {
    const ssize_t n = recv(fd, buf.data(), buf.size(), 0);
    if (n < 0) {
      if (errno == EINTR) continue;
      Fail("recv");
    }
    if (n == 0) break;
    hash.Update(buf.data(), static_cast<size_t>(n));
    WriteAll(fd, buf.data(), static_cast<size_t>(n));
    stats.bytes += static_cast<uint64_t>(n);
  }
  if (shutdown(fd, SHUT_WR) != 0) Fail("shutdown");
  stats.hash = hash.value();
  return stats;
}

BothWays ExchangeBothWays(int client, const std::function<UniqueFd()>& accept_backend,
                          uint64_t bytes) {
  BothWays out;
  std::thread backend([&] {
    UniqueFd c = accept_backend();
    std::future<StreamStats> received =
        std::async(std::launch::async, [&] { return ReceiveAll(c.get()); });
    out.backend_sent = SendPattern(c.get(), 2, bytes);
    out.backend_got = received.get();
  });
  std::future<StreamStats> received =
      std::async(std::launch::async, [&] { return ReceiveAll(client); });
  out.client_sent = SendPattern(client, 1, bytes);
  out.client_got = received.get();
  backend.join();
  return out;
}

}  // namespace xdpfwd::test
