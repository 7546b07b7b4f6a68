// The datagram path: rinetd's rules with UDP on at least one side, served on kernel sockets by
// one thread, with one association (its own backend socket) per client, as rinetd 0.73 keeps.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "forwarder/rules.h"
#include "forwarder/session_log.h"
#include "os/result.h"

namespace xdpfwd {

namespace datagram_path {
class Loop;
struct Counters;
}  // namespace datagram_path

struct DatagramPathConfig {
  std::vector<Rule> rules;  // each with UDP on a side (!rule.is_stream())
  std::vector<AccessPattern> global_access;
  // Open associations, all rules together. A new client beyond it is refused: its datagram is
  // dropped, its TCP connection closed, and refused_full counts it (a log line a second at
  // most; no session event: rinetd, whose table grows, has no word for it).
  uint32_t max_associations = 8192;
  // Every opened, ended and refused association, on the path's own thread. May be empty.
  std::function<void(const SessionEvent&)> on_session;
};

// X(name, kind, what it counts), kind counter or gauge: one list for the live counters, the
// totals, Format() and the metrics.
#define XDPFWD_DATAGRAM_COUNTERS(X)                                                               \
  X(associations_opened, counter, "associations whose backend leg was started")                   \
  X(associations_open, gauge, "associations open now")                                            \
  X(closed_client, counter, "ended by the client: its TCP stream closed or failed")               \
  X(closed_backend, counter, "ended by the backend: stream closed or reset, ICMP unreachable")    \
  X(closed_idle, counter, "ended after the rule's udp_timeout_s with nothing either way")         \
  X(closed_stopped, counter, "ended because the path was stopping")                               \
  X(backend_failed, counter, "backend leg not started or not connected: socket, bind or connect") \
  X(refused_not_allowed, counter, "clients refused: an allow list matched none of its patterns")  \
  X(refused_denied, counter, "clients refused: a deny pattern matched")                           \
  X(refused_full, counter, "clients refused: max_associations were open")                         \
  X(datagrams_in, counter, "datagrams from UDP clients taken into an association")                \
  X(datagrams_out, counter, "datagrams sent to UDP clients")                                      \
  X(bytes_in, counter, "payload bytes received from clients (datagrams or stream)")               \
  X(bytes_out, counter, "payload bytes sent to clients (datagrams or stream)")                    \
  X(dropped, counter,                                                                             \
    "datagrams dropped: a socket buffer or stream queue was full, or it was too big")             \
  X(errors, counter, "unexpected syscall failures")

struct DatagramPathTotals {
#define XDPFWD_FIELD(name, kind, what) uint64_t name = 0;
  XDPFWD_DATAGRAM_COUNTERS(XDPFWD_FIELD)
#undef XDPFWD_FIELD
  // "associations_opened=3 associations_open=1 ... errors=0".
  std::string Format() const;
};

// What a client sees, as rinetd 0.73:
// - udp->udp: a UDP client (address and port, per rule) gets an association on its first
//   datagram, with a backend socket of its own, connected, so the backend sees one source port
//   per client. Replies go back from the rule's listener. (rinetd's empty "connect" datagram to
//   the backend is not sent.)
// - udp->tcp: the same, the backend leg a TCP connection: each datagram's payload goes into the
//   stream, each read of the stream (at most 65,507 bytes) comes back as one datagram.
// - tcp->udp: each accepted connection gets a connected UDP backend socket; each read of the
//   stream is one datagram, the backend's datagrams are written into the stream.
// A stream leg that connects or is slow queues up to 256 KiB; whole datagrams beyond are dropped.
// A UDP client's association ends after the rule's udp_timeout_s (0: never) with nothing either
// way (kRemoteClosedFirst), when its backend ends (kLocalClosedFirst: EOF, reset, ICMP
// unreachable) or never connects (kLocalConnectFailed). A TCP client's ends with its stream
// (kRemoteClosedFirst) or its backend: no idle limit, as in rinetd, whose timeout is for UDP
// clients only. Events: kOpened once the backend leg is on its way, then exactly one end event;
// a refused client (access, socket, bind, connect) gets one event and no association.
class DatagramPath {
 public:
  // Binds every rule's listener (an error names it: "listen 127.0.0.1:5353/udp: Address
  // already in use") and starts the path's thread.
  static Result<std::unique_ptr<DatagramPath>> Start(DatagramPathConfig config);
  ~DatagramPath();  // Stop()
  DatagramPath(const DatagramPath&) = delete;
  DatagramPath& operator=(const DatagramPath&) = delete;

  // Closes every listener and association and joins the thread; idempotent. Each association
  // still open ends with a kShutdown event, as the stream paths' connections do, so every
  // "opened" line of the access log has its end line; on_session is called for them on the
  // path's thread before Stop() returns.
  void Stop();
  DatagramPathTotals Totals() const;  // any thread, also after Stop()
  // The address rule `rule_index`'s listener is bound to (its real port when the rule gave 0).
  SocketAddress bound_address(size_t rule_index) const { return bound_.at(rule_index); }

 private:
  explicit DatagramPath(DatagramPathConfig config);

  DatagramPathConfig config_;  // the loop points into its rules
  std::unique_ptr<datagram_path::Counters> counters_;
  std::vector<SocketAddress> bound_;
  std::unique_ptr<datagram_path::Loop> loop_;
  std::thread thread_;
  std::mutex stop_mutex_;
};

}  // namespace xdpfwd
