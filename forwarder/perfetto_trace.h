// A Perfetto trace (.pftrace) written without the Perfetto SDK: tracks, slices, instants,
// counters and flows as TrackDescriptor and TrackEvent packets, the protobuf encoded by hand.
// forwarder/perfetto_trace.proto documents every message and field written here.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "os/result.h"

namespace xdpfwd {

// The protobuf wire format, only what a trace needs: varints, fixed64 and length-delimited
// fields. By hand rather than with protozero or libprotobuf: forty lines, no dependency, and a
// known-answer test pins the bytes (tests/unit/perfetto_trace_test.cpp).
class ProtoMessage {
 public:
  void Varint(uint32_t field, uint64_t value);  // uint32/uint64/enum/bool fields
  void Int64(uint32_t field, int64_t value) { Varint(field, static_cast<uint64_t>(value)); }
  void Fixed64(uint32_t field, uint64_t value);
  void Bytes(uint32_t field, std::string_view bytes);  // string and bytes fields
  void Message(uint32_t field, const ProtoMessage& message) { Bytes(field, message.bytes()); }
  const std::string& bytes() const { return bytes_; }

 private:
  void Tag(uint32_t field, uint32_t wire_type);
  void RawVarint(uint64_t value);
  std::string bytes_;
};

// A debug annotation shown in the UI's details panel: a name and a small value.
struct TraceAnnotation {
  std::string name;
  std::variant<int64_t, std::string> value;
};

struct TraceEventDetails {
  std::vector<TraceAnnotation> annotations;
  std::vector<uint64_t> flow_ids;              // flows that begin (or pass) at this event
  std::vector<uint64_t> terminating_flow_ids;  // flows that end at it
};

class PerfettoTrace {
 public:
  // Every packet carries sequence_id; the first one says the sequence starts clean.
  explicit PerfettoTrace(uint32_t sequence_id = 1) : sequence_id_(sequence_id) {}

  // Makes CLOCK_MONOTONIC the trace's clock (every event here is stamped with it).
  // boottime_ns, read together with monotonic_ns (0: not known), lets Perfetto line this trace
  // up with others of the same boot, which use CLOCK_BOOTTIME.
  void Clocks(uint64_t monotonic_ns, uint64_t boottime_ns);

  // Tracks: uuids are the caller's, unique in the trace and not 0.
  void ProcessTrack(uint64_t uuid, int32_t pid, std::string_view name);
  // A track nested in the parent's group (a process track's: shown beside its threads).
  void ChildTrack(uint64_t uuid, uint64_t parent_uuid, std::string_view name);
  void CounterTrack(uint64_t uuid, uint64_t parent_uuid, std::string_view name,
                    std::string_view unit_name);

  // Events, in any order (Perfetto sorts them by time). Slices on one track must nest.
  void SliceBegin(uint64_t track, uint64_t monotonic_ns, std::string_view name,
                  const TraceEventDetails& details = {});
  void SliceEnd(uint64_t track, uint64_t monotonic_ns, const TraceEventDetails& details = {});
  void Instant(uint64_t track, uint64_t monotonic_ns, std::string_view name,
               const TraceEventDetails& details = {});
  void Counter(uint64_t track, uint64_t monotonic_ns, int64_t value);

  // The Trace message so far: the contents of a .pftrace file.
  const std::string& bytes() const { return trace_.bytes(); }

 private:
  enum class EventType : uint64_t { kSliceBegin = 1, kSliceEnd = 2, kInstant = 3, kCounter = 4 };
  void Event(EventType type, uint64_t track, uint64_t monotonic_ns, std::string_view name,
             const TraceEventDetails& details, const int64_t* counter_value);
  void Packet(ProtoMessage& packet);  // adds the sequence fields and appends it to the trace
  void Descriptor(const ProtoMessage& descriptor);

  ProtoMessage trace_;
  uint32_t sequence_id_;
  bool first_packet_ = true;
};

// Writes a trace where a user asked for it (whole or not at all: a temporary file renamed).
Result<void> WriteTraceFile(const std::string& path, std::string_view bytes);

}  // namespace xdpfwd
