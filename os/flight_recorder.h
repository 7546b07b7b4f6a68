// The flight recorder: every fast-path worker keeps its newest events (connection life, TCP
// trouble, its own iterations and stalls) in an overwriting ring in shared memory, always on,
// so that the control process can turn the last moments before a complaint or a crash into a
// Perfetto trace (forwarder/perfetto_trace.h, docs/flight_recorder.md).
#pragma once

#include <atomic>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

#include "os/result.h"

namespace xdpfwd {

// X(name, text in the trace, arg0, arg1, arg2, arg3): what each argument slot holds, "" where
// unused. One list, so the recorder, the trace's names and its annotations never disagree.
// Durations are ns except a gap's (µs: a stopped worker's gap must not wrap at 4.29 s).
// Append only: the numbers are in the rings, read by a control process of another build.
#define XDPFWD_RECORDER_EVENTS(X)                                                                \
  /* A connection's life. Which leg an event belongs to is the record's leg. */                  \
  X(kClientSyn, "client SYN", "rule", "client_port", "", "")                                     \
  X(kClientEstablished, "client handshake done", "rule", "client_port", "", "")                  \
  X(kBackendSynSent, "backend SYN sent", "local_port", "", "", "")                               \
  X(kBackendEstablished, "backend established", "", "", "", "")                                  \
  X(kFirstByteToBackend, "first byte client->backend", "bytes", "", "", "")                      \
  X(kFirstByteToClient, "first byte backend->client", "bytes", "", "", "")                       \
  X(kClientFin, "FIN from client", "", "", "", "")                                               \
  X(kBackendFin, "FIN from backend", "", "", "", "")                                             \
  X(kClientRst, "RST from client", "", "", "", "")                                               \
  X(kBackendRst, "RST from backend", "", "", "", "")                                             \
  /* reason: a SessionResult (forwarder/session_log.h). */                                       \
  X(kConnectionEnd, "connection end", "reason", "", "", "")                                      \
  /* TCP on one leg (the record's leg). */                                                       \
  X(kRetransmit, "retransmission", "segments", "bytes", "", "")                                  \
  X(kRto, "RTO", "rto_ms", "backoff", "", "")                                                    \
  X(kFastRecovery, "fast recovery entered", "cwnd", "ssthresh", "", "")                          \
  /* In: this leg's peer advertised a zero window; out: we advertised one to it. */              \
  X(kZeroWindowIn, "zero window in", "", "", "", "")                                             \
  X(kZeroWindowOut, "zero window out", "", "", "", "")                                           \
  X(kBackpressureOn, "relay backpressure on", "queued_bytes", "", "", "")                        \
  X(kBackpressureOff, "relay backpressure off", "queued_bytes", "", "", "")                      \
  /* The worker itself (connection 0). An iteration is recorded at its end, only if it did */    \
  /* work; a gap when the worker did not run for longer than its threshold, at the gap's end. */ \
  X(kIteration, "iteration", "packets_received", "packets_sent", "ns", "")                       \
  X(kGap, "gap", "gap_us", "minor_faults", "major_faults", "involuntary_switches")               \
  /* This leg's peer held its small segments back for our delayed ACK three times in a row */    \
  /* (Nagle on the peer); its small segments are ACKed at once from now on. stall_us: the */     \
  /* third wait, from the segment before to the one held back. */                                \
  X(kNaglePeer, "Nagle peer: small segments waited for our delayed ACK", "stall_us", "", "", "")

enum class RecorderEvent : uint16_t {
#define XDPFWD_RECORDER_ENUM(name, text, a0, a1, a2, a3) name,
  XDPFWD_RECORDER_EVENTS(XDPFWD_RECORDER_ENUM)
#undef XDPFWD_RECORDER_ENUM
      kCount
};

// What the trace shows for an event, and the name of each argument slot ("" unused). An
// unknown kind (a newer writer) reads as "unknown".
struct RecorderEventInfo {
  std::string_view text;
  std::string_view args[4];
};
const RecorderEventInfo& RecorderEventInfoOf(uint16_t kind);

// Which side of a connection an event is on: the trace draws each leg on a track of its own
// and a flow from the client leg to the backend leg.
enum class RecorderLeg : uint8_t { kWorker = 0, kClient = 1, kBackend = 2 };

// One event, 32 bytes: two records per cache line, and a power of two so that a slot is an
// index & mask, never a division.
struct RecorderRecord {
  uint64_t monotonic_ns;  // CLOCK_MONOTONIC (os/clock.h), read by the caller
  uint32_t connection;    // the worker's id for it (reuse is fine); 0: the worker itself
  uint16_t kind;          // RecorderEvent
  uint8_t leg;            // RecorderLeg
  uint8_t reserved;       // 0
  uint32_t args[4];       // as named in XDPFWD_RECORDER_EVENTS
};
static_assert(sizeof(RecorderRecord) == 32);

// The shared-memory layout a reader checks before it trusts anything: this header on its own
// cache line, then `capacity` records.
inline constexpr uint32_t kRecorderMagic = 0x52444658;  // "XFDR" in memory (little endian)
inline constexpr uint16_t kRecorderVersion = 1;
struct alignas(64) RecorderHeader {
  uint32_t magic;
  uint16_t version;
  uint16_t record_bytes;  // sizeof(RecorderRecord)
  uint32_t capacity;      // records; a power of two
  uint32_t reserved;
  // Positions count records since Format and never wrap (2^64 records: centuries). The writer
  // raises `claimed` before it touches a slot and `published` after; the gap between the two
  // is the one slot that may be half-written, also after the writer died mid-record.
  std::atomic<uint64_t> claimed;
  std::atomic<uint64_t> published;
};
static_assert(sizeof(RecorderHeader) == 64);
static_assert(std::atomic<uint64_t>::is_always_lock_free);  // shared between processes

// The writer's view. One writer per ring (its worker); it never waits, never fails, never
// makes a syscall: a record is six stores, the oldest record is overwritten.
class FlightRecorder {
 public:
  static size_t MemoryBytes(uint32_t records);  // records: a power of two
  // Lays out an empty ring in zeroed, 64-byte aligned memory of MemoryBytes(records).
  static void Format(void* memory, uint32_t records);
  // The writer attaches to a formatted ring, also one a dead writer left: it goes on after the
  // last record that was published.
  static FlightRecorder Attach(void* memory);

  FlightRecorder() = default;  // records nothing until attached
  bool attached() const noexcept { return header_ != nullptr; }

  void Record(uint64_t monotonic_ns, RecorderEvent kind, uint32_t connection, RecorderLeg leg,
              uint32_t arg0 = 0, uint32_t arg1 = 0, uint32_t arg2 = 0, uint32_t arg3 = 0) noexcept;
  void Iteration(uint64_t monotonic_ns, uint32_t packets_received, uint32_t packets_sent,
                 uint64_t ns) noexcept {
    Record(monotonic_ns, RecorderEvent::kIteration, 0, RecorderLeg::kWorker, packets_received,
           packets_sent, Saturate(ns));
  }
  // monotonic_ns: the gap's end. Rare (a gap is past a threshold), so its one division is fine.
  void Gap(uint64_t monotonic_ns, uint64_t gap_ns, uint64_t minor_faults, uint64_t major_faults,
           uint64_t involuntary_switches) noexcept {
    Record(monotonic_ns, RecorderEvent::kGap, 0, RecorderLeg::kWorker, Saturate(gap_ns / 1000),
           Saturate(minor_faults), Saturate(major_faults), Saturate(involuntary_switches));
  }

 private:
  static uint32_t Saturate(uint64_t v) noexcept {
    return v > UINT32_MAX ? UINT32_MAX : static_cast<uint32_t>(v);
  }
  RecorderHeader* header_ = nullptr;
  uint64_t* slots_ = nullptr;  // the records as 64-bit words, stored atomically (see Record)
  uint64_t mask_ = 0;
  uint64_t next_ = 0;  // the position this writer records next; only it writes the counters
};

// A consistent copy of a ring, taken while its writer keeps writing or after it died.
struct RecorderSnapshot {
  std::vector<RecorderRecord> records;  // oldest first
  uint64_t published = 0;               // records the writer ever published
  uint64_t lost = 0;  // published but not in `records`: overwritten before or during the copy
};

// Checks the layout (magic, version, record size, capacity within `bytes`) and copies every
// record that no write overlapped. Another process may be writing the ring meanwhile.
Result<RecorderSnapshot> ReadRecorder(const void* memory, size_t bytes);

inline void FlightRecorder::Record(uint64_t monotonic_ns, RecorderEvent kind, uint32_t connection,
                                   RecorderLeg leg, uint32_t arg0, uint32_t arg1, uint32_t arg2,
                                   uint32_t arg3) noexcept {
  // The record's four words, built in registers: RecorderRecord's layout on a little-endian
  // machine (the layout test pins it). A struct copied word by word compiled to a stack
  // round trip and a loop: 11.5 ns a record instead of 1.3 (docs/flight_recorder.md).
  static_assert(std::endian::native == std::endian::little);
  const uint64_t word1 =
      connection | static_cast<uint64_t>(kind) << 32 | static_cast<uint64_t>(leg) << 48;
  const uint64_t word2 = arg0 | static_cast<uint64_t>(arg1) << 32;
  const uint64_t word3 = arg2 | static_cast<uint64_t>(arg3) << 32;
  const uint64_t position = next_;
  header_->claimed.store(position + 1, std::memory_order_relaxed);
  // Release fence: the claim above is ordered before every word stored below. A reader whose
  // copy saw any of these words then sees the claim after its acquire fence, and discards
  // the slot (a seqlock's write side; Boehm, "Can seqlocks get along with programming
  // language memory models?", 2012). On x86 this is a compiler barrier only.
  std::atomic_thread_fence(std::memory_order_release);
  uint64_t* slot = slots_ + (position & mask_) * 4;
  // Relaxed atomic stores, plain moves on x86: the reader copies concurrently, and atomics
  // make that a race the language defines rather than undefined behaviour.
  std::atomic_ref<uint64_t>(slot[0]).store(monotonic_ns, std::memory_order_relaxed);
  std::atomic_ref<uint64_t>(slot[1]).store(word1, std::memory_order_relaxed);
  std::atomic_ref<uint64_t>(slot[2]).store(word2, std::memory_order_relaxed);
  std::atomic_ref<uint64_t>(slot[3]).store(word3, std::memory_order_relaxed);
  // Release: the slot's words are visible before the count that publishes them.
  header_->published.store(position + 1, std::memory_order_release);
  next_ = position + 1;
}

}  // namespace xdpfwd
