// One direction of a connection on the kernel-socket path: bytes from a source socket to a sink
// socket through a pipe (splice, no copy into user space) or a user-space buffer (recv/send),
// and the per-thread pools those come from. Private to the kernel path.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "forwarder/kernel_path.h"
#include "forwarder/relay_counters.h"
#include "os/result.h"
#include "os/unique_fd.h"

namespace xdpfwd::kernel_path {

// Everything one event-loop thread counts. One writer (the loop thread, through
// RelayCounters::Add); Snapshot() may run on any thread.
struct PathCounters {
  RelayCounters relay;
  // The relay counters again, per rule: a slot each for the first kRuleSlots - 1 rules this
  // thread meets (reloads make new ids), the last for every other. A slot's id (plus one; 0:
  // free) is set once, by the loop thread, before anything is counted in it (release).
  static constexpr size_t kRuleSlots = 64;
  struct RuleSlot {
    std::atomic<uint64_t> id_plus_one{0};
    RelayCounters counters;
  };
  RuleSlot rules[kRuleSlots];
  // The loop thread's: the slot of `rule_id`, claimed if new.
  RelayCounters& ForRule(uint32_t rule_id);
#define XDPFWD_FIELD(name, kind, what) std::atomic<uint64_t> name{0};
  XDPFWD_KERNEL_PATH_COUNTERS(XDPFWD_FIELD)
#undef XDPFWD_FIELD

  KernelPathTotals Snapshot() const;
};

// One socket of a relayed connection and what edge-triggered epoll has said about it. A flag
// set by an event stays set until a syscall proves it stale (EAGAIN, or a short transfer).
struct Leg {
  UniqueFd fd;
  bool readable = false;
  bool writable = false;
  // EPOLLRDHUP or EPOLLHUP seen: the peer's FIN has been announced and no later edge will
  // announce it again, so only EAGAIN may clear `readable` from now on.
  bool hung_up = false;
};

// A non-blocking pipe; move-only.
class Pipe {
 public:
  // pipe2 + F_SETPIPE_SZ(want_bytes); keeps the default size if the kernel refuses a larger one
  // (unprivileged users are held to fs.pipe-max-size and fs.pipe-user-pages-soft).
  static Result<Pipe> Create(size_t want_bytes);
  Pipe() = default;

  int read_fd() const { return read_.get(); }
  int write_fd() const { return write_.get(); }
  size_t capacity() const { return capacity_; }
  explicit operator bool() const { return static_cast<bool>(read_); }

 private:
  UniqueFd read_, write_;
  size_t capacity_ = 0;
};

// Empty pipes kept for reuse, so a connection holds a pipe only while bytes are in it and
// request/response traffic costs no pipe2/close per message.
class PipePool {
 public:
  // `pooled` is kept equal to the number of pipes in the pool (two descriptors each), so that a
  // count of the process's descriptors can tell the pool from a leak.
  PipePool(size_t pipe_bytes, std::atomic<uint64_t>& pooled)
      : pipe_bytes_(pipe_bytes), pooled_(pooled) {}
  Result<Pipe> Take();
  void Give(Pipe pipe);  // must be empty
  void Clear();

 private:
  size_t pipe_bytes_;
  std::atomic<uint64_t>& pooled_;
  std::vector<Pipe> free_;
};

// Copy buffers, the same way: held only while they hold bytes.
class BufferPool {
 public:
  explicit BufferPool(size_t buffer_bytes) : buffer_bytes_(buffer_bytes) {}
  std::unique_ptr<uint8_t[]> Take();  // nullptr when out of memory
  void Give(std::unique_ptr<uint8_t[]> buffer);
  size_t buffer_bytes() const { return buffer_bytes_; }
  void Clear() { free_.clear(); }

 private:
  size_t buffer_bytes_;
  std::vector<std::unique_ptr<uint8_t[]>> free_;
};

// What a loop thread lends to every pump it runs. `kept_buffers` hold a direction's bytes
// while it keeps them (Direction::Keep), whatever the size of `buffers`.
struct PumpContext {
  PipePool& pipes;
  BufferPool& buffers;
  BufferPool& kept_buffers;
  PathCounters& counters;
};

enum class PumpStatus : uint8_t {
  kWaiting,       // nothing to do until epoll reports the source readable or the sink writable
  kBudgetSpent,   // more to do; take another turn after the other connections had theirs
  kFinished,      // source ended, every byte relayed, sink shut down for writing (or, after
                  // OtherFinished, left for the loop's close to send its FIN)
  kSourceFailed,  // a syscall on the source socket failed (err): that leg is broken
  kSinkFailed,    // a syscall on the sink socket failed (err): that leg is broken
  kFailed,        // a local resource failed (err): no pipe, no memory
};

struct PumpResult {
  PumpStatus status = PumpStatus::kWaiting;
  int err = 0;
  uint64_t bytes = 0;  // written to the sink during this call
};

class Direction {
 public:
  explicit Direction(bool use_splice) : splice_(use_splice) {}

  // Moves bytes from src to sink until one of them would block, the source ends, or about
  // `budget` bytes have been written. Never blocks.
  PumpResult Pump(Leg& src, Leg& sink, PumpContext& ctx, uint64_t budget);
  bool finished() const { return finished_; }
  // The other direction has finished and keeps nothing: when this one finishes, the connection
  // is complete and the loop closes both sockets at once, and the close sends the sink's FIN,
  // so the shutdown(SHUT_WR) is skipped (one syscall a connection; its last direction only).
  void OtherFinished() { other_finished_ = true; }
  bool source_ended() const { return eof_; }  // the source's EOF has been read
  bool splicing() const { return splice_; }
  // [retry-on=empty-response]: from now on every byte read from the source is also kept, so that
  // Rewind() can send them all again to another sink. Kept bytes must be in user space, so this
  // direction copies (recv/send) while it keeps, and splices again once it stops (if it did).
  // It stops by itself once it read more than ctx.kept_buffers.buffer_bytes() - 1 bytes (one
  // kept buffer, filled). Call before the first Pump.
  void Keep();
  void StopKeeping();  // the kept bytes are dropped (those not yet sent still go)
  bool keeping() const { return keeping_; }
  // While keeping, for a new sink: every byte read so far is sent again, from the first, then
  // the source's end if it was read.
  void Rewind();
  // Returns an empty pipe or buffer to the pools; one still holding bytes is dropped. For a
  // connection that is ending.
  void Release(PumpContext& ctx);

 private:
  PumpResult PumpSplice(Leg& src, Leg& sink, PumpContext& ctx, uint64_t budget);
  PumpResult PumpCopy(Leg& src, Leg& sink, PumpContext& ctx, uint64_t budget);
  PumpResult Finish(Leg& sink, uint64_t bytes);
  // The pool buffer_ came from and goes back to.
  BufferPool& Pool(PumpContext& ctx) const {
    return buffer_is_kept_ ? ctx.kept_buffers : ctx.buffers;
  }
  void GiveBuffer(PumpContext& ctx);

  bool splice_;
  bool keeping_ = false;
  bool splice_after_keeping_ = false;  // splice_ as it was before Keep
  bool buffer_is_kept_ = false;        // buffer_ is of ctx.kept_buffers
  bool eof_ = false;                   // the source returned end of stream
  bool finished_ = false;              // ... and the sink has been shut down (or is closed next)
  bool other_finished_ = false;        // OtherFinished
  Pipe pipe_;
  size_t in_pipe_ = 0;
  std::unique_ptr<uint8_t[]> buffer_;
  size_t buffer_begin_ = 0, buffer_end_ = 0;
};

}  // namespace xdpfwd::kernel_path
