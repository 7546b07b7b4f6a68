// Process-wide logging for set-up and control paths (never the per-packet path): one line per
// event on stderr, prefixed "xdpfwd:", with a verbosity switch for detail.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string_view>

namespace xdpfwd {

inline int& LogVerbosity() {
  static int level = 0;
  return level;
}

inline void Log(std::string_view line) {
  std::fprintf(stderr, "xdpfwd: %.*s\n", static_cast<int>(line.size()), line.data());
}

// Logged only with -v (verbosity >= 1).
inline void LogDetail(std::string_view line) {
  if (LogVerbosity() >= 1) Log(line);
}

// At most one line per interval from a loop that may meet the same event thousands of times a
// second (a dead backend under load): the events held back are counted for the next line.
class LogThrottle {
 public:
  explicit LogThrottle(uint64_t interval_ms) : interval_ms_(interval_ms) {}
  // Counts one event at `now_ms`; true when its line may go out now, with `held_back` set to
  // the events counted since the last line that went out.
  bool Count(uint64_t now_ms, uint64_t& held_back) {
    ++pending_;
    if (logged_once_ && now_ms < next_ms_) return false;
    held_back = pending_ - 1;
    pending_ = 0;
    logged_once_ = true;
    next_ms_ = now_ms + interval_ms_;
    return true;
  }

 private:
  uint64_t interval_ms_;
  uint64_t next_ms_ = 0;
  uint64_t pending_ = 0;
  bool logged_once_ = false;
};

}  // namespace xdpfwd
