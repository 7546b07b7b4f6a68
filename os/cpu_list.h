// CPU lists as the kernel writes them ("0-3,8,10-11": /sys/devices/system/cpu/isolated,
// nohz_full, /proc/irq/N/smp_affinity_list) and as --cpus takes them.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "os/result.h"

namespace xdpfwd {

// Comma-separated CPUs and LOW-HIGH ranges, ascending and distinct on return. Surrounding
// whitespace (the kernel's trailing newline) is ignored; an empty text is an empty list.
// Refused, with the item named (the caller names the option or file): a non-number, a reversed
// range, a CPU given twice, a CPU above `max_cpu`.
Result<std::vector<int>> ParseCpuList(std::string_view text, int max_cpu = 4095);

// The shortest list form: {0,1,2,3,8} -> "0-3,8"; {} -> "none".
std::string FormatCpuList(const std::vector<int>& cpus);

// Busy and total time of each CPU (clock ticks), from /proc/stat's "cpuN ..." lines: busy is
// everything but idle and iowait.
struct CpuTimes {
  uint64_t busy = 0;
  uint64_t total = 0;
};
std::map<int, CpuTimes> ParseCpuTimes(std::string_view proc_stat);
std::map<int, CpuTimes> ReadCpuTimes();  // empty if /proc/stat cannot be read

// The `n` CPUs of `allowed` that were least busy between two readings, ascending (ties go to
// the lower number; a CPU missing from a reading counts as fully busy). Where fast-path
// workers go when the user names no CPUs.
std::vector<int> LeastBusyCpus(const std::vector<int>& allowed, size_t n,
                               const std::map<int, CpuTimes>& before,
                               const std::map<int, CpuTimes>& after);

}  // namespace xdpfwd
