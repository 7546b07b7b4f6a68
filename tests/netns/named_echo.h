// A backend that names itself to each client before echoing, and the client that asks it: which
// backend of a rule a connection reached (either family), and whether its bytes crossed intact.
#pragma once

#include <sys/socket.h>

#include <future>
#include <mutex>
#include <string>
#include <vector>

#include "tests/netns/auto_mode_fixture.h"
#include "tests/support/backend.h"

namespace xdpfwd::test {

// Says its name (one byte) to each client, then echoes until the client's FIN; notes the source
// address each backend leg came from. Gone (destroyed), its port refuses new handshakes.
class NamedEcho {
 public:
  NamedEcho(UniqueFd listener, char name)
      : name_(name), backend_(std::move(listener), [this](int fd) { Serve(fd); }) {}
  std::vector<std::string> peers() {
    std::lock_guard lock(mu_);
    return peers_;
  }
  std::string failures() { return backend_.failures(); }

 private:
  void Serve(int fd) {
    sockaddr_storage peer{};
    socklen_t length = sizeof(peer);
    char text[INET6_ADDRSTRLEN] = {};
    if (getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &length) == 0) {
      const void* a =
          peer.ss_family == AF_INET6
              ? static_cast<const void*>(&reinterpret_cast<sockaddr_in6*>(&peer)->sin6_addr)
              : static_cast<const void*>(&reinterpret_cast<sockaddr_in*>(&peer)->sin_addr);
      inet_ntop(peer.ss_family, a, text, sizeof(text));
    }
    {
      std::lock_guard lock(mu_);
      peers_.push_back(text);
    }
    BoundWaits(fd);
    if (send(fd, &name_, 1, MSG_NOSIGNAL) != 1) throw std::runtime_error("send name");
    EchoUntilEofOrReset(fd);
  }
  const char name_;
  std::mutex mu_;
  std::vector<std::string> peers_;
  Backend backend_;  // last: its threads stop before the rest goes
};

// The name a NamedEcho behind `fd` (a connected client) says, then `bytes` each way crossed at
// once; '-' if the connection failed, '!' if the bytes did not come back whole.
inline char NamedEchoOn(int fd, uint64_t seed, uint64_t bytes) {
  char name = 0;
  if (recv(fd, &name, 1, MSG_WAITALL) != 1) return '-';
  std::future<StreamStats> echoed = std::async(std::launch::async, [fd] { return ReceiveAll(fd); });
  const StreamStats sent = SendPattern(fd, seed, bytes);
  const StreamStats got = echoed.get();
  return got.bytes == sent.bytes && got.hash == sent.hash ? name : '!';
}

// One client connection from `ns` to addr:port (either family), as NamedEchoOn.
inline char AskNamed(const std::string& ns, const std::string& addr, uint16_t port, uint64_t seed,
                     uint64_t bytes) {
  try {
    UniqueFd c = TcpConnectTo(ns, addr, port);
    return NamedEchoOn(c.get(), seed, bytes);
  } catch (const std::exception&) {
    return '-';
  }
}

}  // namespace xdpfwd::test
