// The isolation report from the kernel's files' contents: what it says of each spinning
// thread's core, and when it warns.
#include "os/isolation.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

namespace xdpfwd {
namespace {

bool Has(const std::vector<std::string>& lines, const std::string& text) {
  for (const std::string& l : lines) {
    if (l.find(text) != std::string::npos) return true;
  }
  return false;
}

std::string All(const IsolationReport& r) {
  std::string out;
  for (const auto& l : r.lines) out += "line: " + l + "\n";
  for (const auto& w : r.warnings) out += "warning: " + w + "\n";
  return out;
}

TEST(IsolationTest, AnIsolatedTicklessCoreWithNoIrqs) {
  IsolationFacts f;
  f.isolated = "2-3\n";
  f.nohz_full = "2-3\n";
  f.irq_affinities = {"0-1\n", "0\n", "1\n"};
  const IsolationReport r = ReportIsolation(f, {{"fast-path worker", 2}});
  ASSERT_EQ(r.lines.size(), 1u) << All(r);
  EXPECT_EQ(r.lines[0],
            "CPU 2 (fast-path worker): in isolcpus, nohz_full, 0 of 3 IRQs may be delivered there");
  EXPECT_TRUE(r.warnings.empty()) << All(r);
}

TEST(IsolationTest, ASharedCoreWithIrqsPointsToTheTuningPage) {
  IsolationFacts f;
  f.isolated = "\n";
  f.nohz_full = "(null)\n";  // older kernels' empty mask
  f.irq_affinities = {"0-1\n", "1\n", "0\n", "garbage"};
  const IsolationReport r = ReportIsolation(f, {{"fast-path worker", 1}});
  ASSERT_EQ(r.lines.size(), 1u) << All(r);
  EXPECT_TRUE(Has(r.lines, "CPU 1 (fast-path worker): not in isolcpus, not nohz_full, 2 of 3 IRQs"))
      << All(r) << "an unreadable affinity is left out of the count";
  EXPECT_TRUE(Has(r.lines, "docs/tuning.md")) << All(r);
}

TEST(IsolationTest, NoNohzFullFileSaysSo) {
  IsolationFacts f;
  f.nohz_full_known = false;
  const IsolationReport r = ReportIsolation(f, {{"fast-path worker", 0}});
  EXPECT_TRUE(Has(r.lines, "no nohz_full support")) << All(r);
}

TEST(IsolationTest, WarnsWhenSpinningThreadsShareACore) {
  IsolationFacts f;
  const IsolationReport r =
      ReportIsolation(f, {{"fast-path worker", 1}, {"kernel-path thread", 1}, {"other", 0}});
  EXPECT_EQ(r.lines.size(), 2u) << All(r);
  ASSERT_EQ(r.warnings.size(), 1u) << All(r);
  EXPECT_TRUE(Has(r.warnings, "CPU 1 is shared by fast-path worker and kernel-path thread"))
      << All(r);
}

TEST(IsolationTest, WarnsOfUnpinnedSpinners) {
  IsolationFacts f;
  IsolationReport r =
      ReportIsolation(f, {{"fast-path worker", 1}, {"kernel-path threads (busy-polling)", -1}});
  EXPECT_TRUE(Has(r.warnings, "kernel-path threads (busy-polling) not pinned: may spin on CPU 1"))
      << All(r);
  r = ReportIsolation(f, {{"fast-path worker", -1}});
  EXPECT_TRUE(r.lines.empty()) << All(r);
  EXPECT_TRUE(Has(r.warnings, "fast-path worker not pinned")) << All(r);
  r = ReportIsolation(f, {});
  EXPECT_TRUE(r.lines.empty() && r.warnings.empty()) << All(r);
}

}  // namespace
}  // namespace xdpfwd

namespace xdpfwd {
namespace {

TEST(IsolationTaskTest, ReadsTheNameAndLastCpuAndSkipsKernelThreads) {
  // A user task on CPU 1 whose name holds a space and a parenthesis; fields 3-39 follow.
  std::string user = "4242 (my (odd) app) S";
  for (int n = 4; n <= 38; ++n) user += n == 9 ? " 4194560" : " 0";
  user += " 1 0 0";
  const auto task = ParseTaskStat(user);
  ASSERT_TRUE(task.has_value());
  EXPECT_EQ(task->first, "my (odd) app");
  EXPECT_EQ(task->second, 1);
  std::string kthread = "12 (ksoftirqd/1) S";
  for (int n = 4; n <= 38; ++n) kthread += n == 9 ? " 69238848" : " 0";  // PF_KTHREAD set
  kthread += " 1 0 0";
  EXPECT_FALSE(ParseTaskStat(kthread).has_value());
  EXPECT_FALSE(ParseTaskStat("garbage").has_value());
}

TEST(IsolationTaskTest, OtherTasksOnAWorkersCoreAreNamed) {
  IsolationFacts f;
  f.isolated = "\n";
  f.tasks_by_cpu[2] = {"sshd", "bash", "bash", "cron", "top"};
  f.tasks_by_cpu[3] = {"elsewhere"};
  const IsolationReport r = ReportIsolation(f, {{"fast-path worker 0", 2}});
  ASSERT_EQ(r.lines.size(), 1u);
  EXPECT_NE(r.lines[0].find("5 other task(s) last ran there (bash, cron, sshd, ...)"),
            std::string::npos)
      << r.lines[0];
  EXPECT_EQ(r.lines[0].find("elsewhere"), std::string::npos);
}

}  // namespace

// Reading every task's stat while tasks come and go must not throw: a task that exits between
// open and read fails the read with ESRCH (libstdc++ throws it through istreambuf_iterator),
// and uncaught that ended the forwarder's control process at start.
TEST(IsolationTaskTest, ReadingTasksThatComeAndGoNeverThrows) {
  std::atomic<bool> stop{false};
  std::vector<std::thread> churn;
  for (int i = 0; i < 4; ++i) {
    churn.emplace_back([&stop] {
      while (!stop.load()) std::thread([] {}).join();
    });
  }
  size_t walks = 0;
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(2);
  try {
    while (std::chrono::steady_clock::now() < until) {
      (void)ReadIsolationFacts();
      ++walks;
    }
  } catch (const std::exception& e) {
    ADD_FAILURE() << "after " << walks << " walks: " << e.what();
  }
  stop = true;
  for (std::thread& t : churn) t.join();
  EXPECT_GT(walks, 0u);
}

}  // namespace xdpfwd
