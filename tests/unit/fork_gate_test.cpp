// The fork gate (os/fork_gate.h): no fork while another thread holds a pass, and no pass taken
// while a fork waits or happens.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <future>
#include <thread>

#include "os/fork_gate.h"

namespace xdpfwd {
namespace {

using namespace std::chrono_literals;

// Forks a child that exits at once; the parent reaps it. Returns what Fork returned.
std::optional<pid_t> ForkAndReap(ForkGate& gate, std::chrono::milliseconds patience) {
  const std::optional<pid_t> pid = gate.Fork(patience);
  if (pid && *pid == 0) _exit(0);
  if (pid && *pid > 0) {
    int status = 0;
    EXPECT_EQ(waitpid(*pid, &status, 0), *pid);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  }
  return pid;
}

TEST(ForkGateTest, NoForkWhileAnotherThreadWorks) {
  ForkGate gate;
  std::promise<void> entered, release;
  std::thread worker([&] {
    ForkGate::Pass working = gate.Enter();
    entered.set_value();
    release.get_future().wait();
  });
  entered.get_future().wait();
  EXPECT_EQ(gate.passes_held(), 1u);
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_EQ(ForkAndReap(gate, 100ms), std::nullopt) << "forked while a pass was held";
  EXPECT_GE(std::chrono::steady_clock::now() - t0, 100ms) << "gave up before its patience";
  release.set_value();
  worker.join();
  EXPECT_EQ(gate.passes_held(), 0u);
  const std::optional<pid_t> pid = ForkAndReap(gate, 100ms);
  ASSERT_TRUE(pid.has_value());
  EXPECT_GT(*pid, 0);
}

TEST(ForkGateTest, AForkWaitsForThePassAndNewPassesWaitForTheFork) {
  ForkGate gate;
  ForkGate::Pass first = gate.Enter();
  // (The gate's own count: the forker's thread learns of the fork only after the gate has
  // reopened, and the second thread may be in by then.)
  std::future<std::optional<pid_t>> forker =
      std::async(std::launch::async, [&] { return ForkAndReap(gate, 5s); });
  // Once the forker waits, a second thread's Enter waits too: it must not get in between.
  while (!gate.fork_pending()) std::this_thread::sleep_for(1ms);
  std::atomic<bool> second_in{false};
  std::thread second([&] {
    const ForkGate::Pass working = gate.Enter();
    second_in = true;
    EXPECT_EQ(gate.forks(), 1u) << "a pass was taken while a fork was pending";
  });
  std::this_thread::sleep_for(100ms);
  EXPECT_FALSE(second_in.load()) << "entered while a fork waited for the first pass";
  EXPECT_EQ(gate.forks(), 0u) << "forked while the first pass was held";
  first.Release();
  const std::optional<pid_t> pid = forker.get();
  ASSERT_TRUE(pid.has_value());
  EXPECT_GT(*pid, 0);
  second.join();
  EXPECT_TRUE(second_in.load());
}

// Many threads entering and leaving as fast as they can while forks come and go: every fork
// happens, and no thread is left waiting.
TEST(ForkGateTest, BusyThreadsAndRepeatedForksMakeProgress) {
  ForkGate gate;
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> stretches{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      while (!stop.load()) {
        const ForkGate::Pass working = gate.Enter();
        stretches.fetch_add(1);
      }
    });
  }
  for (int i = 0; i < 50; ++i) {
    const std::optional<pid_t> pid = ForkAndReap(gate, 5s);
    ASSERT_TRUE(pid.has_value()) << "fork " << i << " never found the threads between stretches";
    ASSERT_GT(*pid, 0);
  }
  stop = true;
  for (std::thread& t : threads) t.join();
  EXPECT_GT(stretches.load(), 0u);
  EXPECT_EQ(gate.passes_held(), 0u);
}

}  // namespace
}  // namespace xdpfwd
