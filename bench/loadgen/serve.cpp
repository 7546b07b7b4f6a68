// serve: the benchmark's backend. One thread, level-triggered epoll, non-blocking sockets: on
// each connection read exactly --request bytes, write exactly --response bytes, repeat (or close
// after the first response, so TIME_WAIT stays on this side in connection-rate runs). With
// --accept-proxy each connection first sends a PROXY header (a forwarder's [proxy=v1|v2]).
#include <sys/epoll.h>
#include <sys/signalfd.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <span>
#include <string>
#include <vector>

#include "bench/loadgen/modes.h"
#include "bench/loadgen/process.h"
#include "bench/loadgen/proxy_header.h"
#include "bench/loadgen/report.h"

namespace xdpfwd::loadgen {
namespace {

constexpr size_t kChunk = 256 * 1024;  // largest single read or write
constexpr int kBacklog = 4096;         // connection-rate runs open thousands per second
// After EMFILE/ENFILE the listener is left out of epoll this long (or until a connection
// closes): the pending connection would otherwise wake every epoll_wait and spin the loop.
constexpr uint64_t kAcceptPauseNs = 100'000'000;
static_assert(kChunk >= kProxyMaxBytes, "a whole PROXY header fits in the scratch buffer");

struct Connection {
  bool open = false;
  bool awaiting_header = false;  // --accept-proxy: its PROXY header is not complete yet
  bool writing = false;          // the request is complete; the response is being written
  bool wants_out = false;        // registered for EPOLLOUT (a write would have blocked)
  uint64_t done = 0;             // bytes of the current request read, or response written
  std::string header;            // a PROXY header's first part, when it came in more than one read
};

class Server {
 public:
  Server(const Options& o, UniqueFd listener, UniqueFd signals, UniqueFd epoll)
      : o_(o),
        listener_(std::move(listener)),
        signals_(std::move(signals)),
        epoll_(std::move(epoll)),
        scratch_(kChunk),
        pattern_(kChunk) {
    for (size_t i = 0; i < kChunk; ++i) pattern_[i] = static_cast<char>('a' + i % 26);
  }

  Result<void> Run() {
    if (!Watch(EPOLL_CTL_ADD, listener_.get(), EPOLLIN) ||
        !Watch(EPOLL_CTL_ADD, signals_.get(), EPOLLIN)) {
      return SystemError("epoll_ctl");
    }
    epoll_event events[256];
    const uint64_t report_ns = static_cast<uint64_t>(o_.report_every * 1e9);
    uint64_t next_report = report_ns != 0 ? MonotonicNs() + report_ns : 0;
    for (;;) {
      const uint64_t now = MonotonicNs();
      if (next_report != 0 && now >= next_report) {
        PrintProgress();
        next_report = now + report_ns;
      }
      int wait_ms = -1;
      for (const uint64_t deadline : {accept_paused_until_, next_report}) {
        if (deadline == 0) continue;
        const int ms = now >= deadline ? 0 : static_cast<int>((deadline - now) / 1'000'000 + 1);
        wait_ms = wait_ms < 0 ? ms : std::min(wait_ms, ms);
      }
      const int n = epoll_wait(epoll_.get(), events, 256, wait_ms);
      if (n < 0 && errno != EINTR) return SystemError("epoll_wait");
      for (int i = 0; i < n; ++i) {
        const int fd = events[i].data.fd;
        if (fd == signals_.get()) return {};
        if (fd == listener_.get()) {
          Accept();
        } else {
          Serve(fd);
        }
      }
      if (accept_paused_until_ != 0 && MonotonicNs() >= accept_paused_until_) ResumeAccept();
    }
  }

  // --report-every: what it served so far, for a reader that will kill it (SIGKILL leaves no
  // summary). Not a "mode" line, so a reader of the summary cannot take it for one.
  void PrintProgress() const {
    JsonObject j;
    j.String("event", "progress").Count("connections", accepted_).Count("exchanges", exchanges_);
    PrintLine(j);
  }

  JsonObject Summary(const std::string& listen) const {
    JsonObject errors;
    errors.Count("accept", accept_errors_)
        .Count("reset", resets_)
        .Count("short", shorts_)
        .Count("proxy", proxy_errors_)
        .Count("excess", excess_);
    JsonObject j;
    j.String("mode", "serve")
        .String("listen", listen)
        .Count("connections", accepted_)
        .Count("exchanges", exchanges_)
        .Count("bytes_received", bytes_in_)
        .Count("bytes_sent", bytes_out_);
    if (o_.accept_proxy) j.Count("proxy_headers", proxy_headers_);
    j.Object("errors", errors);
    return j;
  }

 private:
  bool Watch(int op, int fd, uint32_t events) {
    epoll_event ev{};
    ev.events = events;
    ev.data.fd = fd;
    return epoll_ctl(epoll_.get(), op, fd, &ev) == 0;
  }

  void Accept() {
    for (int i = 0; i < 64; ++i) {
      const int fd = accept4(listener_.get(), nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (fd < 0) {
        if (errno == EAGAIN || errno == ECONNABORTED || errno == EINTR) return;
        ++accept_errors_;
        if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
          Watch(EPOLL_CTL_MOD, listener_.get(), 0);
          accept_paused_until_ = MonotonicNs() + kAcceptPauseNs;
        }
        return;
      }
      if (static_cast<size_t>(fd) >= connections_.size()) connections_.resize(fd * 2 + 64);
      if (!Watch(EPOLL_CTL_ADD, fd, EPOLLIN)) {
        ++accept_errors_;
        close(fd);
        continue;
      }
      Connection& c = connections_[fd];
      c = Connection{};
      c.open = true;
      c.awaiting_header = o_.accept_proxy;
      ++accepted_;
    }
  }

  void ResumeAccept() {
    accept_paused_until_ = 0;
    Watch(EPOLL_CTL_MOD, listener_.get(), EPOLLIN);
  }

  void Close(int fd) {
    close(fd);  // also leaves epoll
    connections_[fd].open = false;
    if (accept_paused_until_ != 0) ResumeAccept();
  }

  void Serve(int fd) {
    Connection& c = connections_[fd];
    if (!c.open) return;
    if (c.writing) {
      Write(fd, c);
      return;
    }
    if (c.awaiting_header) {
      // Whatever is left of the request after the header is read on the next wake-up
      // (level-triggered: epoll reports it again).
      ReadProxyHeader(fd, c);
      return;
    }
    for (;;) {
      // Never read past this request: the next one is answered only after this response.
      const ssize_t n = recv(fd, scratch_.data(), std::min(o_.request - c.done, kChunk), 0);
      if (n > 0) {
        bytes_in_ += static_cast<uint64_t>(n);
        c.done += static_cast<uint64_t>(n);
        if (c.done == o_.request) {
          c.writing = true;
          c.done = 0;
          // No read after the response: the client sends nothing until it has it, and epoll
          // reports anything early (a recv that would only say EAGAIN costs a syscall per
          // exchange).
          Write(fd, c);
          return;
        }
      } else if (n == 0) {
        if (c.done != 0) ++shorts_;  // EOF between requests is the client's normal close
        Close(fd);
        return;
      } else {
        if (errno == EINTR) continue;
        if (errno != EAGAIN) {
          ++resets_;
          Close(fd);
        }
        return;
      }
    }
  }

  // --accept-proxy: reads up to the end of the connection's PROXY header. Bytes after it in the
  // same read are the request's first; more than one request's worth there (a client that did
  // not wait for its response, which no mode of ours does) counts as excess. A connection
  // whose first bytes are not a valid header, or that ends before its header does, counts as
  // a proxy error; either is closed.
  void ReadProxyHeader(int fd, Connection& c) {
    // A header split over reads (rare: the sender writes it whole) is put back in front of
    // what follows, so the scan always sees it from its first byte.
    const size_t have = c.header.size();
    std::memcpy(scratch_.data(), c.header.data(), have);
    ssize_t n;
    do {
      n = recv(fd, scratch_.data() + have, kProxyMaxBytes - have, 0);
    } while (n < 0 && errno == EINTR);
    if (n < 0) {
      if (errno != EAGAIN) {
        ++resets_;
        Close(fd);
      }
      return;
    }
    if (n == 0) {
      ++proxy_errors_;
      Close(fd);
      return;
    }
    const size_t got = have + static_cast<size_t>(n);
    const ProxyScan scan =
        ScanProxyHeader(std::span(reinterpret_cast<const uint8_t*>(scratch_.data()), got));
    if (scan.status == ProxyScan::Status::kInvalid) {
      ++proxy_errors_;
      Close(fd);
      return;
    }
    if (scan.status == ProxyScan::Status::kIncomplete) {
      c.header.assign(scratch_.data(), got);
      return;
    }
    ++proxy_headers_;
    c.awaiting_header = false;
    std::string().swap(c.header);
    const uint64_t after = got - scan.length;
    if (after > o_.request) {
      ++excess_;
      Close(fd);
      return;
    }
    bytes_in_ += after;
    c.done = after;
    if (c.done == o_.request) {
      c.writing = true;
      c.done = 0;
      Write(fd, c);
    }
  }

  void Write(int fd, Connection& c) {
    while (c.done < o_.response) {
      const ssize_t n =
          send(fd, pattern_.data(), std::min(o_.response - c.done, kChunk), MSG_NOSIGNAL);
      if (n < 0) {
        if (errno == EINTR) continue;
        if (errno != EAGAIN) {
          ++resets_;
          Close(fd);
        } else if (!c.wants_out) {
          c.wants_out = true;
          Watch(EPOLL_CTL_MOD, fd, EPOLLOUT);
        }
        return;
      }
      bytes_out_ += static_cast<uint64_t>(n);
      c.done += static_cast<uint64_t>(n);
    }
    ++exchanges_;
    if (o_.close_after_response) {
      Close(fd);
      return;
    }
    c.writing = false;
    c.done = 0;
    if (c.wants_out) {
      c.wants_out = false;
      Watch(EPOLL_CTL_MOD, fd, EPOLLIN);
    }
  }

  const Options& o_;
  UniqueFd listener_;
  UniqueFd signals_;
  UniqueFd epoll_;
  std::vector<char> scratch_;
  std::vector<char> pattern_;
  std::vector<Connection> connections_;  // indexed by fd
  uint64_t accept_paused_until_ = 0;     // MonotonicNs() deadline, 0 when accepting
  uint64_t accepted_ = 0, exchanges_ = 0, bytes_in_ = 0, bytes_out_ = 0;
  uint64_t proxy_headers_ = 0;
  uint64_t accept_errors_ = 0, resets_ = 0, shorts_ = 0, proxy_errors_ = 0, excess_ = 0;
};

}  // namespace

int RunServe(const Options& o) {
  RaiseFileLimitToHard();  // one descriptor per held connection
  auto signals = StopSignalFd();
  if (!signals) {
    Log(signals.error().message());
    return 1;
  }
  auto listener = Listen(o.listen, kBacklog, o.reuse_port);
  if (!listener) {
    Log(listener.error().message());
    return 1;
  }
  UniqueFd epoll(epoll_create1(EPOLL_CLOEXEC));
  if (!epoll) {
    Log(SystemError("epoll_create1").message());
    return 1;
  }
  auto bound = LocalAddress(listener->get());
  if (!bound) {
    Log(bound.error().message());
    return 1;
  }
  Log("serve: listening on " + ToString(*bound));
  Server server(o, std::move(*listener), std::move(*signals), std::move(epoll));
  auto ran = server.Run();
  if (!ran) {
    Log(ran.error().message());
    return 1;
  }
  PrintLine(server.Summary(ToString(*bound)));
  return 0;
}

}  // namespace xdpfwd::loadgen
