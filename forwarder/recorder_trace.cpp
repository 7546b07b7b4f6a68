// Flight-recorder records to Perfetto tracks and events (see recorder_trace.h).
#include "forwarder/recorder_trace.h"

#include <algorithm>
#include <optional>
#include <unordered_map>
#include <vector>

#include "forwarder/perfetto_trace.h"
#include "forwarder/session_log.h"

namespace xdpfwd {

namespace {

// Where events with the same timestamp go relative to each other. An iteration that ends
// where the next begins must close first; a connection's end instant must land inside the
// connection's slice, so that slice closes last.
enum class Rank { kAdjacentEnd = 0, kBegin = 1, kPoint = 2, kEnclosingEnd = 3 };

enum class Kind { kBegin, kEnd, kInstant, kCounter };

struct PendingEvent {
  uint64_t ns;
  Rank rank;
  size_t order;  // insertion order: the last tie-break, so the output is deterministic
  Kind kind;
  uint64_t track;
  std::string name;
  TraceEventDetails details;
  int64_t value = 0;
};

// Track uuids and flow ids of worker i live in (i + 1) << 48; within a worker, the low ids
// are its fixed tracks and connection instance n takes 16 + 2n (client) and 17 + 2n (backend).
// A connection instance is one use of a connection id from its client SYN: an id the worker
// reuses starts a new instance, so each has its own tracks and flow.
constexpr uint64_t kProcessTrack = 0;
constexpr uint64_t kLoopTrack = 1;
constexpr uint64_t kGapTrack = 2;
constexpr uint64_t kReceivedTrack = 3;
constexpr uint64_t kSentTrack = 4;
constexpr uint64_t kFirstConnectionTrack = 16;
// A worker whose pid the reader does not know: stand-in pids far above pid_max's default.
constexpr int32_t kStandInPid = 10'000'000;

class WorkerTrace {
 public:
  WorkerTrace(const WorkerRecording& worker, size_t index, PerfettoTrace& trace)
      : base_(static_cast<uint64_t>(index + 1) << 48), trace_(trace) {
    const int32_t pid = worker.pid != 0 ? worker.pid : kStandInPid + static_cast<int32_t>(index);
    trace_.ProcessTrack(base_ + kProcessTrack, pid, worker.name);
    trace_.ChildTrack(base_ + kLoopTrack, base_ + kProcessTrack, "loop");
    trace_.ChildTrack(base_ + kGapTrack, base_ + kProcessTrack, "gaps");
    trace_.CounterTrack(base_ + kReceivedTrack, base_ + kProcessTrack, "packets received",
                        "packets");
    trace_.CounterTrack(base_ + kSentTrack, base_ + kProcessTrack, "packets sent", "packets");
    const RecorderSnapshot& s = worker.snapshot;
    if (s.lost > 0 && !s.records.empty()) {
      TraceEventDetails details;
      details.annotations.push_back({"records", static_cast<int64_t>(s.lost)});
      Add(s.records.front().monotonic_ns, Rank::kPoint, Kind::kInstant, base_ + kLoopTrack,
          "older records overwritten", std::move(details));
    }
    for (const RecorderRecord& r : s.records) Convert(r);
  }

  void Emit() {
    std::sort(events_.begin(), events_.end(), [](const PendingEvent& a, const PendingEvent& b) {
      if (a.ns != b.ns) return a.ns < b.ns;
      if (a.rank != b.rank) return a.rank < b.rank;
      return a.order < b.order;
    });
    for (const PendingEvent& e : events_) {
      switch (e.kind) {
        case Kind::kBegin:
          trace_.SliceBegin(e.track, e.ns, e.name, e.details);
          break;
        case Kind::kEnd:
          trace_.SliceEnd(e.track, e.ns, e.details);
          break;
        case Kind::kInstant:
          trace_.Instant(e.track, e.ns, e.name, e.details);
          break;
        case Kind::kCounter:
          trace_.Counter(e.track, e.ns, e.value);
          break;
      }
    }
  }

 private:
  struct Connection {
    uint64_t instance = 0;
    bool client_declared = false;
    bool backend_declared = false;
    bool client_open = false;  // the connection's slice on the client leg
    bool backend_open = false;
    bool ended = false;
    bool flow_drawn = false;
    std::optional<size_t> last_client_event{};  // index in events_: where a flow would start
  };

  size_t Add(uint64_t ns, Rank rank, Kind kind, uint64_t track, std::string name,
             TraceEventDetails details = {}, int64_t value = 0) {
    events_.push_back(PendingEvent{ns, rank, events_.size(), kind, track, std::move(name),
                                   std::move(details), value});
    return events_.size() - 1;
  }

  static TraceEventDetails Annotations(const RecorderRecord& r) {
    const RecorderEventInfo& info = RecorderEventInfoOf(r.kind);
    TraceEventDetails details;
    if (r.connection != 0) {
      details.annotations.push_back({"connection", static_cast<int64_t>(r.connection)});
    }
    for (int i = 0; i < 4; ++i) {
      if (!info.args[i].empty()) {
        details.annotations.push_back({std::string(info.args[i]), int64_t{r.args[i]}});
      }
    }
    if (r.kind == static_cast<uint16_t>(RecorderEvent::kConnectionEnd) &&
        r.args[0] <= static_cast<uint32_t>(SessionResult::kProxyRefused)) {
      details.annotations.push_back(
          {"reason_name", std::string(SessionResultName(static_cast<SessionResult>(r.args[0])))});
    }
    return details;
  }

  void Convert(const RecorderRecord& r) {
    const std::string name(RecorderEventInfoOf(r.kind).text);
    const auto kind = static_cast<RecorderEvent>(r.kind);
    if (r.connection != 0) {
      ConvertConnection(r, kind, name);
    } else if (kind == RecorderEvent::kIteration) {
      // Slices on one track must nest: an iteration starts no earlier than the last one ended,
      // and lasts at least 1 ns so that its end sorts after its begin.
      uint64_t start = r.monotonic_ns - std::min<uint64_t>(r.args[2], r.monotonic_ns);
      start = std::max(start, loop_free_from_);
      if (start >= r.monotonic_ns) start = r.monotonic_ns > 0 ? r.monotonic_ns - 1 : 0;
      Add(start, Rank::kBegin, Kind::kBegin, base_ + kLoopTrack, name, Annotations(r));
      Add(r.monotonic_ns, Rank::kAdjacentEnd, Kind::kEnd, base_ + kLoopTrack, {});
      loop_free_from_ = r.monotonic_ns;
      // Per-iteration values: the count while the iteration ran, 0 after it (an idle worker
      // records no iterations, and a counter holds its last value until the next).
      Add(start, Rank::kPoint, Kind::kCounter, base_ + kReceivedTrack, {}, {}, r.args[0]);
      Add(start, Rank::kPoint, Kind::kCounter, base_ + kSentTrack, {}, {}, r.args[1]);
      Add(r.monotonic_ns, Rank::kPoint, Kind::kCounter, base_ + kReceivedTrack, {}, {}, 0);
      Add(r.monotonic_ns, Rank::kPoint, Kind::kCounter, base_ + kSentTrack, {}, {}, 0);
    } else if (kind == RecorderEvent::kGap) {
      const uint64_t gap_ns = uint64_t{r.args[0]} * 1000;
      uint64_t start = r.monotonic_ns - std::min(gap_ns, r.monotonic_ns);
      start = std::max(start, gap_free_from_);
      if (start < r.monotonic_ns) {
        Add(start, Rank::kBegin, Kind::kBegin, base_ + kGapTrack, name, Annotations(r));
        Add(r.monotonic_ns, Rank::kAdjacentEnd, Kind::kEnd, base_ + kGapTrack, {});
        gap_free_from_ = r.monotonic_ns;
      }
      Add(r.monotonic_ns, Rank::kPoint, Kind::kInstant, base_ + kGapTrack, name, Annotations(r));
    } else {
      Add(r.monotonic_ns, Rank::kPoint, Kind::kInstant, base_ + kLoopTrack, name, Annotations(r));
    }
  }

  // Where a connection's slice begins: its client's SYN, or the completed handshake where the
  // stack does not show the SYN (lwIP's listener answers it before the relay sees a pcb).
  static bool ClientStart(RecorderEvent kind) {
    return kind == RecorderEvent::kClientSyn || kind == RecorderEvent::kClientEstablished;
  }

  Connection& ConnectionFor(const RecorderRecord& r, RecorderEvent kind) {
    auto it = connections_.find(r.connection);
    if (it == connections_.end() || (it->second.ended && ClientStart(kind))) {
      it = connections_.insert_or_assign(r.connection, Connection{++instances_}).first;
    }
    return it->second;
  }

  uint64_t LegTrack(Connection& c, uint32_t id, bool backend) {
    const uint64_t uuid = base_ + kFirstConnectionTrack + 2 * c.instance + (backend ? 1 : 0);
    bool& declared = backend ? c.backend_declared : c.client_declared;
    if (!declared) {
      trace_.ChildTrack(uuid, base_ + kProcessTrack,
                        "conn " + std::to_string(id) + (backend ? " backend" : " client"));
      declared = true;
    }
    return uuid;
  }

  void ConvertConnection(const RecorderRecord& r, RecorderEvent kind, const std::string& name) {
    Connection& c = ConnectionFor(r, kind);
    const bool backend = r.leg == static_cast<uint8_t>(RecorderLeg::kBackend);
    const uint64_t track = LegTrack(c, r.connection, backend);
    const uint64_t flow = base_ + c.instance;
    if (ClientStart(kind) && !c.client_open && !c.ended) {
      Add(r.monotonic_ns, Rank::kBegin, Kind::kBegin, track, "connection", Annotations(r));
      c.client_open = true;
    }
    if (kind == RecorderEvent::kBackendSynSent && backend && !c.backend_open && !c.ended) {
      Add(r.monotonic_ns, Rank::kBegin, Kind::kBegin, track, "backend leg", Annotations(r));
      c.backend_open = true;
    }
    TraceEventDetails details = Annotations(r);
    const bool draw_flow = kind == RecorderEvent::kBackendSynSent && backend && !c.flow_drawn &&
                           c.last_client_event.has_value();
    if (draw_flow) {
      events_[*c.last_client_event].details.flow_ids.push_back(flow);
      details.terminating_flow_ids.push_back(flow);
      c.flow_drawn = true;
    }
    const size_t index =
        Add(r.monotonic_ns, Rank::kPoint, Kind::kInstant, track, name, std::move(details));
    if (!backend) c.last_client_event = index;
    if (kind == RecorderEvent::kConnectionEnd && !c.ended) {
      if (c.client_open) {
        Add(r.monotonic_ns, Rank::kEnclosingEnd, Kind::kEnd, LegTrack(c, r.connection, false), {});
      }
      if (c.backend_open) {
        Add(r.monotonic_ns, Rank::kEnclosingEnd, Kind::kEnd, LegTrack(c, r.connection, true), {});
      }
      c.client_open = c.backend_open = false;
      c.ended = true;
    }
  }

  uint64_t base_;
  PerfettoTrace& trace_;
  std::vector<PendingEvent> events_;
  std::unordered_map<uint32_t, Connection> connections_;
  uint64_t instances_ = 0;
  uint64_t loop_free_from_ = 0;  // where the last iteration slice ended
  uint64_t gap_free_from_ = 0;
};

}  // namespace

std::string RecorderTrace(std::span<const WorkerRecording> workers, TraceClockReading clocks) {
  PerfettoTrace trace;
  uint64_t monotonic = clocks.monotonic_ns;
  if (monotonic == 0) {
    // No reading given: anchor the clock at the earliest event, which is all Perfetto needs.
    monotonic = UINT64_MAX;
    for (const WorkerRecording& w : workers) {
      for (const RecorderRecord& r : w.snapshot.records) {
        monotonic = std::min(monotonic, r.monotonic_ns);
      }
    }
    if (monotonic == UINT64_MAX) monotonic = 0;
  }
  trace.Clocks(monotonic, clocks.boottime_ns);
  for (size_t i = 0; i < workers.size(); ++i) {
    WorkerTrace(workers[i], i, trace).Emit();
  }
  return trace.bytes();
}

}  // namespace xdpfwd
