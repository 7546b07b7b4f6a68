#include "os/fork_gate.h"

#include <unistd.h>

namespace xdpfwd {

ForkGate& ForkGate::OfProcess() {
  static ForkGate gate;
  return gate;
}

ForkGate::Pass& ForkGate::Pass::operator=(Pass&& o) noexcept {
  if (this != &o) {
    Release();
    gate_ = o.gate_;
    o.gate_ = nullptr;
  }
  return *this;
}

void ForkGate::Pass::Release() {
  if (gate_ != nullptr) gate_->Leave();
  gate_ = nullptr;
}

// Sequentially consistent on both sides (a thread counts itself in, then looks for a fork; the
// forker announces the fork, then looks at the count): one of the two always sees the other.
ForkGate::Pass ForkGate::Enter() {
  for (;;) {
    working_.fetch_add(1);
    if (!forking_.load()) return Pass(this);
    Leave();
    std::unique_lock lock(mu_);
    cv_.wait(lock, [this] { return !forking_.load(); });
  }
}

void ForkGate::Leave() {
  if (working_.fetch_sub(1) == 1 && forking_.load()) {
    std::lock_guard lock(mu_);  // the forker is either before its check or asleep: not missed
    cv_.notify_all();
  }
}

std::optional<pid_t> ForkGate::Fork(std::chrono::milliseconds patience) {
  std::unique_lock lock(mu_);
  forking_.store(true);
  const bool quiet = cv_.wait_for(lock, patience, [this] { return working_.load() == 0; });
  if (!quiet) {
    forking_.store(false);
    cv_.notify_all();
    return std::nullopt;
  }
  lock.unlock();  // not held across the fork: the parked threads wait on it, holding nothing
  const pid_t pid = fork();
  if (pid == 0) return pid;  // the child: one thread, no pass, and never back here
  if (pid > 0) forks_.fetch_add(1);
  lock.lock();
  forking_.store(false);
  cv_.notify_all();
  return pid;
}

}  // namespace xdpfwd
