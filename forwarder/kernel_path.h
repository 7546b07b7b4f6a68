// The kernel-socket path: epoll event loops on N threads, each with its own SO_REUSEPORT
// listener per rule, relaying with splice(2) through a pipe per direction (a buffered copy where
// splice cannot be used). It serves whatever the fast path does not take, and it is the
// baseline every benchmark compares against.
#pragma once

#include <netinet/in.h>

#include <atomic>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "forwarder/connection_table.h"
#include "forwarder/health_board.h"
#include "forwarder/recorder_trace.h"
#include "forwarder/relay_counters.h"
#include "forwarder/rules.h"
#include "forwarder/session_log.h"
#include "os/result.h"

namespace xdpfwd {

class TcpEvents;

namespace kernel_path {
class Loop;
class PlanBoard;
struct PathCounters;
}  // namespace kernel_path

struct KernelPathConfig {
  std::vector<Rule> rules;                   // TCP on both sides (Rule::is_stream)
  std::vector<AccessPattern> global_access;  // allow/deny lines before the first rule
  SessionSink* sessions = nullptr;           // the access log's events; nullptr: none made
  // The rules' backends (forwarder/health_board.h: checks' verdicts, states, weights, counters);
  // nullptr: none.
  HealthBoard* health = nullptr;
  RelayLimits limits;  // max_connections is for the whole path, all threads
  int threads = 0;     // 0: one per CPU this process may run on
  size_t copy_buffer_bytes = 64 * 1024;
  // Each thread keeps its newest connection events in a flight recorder (os/flight_recorder.h)
  // that `xdpfwd ctl trace dump` writes beside the fast path's; false: none.
  bool flight_recorder = true;
  // With the recorder: the kernel's TCP events of this path's sockets (retransmissions, RTOs,
  // fast recovery, zero window in, Nagle peers) from BPF programs (xdp/tcp_events.h), recorded
  // on the connection's leg; a Nagle peer is also counted and warned about. A kernel that
  // cannot load them leaves them out, said once in the log.
  bool tcp_events = true;
  bool use_splice = true;  // false: buffered copy for every connection
  // The loop threads never sleep: epoll_wait with a zero timeout, in a loop. Each thread keeps
  // a CPU busy, and a message no longer waits for the loop's halted CPU to wake (see
  // docs/kernel-path.md, "Latency: where the time goes").
  bool busy_poll = false;
  // Local addresses for backend legs (--backend-source), either family: a leg uses those of its
  // backend's family in turn (each is a local port range of its own). None of that family: the
  // route's source address.
  std::vector<IpAddress> backend_sources;
};

// Path-specific counters next to the shared relay ones. X(name, kind, what it counts), kind
// counter or gauge: one list for the threads' live counters, the totals, Format() and the
// metrics.
#define XDPFWD_KERNEL_PATH_COUNTERS(X)                                                          \
  X(splice_bytes, counter, "payload bytes moved with splice")                                   \
  X(copy_bytes, counter, "payload bytes moved with recv and send")                              \
  X(splice_calls, counter, "splice calls")                                                      \
  X(copy_calls, counter, "recv and send calls")                                                 \
  X(errors, counter, "unexpected syscall failures on the data path")                            \
  /* Every spin of the loop when busy-polling; a deadline's wake-up when sleeping. */           \
  X(empty_polls, counter, "epoll_wait calls that returned no event")                            \
  /* Least recently used first, taking over its own TIME_WAIT 4-tuples, because many of the */  \
  /* (source, backend) pair's 4-tuples were taken and the kernel's choice scans them one by */  \
  /* one (docs/kernel-path.md). */                                                              \
  X(own_port_connects, counter, "backend connects on a local port this path chose itself")      \
  /* A port chosen here that was refused (EADDRINUSE, EADDRNOTAVAIL), or the kernel's choice */ \
  /* after that. Near 0 when choosing ports is O(1). */                                         \
  X(port_retries, counter, "backend connect attempts beyond the first of a connection")         \
  X(kernel_no_port, counter, "backend connects for which the kernel found no local port")       \
  /* Read from the TCP event programs' per-CPU map by Totals(); no thread counts it. */         \
  X(tcp_events_dropped, counter, "TCP events lost to a full ring (xdp/tcp_events.h)")           \
  /* A bpf syscall each, for connections that live past their first 10 ms (Loop::TagDue). */    \
  X(tcp_events_tagged, counter, "sockets tagged for the TCP event programs")                    \
  /* Two descriptors each, at most 64 per thread: what the process's descriptors may exceed */  \
  /* its idle count by once connections end. */                                                 \
  X(pooled_pipes, gauge, "empty pipes the threads keep for reuse")

struct KernelPathTotals {
  RelayTotals relay;
#define XDPFWD_FIELD(name, kind, what) uint64_t name = 0;
  XDPFWD_KERNEL_PATH_COUNTERS(XDPFWD_FIELD)
#undef XDPFWD_FIELD
  std::vector<RuleTotals> rules;  // the relay counters per rule
  KernelPathTotals& operator+=(const KernelPathTotals& o);
  std::string Format() const;
};

class KernelPath {
 public:
  // Binds every rule's listener on every thread (errors name the rule and address, e.g.
  // "listen 10.0.1.1:9000: Address already in use") and starts the threads. Raises the
  // process's open-file soft limit towards what max_connections needs (never past the hard
  // limit) and logs a warning if even that is too low.
  static Result<std::unique_ptr<KernelPath>> Start(const KernelPathConfig& config);
  ~KernelPath();  // Stop()
  KernelPath(const KernelPath&) = delete;
  KernelPath& operator=(const KernelPath&) = delete;

  // Closes every listener (new clients are refused by the kernel); open connections go on.
  // Returns once every thread has closed its listeners.
  void StopAccepting();
  // Serves `rules` from now on, with `global_access` for new clients. A rule whose id is one
  // this path already serves is unchanged: its listeners stay (no rebind). Other listen
  // addresses it keeps get the new version of their rule for new connections (a changed
  // backend, access list or source); rules gone stop accepting while their connections finish;
  // new ones are listened on by every thread. Fails, changing nothing, when a new listen
  // address cannot be bound or a new [src=] address is not this host's. Returns once every
  // thread serves the new rules.
  Result<void> Reload(const std::vector<Rule>& rules,
                      const std::vector<AccessPattern>& global_access);
  // Stops accepting, closes every connection and listener, joins the threads. Idempotent.
  void Stop();
  KernelPathTotals Totals() const;  // summed over threads; callable from any thread
  // Each thread's flight recorder as it is now ("kernel thread N"); empty when off.
  std::vector<WorkerRecording> ReadRecorders() const;
  // Every open connection of every thread (`show sess`), from any thread. Each loop copies its
  // own table between two epoll batches when asked (its data path is neither stopped nor
  // locked); a loop that has not answered within 1 s is left out, its number put in
  // `silent_threads` and logged. Empty after Stop().
  std::vector<ConnectionRow> Connections(std::vector<int>* silent_threads = nullptr);
  // `shutdown session ID`: resets both legs of connection `id` (ConnectionRow::id) on its own
  // thread, counted as admin_shutdown and logged as done-shutdown. An error when no open
  // connection has that id, or its thread did not answer within 1 s.
  Result<void> Shutdown(uint64_t id);
  int threads() const;
  // Whether the kernel's TCP events are recorded (KernelPathConfig::tcp_events, and loaded).
  bool tcp_events() const { return tcp_events_ != nullptr; }
  bool busy_poll() const { return config_.busy_poll; }

 private:
  explicit KernelPath(const KernelPathConfig& config);

  void Publish(std::vector<const Rule*> rules, std::vector<AccessPattern> global_access,
               bool accepting);  // under stop_mutex_
  Result<void> WaitApplied();    // under stop_mutex_: every loop serves the last plan published

  uint64_t desk_generation_ = 0;  // the last question asked of the loops (under stop_mutex_)

  KernelPathConfig config_;
  // Every version of every rule served since start, never freed: connections point to the
  // one they began with. A reload adds only the rules it changes or adds.
  std::deque<Rule> rules_;
  std::unique_ptr<kernel_path::PlanBoard> board_;  // what the loops' listeners serve
  uint64_t generation_ = 0;                        // the last plan published
  std::atomic<uint32_t> open_connections_{0};      // all threads', against max_connections
  // One per thread; they outlive the loops so Totals() still answers after Stop().
  std::vector<std::unique_ptr<kernel_path::PathCounters>> counters_;
  // One recorder ring per thread (heap memory: the threads share the process), kept after
  // Stop() like the counters.
  struct RecorderRing {
    void* memory = nullptr;
    size_t bytes = 0;
    FlightRecorder writer;
    ~RecorderRing();
  };
  std::vector<std::unique_ptr<RecorderRing>> recorders_;
  std::unique_ptr<TcpEvents> tcp_events_;  // nullptr: off, or the kernel could not load them
  std::vector<std::unique_ptr<kernel_path::Loop>> loops_;
  std::vector<std::thread> threads_;
  // Serialises Stop, Reload, StopAccepting and the questions to the loops (a question must
  // not outlive the loop it waits for).
  std::mutex stop_mutex_;
};

}  // namespace xdpfwd
