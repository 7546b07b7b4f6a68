// The kernel path's TCP events: BPF programs on the kernel's TCP tracepoints and functions that
// report retransmissions, RTOs, fast recovery, zero windows and Nagle peers of the sockets the
// kernel path tags, each into a ring of the thread that owns the socket (xdp/tcp_events.bpf.c).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "os/result.h"
#include "xdp/tcp_events_shared.h"

struct ring_buffer;

namespace xdpfwd {

static_assert(sizeof(tcp_socket_tag) == 32);
static_assert(sizeof(tcp_event) == 32);

// One thread's ring, read by that thread alone: Drain() makes no syscall (the ring is mapped).
class TcpEventRing {
 public:
  using Handler = void (*)(void* context, const tcp_event& event);
  TcpEventRing(const TcpEventRing&) = delete;
  TcpEventRing& operator=(const TcpEventRing&) = delete;
  ~TcpEventRing();
  // Hands every event waiting to `handler`; returns how many.
  size_t Drain();

 private:
  friend class TcpEvents;
  TcpEventRing(Handler handler, void* context) : handler_(handler), context_(context) {}
  static int OnSample(void* self, void* data, size_t bytes);
  ring_buffer* ring_ = nullptr;
  Handler handler_;
  void* context_;
};

class TcpEvents {
 public:
  // Loads and attaches the programs with a ring for each of `threads` threads (at most
  // TCP_EVENTS_MAX_THREADS). Programs this kernel cannot attach are left out and named in
  // missing(); an error only when none can run (no BPF, no BTF, no socket storage).
  static Result<std::unique_ptr<TcpEvents>> Load(int threads);
  ~TcpEvents();
  TcpEvents(const TcpEvents&) = delete;
  TcpEvents& operator=(const TcpEvents&) = delete;

  // Thread `thread`'s ring, to be drained on that thread; events go to `handler`.
  Result<std::unique_ptr<TcpEventRing>> OpenRing(int thread, TcpEventRing::Handler handler,
                                                 void* context);
  // Tags socket `fd` (a connected TCP socket) as the kernel path's: one bpf syscall. The tag
  // goes when the socket is freed.
  Result<void> Tag(int fd, uint64_t connection, uint32_t rule, uint8_t leg, uint8_t thread);
  // What this kernel could not load or attach ("tp_btf/timer_expire_entry: ..."), empty when
  // all ran.
  const std::vector<std::string>& missing() const { return missing_; }
  // Events dropped because a thread's ring was full.
  uint64_t dropped() const;

 private:
  TcpEvents() = default;
  struct Skeleton;
  std::unique_ptr<Skeleton> skeleton_;
  std::vector<int> ring_fds_;
  std::vector<std::string> missing_;
};

}  // namespace xdpfwd
