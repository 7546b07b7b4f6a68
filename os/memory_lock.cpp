// Locking a process's memory and reading what is locked (see memory_lock.h).
#include "os/memory_lock.h"

#include <malloc.h>
#include <sys/mman.h>

#include <charconv>
#include <cstdlib>
#include <fstream>
#include <limits>
#include <sstream>
#include <string>

namespace xdpfwd {
namespace {

// Writes a byte every page of kStackTouchBytes below the caller's frame, from the top down, as
// a growing stack is touched. noinline: the array is this frame's, below the caller's, which is
// what must be mapped.
[[gnu::noinline]] void TouchStack() {
  [[maybe_unused]] volatile char area[kStackTouchBytes];  // volatile: each write stays
  for (size_t at = 4096; at <= kStackTouchBytes; at += 4096) area[kStackTouchBytes - at] = 0;
}

}  // namespace

Result<void> LockAllMemory() {
  TouchStack();
  // glibc's malloc: a block of 128 KiB or more would be an mmap of its own, mapped anew at each
  // allocation; a free heap top of 128 KiB or more would go back to the kernel. Both off, and
  // the reserve allocated and freed: it stays at the top of the heap, mapped, for the lock.
  mallopt(M_MMAP_MAX, 0);
  mallopt(M_TRIM_THRESHOLD, std::numeric_limits<int>::max());
  mallopt(M_TOP_PAD, static_cast<int>(kHeapGrowthBytes));
  void* volatile reserve = malloc(kHeapReserveBytes);  // volatile: the pair is not optimised out
  free(reserve);
  if (mlockall(MCL_CURRENT | MCL_FUTURE) != 0) return SystemError("mlockall");
  return {};
}

std::optional<uint64_t> StatusBytes(std::string_view status, std::string_view field) {
  for (size_t at = 0; at < status.size();) {
    size_t end = status.find('\n', at);
    if (end == std::string_view::npos) end = status.size();
    const std::string_view line = status.substr(at, end - at);
    at = end + 1;
    if (line.size() <= field.size() || line.substr(0, field.size()) != field ||
        line[field.size()] != ':') {
      continue;
    }
    const size_t digits = line.find_first_of("0123456789", field.size());
    if (digits == std::string_view::npos) return std::nullopt;
    uint64_t kib = 0;
    const auto r = std::from_chars(line.data() + digits, line.data() + line.size(), kib);
    if (r.ec != std::errc{} || line.substr(static_cast<size_t>(r.ptr - line.data())) != " kB") {
      return std::nullopt;
    }
    return kib * 1024;
  }
  return std::nullopt;
}

std::optional<uint64_t> LockedBytes(pid_t pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/status");
  if (!f) return std::nullopt;
  std::ostringstream text;
  text << f.rdbuf();
  return StatusBytes(text.str(), "VmLck");
}

}  // namespace xdpfwd
