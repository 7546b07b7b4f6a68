// Process-wide logging for set-up and control paths (never the per-packet path): one line per
// event on stderr, prefixed "xdpfwd:", with a verbosity switch for detail.
#pragma once

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

}  // namespace xdpfwd
