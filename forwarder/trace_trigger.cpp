// Triggers that dump the flight recorders by themselves (trace_trigger.h).
#include "forwarder/trace_trigger.h"

#include <cstdio>
#include <unordered_map>
#include <vector>

#include "forwarder/options.h"
#include "stack/worker.h"

namespace xdpfwd {
namespace {

std::string Milliseconds(uint64_t ns) {
  char text[32];
  std::snprintf(text, sizeof text, "%.1f ms", static_cast<double>(ns) / 1e6);
  return text;
}

}  // namespace

std::string TraceTrigger::Describe() const {
  const char* what = kind == Kind::kGap       ? "a worker gap"
                     : kind == Kind::kConnect ? "a backend connect"
                                              : "a first byte back";
  return std::string(what) + " of " + Milliseconds(bound_ns) + " or more -> " + file;
}

Result<TraceTrigger> ParseTraceTrigger(std::string_view words, uint64_t now_ns) {
  std::vector<std::string> w;
  for (size_t i = 0; i < words.size();) {
    const size_t end = std::min(words.find(' ', i), words.size());
    if (end > i) w.emplace_back(words.substr(i, end - i));
    i = end + 1;
  }
  if (w.size() != 3 || (w[0] != "gap" && w[0] != "connect" && w[0] != "first-byte")) {
    return Error{{},
                 "trace trigger: expected 'gap DURATION FILE', 'connect DURATION FILE' or "
                 "'first-byte DURATION FILE'"};
  }
  auto bound = ParseDuration(w[1]);
  if (!bound) return Error{{}, "trace trigger: " + bound.error().message()};
  TraceTrigger t;
  t.kind = w[0] == "gap"       ? TraceTrigger::Kind::kGap
           : w[0] == "connect" ? TraceTrigger::Kind::kConnect
                               : TraceTrigger::Kind::kFirstByte;
  t.bound_ns = static_cast<uint64_t>(bound->count()) * 1'000'000u;
  if (t.kind == TraceTrigger::Kind::kGap && t.bound_ns < Worker::kGapNs) {
    return Error{{}, "trace trigger: the workers record gaps of 1 ms and more: give 1ms or more"};
  }
  if (t.bound_ns == 0) return Error{{}, "trace trigger: give a duration above 0"};
  t.file = w[2];
  if (t.file[0] != '/') {
    return Error{{},
                 "trace trigger: give an absolute path for the trace file (it is written "
                 "by the xdpfwd process, whose working directory is not yours)"};
  }
  t.armed_ns = now_ns;
  return t;
}

std::optional<std::string> FindTraceTrigger(const TraceTrigger& t,
                                            std::span<const WorkerRecording> rings) {
  for (const WorkerRecording& ring : rings) {
    // A connection's handshake with the client: where its connect time and its first byte's
    // wait start.
    std::unordered_map<uint32_t, uint64_t> accepted;
    const RecorderEvent ends = t.kind == TraceTrigger::Kind::kConnect
                                   ? RecorderEvent::kBackendEstablished
                                   : RecorderEvent::kFirstByteToClient;
    for (const RecorderRecord& r : ring.snapshot.records) {
      const auto kind = static_cast<RecorderEvent>(r.kind);
      if (t.kind == TraceTrigger::Kind::kGap) {
        const uint64_t gap_ns = uint64_t{r.args[0]} * 1000;
        if (kind == RecorderEvent::kGap && r.monotonic_ns > t.armed_ns && gap_ns >= t.bound_ns) {
          return ring.name + " did not run for " + Milliseconds(gap_ns);
        }
        continue;
      }
      if (kind == RecorderEvent::kClientEstablished) {
        accepted[r.connection] = r.monotonic_ns;
      } else if (kind == ends && r.monotonic_ns > t.armed_ns) {
        const auto it = accepted.find(r.connection);
        if (it != accepted.end() && r.monotonic_ns - it->second >= t.bound_ns) {
          return ring.name + ": connection " + std::to_string(r.connection) +
                 (t.kind == TraceTrigger::Kind::kConnect ? "'s backend took "
                                                         : "'s first byte back took ") +
                 Milliseconds(r.monotonic_ns - it->second) +
                 (t.kind == TraceTrigger::Kind::kConnect ? " to establish" : " from its handshake");
        }
      }
    }
  }
  return std::nullopt;
}

}  // namespace xdpfwd
