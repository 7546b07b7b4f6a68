// What xdpfwd can tell is wrong with its host, from the fast-path workers' counters a few
// seconds apart: a worker's CPU shared with other tasks (it was preempted), page faults on a
// worker after start, AF_XDP sockets that dropped packets. Each warning says what was seen and
// the fix; the control loop logs it, `show info` lists it, /metrics counts it.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "forwarder/service_report.h"

namespace xdpfwd {

struct HostWarning {
  std::string kind;  // "worker_preempted", "worker_page_faults", "xsk_drops"
  int worker = -1;
  std::string text;  // what was seen, and the fix
};

class HostDiagnosis {
 public:
  // A warning stays in `active()` this long after the interval that last raised it.
  static constexpr std::chrono::seconds kKeep{60};

  // Compares `now` with the report of the previous call (the first call only remembers it).
  // Returns the warnings raised in this interval that were not active already: the ones to log.
  std::vector<HostWarning> Check(const ServiceReport& now, std::chrono::steady_clock::time_point t);

  // Warnings raised within kKeep of `t`, the latest text of each (kind, worker).
  std::vector<HostWarning> active(std::chrono::steady_clock::time_point t) const;
  // Warnings ever raised, by kind (a warning active for a minute counts once per interval).
  const std::map<std::string, uint64_t>& raised() const { return raised_; }

 private:
  struct Seen {
    HostWarning warning;
    std::chrono::steady_clock::time_point last;
  };
  void Raise(HostWarning w, std::chrono::steady_clock::time_point t,
             std::vector<HostWarning>& fresh);

  std::optional<ServiceReport> last_;
  std::chrono::steady_clock::time_point last_time_;
  std::map<std::pair<std::string, int>, Seen> seen_;
  std::map<std::string, uint64_t> raised_;
};

}  // namespace xdpfwd
