// Moving bytes for one direction of a kernel-path connection: splice(2) through a pipe, or
// recv/send through a buffer. Both hold their pipe or buffer only while it holds bytes.
#include "forwarder/kernel_path_pump.h"

#include <fcntl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <new>
#include <utility>

namespace xdpfwd::kernel_path {
namespace {

// Idle pipes and buffers kept per thread. Beyond these, a burst's extras are closed or freed
// once it is over, so an idle forwarder holds little.
constexpr size_t kMaxFreePipes = 64;
constexpr size_t kMaxFreeBuffers = 64;

// SPLICE_F_MOVE is only a hint (pages are referenced, not copied, either way); NONBLOCK makes
// the pipe side non-blocking, the socket side already is.
constexpr unsigned kSpliceFlags = SPLICE_F_MOVE | SPLICE_F_NONBLOCK;

void Add(std::atomic<uint64_t>& counter, uint64_t n = 1) { RelayCounters::Add(counter, n); }

}  // namespace

RelayCounters& PathCounters::ForRule(uint32_t rule_id) {
  const uint64_t want = uint64_t{rule_id} + 1;
  for (size_t i = 0; i + 1 < kRuleSlots; ++i) {
    const uint64_t id = rules[i].id_plus_one.load(std::memory_order_relaxed);
    if (id == want) return rules[i].counters;
    if (id == 0) {
      // Release: a reader that sees the id sees zeroed counters behind it.
      rules[i].id_plus_one.store(want, std::memory_order_release);
      return rules[i].counters;
    }
  }
  RuleSlot& other = rules[kRuleSlots - 1];
  other.id_plus_one.store(uint64_t{RuleTotals::kOtherRules} + 1, std::memory_order_release);
  return other.counters;
}

KernelPathTotals PathCounters::Snapshot() const {
  KernelPathTotals t;
  t.relay = relay.Snapshot();
  for (const RuleSlot& slot : rules) {
    const uint64_t id = slot.id_plus_one.load(std::memory_order_acquire);
    if (id != 0) {
      AddRuleTotals(t.rules, static_cast<uint32_t>(id - 1), slot.counters.Snapshot());
    }
  }
#define XDPFWD_FIELD(name, kind, what) t.name = name.load(std::memory_order_relaxed);
  XDPFWD_KERNEL_PATH_COUNTERS(XDPFWD_FIELD)
#undef XDPFWD_FIELD
  return t;
}

Result<Pipe> Pipe::Create(size_t want_bytes) {
  int fds[2];
  if (pipe2(fds, O_NONBLOCK | O_CLOEXEC) != 0) return SystemError("pipe2");
  Pipe p;
  p.read_.reset(fds[0]);
  p.write_.reset(fds[1]);
  int size = fcntl(fds[1], F_SETPIPE_SZ, static_cast<int>(want_bytes));
  if (size < 0) size = fcntl(fds[1], F_GETPIPE_SZ);
  if (size <= 0) return SystemError("F_GETPIPE_SZ");
  p.capacity_ = static_cast<size_t>(size);
  return p;
}

Result<Pipe> PipePool::Take() {
  if (free_.empty()) return Pipe::Create(pipe_bytes_);
  Pipe p = std::move(free_.back());
  free_.pop_back();
  pooled_.store(free_.size(), std::memory_order_relaxed);
  return p;
}

void PipePool::Give(Pipe pipe) {
  if (free_.size() < kMaxFreePipes) free_.push_back(std::move(pipe));
  pooled_.store(free_.size(), std::memory_order_relaxed);
}

void PipePool::Clear() {
  free_.clear();
  pooled_.store(0, std::memory_order_relaxed);
}

std::unique_ptr<uint8_t[]> BufferPool::Take() {
  if (free_.empty()) return std::unique_ptr<uint8_t[]>(new (std::nothrow) uint8_t[buffer_bytes_]);
  std::unique_ptr<uint8_t[]> b = std::move(free_.back());
  free_.pop_back();
  return b;
}

void BufferPool::Give(std::unique_ptr<uint8_t[]> buffer) {
  if (free_.size() < kMaxFreeBuffers) free_.push_back(std::move(buffer));
}

PumpResult Direction::Pump(Leg& src, Leg& sink, PumpContext& ctx, uint64_t budget) {
  if (finished_) return {PumpStatus::kFinished, 0, 0};
  if (splice_after_keeping_ && !keeping_ && buffer_begin_ == buffer_end_) {
    splice_ = true;  // nothing kept any more, nothing left in the buffer: splice again
    splice_after_keeping_ = false;
  }
  PumpResult r = splice_ ? PumpSplice(src, sink, ctx, budget) : PumpCopy(src, sink, ctx, budget);
  // Idle connections hold no pipe and no buffer.
  if (pipe_ && in_pipe_ == 0) ctx.pipes.Give(std::move(pipe_));
  if (buffer_ && buffer_begin_ == buffer_end_ && !keeping_) GiveBuffer(ctx);
  return r;
}

void Direction::Release(PumpContext& ctx) {
  if (pipe_ && in_pipe_ == 0) ctx.pipes.Give(std::move(pipe_));
  if (buffer_ && buffer_begin_ == buffer_end_) GiveBuffer(ctx);
  pipe_ = Pipe();
  buffer_.reset();
  buffer_is_kept_ = keeping_ = false;
  in_pipe_ = buffer_begin_ = buffer_end_ = 0;
}

void Direction::GiveBuffer(PumpContext& ctx) {
  Pool(ctx).Give(std::move(buffer_));
  buffer_is_kept_ = false;
  buffer_begin_ = buffer_end_ = 0;
}

void Direction::Keep() {
  keeping_ = true;
  splice_after_keeping_ = splice_;
  splice_ = false;
}

void Direction::StopKeeping() { keeping_ = false; }

void Direction::Rewind() {
  buffer_begin_ = 0;
  finished_ = false;  // eof_ stays: the source's end follows the bytes again
}

PumpResult Direction::Finish(Leg& sink, uint64_t bytes) {
  // Half-close: the other direction keeps flowing until its own source ends. If it has ended,
  // the loop closes the sink now, and the close sends the FIN.
  if (!other_finished_ && shutdown(sink.fd.get(), SHUT_WR) != 0) {
    return {PumpStatus::kSinkFailed, errno, bytes};
  }
  finished_ = true;
  return {PumpStatus::kFinished, 0, bytes};
}

// The pipe is filled only when it is empty. That makes EAGAIN from the socket->pipe splice
// unambiguous (an empty pipe cannot be full, so the socket has nothing), and bounds what a
// connection holds to one pipe per direction.
PumpResult Direction::PumpSplice(Leg& src, Leg& sink, PumpContext& ctx, uint64_t budget) {
  PathCounters& c = ctx.counters;
  uint64_t moved = 0;
  auto fall_back_to_copy = [&] {
    splice_ = false;
    PumpResult r = PumpCopy(src, sink, ctx, budget > moved ? budget - moved : 0);
    r.bytes += moved;
    return r;
  };
  for (;;) {
    if (in_pipe_ > 0) {
      if (!sink.writable) return {PumpStatus::kWaiting, 0, moved};
      const ssize_t n =
          splice(pipe_.read_fd(), nullptr, sink.fd.get(), nullptr, in_pipe_, kSpliceFlags);
      Add(c.splice_calls);
      if (n < 0) {
        if (errno == EINTR) continue;
        if (errno == EAGAIN) {
          sink.writable = false;
          return {PumpStatus::kWaiting, 0, moved};
        }
        return {PumpStatus::kSinkFailed, errno, moved};
      }
      in_pipe_ -= static_cast<size_t>(n);
      moved += static_cast<uint64_t>(n);
      Add(c.splice_bytes, static_cast<uint64_t>(n));
      if (in_pipe_ > 0) {
        // A short write to a TCP socket means its send buffer is full, and TCP has set
        // SOCK_NOSPACE, so an EPOLLOUT edge follows when it drains: no need to hear EAGAIN.
        sink.writable = false;
        return {PumpStatus::kWaiting, 0, moved};
      }
      continue;
    }
    if (eof_) return Finish(sink, moved);
    if (!src.readable) return {PumpStatus::kWaiting, 0, moved};
    if (moved >= budget) return {PumpStatus::kBudgetSpent, 0, moved};
    if (!pipe_) {
      Result<Pipe> p = ctx.pipes.Take();
      if (!p) {  // out of file descriptors or pipe quota: this direction copies instead
        Add(c.errors);
        return fall_back_to_copy();
      }
      pipe_ = std::move(*p);
    }
    const ssize_t n =
        splice(src.fd.get(), nullptr, pipe_.write_fd(), nullptr, pipe_.capacity(), kSpliceFlags);
    Add(c.splice_calls);
    if (n > 0) {
      in_pipe_ = static_cast<size_t>(n);
      continue;
    }
    if (n == 0) {
      eof_ = true;
      continue;
    }
    if (errno == EINTR) continue;
    if (errno == EAGAIN) {
      src.readable = false;
      return {PumpStatus::kWaiting, 0, moved};
    }
    // The socket cannot be spliced (a ULP, a kernel without it): copy for this connection.
    if (errno == EINVAL || errno == ENOSYS) return fall_back_to_copy();
    return {PumpStatus::kSourceFailed, errno, moved};
  }
}

PumpResult Direction::PumpCopy(Leg& src, Leg& sink, PumpContext& ctx, uint64_t budget) {
  PathCounters& c = ctx.counters;
  uint64_t moved = 0;
  for (;;) {
    if (buffer_end_ > buffer_begin_) {
      if (!sink.writable) return {PumpStatus::kWaiting, 0, moved};
      const ssize_t n = send(sink.fd.get(), buffer_.get() + buffer_begin_,
                             buffer_end_ - buffer_begin_, MSG_NOSIGNAL | MSG_DONTWAIT);
      Add(c.copy_calls);
      if (n < 0) {
        if (errno == EINTR) continue;
        if (errno == EAGAIN) {
          sink.writable = false;
          return {PumpStatus::kWaiting, 0, moved};
        }
        return {PumpStatus::kSinkFailed, errno, moved};
      }
      buffer_begin_ += static_cast<size_t>(n);
      moved += static_cast<uint64_t>(n);
      Add(c.copy_bytes, static_cast<uint64_t>(n));
      if (buffer_begin_ < buffer_end_) {
        sink.writable = false;  // short write: send buffer full, EPOLLOUT follows (see above)
        return {PumpStatus::kWaiting, 0, moved};
      }
      if (!keeping_) buffer_begin_ = buffer_end_ = 0;
      continue;
    }
    if (eof_) return Finish(sink, moved);
    if (!src.readable) return {PumpStatus::kWaiting, 0, moved};
    if (moved >= budget) return {PumpStatus::kBudgetSpent, 0, moved};
    if (!buffer_) {
      buffer_is_kept_ = keeping_;
      buffer_ = Pool(ctx).Take();
      if (!buffer_) return {PumpStatus::kFailed, ENOMEM, moved};
    }
    // While keeping, new bytes go after the kept ones (all sent; Rewind sends them again). A
    // kept buffer filled is more than is kept: keeping stops, so there is room while it lasts.
    const size_t at = keeping_ ? buffer_end_ : 0;
    const size_t room = Pool(ctx).buffer_bytes() - at;
    const ssize_t n = recv(src.fd.get(), buffer_.get() + at, room, MSG_DONTWAIT);
    Add(c.copy_calls);
    if (n > 0) {
      buffer_begin_ = at;
      buffer_end_ = at + static_cast<size_t>(n);
      if (keeping_ && static_cast<size_t>(n) == room) keeping_ = false;  // too much to keep
      // TCP's recv hands over everything queued, so a short read emptied the socket and the
      // next segment raises a new edge: skip the recv that would only say EAGAIN. Not once
      // the FIN was announced: that edge has been consumed and will not come again.
      if (static_cast<size_t>(n) < room && !src.hung_up) src.readable = false;
      continue;
    }
    if (n == 0) {
      eof_ = true;
      continue;
    }
    if (errno == EINTR) continue;
    if (errno == EAGAIN) {
      src.readable = false;
      return {PumpStatus::kWaiting, 0, moved};
    }
    return {PumpStatus::kSourceFailed, errno, moved};
  }
}

}  // namespace xdpfwd::kernel_path
