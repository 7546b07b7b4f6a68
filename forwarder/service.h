// The xdpfwd process's one owner: starts what a configuration needs (the fast path, the
// kernel path, the datagram relay, the access log, the pid file), serves a new configuration
// on SIGHUP without dropping a connection, drains on SIGTERM, and stops. The control loop
// (forwarder/control_loop.h) takes signals and commands and calls it; nothing else starts or
// stops a path.
#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "forwarder/datagram_path.h"
#include "forwarder/fast_path.h"
#include "forwarder/health_checker.h"
#include "forwarder/kernel_path.h"
#include "forwarder/options.h"
#include "forwarder/rules.h"
#include "forwarder/service_report.h"
#include "forwarder/session_log.h"
#include "os/result.h"
#include "os/shared_memory.h"

namespace xdpfwd {

class PidFile;

// What a reload changed, by rule (Rule::id says which rules are the same).
struct ReloadSummary {
  int kept = 0, changed = 0, added = 0, removed = 0;
  std::vector<std::string> notes;  // what the reload could not do as asked, and why
  std::string Format() const;      // "kept 2, changed 1, added 0, removed 1"
};

class Service {
 public:
  // Starts every path the configuration's rules need; errors say which path and why (the
  // caller exits 1).
  static Result<std::unique_ptr<Service>> Start(const Options& options, Config config);
  ~Service();  // Stop()
  Service(const Service&) = delete;
  Service& operator=(const Service&) = delete;

  std::string ReadyLine() const;  // "path=auto rules: ...; fast path on ...; ..."
  void LogIsolation();            // whether each spinning thread has its core to itself
  void PrintStats() const;        // every path's counters (SIGUSR1)
  void ReopenLog();               // logrotate's SIGHUP
  // Everything the paths publish now, for the control socket and the metrics: one round of
  // requests to the fast path's workers (bounded; forwarder/fast_path.h's Snapshot). `flows`:
  // whether the fast path's flow maps' entries are counted (its `flows` gauge: the kernel's count,
  // or a walk where the kernel gives none); a reader that does not show them passes kNotCounted.
  ServiceReport Report(FastPath::Flows flows = FastPath::Flows::kCounted) const;
  // The fast path's flight recorders (a dead worker's too) as a Perfetto trace written to
  // `path` (absolute); the answer says what it holds. An error when no recorder runs.
  Result<std::string> DumpTrace(const std::string& path) const;
  // The fast path's flight recorders as they are now (empty: none runs, or it is off).
  std::vector<WorkerRecording> Recordings() const;
  // `show sess`: every open connection of both TCP paths, with `notes` on what is missing.
  // Ids are unique in the process: a kernel-path connection's has bit kKernelSessionBit set.
  std::vector<ConnectionRow> Connections(std::vector<std::string>& notes) const;
  // `shutdown session ID`: resets that connection's legs.
  Result<void> ShutdownSession(uint64_t id) const;
  static constexpr uint64_t kKernelSessionBit = uint64_t{1} << 47;
  // `show backends`: the backends of every rule on the board (several backends, checks or a
  // state): state, checks' verdict, weight and counters.
  std::vector<HealthChecker::BackendView> CheckedBackends() const;
  // `set backend RULE ADDR:PORT ready|drain|maint`.
  Result<void> SetBackendAdmin(uint32_t rule_id, const std::string& backend,
                               HealthChecker::Admin admin);
  // `set weight RULE ADDR:PORT N`.
  Result<void> SetBackendWeight(uint32_t rule_id, const std::string& backend, uint32_t weight);

  // Serves `next` from now on. Rules whose text is unchanged keep their listeners and
  // connections; removed rules stop accepting while their connections finish; changed and added
  // rules take new connections (docs/operations.md says which path serves them). A
  // configuration that cannot be served leaves the running one in place and says why.
  Result<ReloadSummary> Reload(Config next);

  // SIGTERM: no path accepts any more; returns the connections still open. The caller waits
  // for OpenConnections() to reach 0 (or its limit), then calls Stop(), which resets the rest.
  uint64_t BeginDrain();
  bool draining() const { return draining_; }
  uint64_t OpenConnections() const;
  void Stop();  // resets what is open, detaches XDP; idempotent

 private:
  explicit Service(const Options& options);
  Result<void> StartKernelPath(const std::vector<Rule>& stream_rules);
  Result<void> StartDatagramPath(const std::vector<Rule>& rules);
  void KeepOffWorkerCpus();

  const Options options_;
  Config running_;
  uint32_t next_rule_id_ = 0;     // ids are never reused: an id names one version of a rule
  std::vector<Rule> fast_rules_;  // what the fast path's steering still takes
  std::vector<AccessPattern> fast_access_;  // the global lists the fast path's workers hold
  std::unique_ptr<SessionLog> log_;
  // The active health checks: their verdicts in memory the fast path's workers inherit (made
  // before they fork, kept past every path), and the checker that writes them.
  SharedMemory health_memory_;
  HealthBoard* health_ = nullptr;
  std::unique_ptr<HealthChecker> checker_;
  std::unique_ptr<FastPath> fast_;
  std::unique_ptr<KernelPath> kernel_;
  std::unique_ptr<DatagramPath> datagram_;
  std::unique_ptr<PidFile> pid_file_;
  bool stopped_ = false;
  bool draining_ = false;
  std::vector<std::string> isolation_warnings_;  // LogIsolation's, for Report()
  std::string control_cpus_note_;                // where KeepOffWorkerCpus put the rest
  const int64_t start_time_unix_ms_;
  const std::chrono::steady_clock::time_point started_;
};

}  // namespace xdpfwd
