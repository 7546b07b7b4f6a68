// Active health checks, for rules with [check=DURATION] (docs/configuration.md): from a thread
// of the control process, off the data path, each backend of such a rule gets a TCP connect
// every interval (a PROXY v2 LOCAL header, or v1's UNKNOWN line, first where the rule sends
// PROXY). `fall` failed checks in a row mark a backend down, `rise` passed checks in a row up
// again; the verdicts go to the HealthBoard every fast-path worker and kernel-path thread picks
// from, so a dead backend is left out before any client's handshake meets it.
#pragma once

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
  // An operator's say over one backend (`set backend`): ready takes new connections; drain
  // and maint take none (open ones carry on), and maint also stops its checks.
  enum class Admin : uint8_t { kReady, kDrain, kMaint };
  static const char* AdminName(Admin a);

  // What `show backends` shows of one backend.
  struct BackendView {
    uint32_t rule_id = 0;
    std::string backend;  // "10.0.0.2:9001"
    Admin admin = Admin::kReady;
    bool checked = false;  // the rule has [check=]
    bool up = true;        // the checks' verdict (up when unchecked)
    uint64_t checks = 0, failures = 0;
    std::string last_error;  // of the last failed check
  };

  // Writes to `board`, which must outlive the checker.
  static Result<std::unique_ptr<HealthChecker>> Start(HealthBoard& board);
  ~HealthChecker();  // stops its thread; the board keeps the last verdicts
  HealthChecker(const HealthChecker&) = delete;
  HealthChecker& operator=(const HealthChecker&) = delete;

  // The rules with several backends or with checks from now on (a reload): a rule kept by id
  // keeps its backends' state, a new one starts with every backend up and ready, a removed
  // one's board entry goes. Call before the paths serve `rules`, so that their pickers find
  // the entries.
  void SetRules(const std::vector<Rule>& rules);
  // `set backend RULE ADDR:PORT ready|drain|maint`; an error names what is not there.
  Result<void> SetAdmin(uint32_t rule_id, const std::string& backend, Admin admin);
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
    std::atomic<uint64_t>* bits = nullptr;
    std::vector<Check> backends;
  };

  explicit HealthChecker(HealthBoard& board) : board_(board) {}
  void Run();
  void Begin(Check& check, Clock::time_point now);
  void End(Check& check, bool passed, const std::string& why, Clock::time_point now);
  void Publish(Checked& checked);
  static std::chrono::milliseconds CheckTimeout(const Rule& rule);

  HealthBoard& board_;
  UniqueFd epoll_;
  mutable std::mutex mu_;  // everything below
  std::vector<std::unique_ptr<Checked>> rules_;
  std::unordered_map<uint64_t, Check*> in_flight_;  // by token: events never name a freed check
  uint64_t next_token_ = 1;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace xdpfwd
