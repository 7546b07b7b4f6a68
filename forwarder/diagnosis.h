// What xdpfwd can tell is wrong with its host and its peers, from the fast-path workers'
// counters a few seconds apart: a worker's CPU shared with other tasks (it was preempted), page
// faults on a worker after start, a worker whose memory lock was refused, AF_XDP sockets that
// dropped packets, lwIP's pools run dry (segments for send queues, pool pbufs for out-of-order
// data), a backend or clients whose small segments wait for our delayed ACKs (Nagle on the peer).
// Each warning says what was seen and the fix; the control loop logs it, `show info` lists it,
// /metrics counts it.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "forwarder/service_report.h"

namespace xdpfwd {

// Every kind of warning, as /metrics lists them (each with a count, 0 included).
inline constexpr const char* kHostWarningKinds[] = {
    "worker_preempted",    "worker_page_faults",  "worker_memory_unlocked", "xsk_drops",
    "lwip_pool_exhausted", "backend_nagle_stall", "client_nagle_stall"};

struct HostWarning {
  std::string kind;   // one of kHostWarningKinds
  int worker = -1;    // -1: not one worker's
  std::string text;   // what was seen, and the fix
  int64_t rule = -1;  // -1: not one rule's
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
  // The Nagle peers of one path's rules (`path`: "fast", "kernel").
  void CheckPeers(const ServiceReport& now, const std::vector<RuleTotals>& rules,
                  const std::vector<RuleTotals>& last_rules, const char* path,
                  const std::string& over, std::chrono::steady_clock::time_point t,
                  std::vector<HostWarning>& fresh);

  std::map<std::tuple<std::string, int, int64_t>, Seen> seen_;
  std::map<std::string, uint64_t> raised_;
};

}  // namespace xdpfwd
