// A TCP backend for relay tests: every accepted connection is served on its own thread by a
// function the test gives. A failure on those threads (any exception) is recorded and fails the
// test that owns the Backend; it never aborts the test binary.
#pragma once

#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "os/unique_fd.h"

namespace xdpfwd::test {

// Bounds blocking recv/send on fd (30 s unless told) so that a relay bug fails a helper (it
// throws on the timeout) instead of hanging the test.
void BoundWaits(int fd, int seconds = 30);

// A serve function: echoes until the client's end of stream, then shuts down its write side.
// A reset from the forwarder (ECONNRESET, EPIPE, ENOTCONN) also ends it quietly: for tests in
// which the forwarder resets the backend leg by design (idle timeout, Stop, teardown).
// Anything else throws. (EchoUntilEof from tcp.h throws on a reset too.)
void EchoUntilEofOrReset(int fd);

class Backend {
 public:
  using Serve = std::function<void(int fd)>;
  // Serves connections accepted on `listener` until destroyed. Each is closed when `serve`
  // returns or throws.
  Backend(UniqueFd listener, Serve serve);
  // Stops accepting, waits for every connection being served, and adds a test failure for each
  // failure not already read through failures().
  ~Backend();
  Backend(const Backend&) = delete;
  Backend& operator=(const Backend&) = delete;

  // Waits until `n` connections have been served to the end (serve returned or threw).
  bool WaitServed(int n, std::chrono::milliseconds timeout = std::chrono::seconds(30));
  int served();
  // What serve threw so far ("what(); what(); "), or "" — marks them as reported.
  std::string failures();

 private:
  void AcceptLoop();
  void Record(const std::string& failure);  // mu_ held
  // Joins the threads that have finished serving (mu_ held): a long run of short connections
  // (the soak test) would otherwise keep a thread and its stack per connection served.
  void JoinFinished();

  UniqueFd listener_;
  Serve serve_;
  std::thread acceptor_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::thread> serving_;
  std::vector<std::thread::id> finished_;  // left serve, not yet joined
  std::string failures_;
  size_t reported_ = 0;  // failures_ up to here were returned by failures()
  int served_ = 0;
};

}  // namespace xdpfwd::test
