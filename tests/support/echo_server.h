// An echo server for many connections at once, on one thread (epoll): for tests that open
// thousands of connections, where Backend's thread per connection would not do.
#pragma once

#include <atomic>
#include <thread>

#include "os/unique_fd.h"

namespace xdpfwd::test {

// Echoes every connection accepted on `listener` until the client's end of stream, then shuts
// down its write side. Stops (and joins its thread) when destroyed.
class EchoServer {
 public:
  explicit EchoServer(UniqueFd listener);
  ~EchoServer();
  EchoServer(const EchoServer&) = delete;
  EchoServer& operator=(const EchoServer&) = delete;

 private:
  void Loop();

  UniqueFd listener_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace xdpfwd::test
