// A trace written by itself when something slow happens, magic-trace style: armed with
// `xdpfwd ctl trace trigger gap 5ms FILE` (a worker that did not run for that long),
// `... connect 100ms FILE` (a backend slower than that to establish) or `... first-byte 100ms
// FILE` (a connection whose first byte back took that long from its handshake), it fires on the
// first such event recorded after it was armed, and the control loop dumps every flight
// recorder, which still holds the seconds before it.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "forwarder/recorder_trace.h"
#include "os/result.h"

namespace xdpfwd {

struct TraceTrigger {
  enum class Kind { kGap, kConnect, kFirstByte };
  Kind kind = Kind::kGap;
  uint64_t bound_ns = 0;
  std::string file;              // absolute path
  uint64_t armed_ns = 0;         // CLOCK_MONOTONIC: only events after it fire
  std::string Describe() const;  // "a gap of 5 ms or more -> /tmp/x.pftrace"
};

// "gap 5ms /tmp/x.pftrace", "connect 100ms /tmp/x.pftrace" or "first-byte 100ms
// /tmp/x.pftrace", armed at `now_ns`. A gap shorter
// than the workers record (1 ms) is refused, as is a relative file.
Result<TraceTrigger> ParseTraceTrigger(std::string_view words, uint64_t now_ns);

// What fires `t` in `rings`: the first matching event after t.armed_ns, said in words ("worker
// 0 did not run for 12.3 ms"), or nothing.
std::optional<std::string> FindTraceTrigger(const TraceTrigger& t,
                                            std::span<const WorkerRecording> rings);

}  // namespace xdpfwd
