// See echo_server.h.
#include "tests/support/echo_server.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/socket.h>

#include <utility>
#include <vector>

namespace xdpfwd::test {

EchoServer::EchoServer(UniqueFd listener) : listener_(std::move(listener)) {
  fcntl(listener_.get(), F_SETFL, fcntl(listener_.get(), F_GETFL) | O_NONBLOCK);
  thread_ = std::thread([this] { Loop(); });
}

EchoServer::~EchoServer() {
  stop_ = true;
  thread_.join();
}

void EchoServer::Loop() {
  UniqueFd ep(epoll_create1(EPOLL_CLOEXEC));
  epoll_event ev{EPOLLIN, {.fd = listener_.get()}};
  epoll_ctl(ep.get(), EPOLL_CTL_ADD, listener_.get(), &ev);
  std::vector<UniqueFd> conns;
  std::vector<char> buf(65536);
  while (!stop_) {
    epoll_event events[64];
    const int n = epoll_wait(ep.get(), events, 64, 50);
    for (int i = 0; i < n; ++i) {
      const int fd = events[i].data.fd;
      if (fd == listener_.get()) {
        for (;;) {
          const int c = accept4(listener_.get(), nullptr, nullptr, SOCK_CLOEXEC);
          if (c < 0) break;
          const int one = 1;
          setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
          epoll_event cev{EPOLLIN, {.fd = c}};
          epoll_ctl(ep.get(), EPOLL_CTL_ADD, c, &cev);
          conns.emplace_back(c);
        }
        continue;
      }
      const ssize_t got = recv(fd, buf.data(), buf.size(), MSG_DONTWAIT);
      if (got <= 0) {
        if (got < 0 && errno == EAGAIN) continue;
        epoll_ctl(ep.get(), EPOLL_CTL_DEL, fd, nullptr);
        shutdown(fd, SHUT_WR);
        continue;
      }
      for (ssize_t off = 0; off < got;) {
        const ssize_t w = send(fd, buf.data() + off, static_cast<size_t>(got - off), MSG_NOSIGNAL);
        if (w < 0) break;
        off += w;
      }
    }
  }
}

}  // namespace xdpfwd::test
