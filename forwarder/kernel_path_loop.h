// One thread of the kernel-socket path: an epoll loop with its own SO_REUSEPORT listener per
// rule, the connections it accepted, their connect and idle deadlines, and its pipe and buffer
// pools. Nothing here is shared with other loops except the path-wide connection count.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <list>
#include <memory>
#include <vector>

#include "forwarder/kernel_path.h"
#include "forwarder/kernel_path_backend.h"
#include "forwarder/kernel_path_pump.h"
#include "os/log.h"
#include "os/result.h"
#include "os/unique_fd.h"

namespace xdpfwd::kernel_path {

class Loop {
 public:
  // Creates the epoll set, the wake-up eventfd and a listener for every rule. `config`,
  // `open_connections` and `counters` must outlive the loop; the counters may also outlive it,
  // so totals survive Stop().
  static Result<std::unique_ptr<Loop>> Create(const KernelPathConfig& config,
                                              std::atomic<uint32_t>& open_connections,
                                              PathCounters& counters, BackendConnector connector);
  ~Loop();
  Loop(const Loop&) = delete;
  Loop& operator=(const Loop&) = delete;

  // Serves until RequestStop(), then resets every connection. Call once, on the loop's own
  // thread. Destroying the loop closes every descriptor it owns.
  void Run();
  // Any thread, while the loop exists.
  void RequestStop();

 private:
  using Clock = std::chrono::steady_clock;
  struct Listener {
    UniqueFd fd;
    const Rule* rule = nullptr;
  };
  struct Connection;
  using ConnectionList = std::list<Connection>;
  // Why a connection ended; each has its counter.
  enum class End : uint8_t {
    kCompleted,
    kClientReset,
    kBackendReset,
    kBackendRefused,
    kBackendTimeout,
    kBackendError,
    kBackendNoPort,  // connect: EADDRNOTAVAIL, no local port left (counted by the path)
    kIdleTimeout,
    kStallTimeout,  // a peer acknowledged nothing for the stall timeout (TCP_USER_TIMEOUT)
    kError,
    kStopped,
  };

  Loop(const KernelPathConfig& config, std::atomic<uint32_t>& open_connections,
       PathCounters& counters, BackendConnector connector);
  Result<void> Open();

  void OnWake();
  void OnListener(Listener& listener);
  bool ShedConnection(Listener& listener);  // true: a waiting client was reset
  void StartConnection(UniqueFd client, const Rule& rule);
  void OnLegEvent(Connection& c, bool client_leg, uint32_t events);
  void OnConnected(Connection& c);
  void Relay(Connection& c);
  void Finish(Connection& c, End why);
  void RunQueuedTurns();
  void ExpireDeadlines();
  void ReportConnectTimeout(const Connection& c);
  int NextTimeoutMs() const;
  void Touch(Connection& c);
  void ResetEverything();

  const KernelPathConfig& config_;
  std::atomic<uint32_t>& open_connections_;
  std::atomic<bool> stop_{false};
  UniqueFd epoll_, wake_;
  // Kept open so that, when accept fails with EMFILE, closing it frees one descriptor to
  // accept and reset the waiting client (otherwise the level-triggered listener would spin).
  UniqueFd spare_fd_;
  bool warned_fd_limit_ = false;
  LogThrottle connect_timeout_log_{1000};
  std::vector<std::unique_ptr<Listener>> listeners_;

  // Connections live in these lists and move between them with splice (no allocation, no
  // address change). connecting_ is ordered by connect start, relaying_ by last activity, so
  // the front of each is the next deadline. ended_ holds connections finished during this
  // iteration until its epoll events can no longer name them.
  ConnectionList connecting_, relaying_, ended_;
  std::vector<Connection*> turns_;          // spent their budget; continue next iteration
  std::vector<Connection*> turns_running_;  // turns_ being served (kept for its capacity)
  Clock::time_point now_;

  PathCounters& counters_;
  PipePool pipes_;
  BufferPool buffers_;
  PumpContext pump_;
  BackendConnector connector_;
};

}  // namespace xdpfwd::kernel_path
