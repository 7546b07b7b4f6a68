// Active health checks, for rules with [check=DURATION] (docs/configuration.md): from a thread
// of the control process, off the data path, each backend of such a rule gets a TCP connect
// every interval (a PROXY v2 LOCAL header, or v1's UNKNOWN line, first where the rule sends
// PROXY). `fall` failed checks in a row mark a backend down, `rise` passed checks in a row up
// again; the verdicts go to the HealthBoard every fast-path worker and kernel-path thread picks
// from, so a dead backend is left out before any client's handshake meets it. The checker also
// keeps the operator's word on each backend (ready, drain, maint; its weight) and reads the
// board's per-backend counters for `show backends` and the metrics.
#pragma once

#include <netinet/in.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "forwarder/health_board.h"
#include "forwarder/rules.h"
#include "os/result.h"
#include "os/unique_fd.h"

namespace xdpfwd {

class HealthChecker {
 public:
  // An operator's say over one backend (`set backend`, [state=]): rules.h's BackendAdmin.
  using Admin = BackendAdmin;
  static const char* AdminName(Admin a) { return BackendAdminName(a).data(); }

  // The rules on the board: TCP rules with several backends, checks, or a backend's [state=].
  static bool Covers(const Rule& rule);

  // What `show backends` and the metrics show of one backend.
  struct BackendView {
    uint32_t rule_id = 0;
    std::string backend;  // "10.0.0.2:9001"
    Admin admin = Admin::kReady;
    bool checked = false;  // the rule has [check=]
    bool up = true;        // the checks' verdict (up when unchecked)
    uint64_t checks = 0, failures = 0;
    std::string last_error;  // of the last failed check
    uint32_t weight = 1;     // as the pickers use it now (the file's, or `set weight`'s)
    bool backup = false;
    // Both paths' counts (health_board.h says when each moves).
    uint64_t current = 0, sessions = 0, connect_failures = 0;
    uint64_t bytes_to_backend = 0, bytes_from_backend = 0;
  };

  // Writes to `board`, which must outlive the checker. `backend_sources` (--backend-source):
  // a check of a backend of a rule without src= comes from each of those of its family in turn,
  // as the backend legs do, so that it tries the path clients' connections take.
  static Result<std::unique_ptr<HealthChecker>> Start(HealthBoard& board,
                                                      std::vector<IpAddress> backend_sources = {});
  ~HealthChecker();  // stops its thread; the board keeps the last verdicts
  HealthChecker(const HealthChecker&) = delete;
  HealthChecker& operator=(const HealthChecker&) = delete;

  // The rules the board covers from now on (a reload): a rule kept by id keeps its backends'
  // state and weights (until ApplyFile), a new one starts with every backend up and with the
  // file's weights and states, a removed one's board entry goes. Call before the paths serve
  // `rules`, so that their pickers find the entries.
  void SetRules(const std::vector<Rule>& rules);
  // Once a reload has taken: the file's weights and states for every rule, kept ones too. The
  // file wins over what `set backend` and `set weight` said at run time (as HAProxy without a
  // server-state file); each backend whose state moves says so in the log.
  void ApplyFile(const std::vector<Rule>& rules);
  // `set backend RULE ADDR:PORT ready|drain|maint`; an error names what is not there.
  Result<void> SetAdmin(uint32_t rule_id, const std::string& backend, Admin admin);
  // `set weight RULE ADDR:PORT N`, 1..kMaxWeight.
  Result<void> SetWeight(uint32_t rule_id, const std::string& backend, uint32_t weight);
  std::vector<BackendView> View() const;

 private:
  using Clock = std::chrono::steady_clock;
  struct Checked;
  struct Check {  // one backend's
    Checked* owner = nullptr;
    size_t index = 0;
    SocketAddress address;
    UniqueFd fd;  // a check under way
    uint64_t token = 0;
    Clock::time_point started{}, next{};
    uint32_t failed_in_a_row = 0, passed_in_a_row = 0;
    BackendView view;
  };
  struct Checked {  // one rule's
    Rule rule;
    HealthBoard::Entry* entry = nullptr;
    std::vector<Check> backends;
  };

  HealthChecker(HealthBoard& board, std::vector<IpAddress> backend_sources)
      : board_(board), backend_sources_(std::move(backend_sources)) {}
  // Binds a check's socket where the backend legs would be: the rule's src=, else the next
  // --backend-source (IPv4 backends); an error says which address failed.
  Result<void> BindSource(int fd, const Check& c);
  void Run();
  void Begin(Check& check, Clock::time_point now);
  void End(Check& check, bool passed, const std::string& why, Clock::time_point now);
  // The verdicts and states to the board; the weights, and a new generation for the pickers.
  void Publish(Checked& checked);
  void PublishWeights(Checked& checked);
  // The backend `backend` (ADDR:PORT) of rule `rule_id`, or an error naming what is not there.
  Result<Check*> Find(uint32_t rule_id, const std::string& backend);
  void SetAdminLocked(Check& c, Admin admin, const char* by);
  static std::chrono::milliseconds CheckTimeout(const Rule& rule);

  HealthBoard& board_;
  const std::vector<IpAddress> backend_sources_;
  size_t next_source_ = 0;  // the checker thread's
  UniqueFd epoll_;
  mutable std::mutex mu_;  // everything below
  std::vector<std::unique_ptr<Checked>> rules_;
  std::unordered_map<uint64_t, Check*> in_flight_;  // by token: events never name a freed check
  uint64_t next_token_ = 1;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace xdpfwd
