// What the service shows of itself at one moment: every path's counters, each fast-path
// worker's, the steering program's decisions, the access log's. Service::Report() fills it
// from what the paths publish; forwarder/exposition.h renders it (metrics, JSON, the control
// socket's tables), so the renderers can be tested without a running service.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "forwarder/datagram_path.h"
#include "forwarder/fast_path.h"
#include "forwarder/health_checker.h"
#include "forwarder/kernel_path.h"
#include "forwarder/session_log.h"

namespace xdpfwd {

struct WorkerReport {
  uint32_t index = 0;
  int pid = -1;  // -1: being restarted
  int cpu = -1;  // -1: not pinned
  // Memory the kernel keeps resident for it (VmLck of /proc/PID/status, read by the control
  // process): all it maps with --tune memory-lock=on, its AF_XDP frame areas alone with off.
  uint64_t locked_bytes = 0;
  int lock_error = 0;  // mlockall's errno where the lock was refused (it runs unlocked); 0: none
  FastPathSnapshot counters;
};

struct SteerReasonCount {
  std::string reason;  // ReasonName's
  uint64_t packets = 0;
  uint64_t bytes = 0;
};

struct RuleReport {
  uint32_t id = 0;
  std::string listen, backend;  // "10.0.1.1:9000"
  std::string protocol;         // "tcp", "udp -> tcp", ...
  std::string path;             // which path takes its new connections: fast, kernel, datagram
};

struct ServiceReport {
  std::string version;
  int pid = 0;
  int64_t start_time_unix_ms = 0;
  uint64_t uptime_ms = 0;
  std::string path_choice;  // --path: auto, xdp, kernel
  std::string config_file;  // empty: the rule came from the command line
  bool draining = false;
  uint64_t reloads = 0, reloads_refused = 0;
  std::vector<RuleReport> rules;
  // The backends of the rules on the health board (several backends, checks or a state).
  std::vector<HealthChecker::BackendView> backends;
  std::vector<std::string> warnings;                // each says what is wrong and the fix
  std::map<std::string, uint64_t> warnings_raised;  // the host diagnosis's, by kind

  std::optional<FastPathSnapshot> fast;  // summed over workers (dead ones' counters included)
  std::string fast_description;
  std::vector<WorkerReport> workers;
  std::vector<SteerReasonCount> steer;  // every reason, in code order

  std::optional<KernelPathTotals> kernel;
  int kernel_threads = 0;
  bool kernel_busy_poll = false;

  std::optional<DatagramPathTotals> datagram;

  std::optional<SessionLog::Stats> access_log;
  std::string access_log_file;
};

}  // namespace xdpfwd
