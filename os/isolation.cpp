// Core isolation report; see isolation.h.
#include "os/isolation.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "os/cpu_list.h"

namespace xdpfwd {
namespace {

// Never throws: /proc files of a task that exits between open and read fail the read with
// ESRCH, and libstdc++'s filebuf throws that through an istreambuf_iterator. Uncaught, it
// ended the forwarder's control process at start (seen once in ~30 multi_queue_test starts
// under ASan, while the test's threads came and went). A file that cannot be read is empty.
std::string ReadFile(const std::string& path, bool* found = nullptr) {
  std::ifstream in(path);
  if (found != nullptr) *found = static_cast<bool>(in);
  try {
    return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  } catch (const std::exception&) {
    return {};
  }
}

// The entries of a directory, never throwing: a /proc directory may vanish while it is walked
// (range-for's increment would throw filesystem_error).
std::vector<std::filesystem::path> Entries(const std::filesystem::path& dir) {
  std::vector<std::filesystem::path> out;
  std::error_code ec;
  for (std::filesystem::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    out.push_back(it->path());
  }
  return out;
}

// A kernel CPU list, or nullopt when it cannot be read as one. Some kernels print "(null)" for
// an empty nohz_full mask.
std::optional<std::vector<int>> KernelList(const std::string& text) {
  if (text.find("(null)") != std::string::npos) return std::vector<int>{};
  auto cpus = ParseCpuList(text);
  if (!cpus) return std::nullopt;
  return *cpus;
}

bool Contains(const std::optional<std::vector<int>>& list, int cpu) {
  return list && std::binary_search(list->begin(), list->end(), cpu);
}

}  // namespace

std::optional<std::pair<std::string, int>> ParseTaskStat(const std::string& line) {
  // "pid (comm) state ppid ..." where comm may hold spaces and parentheses: it ends at the last
  // ')'. From there fields are numbered from 3 (state): flags is field 9, processor field 39.
  const size_t open = line.find('(');
  const size_t close = line.rfind(')');
  if (open == std::string::npos || close == std::string::npos || close < open) return std::nullopt;
  std::istringstream rest(line.substr(close + 1));
  std::string field;
  unsigned long flags = 0;
  int cpu = -1;
  for (int n = 3; rest >> field; ++n) {
    if (n == 9) flags = std::strtoul(field.c_str(), nullptr, 10);
    if (n == 39) {
      cpu = std::atoi(field.c_str());
      break;
    }
  }
  constexpr unsigned long kPfKthread = 0x00200000;  // include/linux/sched.h
  if (cpu < 0 || (flags & kPfKthread) != 0) return std::nullopt;
  return std::make_pair(line.substr(open + 1, close - open - 1), cpu);
}

IsolationFacts ReadIsolationFacts(const std::vector<int>& own) {
  IsolationFacts f;
  f.isolated = ReadFile("/sys/devices/system/cpu/isolated");
  f.nohz_full = ReadFile("/sys/devices/system/cpu/nohz_full", &f.nohz_full_known);
  for (const auto& e : Entries("/proc/irq")) {
    std::error_code ec;
    if (!std::filesystem::is_directory(e, ec)) continue;
    bool found = false;
    std::string list = ReadFile((e / "smp_affinity_list").string(), &found);
    if (found) f.irq_affinities.push_back(std::move(list));
  }
  for (const auto& p : Entries("/proc")) {
    const std::string pid = p.filename().string();
    if (pid.empty() || pid.find_first_not_of("0123456789") != std::string::npos) continue;
    if (std::find(own.begin(), own.end(), std::atoi(pid.c_str())) != own.end()) continue;
    for (const auto& t : Entries(p / "task")) {
      if (auto task = ParseTaskStat(ReadFile((t / "stat").string()))) {
        f.tasks_by_cpu[task->second].push_back(task->first);
      }
    }
  }
  return f;
}

IsolationReport ReportIsolation(const IsolationFacts& facts,
                                const std::vector<SpinningThread>& threads) {
  IsolationReport r;
  const auto isolated = KernelList(facts.isolated);
  const auto nohz = KernelList(facts.nohz_full);
  std::map<int, std::vector<std::string>> by_cpu;  // pinned spinners per core
  std::vector<std::string> unpinned;
  for (const SpinningThread& t : threads) {
    if (t.cpu < 0) {
      unpinned.push_back(t.name);
    } else {
      by_cpu[t.cpu].push_back(t.name);
    }
  }
  for (const auto& [cpu, names] : by_cpu) {
    size_t irqs = 0, readable = 0;
    for (const std::string& text : facts.irq_affinities) {
      const auto list = KernelList(text);
      if (!list) continue;
      ++readable;
      if (Contains(list, cpu)) ++irqs;
    }
    std::string who;
    for (const std::string& n : names) who += (who.empty() ? "" : " and ") + n;
    const bool iso = Contains(isolated, cpu);
    const bool tickless = Contains(nohz, cpu);
    std::string line =
        "CPU " + std::to_string(cpu) + " (" + who +
        "): " + (isolated ? (iso ? "in isolcpus" : "not in isolcpus") : "isolcpus unknown") + ", " +
        (!facts.nohz_full_known ? "no nohz_full support"
         : nohz                 ? (tickless ? "nohz_full" : "not nohz_full")
                                : "nohz_full unknown") +
        ", " + std::to_string(irqs) + " of " + std::to_string(readable) +
        " IRQs may be delivered there";
    if (auto others = facts.tasks_by_cpu.find(cpu); others != facts.tasks_by_cpu.end()) {
      std::vector<std::string> seen = others->second;
      std::sort(seen.begin(), seen.end());
      seen.erase(std::unique(seen.begin(), seen.end()), seen.end());
      std::string some;
      for (size_t k = 0; k < std::min<size_t>(seen.size(), 3); ++k) {
        some += (k == 0 ? "" : ", ") + seen[k];
      }
      if (seen.size() > 3) some += ", ...";
      line += ", " + std::to_string(others->second.size()) + " other task(s) last ran there (" +
              some + ")";
    }
    if (!iso || irqs > 0) line += " (docs/tuning.md says how to give it the core alone)";
    r.lines.push_back(line);
    if (names.size() > 1) {
      r.warnings.push_back("CPU " + std::to_string(cpu) + " is shared by " + who +
                           ": spinning threads on one core take turns by scheduler ticks");
    }
  }
  for (const std::string& name : unpinned) {
    if (by_cpu.empty()) {
      r.warnings.push_back(name + " not pinned: it spins wherever the scheduler puts it");
      continue;
    }
    std::vector<int> pinned;
    for (const auto& entry : by_cpu) pinned.push_back(entry.first);
    r.warnings.push_back(name + " not pinned: may spin on CPU " + FormatCpuList(pinned) +
                         " beside the pinned threads there");
  }
  return r;
}

}  // namespace xdpfwd
