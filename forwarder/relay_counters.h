// Counters both paths keep per connection event, so `xdpfwd` can print them side by side and
// the benchmark can tell which path served what. Each live RelayCounters has one writer thread
// (a worker or an event loop); other threads read it with Snapshot().
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "forwarder/latency_histogram.h"

namespace xdpfwd {

// Limits every path enforces the same way.
struct RelayLimits {
  // The backend handshake must complete within this, or the client is reset (counted).
  std::chrono::milliseconds connect_timeout{5000};
  // A connection with no bytes in either direction for this long is reset on both legs. 0: never.
  std::chrono::milliseconds idle_timeout{0};
  // Connections beyond this are refused at once (reset), counted as over_limit.
  uint32_t max_connections = 16384;
  // A peer that acknowledges nothing for this long while bytes wait for it (a window kept at
  // zero, or silence) has both legs reset, counted as stall_timeout: what it pins (up to a send
  // buffer and a window of backlog, 2 MiB per direction) is released. lwIP alone never gives up
  // on a peer that answers its zero-window probes. 0: never. The kernel path passes it to the
  // kernel as TCP_USER_TIMEOUT (docs/relay.md).
  std::chrono::milliseconds stall_timeout{120'000};
};

// X(name, kind, what it counts), kind counter (only grows) or gauge (a level now). One list, so
// the live counters, the snapshot, the formatter and the metrics can never disagree.
#define XDPFWD_RELAY_COUNTERS(X)                                                              \
  X(accepted, counter, "client connections taken")                                            \
  X(active, gauge, "open now: client leg or backend leg still alive")                         \
  X(completed, counter, "ended with both directions closed cleanly")                          \
  X(over_limit, counter, "refused because max_connections was reached")                       \
  X(not_allowed, counter, "refused by access control: no allow pattern matched (closed)")     \
  X(denied, counter, "refused by access control: a deny pattern matched (closed)")            \
  X(no_backend, counter, "refused: every backend of the rule is in drain or maint (reset)")   \
  X(backend_refused, counter, "backend answered the SYN with a reset; client was reset")      \
  X(backend_timeout, counter, "backend did not complete the handshake in time")               \
  X(backend_error, counter, "backend leg could not be started (no memory, no flow slot)")     \
  X(backend_no_port, counter, "backend leg refused: no local port left toward it")            \
  X(idle_timeout, counter, "reset on both legs for idleness")                                 \
  X(stall_timeout, counter, "reset: a peer took no bytes while some waited for it")           \
  X(client_reset, counter, "client reset or aborted; backend leg was reset")                  \
  X(backend_reset, counter, "backend reset mid-stream; client leg was reset")                 \
  X(shutdown_reset, counter, "reset on both legs because xdpfwd was stopping")                \
  X(admin_shutdown, counter, "reset on both legs by `shutdown session`")                      \
  X(bytes_to_backend, counter, "payload bytes relayed client -> backend")                     \
  X(bytes_to_client, counter, "payload bytes relayed backend -> client")                      \
  X(client_nagle_peers, counter,                                                              \
    "client legs whose small segments waited for our delayed ACK (Nagle on the client; "      \
    "ACKed at once since; fast path)")                                                        \
  X(backend_nagle_peers, counter,                                                             \
    "backend legs whose small segments waited for our delayed ACK (Nagle on the backend; "    \
    "ACKed at once since; fast path)")                                                        \
  X(backend_failovers, counter,                                                               \
    "backend handshakes that failed and were retried on another backend of the rule")         \
  X(backends_marked_down, counter,                                                            \
    "backends left out of the picks after failed handshakes in a row (passive health)")       \
  X(proxy_headers, counter,                                                                   \
    "PROXY headers read ([accept-proxy]); such a connection counts accepted from its header") \
  X(proxy_invalid, counter,                                                                   \
    "reset: a malformed PROXY header, or the connection ended before a whole one")            \
  X(proxy_untrusted, counter, "reset: an [accept-proxy] client not of the proxy-from lines")  \
  X(proxy_timeout, counter, "reset: no whole PROXY header within accept-proxy-timeout")       \
  X(backend_retries, counter,                                                                 \
    "backend legs that ended before answering, made again to another backend with the "       \
    "client's bytes ([retry-on=empty-response])")

// A plain copy, summable across threads and paths.
struct RelayTotals {
#define XDPFWD_FIELD(name, kind, what) uint64_t name = 0;
  XDPFWD_RELAY_COUNTERS(XDPFWD_FIELD)
#undef XDPFWD_FIELD
  // From the client's connection taken to the backend leg established, and to the backend's
  // first byte (its connect time plus its answer to the client's first bytes, if it waited
  // for them).
  LatencyHistogram connect, first_byte;
  RelayTotals& operator+=(const RelayTotals& o);
  // "accepted=10 active=2 completed=8 ... bytes_to_client=5242880".
  std::string Format() const;
};

// One rule's share of a path's counters (Rule::id; kOtherRules: rules beyond what a thread
// keeps apart).
struct RuleTotals {
  static constexpr uint32_t kOtherRules = UINT32_MAX;
  uint32_t rule_id = 0;
  RelayTotals totals;
};
// Adds `t` to `rule_id`'s entry of `rules` (appended if missing).
void AddRuleTotals(std::vector<RuleTotals>& rules, uint32_t rule_id, const RelayTotals& t);

struct RelayCounters {
#define XDPFWD_FIELD(name, kind, what) std::atomic<uint64_t> name{0};
  XDPFWD_RELAY_COUNTERS(XDPFWD_FIELD)
#undef XDPFWD_FIELD
  LatencyHistogramCounters connect, first_byte;

  // For the owning thread only: one writer, so a relaxed load + store is enough and costs no
  // locked instruction on the data path.
  static void Add(std::atomic<uint64_t>& c, uint64_t n = 1) {
    c.store(c.load(std::memory_order_relaxed) + n, std::memory_order_relaxed);
  }
  static void Sub(std::atomic<uint64_t>& c, uint64_t n = 1) {
    c.store(c.load(std::memory_order_relaxed) - n, std::memory_order_relaxed);
  }
  RelayTotals Snapshot() const;
  // This one's counter that is `field` in `of` (another RelayCounters): a rule's counter for
  // what the path counted.
  std::atomic<uint64_t>& Same(const RelayCounters& of, const std::atomic<uint64_t>& field);
};

}  // namespace xdpfwd
