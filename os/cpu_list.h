// CPU lists as the kernel writes them ("0-3,8,10-11": /sys/devices/system/cpu/isolated,
// nohz_full, /proc/irq/N/smp_affinity_list) and as --cpus takes them.
#pragma once

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

}  // namespace xdpfwd
