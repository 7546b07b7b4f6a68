// Small blocking-socket helpers for tests: sockets created inside a namespace (a socket belongs
// to the namespace it was created in, whichever thread uses it later), a deterministic byte
// stream and a hash to prove every byte arrived in order.
#pragma once

#include <netinet/in.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>

#include "os/unique_fd.h"

namespace xdpfwd::test {

// Listening TCP socket in `ns` on addr:port (port 0 picks a free one; read it with LocalPort).
UniqueFd TcpListen(const std::string& ns, const in_addr& addr, uint16_t port = 0);
// Connected TCP socket from `ns` to addr:port; throws on failure.
UniqueFd TcpConnect(const std::string& ns, const in_addr& addr, uint16_t port);
UniqueFd TcpConnect(const std::string& ns, const in6_addr& addr, uint16_t port);
uint16_t LocalPort(int fd);
// SO_LINGER {1, 0}: the socket's close sends a reset.
void SetLinger0(int fd);
// Reads fd until EOF or an error, for at most `timeout`: the bytes read, or -errno (-ETIMEDOUT
// when the time ran out).
int64_t DrainUntilClosed(int fd, std::chrono::milliseconds timeout);

// FNV-1a, 64 bit: order-sensitive, enough to catch lost, duplicated or reordered bytes.
class Fnv1a {
 public:
  void Update(const void* data, size_t len);
  uint64_t value() const { return h_; }

 private:
  uint64_t h_ = 14695981039346656037ull;
};

// Pseudo-random bytes from a seed (xorshift64*), so a sender and a checker agree.
class PatternStream {
 public:
  explicit PatternStream(uint64_t seed) : state_(seed ? seed : 1) {}
  void Fill(uint8_t* out, size_t len);

 private:
  uint64_t state_;
};

struct StreamStats {
  uint64_t bytes = 0;
  uint64_t hash = 0;
};

// Writes `total` bytes of PatternStream(seed) to fd, then shuts down its write side.
StreamStats SendPattern(int fd, uint64_t seed, uint64_t total);
// Reads fd to EOF, hashing what arrives.
StreamStats ReceiveAll(int fd);
// Reads fd to EOF and writes every byte back, then shuts down the write side.
StreamStats EchoUntilEof(int fd);

// One connection's two ends each send `bytes` of PatternStream (the client seed 1, the backend
// seed 2) and read the other's at the same time; `accept_backend` gives the backend's end, on a
// thread of its own. What each end sent and received.
struct BothWays {
  StreamStats client_sent, client_got, backend_sent, backend_got;
};
BothWays ExchangeBothWays(int client, const std::function<UniqueFd()>& accept_backend,
                          uint64_t bytes);

}  // namespace xdpfwd::test
