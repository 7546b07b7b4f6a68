// CPU list parsing and formatting; see cpu_list.h.
#include "os/cpu_list.h"
#include "os/parse_number.h"

#include <algorithm>
#include <charconv>
#include <fstream>
#include <sstream>

namespace xdpfwd {
namespace {

std::string_view Trim(std::string_view s) {
  const auto space = [](char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; };
  while (!s.empty() && space(s.front())) s.remove_prefix(1);
  while (!s.empty() && space(s.back())) s.remove_suffix(1);
  return s;
}

Result<int> ParseCpu(std::string_view item, int max_cpu) {
  const std::optional<int> number = ParseDecimal<int>(item);
  if (!number) return Error{{}, "'" + std::string(item) + "' is not a CPU number"};
  const int cpu = *number;
  if (cpu > max_cpu) {
    return Error{{},
                 "CPU " + std::to_string(cpu) + " does not exist (the highest is " +
                     std::to_string(max_cpu) + ")"};
  }
  return cpu;
}

}  // namespace

Result<std::vector<int>> ParseCpuList(std::string_view text, int max_cpu) {
  text = Trim(text);
  std::vector<int> cpus;
  if (text.empty()) return cpus;
  for (std::string_view rest = text;;) {
    const size_t comma = rest.find(',');
    const std::string_view item = Trim(rest.substr(0, comma));
    const size_t dash = item.find('-');
    auto lo = ParseCpu(item.substr(0, dash), max_cpu);
    if (!lo) return lo.error();
    int hi = *lo;
    if (dash != std::string_view::npos) {
      auto h = ParseCpu(item.substr(dash + 1), max_cpu);
      if (!h) return h.error();
      if (*h < *lo) {
        return Error{{}, "'" + std::string(item) + "' is a reversed range"};
      }
      hi = *h;
    }
    for (int c = *lo; c <= hi; ++c) cpus.push_back(c);
    if (comma == std::string_view::npos) break;
    rest.remove_prefix(comma + 1);
  }
  std::sort(cpus.begin(), cpus.end());
  if (auto twice = std::adjacent_find(cpus.begin(), cpus.end()); twice != cpus.end()) {
    return Error{{}, "CPU " + std::to_string(*twice) + " is given twice"};
  }
  return cpus;
}

std::string FormatCpuList(const std::vector<int>& cpus) {
  if (cpus.empty()) return "none";
  std::vector<int> sorted = cpus;
  std::sort(sorted.begin(), sorted.end());
  std::string out;
  for (size_t i = 0; i < sorted.size();) {
    size_t j = i;
    while (j + 1 < sorted.size() && sorted[j + 1] == sorted[j] + 1) ++j;
    if (!out.empty()) out += ',';
    out += std::to_string(sorted[i]);
    if (j > i) out += "-" + std::to_string(sorted[j]);
    i = j + 1;
  }
  return out;
}

std::map<int, CpuTimes> ParseCpuTimes(std::string_view text) {
  std::map<int, CpuTimes> out;
  while (!text.empty()) {
    const size_t eol = text.find('\n');
    std::string_view line = text.substr(0, eol);
    text = eol == std::string_view::npos ? std::string_view() : text.substr(eol + 1);
    if (line.size() < 4 || line.substr(0, 3) != "cpu" || line[3] < '0' || line[3] > '9') continue;
    line.remove_prefix(3);
    int cpu = -1;
    auto [p, ec] = std::from_chars(line.data(), line.data() + line.size(), cpu);
    if (ec != std::errc()) continue;
    // user nice system idle iowait irq softirq steal ...
    CpuTimes t;
    const char* end = line.data() + line.size();
    for (int field = 0; p < end; ++field) {
      while (p < end && *p == ' ') ++p;
      uint64_t v = 0;
      auto r = std::from_chars(p, end, v);
      if (r.ec != std::errc()) break;
      p = r.ptr;
      t.total += v;
      if (field != 3 && field != 4) t.busy += v;
    }
    out[cpu] = t;
  }
  return out;
}

std::map<int, CpuTimes> ReadCpuTimes() {
  std::ifstream f("/proc/stat");
  std::stringstream text;
  text << f.rdbuf();
  return ParseCpuTimes(text.str());
}

std::vector<int> LeastBusyCpus(const std::vector<int>& allowed, size_t n,
                               const std::map<int, CpuTimes>& before,
                               const std::map<int, CpuTimes>& after) {
  std::vector<std::pair<double, int>> ranked;
  for (int cpu : allowed) {
    double busy = 1.0;
    auto b = before.find(cpu), a = after.find(cpu);
    if (b != before.end() && a != after.end() && a->second.total > b->second.total) {
      busy = static_cast<double>(a->second.busy - b->second.busy) /
             static_cast<double>(a->second.total - b->second.total);
    }
    ranked.push_back({busy, cpu});
  }
  std::sort(ranked.begin(), ranked.end());
  std::vector<int> out;
  for (size_t i = 0; i < std::min(n, ranked.size()); ++i) out.push_back(ranked[i].second);
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace xdpfwd
