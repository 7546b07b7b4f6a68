// Is a busy-polling thread's core its own? At start the fast path reports, for each core a
// spinning thread is pinned to, whether the kernel keeps other work off it (isolcpus,
// nohz_full) and how many IRQs may be delivered there, and warns when spinning threads share a
// core. The report is built from the files' contents, so it is testable without the machine.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace xdpfwd {

// The kernel's word on isolation, as read from its files.
struct IsolationFacts {
  std::string isolated;   // /sys/devices/system/cpu/isolated (isolcpus=)
  std::string nohz_full;  // /sys/devices/system/cpu/nohz_full; absent without CONFIG_NO_HZ_FULL
  bool nohz_full_known = true;
  std::vector<std::string> irq_affinities;  // /proc/irq/*/smp_affinity_list, one per IRQ
  // Other user-space tasks by the CPU they last ran on (/proc/*/task/*/stat, field 39), kernel
  // threads and the caller's own processes left out: what else the scheduler puts there.
  std::map<int, std::vector<std::string>> tasks_by_cpu;
};

// One /proc/PID/task/TID/stat line: the task's name and the CPU it last ran on, or nullopt for a
// kernel thread (PF_KTHREAD in its flags) or a line that does not parse.
std::optional<std::pair<std::string, int>> ParseTaskStat(const std::string& line);

// Reads the files above (missing ones read as empty; nohz_full_known false without the file).
// Tasks of the processes in `own` (xdpfwd and its workers) are not counted.
IsolationFacts ReadIsolationFacts(const std::vector<int>& own = {});

// A thread that never sleeps: a fast-path worker, or a busy-polling kernel-path thread.
struct SpinningThread {
  std::string name;  // "fast-path worker", "kernel-path threads"
  int cpu = -1;      // -1: not pinned, it may spin on any CPU the process may use
};

struct IsolationReport {
  std::vector<std::string> lines;     // one per pinned core: what the kernel does there
  std::vector<std::string> warnings;  // shared cores, unpinned spinners
};

IsolationReport ReportIsolation(const IsolationFacts& facts,
                                const std::vector<SpinningThread>& threads);

}  // namespace xdpfwd
