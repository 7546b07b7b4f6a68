// The KernelPath namespace tests' shared part: a topology per test (client namespace -> the
// root namespace, where KernelPath runs -> server namespace), sockets of either family made
// inside a namespace, stream helpers that report how a stream ended, and the fixture.
#pragma once

#include <gtest/gtest.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <functional>
#include <future>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "forwarder/kernel_path.h"
#include "forwarder/rules.h"
#include "tests/support/backend.h"
#include "tests/support/child_process.h"
#include "tests/support/connection_ends.h"
#include "tests/support/eventually.h"
#include "tests/support/netns_topology.h"
#include "tests/support/tcp.h"

namespace xdpfwd::test {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

// Ports on this test's own topology addresses only (each test builds its own topology).
constexpr uint16_t kListenPort = 9000;
constexpr uint16_t kBackendPort = 9100;
constexpr uint64_t kMiB = 1024 * 1024;

inline size_t OpenFds() {
  return static_cast<size_t>(std::distance(std::filesystem::directory_iterator("/proc/self/fd"),
                                           std::filesystem::directory_iterator()));
}

// The next close() sends a RST instead of a FIN.
inline void ArmReset(int fd) {
  const linger abort{1, 0};
  setsockopt(fd, SOL_SOCKET, SO_LINGER, &abort, sizeof(abort));
}

inline SocketAddress Address(const in_addr& addr, uint16_t port) {
  return FromEndpoint(Endpoint{addr, port});
}

inline SocketAddress Address(const std::string& text) {
  auto a = ParseSocketAddress(text);
  if (!a) throw std::runtime_error(a.error().message());
  return *a;
}

// Listening and connected sockets of either family, created inside `ns`.
inline UniqueFd ListenOn(const std::string& ns, const SocketAddress& at) {
  UniqueFd fd;
  RunInNamespace(ns, [&] {
    fd.reset(socket(at.family(), SOCK_STREAM | SOCK_CLOEXEC, 0));
    const int one = 1;
    setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (at.family() == AF_INET6) setsockopt(fd.get(), IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof(one));
    if (bind(fd.get(), at.get(), at.length) != 0 || listen(fd.get(), 1024) != 0) {
      throw std::runtime_error("listen " + ToString(at) + ": " + std::strerror(errno));
    }
  });
  return fd;
}

inline UniqueFd ConnectTo(const std::string& ns, const SocketAddress& to) {
  UniqueFd fd;
  RunInNamespace(ns, [&] {
    fd.reset(socket(to.family(), SOCK_STREAM | SOCK_CLOEXEC, 0));
    if (connect(fd.get(), to.get(), to.length) != 0) {
      throw std::runtime_error("connect " + ToString(to) + ": " + std::strerror(errno));
    }
  });
  BoundWaits(fd.get());
  return fd;
}

// How a stream ended for a reader.
struct Ending {
  uint64_t bytes = 0;
  int err = 0;  // 0: orderly end of stream (FIN); ECONNRESET: reset; ETIMEDOUT: neither in time
};

inline Ending ReadToEnd(int fd, std::chrono::milliseconds timeout = 10s) {
  const auto deadline = Clock::now() + timeout;
  std::vector<uint8_t> buf(64 * 1024);
  Ending end;
  for (;;) {
    const auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - Clock::now());
    if (left.count() <= 0) {
      end.err = ETIMEDOUT;
      return end;
    }
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, static_cast<int>(left.count())) <= 0) continue;
    const ssize_t n = recv(fd, buf.data(), buf.size(), MSG_DONTWAIT);
    if (n > 0) {
      end.bytes += static_cast<uint64_t>(n);
    } else if (n == 0) {
      return end;
    } else if (errno != EAGAIN && errno != EINTR) {
      end.err = errno;
      return end;
    }
  }
}

inline void SendAll(int fd, const void* data, size_t len) {
  const auto* p = static_cast<const uint8_t*>(data);
  while (len > 0) {
    const ssize_t n = send(fd, p, len, MSG_NOSIGNAL);
    if (n <= 0) throw std::runtime_error(std::string("send: ") + std::strerror(errno));
    p += n;
    len -= static_cast<size_t>(n);
  }
}

inline void RecvExactly(int fd, void* data, size_t len) {
  auto* p = static_cast<uint8_t*>(data);
  while (len > 0) {
    const ssize_t n = recv(fd, p, len, 0);
    if (n <= 0) {
      throw std::runtime_error(n == 0 ? "recv: early end of stream"
                                      : std::string("recv: ") + std::strerror(errno));
    }
    p += n;
    len -= static_cast<size_t>(n);
  }
}

// One round trip through an echo backend.
inline bool Ping(int fd, char tag = 'x') {
  char reply = 0;
  SendAll(fd, &tag, 1);
  RecvExactly(fd, &reply, 1);
  return reply == tag;
}

// Every accepted connection ended in exactly one way or is still open.
inline void ExpectAccountedFor(const KernelPathTotals& t) {
  ExpectEachEndedOnce(t.relay, t.Format());
}

class KernelPathTest : public ::testing::Test {
 protected:
  KernelPathConfig Config(bool use_splice = true) const {
    KernelPathConfig config;
    Rule rule;
    rule.listen = Address(topo_.client_gw(), kListenPort);
    rule.backend = Address(topo_.server_addr(), kBackendPort);
    config.rules.push_back(rule);
    config.threads = 2;  // more than one loop even on a one-CPU machine
    config.use_splice = use_splice;
    config.limits.max_connections = 1000;
    return config;
  }

  std::unique_ptr<KernelPath> Start(const KernelPathConfig& config) {
    auto path = KernelPath::Start(config);
    if (!path) throw std::runtime_error("KernelPath::Start: " + path.error().message());
    return std::move(*path);
  }

  UniqueFd BackendListener() const {
    return TcpListen(topo_.server_ns(), topo_.server_addr(), kBackendPort);
  }

  UniqueFd Client() const {
    UniqueFd fd = TcpConnect(topo_.client_ns(), topo_.client_gw(), kListenPort);
    BoundWaits(fd.get());
    return fd;
  }

  // Waits for a counter condition; on timeout the failure shows every counter.
  void WaitFor(KernelPath& path, const std::function<bool(const RelayTotals&)>& done,
               const char* what, std::chrono::milliseconds timeout = 10s) {
    const bool ok = Eventually([&] { return done(path.Totals().relay); }, timeout);
    EXPECT_TRUE(ok) << what << ": " << path.Totals().Format();
  }

  Topology topo_;
};

}  // namespace xdpfwd::test
