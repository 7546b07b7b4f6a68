// The Perfetto trace writer (see perfetto_trace.h). Field numbers are Perfetto's, as listed in
// forwarder/perfetto_trace.proto; the constants below name them where they are written.
#include "forwarder/perfetto_trace.h"

#include <fcntl.h>
#include <unistd.h>

#include <cstdio>

#include "os/unique_fd.h"

namespace xdpfwd {

namespace {

// Wire types (protobuf encoding spec).
constexpr uint32_t kWireVarint = 0;
constexpr uint32_t kWireFixed64 = 1;
constexpr uint32_t kWireBytes = 2;

// Trace
constexpr uint32_t kTracePacket = 1;
// TracePacket
constexpr uint32_t kPacketClockSnapshot = 6;
constexpr uint32_t kPacketTimestamp = 8;
constexpr uint32_t kPacketSequenceId = 10;  // trusted_packet_sequence_id
constexpr uint32_t kPacketTrackEvent = 11;
constexpr uint32_t kPacketSequenceFlags = 13;
constexpr uint32_t kPacketTimestampClockId = 58;
constexpr uint32_t kPacketTrackDescriptor = 60;
constexpr uint64_t kSeqIncrementalStateCleared = 1;
// ClockSnapshot and its Clock; BuiltinClock ids
constexpr uint32_t kSnapshotClocks = 1;
constexpr uint32_t kSnapshotPrimaryTraceClock = 2;
constexpr uint32_t kClockId = 1;
constexpr uint32_t kClockTimestamp = 2;
constexpr uint64_t kBuiltinClockMonotonic = 3;
constexpr uint64_t kBuiltinClockBoottime = 6;
// TrackDescriptor
constexpr uint32_t kTrackUuid = 1;
constexpr uint32_t kTrackName = 2;
constexpr uint32_t kTrackProcess = 3;
constexpr uint32_t kTrackParentUuid = 5;
constexpr uint32_t kTrackCounter = 8;
// ProcessDescriptor
constexpr uint32_t kProcessPid = 1;
constexpr uint32_t kProcessName = 6;
// CounterDescriptor
constexpr uint32_t kCounterUnit = 3;
constexpr uint32_t kCounterUnitName = 6;
constexpr uint64_t kUnitCount = 2;
// TrackEvent
constexpr uint32_t kEventDebugAnnotations = 4;
constexpr uint32_t kEventType = 9;
constexpr uint32_t kEventTrackUuid = 11;
constexpr uint32_t kEventName = 23;
constexpr uint32_t kEventCounterValue = 30;
constexpr uint32_t kEventFlowIds = 47;
constexpr uint32_t kEventTerminatingFlowIds = 48;
// DebugAnnotation
constexpr uint32_t kAnnotationIntValue = 4;
constexpr uint32_t kAnnotationStringValue = 6;
constexpr uint32_t kAnnotationName = 10;

}  // namespace

void ProtoMessage::RawVarint(uint64_t value) {
  // Seven bits a byte, least significant first; the high bit says another byte follows.
  while (value >= 0x80) {
    bytes_.push_back(static_cast<char>((value & 0x7f) | 0x80));
    value >>= 7;
  }
  bytes_.push_back(static_cast<char>(value));
}

void ProtoMessage::Tag(uint32_t field, uint32_t wire_type) {
  RawVarint((static_cast<uint64_t>(field) << 3) | wire_type);
}

void ProtoMessage::Varint(uint32_t field, uint64_t value) {
  Tag(field, kWireVarint);
  RawVarint(value);
}

void ProtoMessage::Fixed64(uint32_t field, uint64_t value) {
  Tag(field, kWireFixed64);
  for (int i = 0; i < 8; ++i) bytes_.push_back(static_cast<char>(value >> (8 * i)));  // LE
}

void ProtoMessage::Bytes(uint32_t field, std::string_view bytes) {
  Tag(field, kWireBytes);
  RawVarint(bytes.size());
  bytes_.append(bytes);
}

void PerfettoTrace::Packet(ProtoMessage& packet) {
  packet.Varint(kPacketSequenceId, sequence_id_);
  if (first_packet_) {
    // We intern nothing, but a reader skips a sequence's packets until it has seen this flag.
    packet.Varint(kPacketSequenceFlags, kSeqIncrementalStateCleared);
    first_packet_ = false;
  }
  trace_.Message(kTracePacket, packet);
}

void PerfettoTrace::Clocks(uint64_t monotonic_ns, uint64_t boottime_ns) {
  ProtoMessage snapshot;
  ProtoMessage monotonic;
  monotonic.Varint(kClockId, kBuiltinClockMonotonic);
  monotonic.Varint(kClockTimestamp, monotonic_ns);
  snapshot.Message(kSnapshotClocks, monotonic);
  if (boottime_ns != 0) {
    ProtoMessage boottime;
    boottime.Varint(kClockId, kBuiltinClockBoottime);
    boottime.Varint(kClockTimestamp, boottime_ns);
    snapshot.Message(kSnapshotClocks, boottime);
  }
  // Without this the trace's clock would be BOOTTIME, which our events cannot be converted to
  // when boottime_ns is unknown.
  snapshot.Varint(kSnapshotPrimaryTraceClock, kBuiltinClockMonotonic);
  ProtoMessage packet;
  packet.Varint(kPacketTimestamp, monotonic_ns);
  packet.Varint(kPacketTimestampClockId, kBuiltinClockMonotonic);
  packet.Message(kPacketClockSnapshot, snapshot);
  Packet(packet);
}

void PerfettoTrace::Descriptor(const ProtoMessage& descriptor) {
  ProtoMessage packet;
  packet.Message(kPacketTrackDescriptor, descriptor);
  Packet(packet);
}

void PerfettoTrace::ProcessTrack(uint64_t uuid, int32_t pid, std::string_view name) {
  ProtoMessage process;
  process.Int64(kProcessPid, pid);
  process.Bytes(kProcessName, name);
  ProtoMessage track;
  track.Varint(kTrackUuid, uuid);
  track.Bytes(kTrackName, name);
  track.Message(kTrackProcess, process);
  Descriptor(track);
}

void PerfettoTrace::ChildTrack(uint64_t uuid, uint64_t parent_uuid, std::string_view name) {
  ProtoMessage track;
  track.Varint(kTrackUuid, uuid);
  track.Bytes(kTrackName, name);
  track.Varint(kTrackParentUuid, parent_uuid);
  Descriptor(track);
}

void PerfettoTrace::CounterTrack(uint64_t uuid, uint64_t parent_uuid, std::string_view name,
                                 std::string_view unit_name) {
  ProtoMessage counter;
  counter.Varint(kCounterUnit, kUnitCount);
  counter.Bytes(kCounterUnitName, unit_name);
  ProtoMessage track;
  track.Varint(kTrackUuid, uuid);
  track.Bytes(kTrackName, name);
  track.Varint(kTrackParentUuid, parent_uuid);
  track.Message(kTrackCounter, counter);
  Descriptor(track);
}

void PerfettoTrace::Event(EventType type, uint64_t track, uint64_t monotonic_ns,
                          std::string_view name, const TraceEventDetails& details,
                          const int64_t* counter_value) {
  ProtoMessage event;
  event.Varint(kEventType, static_cast<uint64_t>(type));
  event.Varint(kEventTrackUuid, track);
  if (!name.empty()) event.Bytes(kEventName, name);
  if (counter_value != nullptr) event.Int64(kEventCounterValue, *counter_value);
  for (const TraceAnnotation& a : details.annotations) {
    ProtoMessage annotation;
    annotation.Bytes(kAnnotationName, a.name);
    if (const auto* i = std::get_if<int64_t>(&a.value)) {
      annotation.Int64(kAnnotationIntValue, *i);
    } else {
      annotation.Bytes(kAnnotationStringValue, std::get<std::string>(a.value));
    }
    event.Message(kEventDebugAnnotations, annotation);
  }
  // proto2 repeated fixed64 without [packed]: one tagged field per id.
  for (uint64_t id : details.flow_ids) event.Fixed64(kEventFlowIds, id);
  for (uint64_t id : details.terminating_flow_ids) event.Fixed64(kEventTerminatingFlowIds, id);
  ProtoMessage packet;
  packet.Varint(kPacketTimestamp, monotonic_ns);
  // Per packet rather than through TracePacketDefaults: three bytes, and no incremental state
  // for a reader to lose.
  packet.Varint(kPacketTimestampClockId, kBuiltinClockMonotonic);
  packet.Message(kPacketTrackEvent, event);
  Packet(packet);
}

void PerfettoTrace::SliceBegin(uint64_t track, uint64_t monotonic_ns, std::string_view name,
                               const TraceEventDetails& details) {
  Event(EventType::kSliceBegin, track, monotonic_ns, name, details, nullptr);
}

void PerfettoTrace::SliceEnd(uint64_t track, uint64_t monotonic_ns,
                             const TraceEventDetails& details) {
  Event(EventType::kSliceEnd, track, monotonic_ns, {}, details, nullptr);
}

void PerfettoTrace::Instant(uint64_t track, uint64_t monotonic_ns, std::string_view name,
                            const TraceEventDetails& details) {
  Event(EventType::kInstant, track, monotonic_ns, name, details, nullptr);
}

void PerfettoTrace::Counter(uint64_t track, uint64_t monotonic_ns, int64_t value) {
  Event(EventType::kCounter, track, monotonic_ns, {}, {}, &value);
}

Result<void> WriteTraceFile(const std::string& path, std::string_view bytes) {
  const std::string temporary = path + ".partial";
  UniqueFd fd(::open(temporary.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
  if (!fd) return SystemError("open " + temporary);
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::write(fd.get(), bytes.data() + done, bytes.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      const int err = errno;
      ::unlink(temporary.c_str());
      return SystemError("write " + temporary, err);
    }
    done += static_cast<size_t>(n);
  }
  if (::close(fd.release()) != 0) {
    const int err = errno;
    ::unlink(temporary.c_str());
    return SystemError("close " + temporary, err);
  }
  if (std::rename(temporary.c_str(), path.c_str()) != 0) {
    const int err = errno;
    ::unlink(temporary.c_str());
    return SystemError("rename " + temporary + " to " + path, err);
  }
  return {};
}

}  // namespace xdpfwd
