// The access log: one line when a session opens and one when it ends, in rinetd's two formats
// (tab-separated, or logcommon's web-server style), byte for byte. A path hands SessionEvents
// to a SessionLog; the lines are formatted and written off the data path.
#pragma once

#include <sys/socket.h>

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "forwarder/rules.h"
#include "os/result.h"
#include "os/unique_fd.h"

namespace xdpfwd {

// rinetd's result words (rinetd.8, src/rinetd.c). "local" is the backend side, "remote" the
// client, as rinetd names them.
enum class SessionResult : uint8_t {
  kOpened,              // "opened": the backend leg is on its way
  kLocalClosedFirst,    // "done-local-closed": the backend ended first
  kRemoteClosedFirst,   // "done-remote-closed": the client ended first
  kNotAllowed,          // "not-allowed": no allow pattern matched
  kDenied,              // "denied": a deny pattern matched
  kAcceptFailed,        // "accept-failed -"
  kLocalSocketFailed,   // "local-socket-failed -"
  kLocalBindFailed,     // "local-bind-failed -": [src=ADDR] could not be bound
  kLocalConnectFailed,  // "local-connect-failed -": the backend refused or did not answer
  kUnknownError,        // "unknown-error"
  // Ends rinetd has no word for (it has no such limits): xdpfwd's own, in the same style.
  kIdleTimeout,   // "done-idle-timeout": --idle-timeout reset both legs
  kStallTimeout,  // "done-stall-timeout": a peer took no bytes for --stall-timeout
  kShutdown,      // "done-shutdown": xdpfwd stopped (or drained past its limit) and reset it
  // "proxy-refused": [accept-proxy] reset it before any backend leg: not from a proxy-from
  // address, a malformed header, or none within accept-proxy-timeout.
  kProxyRefused,
};
std::string_view SessionResultName(SessionResult result);

struct SessionEvent {
  int64_t unix_ns = 0;  // when it happened (CLOCK_REALTIME); 0: SessionLog::Record stamps it
  uint32_t rule_id = 0;
  sockaddr_storage client{};  // ss_family AF_UNSPEC: unknown (rinetd writes "?")
  uint64_t bytes_in = 0;      // received from the client
  uint64_t bytes_out = 0;     // sent to the client
  SessionResult result = SessionResult::kOpened;
};

// Where a path hands its events. Record is called on the path's own thread and must not block
// it: an implementation queues, and drops (counted) rather than waits.
class SessionSink {
 public:
  virtual ~SessionSink() = default;
  virtual void Record(const SessionEvent& event) noexcept = 0;
};

// One line, '\n' included, exactly as rinetd 0.73 writes it for the same event; the time in
// the local time zone (TZ), as rinetd's.
std::string FormatSessionLine(const SessionEvent& event, const Rule& rule, bool common);

// The access log file: events queued by any thread (Record) or drained from sources (the fast
// path's shared-memory rings) are formatted and appended by one writer thread, a batch per
// write(2) every few milliseconds, so a line is never torn and no path waits on the disk.
class SessionLog final : public SessionSink {
 public:
  struct Stats {
    uint64_t lines = 0;         // written
    uint64_t dropped = 0;       // queue full: the writer was behind (also the sources' own)
    uint64_t write_errors = 0;  // write(2) failed (disk full, ...): those lines are lost
    uint64_t reopens = 0;
  };
  // Opens (creates, appends to) `path` and starts the writer. `rules` indexed by id.
  static Result<std::unique_ptr<SessionLog>> Open(const std::string& path, bool common,
                                                  std::vector<Rule> rules);
  ~SessionLog() override;  // writes everything queued and drains the sources once more
  SessionLog(const SessionLog&) = delete;
  SessionLog& operator=(const SessionLog&) = delete;

  void Record(const SessionEvent& event) noexcept override;
  // Called on the writer thread each round; appends what it has to the vector. Add sources
  // before the events they carry can matter; RemoveSources before a source goes away.
  using Source = std::function<void(std::vector<SessionEvent>&)>;
  void AddSource(Source source);
  void RemoveSources();
  // Closes and reopens the file by its name at the next round (logrotate's SIGHUP).
  void Reopen();
  // A reload: rules with new ids (events name their rule by id; old ids stay known, their
  // connections may still end), and the file and format to write from the next round on.
  void AddRules(const std::vector<Rule>& rules);
  void Retarget(const std::string& path, bool common);
  // Writes everything queued and drained so far before returning (tests, stop).
  void Flush();
  Stats stats() const;

 private:
  SessionLog(std::string path, bool common, std::vector<Rule> rules, UniqueFd fd);
  void Run();
  void WriteRound();

  static constexpr size_t kQueueLimit = 1 << 16;  // events waiting; beyond: dropped
  using RulesById = std::vector<Rule>;      // index: Rule::id; copied on write, read per round
  std::string path_;                        // under mu_
  bool common_;                             // under mu_
  std::shared_ptr<const RulesById> rules_;  // under mu_
  UniqueFd fd_;                             // the writer thread's
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::vector<SessionEvent> queue_;             // under mu_
  std::vector<Source> sources_;                 // under mu_
  bool stop_ = false;                           // under mu_
  bool reopen_ = false;                         // under mu_
  uint64_t flush_wanted_ = 0, flush_done_ = 0;  // under mu_
  std::condition_variable flushed_;
  std::atomic<uint64_t> lines_{0}, dropped_{0}, write_errors_{0}, reopens_{0};
  std::thread writer_;
};

}  // namespace xdpfwd
