// rr, rate and hold: client connections driven by one thread's level-triggered epoll loop. Each
// slot runs connect -> request -> response and then, by mode, repeats the exchange on the same
// connection (rr), waits for the server's EOF or closes first and starts a new connection (rate),
// or stays open and idle until a last exchange proves it still works before it closes (hold).
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <vector>

#include "bench/loadgen/histogram.h"
#include "bench/loadgen/modes.h"
#include "bench/loadgen/process.h"
#include "bench/loadgen/report.h"

namespace xdpfwd::loadgen {
namespace {

constexpr size_t kChunk = 256 * 1024;  // largest single send or recv
// Timeouts are checked, and slots that failed are started again, this often: a refused
// connect is retried at most once per sweep per slot instead of spinning the loop.
constexpr uint64_t kSweepNs = 10'000'000;
constexpr uint64_t kSignalTag = UINT64_MAX;
constexpr uint64_t kStdinTag = UINT64_MAX - 1;
constexpr uint64_t kNever = UINT64_MAX;

uint64_t ToNs(double seconds) { return static_cast<uint64_t>(std::llround(seconds * 1e9)); }

enum class Phase { kIdle, kConnecting, kSending, kReceiving, kAwaitingEof, kHeld };

struct Slot {
  UniqueFd fd;
  Phase phase = Phase::kIdle;
  uint32_t interest = 0;     // events registered with epoll
  bool retry = false;        // failed: start again at the next sweep (rr, rate)
  bool closing = false;      // hold: the exchange that proves it before it closes
  uint64_t started_ns = 0;   // latency origin: rr the request's first byte, else connect()
  uint64_t deadline_ns = 0;  // --timeout for the connect or the current exchange
  uint64_t done = 0;         // bytes of the request sent, or of the response received
};

class ClientRun {
 public:
  ClientRun(const Options& o, UniqueFd epoll, UniqueFd signals)
      : o_(o),
        epoll_(std::move(epoll)),
        signals_(std::move(signals)),
        slots_(o.mode == Mode::kRate ? o.concurrency : o.connections),
        scratch_(kChunk),
        pattern_(kChunk) {
    for (size_t i = 0; i < kChunk; ++i) pattern_[i] = static_cast<char>('A' + i % 26);
  }

  // Until --seconds have passed (rr, rate), stdin ends (hold) or SIGINT/SIGTERM arrives. After
  // --seconds the exchanges in flight finish (uncounted, within --timeout) before their
  // connections close, so the server sees clean closes rather than resets.
  Result<void> Run() {
    if (!Register(EPOLL_CTL_ADD, signals_.get(), kSignalTag, EPOLLIN)) {
      return SystemError("epoll_ctl");
    }
    // A file or /dev/null cannot be polled; it counts as ended once all are established.
    stdin_pollable_ = o_.mode == Mode::kHold && Register(EPOLL_CTL_ADD, 0, kStdinTag, EPOLLIN);
    begin_ns_ = MonotonicNs();
    if (o_.mode != Mode::kHold) {
      measure_from_ns_ = begin_ns_ + ToNs(o_.warmup);
      end_ns_ = measure_from_ns_ + ToNs(o_.seconds);
      for (size_t i = 0; i < slots_.size(); ++i) Start(i);
    }
    uint64_t next_sweep = begin_ns_ + kSweepNs;
    uint64_t quit_ns = kNever;
    epoll_event events[256];
    for (;;) {
      if (o_.mode == Mode::kHold) StepHold();
      const uint64_t now = MonotonicNs();
      if (!draining_ && now >= end_ns_) {
        draining_ = true;
        quit_ns = now + ToNs(o_.timeout);
      }
      if (stop_ || (draining_ && (open_ == 0 || now >= quit_ns))) break;
      if (now >= next_sweep) {
        Sweep(now);
        next_sweep = now + kSweepNs;
      }
      const uint64_t wake = std::min(next_sweep, draining_ ? quit_ns : end_ns_);
      const int wait_ms = wake <= now ? 0 : static_cast<int>((wake - now + 999'999) / 1'000'000);
      const int n = epoll_wait(epoll_.get(), events, 256, wait_ms);
      if (n < 0 && errno != EINTR) return SystemError("epoll_wait");
      for (int i = 0; i < n; ++i) {
        const uint64_t tag = events[i].data.u64;
        if (tag == kSignalTag) {
          stop_ = true;
        } else if (tag == kStdinTag) {
          ReadStdin();
        } else {
          OnEvent(tag, events[i].events);
        }
      }
    }
    stop_ns_ = std::min(MonotonicNs(), end_ns_);
    return {};
  }

  // The final JSON line; false when nothing succeeded (exit code 1).
  bool Report() const {
    const double seconds =
        stop_ns_ > measure_from_ns_ ? static_cast<double>(stop_ns_ - measure_from_ns_) / 1e9 : 0;
    const double per_sec = seconds > 0 ? static_cast<double>(completed_) / seconds : 0;
    JsonObject j;
    j.String("mode", ModeName(o_.mode)).String("connect", ToString(o_.connect));
    if (o_.mode == Mode::kHold) {
      // Held = proven by an exchange when opened and again before closing; nothing else counts.
      const uint64_t held_until = verify_started_ns_ ? verify_started_ns_ : stop_ns_;
      j.Count("requested", slots_.size())
          .Count("opened", opened_)
          .Count("verified_open", completed_)
          .Count("verified_close", verified_close_)
          .Count("connections", verified_close_)
          .Count("dropped", dropped_)
          .Count("not_attempted", slots_.size() - next_held_)
          .Number("held_seconds",
                  established_ns_ ? static_cast<double>(held_until - established_ns_) / 1e9 : 0, 3)
          .Object("errors_at_close", close_failures_.Json())
          .Object("errnos_at_close", close_failures_.ErrnoJson());
    } else {
      if (o_.mode == Mode::kRequestResponse) {
        j.Count("connections", slots_.size());
      } else {
        j.Count("concurrency", slots_.size());
      }
      j.Count("request", o_.request)
          .Count("response", o_.response)
          .Number("warmup", o_.warmup, 3)
          .Number("seconds", seconds, 3);
      if (o_.mode == Mode::kRequestResponse) {
        const double out = per_sec * static_cast<double>(o_.request);
        const double in = per_sec * static_cast<double>(o_.response);
        j.Count("exchanges", completed_)
            .Number("exchanges_per_sec", per_sec, 1)
            .Number("bytes_per_sec", out + in, 1)
            .Number("sent_bytes_per_sec", out, 1)
            .Number("received_bytes_per_sec", in, 1);
      } else {
        j.String("close", o_.close == CloseOrder::kClient ? "client" : "server")
            .Count("connections", completed_)
            .Number("connections_per_sec", per_sec, 1)
            .Count("connections_total", completed_total_)  // warm-up and drain included
            // The connect() calls themselves (socket, bind, connect; warm-up included): the
            // kernel chooses the source port inside connect(), and in a namespace whose
            // ports towards the target are mostly in TIME_WAIT that choice is a scan
            // (docs/benchmarks.md, "client first: the load generator's own ports").
            .Number("connect_call_us_mean",
                    connect_calls_ ? static_cast<double>(connect_call_ns_) / 1e3 /
                                         static_cast<double>(connect_calls_)
                                   : 0,
                    1)
            .Number("connect_call_us_max", static_cast<double>(connect_call_max_ns_) / 1e3, 1)
            .Count("slow_connect_calls", slow_connect_calls_);
      }
      j.Object("latency_us", LatencyJson(latency_));
    }
    j.Object("errors", failures_.Json()).Object("errnos", failures_.ErrnoJson());
    PrintLine(j);
    if (o_.mode == Mode::kHold) return verified_close_ == slots_.size();
    return completed_ > 0;
  }

 private:
  bool Register(int op, int fd, uint64_t tag, uint32_t events) {
    epoll_event ev{};
    ev.events = events;
    ev.data.u64 = tag;
    return epoll_ctl(epoll_.get(), op, fd, &ev) == 0;
  }

  // Level-triggered interest: EPOLLOUT while connecting or while a send would block, EPOLLIN
  // otherwise (never both, so a peer that talks out of turn cannot make the loop spin).
  void SetInterest(size_t i, uint32_t events) {
    Slot& s = slots_[i];
    if (s.interest == events) return;
    Register(EPOLL_CTL_MOD, s.fd.get(), i, events);
    s.interest = events;
  }

  void Start(size_t i) {
    Slot& s = slots_[i];
    s.retry = false;
    s.started_ns = MonotonicNs();
    s.deadline_ns = s.started_ns + ToNs(o_.timeout);
    const SockAddr* source =
        o_.sources.empty() ? nullptr : &o_.sources[next_source_++ % o_.sources.size()];
    auto c = StartConnect(o_.connect, source);
    const uint64_t took = MonotonicNs() - s.started_ns;
    ++connect_calls_;
    connect_call_ns_ += took;
    connect_call_max_ns_ = std::max(connect_call_max_ns_, took);
    slow_connect_calls_ += took >= kSlowConnectNs;
    if (!c) {
      Fail(i, Failure::kConnect, c.error().code.value());
      return;
    }
    s.fd = std::move(c->fd);
    ++open_;
    s.interest = c->done ? EPOLLIN : EPOLLOUT;
    if (!Register(EPOLL_CTL_ADD, s.fd.get(), i, s.interest)) {
      Fail(i, Failure::kConnect, errno);
      return;
    }
    s.phase = Phase::kConnecting;
    if (c->done) Connected(i);
  }

  void Connected(size_t i) {
    if (o_.mode == Mode::kHold) ++opened_;
    BeginExchange(i, MonotonicNs());
  }

  void OnEvent(size_t i, uint32_t events) {
    Slot& s = slots_[i];
    switch (s.phase) {
      case Phase::kIdle:
        return;
      case Phase::kConnecting:
        if (const int err = ConnectResult(s.fd.get()); err != 0) {
          Fail(i, Failure::kConnect, err);
        } else if (events & EPOLLOUT) {
          Connected(i);
        }
        return;
      case Phase::kSending:
        Send(i);
        return;
      case Phase::kReceiving:
        Receive(i);
        return;
      case Phase::kAwaitingEof:
        AwaitEof(i);
        return;
      case Phase::kHeld:
        WatchHeld(i);
        return;
    }
  }

  void BeginExchange(size_t i, uint64_t now) {
    Slot& s = slots_[i];
    if (o_.mode == Mode::kRequestResponse || s.closing) {
      s.started_ns = now;
      s.deadline_ns = now + ToNs(o_.timeout);
    }
    s.phase = Phase::kSending;
    s.done = 0;
    Send(i);
  }

  void Send(size_t i) {
    Slot& s = slots_[i];
    while (s.done < o_.request) {
      const ssize_t n =
          send(s.fd.get(), pattern_.data(), std::min(o_.request - s.done, kChunk), MSG_NOSIGNAL);
      if (n < 0) {
        if (errno == EINTR) continue;
        if (errno == EAGAIN) {
          SetInterest(i, EPOLLOUT);
        } else {
          Fail(i, Failure::kReset, errno);
        }
        return;
      }
      s.done += static_cast<uint64_t>(n);
    }
    s.phase = Phase::kReceiving;
    s.done = 0;
    SetInterest(i, EPOLLIN);  // the response cannot be there yet: no recv until epoll says so
  }

  void Receive(size_t i) {
    Slot& s = slots_[i];
    for (;;) {
      // Exactly the response: anything after it is an error found by AwaitEof or the next one.
      const ssize_t n =
          recv(s.fd.get(), scratch_.data(), std::min(o_.response - s.done, kChunk), 0);
      if (n > 0) {
        s.done += static_cast<uint64_t>(n);
        if (s.done == o_.response) {
          OnResponse(i);
          return;
        }
      } else if (n == 0) {
        Fail(i, Failure::kShort, 0);
        return;
      } else if (errno != EINTR) {
        if (errno != EAGAIN) Fail(i, Failure::kReset, errno);
        return;
      }
    }
  }

  void OnResponse(size_t i) {
    Slot& s = slots_[i];
    const uint64_t now = MonotonicNs();
    switch (o_.mode) {
      case Mode::kRequestResponse:
        Completed(now - s.started_ns, now);
        if (draining_) {
          Close(i);
        } else {
          BeginExchange(i, now);
        }
        return;
      case Mode::kRate:
        if (o_.close == CloseOrder::kClient) {
          // The client's FIN goes first: TIME_WAIT stays on this side (and, through a
          // forwarder, on the forwarder's backend leg).
          Completed(now - s.started_ns, now);
          ++completed_total_;
          Close(i);
          if (!draining_) Start(i);
          return;
        }
        s.phase = Phase::kAwaitingEof;
        AwaitEof(i);  // the server's FIN often came with the response
        return;
      case Mode::kHold:
        --in_flight_;
        if (s.closing) {
          ++verified_close_;
          Close(i);
          return;
        }
        Completed(now - s.started_ns, now);
        s.phase = Phase::kHeld;
        return;
      case Mode::kServe:
        return;
    }
  }

  void AwaitEof(size_t i) {
    Slot& s = slots_[i];
    const ssize_t n = recv(s.fd.get(), scratch_.data(), kChunk, 0);
    if (n == 0) {
      const uint64_t now = MonotonicNs();
      Completed(now - s.started_ns, now);
      ++completed_total_;
      Close(i);
      if (!draining_) Start(i);
    } else if (n > 0) {
      Fail(i, Failure::kExcess, 0);
    } else if (errno != EAGAIN && errno != EINTR) {
      Fail(i, Failure::kReset, errno);
    }
  }

  // An idle held connection only becomes readable when the peer closes or misbehaves.
  void WatchHeld(size_t i) {
    Slot& s = slots_[i];
    const ssize_t n = recv(s.fd.get(), scratch_.data(), kChunk, 0);
    if (n > 0) {
      failures_.Add(Failure::kExcess, 0);
    } else if (n == 0 || (errno != EAGAIN && errno != EINTR)) {
      ++dropped_;
      Close(i);
    }
  }

  void Completed(uint64_t latency_ns, uint64_t now) {
    if (now < measure_from_ns_ || now >= end_ns_) return;
    ++completed_;
    latency_.Record(latency_ns);
  }

  // Counted whether in warm-up or not: a failure is never hidden.
  void Fail(size_t i, Failure kind, int err) {
    (slots_[i].closing ? close_failures_ : failures_).Add(kind, err);
    Close(i);
    if (o_.mode == Mode::kHold) {
      --in_flight_;
    } else {
      slots_[i].retry = !draining_;
    }
  }

  void Close(size_t i) {
    Slot& s = slots_[i];
    if (s.fd) --open_;
    s.fd.reset();  // also leaves epoll
    s.phase = Phase::kIdle;
    s.interest = 0;
    s.closing = false;
  }

  void Sweep(uint64_t now) {
    for (size_t i = 0; i < slots_.size(); ++i) {
      Slot& s = slots_[i];
      if (s.phase == Phase::kIdle) {
        if (s.retry && !draining_) Start(i);
      } else if (s.phase != Phase::kHeld && now > s.deadline_ns) {
        Fail(i, Failure::kTimeout, 0);
      }
    }
  }

  // hold: keep --concurrency connections in progress until all were tried (or --max-failures
  // failed), report them established once, then hold them until stdin ends, then prove each
  // with one more exchange (again --concurrency at once) and close it.
  void StepHold() {
    if (verifying_) {
      StartMoreVerifications();
      return;
    }
    if (established_ns_ != 0) return;
    while (in_flight_ < o_.concurrency && next_held_ < slots_.size()) {
      if (o_.max_failures != 0 && failures_.total() >= o_.max_failures) {
        if (!gave_up_) {
          Log("hold: " + std::to_string(failures_.total()) + " connections failed; opening no " +
              "more (--max-failures)");
        }
        gave_up_ = true;
        break;
      }
      ++in_flight_;  // before Start, which may fail at once and take it back
      Start(next_held_++);
    }
    if ((next_held_ < slots_.size() && !gave_up_) || in_flight_ != 0) return;
    established_ns_ = MonotonicNs();
    Log("hold: " + std::to_string(completed_) + " of " + std::to_string(slots_.size()) +
        " connections established and proven" +
        (stdin_pollable_ && !stdin_ended_ ? "; holding until stdin ends" : ""));
    JsonObject j;
    j.String("event", "established")
        .Count("connections", completed_)
        .Count("requested", slots_.size())
        .Count("opened", opened_)
        .Count("verified_open", completed_)
        .Count("not_attempted", slots_.size() - next_held_)
        .Number("seconds", static_cast<double>(established_ns_ - begin_ns_) / 1e9, 3)
        .Object("latency_us", LatencyJson(latency_))
        .Object("errors", failures_.Json())
        .Object("errnos", failures_.ErrnoJson());
    PrintLine(j);
    if (!stdin_pollable_ || stdin_ended_) BeginVerification();
  }

  void BeginVerification() {
    verifying_ = true;
    verify_started_ns_ = MonotonicNs();
    const uint64_t held = completed_ - dropped_;
    Log("hold: proving the " + std::to_string(held) + " held connections before closing them");
    StartMoreVerifications();
  }

  void StartMoreVerifications() {
    while (in_flight_ < o_.concurrency && next_verify_ < slots_.size()) {
      const size_t i = next_verify_++;
      if (slots_[i].phase != Phase::kHeld) continue;  // failed at open or dropped since
      slots_[i].closing = true;
      ++in_flight_;
      BeginExchange(i, MonotonicNs());
    }
    if (next_verify_ == slots_.size() && in_flight_ == 0) stop_ = true;
  }

  void ReadStdin() {
    char buf[4096];
    const ssize_t n = read(0, buf, sizeof(buf));
    if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) {
      // Level-triggered: an ended stdin would wake every epoll_wait from now on.
      epoll_ctl(epoll_.get(), EPOLL_CTL_DEL, 0, nullptr);
      stdin_ended_ = true;
      if (established_ns_ != 0 && !verifying_) BeginVerification();
    }
  }

  const Options& o_;
  UniqueFd epoll_;
  UniqueFd signals_;
  std::vector<Slot> slots_;
  std::vector<char> scratch_;
  std::vector<char> pattern_;
  size_t next_source_ = 0;
  bool stop_ = false;
  bool draining_ = false;  // --seconds are over: finish exchanges in flight, start none
  size_t open_ = 0;        // slots with a socket
  bool stdin_pollable_ = false;
  uint64_t begin_ns_ = 0;
  uint64_t measure_from_ns_ = 0;  // rr, rate: end of warm-up
  uint64_t end_ns_ = kNever;
  uint64_t stop_ns_ = 0;
  Histogram latency_;
  uint64_t completed_ = 0;        // exchanges (rr), connections (rate, hold) in the measured time
  uint64_t completed_total_ = 0;  // rate: connections completed at any time
  Failures failures_;             // hold: failures while opening and holding
  Failures close_failures_;       // hold: failures of the exchange before closing
  // Time spent in StartConnect (one non-blocking connect). A healthy one takes ~10-30 µs
  // here; one that takes a millisecond has scanned thousands of TIME_WAIT ports.
  static constexpr uint64_t kSlowConnectNs = 1'000'000;
  uint64_t connect_calls_ = 0;
  uint64_t connect_call_ns_ = 0;
  uint64_t connect_call_max_ns_ = 0;
  uint64_t slow_connect_calls_ = 0;
  // hold
  size_t next_held_ = 0;
  size_t in_flight_ = 0;
  uint64_t established_ns_ = 0;
  uint64_t dropped_ = 0;
  uint64_t opened_ = 0;          // handshakes completed (a forwarder may complete one it
                                 // cannot serve: only the exchange proves the connection)
  uint64_t verified_close_ = 0;  // proven again just before closing
  bool gave_up_ = false;         // --max-failures reached: the rest were never attempted
  bool stdin_ended_ = false;
  bool verifying_ = false;
  size_t next_verify_ = 0;
  uint64_t verify_started_ns_ = 0;
};

std::string Describe(const Options& o) {
  const std::string sizes = std::to_string(o.request) + "-byte requests, " +
                            std::to_string(o.response) + "-byte responses";
  const std::string target = ToString(o.connect);
  switch (o.mode) {
    case Mode::kRequestResponse:
      return "rr: " + std::to_string(o.connections) + " connections to " + target + ", " + sizes;
    case Mode::kRate:
      return "rate: " + std::to_string(o.concurrency) + " concurrent connections to " + target +
             ", " + sizes + ", " + (o.close == CloseOrder::kClient ? "client" : "server") +
             " closes first";
    default:
      return "hold: " + std::to_string(o.connections) + " connections to " + target + " (" +
             std::to_string(o.concurrency) + " at once), " + sizes;
  }
}

}  // namespace

int RunClient(const Options& o) {
  const uint64_t slots = o.mode == Mode::kRate ? o.concurrency : o.connections;
  // Besides the sockets: stdio, epoll, signalfd and some slack.
  if (auto ok = EnsureFileLimit(slots + 64); !ok) {
    Log(ok.error().message());
    return 1;
  }
  auto signals = StopSignalFd();
  if (!signals) {
    Log(signals.error().message());
    return 1;
  }
  UniqueFd epoll(epoll_create1(EPOLL_CLOEXEC));
  if (!epoll) {
    Log(SystemError("epoll_create1").message());
    return 1;
  }
  Log(Describe(o));
  ClientRun run(o, std::move(epoll), std::move(*signals));
  if (auto ran = run.Run(); !ran) {
    Log(ran.error().message());
    return 1;
  }
  if (!run.Report()) {
    Log(o.mode == Mode::kHold ? "not every connection was held and proven at open and close; "
                                "see the counts and \"errors\""
                              : "nothing succeeded in the measured time; see \"errors\"");
    return 1;
  }
  return 0;
}

}  // namespace xdpfwd::loadgen
