// Test backend; see backend.h.
#include "tests/support/backend.h"

#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <exception>
#include <stdexcept>
#include <thread>
#include <vector>

namespace xdpfwd::test {
namespace {

std::string Describe(const std::exception_ptr& e) {
  try {
    std::rethrow_exception(e);
  } catch (const std::exception& x) {
    return x.what();
  } catch (...) {
    return "an exception that is not a std::exception";
  }
}

}  // namespace

void BoundWaits(int fd, int seconds) {
  const timeval limit{seconds, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &limit, sizeof(limit));
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &limit, sizeof(limit));
}

void EchoUntilEofOrReset(int fd) {
  auto reset = [](int err) { return err == ECONNRESET || err == EPIPE || err == ENOTCONN; };
  std::vector<uint8_t> buf(64 * 1024);
  for (;;) {
    const ssize_t n = recv(fd, buf.data(), buf.size(), 0);
    if (n == 0) break;
    if (n < 0) {
      if (errno == EINTR) continue;
      if (reset(errno)) return;
      throw std::runtime_error(std::string("recv: ") + std::strerror(errno));
    }
    for (ssize_t sent = 0; sent < n;) {
      const ssize_t m = send(fd, buf.data() + sent, static_cast<size_t>(n - sent), MSG_NOSIGNAL);
      if (m < 0 && errno == EINTR) continue;
      if (m < 0 && reset(errno)) return;
      if (m <= 0) throw std::runtime_error(std::string("send: ") + std::strerror(errno));
      sent += m;
    }
  }
  if (shutdown(fd, SHUT_WR) != 0 && !reset(errno)) {
    throw std::runtime_error(std::string("shutdown: ") + std::strerror(errno));
  }
}

Backend::Backend(UniqueFd listener, Serve serve)
    : listener_(std::move(listener)), serve_(std::move(serve)) {
  acceptor_ = std::thread([this] { AcceptLoop(); });
}

Backend::~Backend() {
  shutdown(listener_.get(), SHUT_RDWR);  // a blocked accept() returns EINVAL
  acceptor_.join();
  for (std::thread& t : serving_) t.join();
  // The test's own thread: a failure added here fails the test that owns this Backend.
  std::lock_guard<std::mutex> lock(mu_);
  if (failures_.size() > reported_) {
    ADD_FAILURE() << "backend: " << failures_.substr(reported_);
  }
}

bool Backend::WaitServed(int n, std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  return cv_.wait_for(lock, timeout, [&] { return served_ >= n; });
}

int Backend::served() {
  std::lock_guard<std::mutex> lock(mu_);
  return served_;
}

std::string Backend::failures() {
  std::lock_guard<std::mutex> lock(mu_);
  reported_ = failures_.size();
  return failures_;
}

void Backend::Record(const std::string& failure) { failures_ += failure + "; "; }

// A thread in finished_ has left serve and pushed its id under mu_ as its last step, so joining
// it here (mu_ held) cannot wait on the lock.
void Backend::JoinFinished() {
  for (auto it = serving_.begin(); it != serving_.end();) {
    if (std::find(finished_.begin(), finished_.end(), it->get_id()) == finished_.end()) {
      ++it;
      continue;
    }
    it->join();
    it = serving_.erase(it);
  }
  finished_.clear();
}

// Before: a serve function throwing anything but a std::exception, or a thread that could not
// be started (std::system_error from the acceptor), called std::terminate and took every test
// of the binary with it. Now each is a recorded failure.
void Backend::AcceptLoop() {
  for (;;) {
    const int fd = accept4(listener_.get(), nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      return;
    }
    BoundWaits(fd);
    std::lock_guard<std::mutex> lock(mu_);
    JoinFinished();
    try {
      serving_.emplace_back([this, fd] {
        UniqueFd owned(fd);
        std::exception_ptr failure;
        try {
          serve_(fd);
        } catch (...) {
          failure = std::current_exception();
        }
        owned.reset();
        std::lock_guard<std::mutex> done(mu_);
        if (failure) Record(Describe(failure));
        ++served_;
        finished_.push_back(std::this_thread::get_id());
        cv_.notify_all();
      });
    } catch (...) {
      close(fd);
      Record("cannot serve a connection: " + Describe(std::current_exception()));
      ++served_;
      cv_.notify_all();
    }
  }
}

}  // namespace xdpfwd::test
