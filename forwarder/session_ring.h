// The access log's records from a fast-path worker to the control process: a single-producer
// single-consumer ring of fixed 48-byte records in memory both processes map (the workers'
// SharedMemory). The worker never waits and never makes a syscall for it: a full ring drops the
// record and counts it. The control process drains it from its log thread.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "forwarder/session_log.h"

namespace xdpfwd {

// A SessionEvent without sockaddr_storage's 128 bytes: the client as family, port and 16
// address bytes, the time as the worker's monotonic clock (converted by the consumer).
struct SessionRecord {
  uint64_t monotonic_ns;
  uint64_t bytes_in;
  uint64_t bytes_out;
  uint32_t rule_id;
  uint16_t client_port;  // host order
  uint8_t client_family;
  uint8_t result;  // SessionResult
  uint8_t client_addr[16];
};
static_assert(sizeof(SessionRecord) == 48);

SessionRecord ToRecord(const SessionEvent& event, uint64_t monotonic_ns);
// realtime_offset_ns: CLOCK_REALTIME minus CLOCK_MONOTONIC, read by the consumer.
SessionEvent FromRecord(const SessionRecord& record, int64_t realtime_offset_ns);

class SessionRing {
 public:
  static size_t MemoryBytes(uint32_t records);  // records: a power of two
  // Lays out an empty ring in zeroed, 64-byte aligned memory, before either end attaches.
  static void Format(void* memory, uint32_t records);
  // A view of a formatted ring; the worker pushes through its view, the control process pops
  // through its own.
  static SessionRing Attach(void* memory);

  bool Push(const SessionRecord& record) noexcept;  // false: full, counted in dropped()
  size_t Pop(SessionRecord* out, size_t max) noexcept;
  uint64_t dropped() const noexcept;
  uint32_t capacity() const noexcept;

 private:
  struct Header;
  explicit SessionRing(Header* header) : header_(header) {}
  Header* header_ = nullptr;
};

}  // namespace xdpfwd
