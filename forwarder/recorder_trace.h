// Flight-recorder snapshots as a Perfetto trace: what a reader of `xdpfwd`'s recorder opens at
// ui.perfetto.dev. The mapping to tracks is in docs/flight_recorder.md.
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "os/flight_recorder.h"

namespace xdpfwd {

// One worker's ring as read by ReadRecorder.
struct WorkerRecording {
  std::string name;  // "worker 0"
  int32_t pid = 0;   // the worker process; 0: not known (the trace uses a stand-in)
  RecorderSnapshot snapshot;
};

// CLOCK_MONOTONIC and CLOCK_BOOTTIME read together by the caller, so the trace lines up with
// others of the same boot. Zeros: not known; the trace is still complete on its own clock.
struct TraceClockReading {
  uint64_t monotonic_ns = 0;
  uint64_t boottime_ns = 0;
};

// Per worker: a process track; a "loop" track of iteration slices, a "gaps" track of gap
// slices and instants; counter tracks of packets received and sent per iteration; and per
// connection a client-leg track (the connection as a slice from client SYN to its end, every
// client-leg event as an instant) and a backend-leg track (from backend SYN to the end), with a
// flow from the client leg's last event before the backend SYN to that SYN.
std::string RecorderTrace(std::span<const WorkerRecording> workers, TraceClockReading clocks = {});

}  // namespace xdpfwd
