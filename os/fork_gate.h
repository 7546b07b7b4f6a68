// Forking from a process whose other threads keep running hands the child every lock as it was
// at that instant: one another thread held (ASan's allocator, a FILE's, a mutex of ours) stays
// held for ever in the child, which hangs at its first use of it. The fast path forks its
// workers, and restarts one that died, while the control loop, the kernel path's threads, the
// health checks and the access log's writer run. The gate lets a fork happen only while every
// other thread is between two stretches of work, blocked where it holds no lock (epoll_wait, a
// condition variable): each of those threads holds a Pass while it works, and Fork waits until
// no pass is held, keeping new ones waiting until the child exists.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <optional>

namespace xdpfwd {

class ForkGate {
 public:
  // The one gate every thread of this process goes through.
  static ForkGate& OfProcess();

  // Held while a thread works; released (or destroyed) before it blocks waiting for work.
  class Pass {
   public:
    Pass() = default;
    explicit Pass(ForkGate* gate) : gate_(gate) {}
    Pass(Pass&& o) noexcept : gate_(o.gate_) { o.gate_ = nullptr; }
    Pass& operator=(Pass&& o) noexcept;
    Pass(const Pass&) = delete;
    Pass& operator=(const Pass&) = delete;
    ~Pass() { Release(); }
    void Release();

   private:
    ForkGate* gate_ = nullptr;
  };

  // Waits while a fork is under way (the time the forker waits for the other passes plus the
  // fork itself: well under a millisecond unless a pass is held long), then holds a pass.
  [[nodiscard]] Pass Enter();

  // fork() once no other thread holds a pass. Returns what fork() does (0 in the child, the
  // child's pid, or -1 with errno); std::nullopt, having forked nothing, if passes were still
  // held after `patience` (ask again later). The caller must not hold a pass itself.
  std::optional<pid_t> Fork(std::chrono::milliseconds patience);

  uint32_t passes_held() const { return working_.load(std::memory_order_relaxed); }
  bool fork_pending() const { return forking_.load(std::memory_order_relaxed); }
  // Children forked through the gate, counted before the gate reopens.
  uint64_t forks() const { return forks_.load(std::memory_order_relaxed); }

 private:
  void Leave();

  std::atomic<uint32_t> working_{0};
  std::atomic<bool> forking_{false};
  std::atomic<uint64_t> forks_{0};
  std::mutex mu_;  // forking_'s changes, and the waits on cv_
  std::condition_variable cv_;
};

}  // namespace xdpfwd
