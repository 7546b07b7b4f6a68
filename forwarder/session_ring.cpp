// The access log's shared-memory ring (see session_ring.h).
#include "forwarder/session_ring.h"

#include <netinet/in.h>

#include <cstring>

namespace xdpfwd {

// Producer and consumer indexes on cache lines of their own, so that neither end's writes
// invalidate the line the other end writes. Indexes run freely; a slot is index & mask.
struct SessionRing::Header {
  alignas(64) std::atomic<uint64_t> head;  // next record the producer writes
  std::atomic<uint64_t> dropped;           // producer only
  alignas(64) std::atomic<uint64_t> tail;  // next record the consumer reads
  alignas(64) uint32_t mask;
  SessionRecord* records() { return reinterpret_cast<SessionRecord*>(this + 1); }
};

size_t SessionRing::MemoryBytes(uint32_t records) {
  return sizeof(Header) + sizeof(SessionRecord) * records;
}

void SessionRing::Format(void* memory, uint32_t records) {
  auto* h = new (memory) Header{};
  h->mask = records - 1;
}

SessionRing SessionRing::Attach(void* memory) { return SessionRing(static_cast<Header*>(memory)); }

bool SessionRing::Push(const SessionRecord& record) noexcept {
  const uint64_t head = header_->head.load(std::memory_order_relaxed);
  // Acquire: the consumer's reads of the slot we are about to reuse are done.
  if (head - header_->tail.load(std::memory_order_acquire) > header_->mask) {
    header_->dropped.store(header_->dropped.load(std::memory_order_relaxed) + 1,
                           std::memory_order_relaxed);
    return false;
  }
  header_->records()[head & header_->mask] = record;
  // Release: the record's bytes are visible before the index that publishes them.
  header_->head.store(head + 1, std::memory_order_release);
  return true;
}

size_t SessionRing::Pop(SessionRecord* out, size_t max) noexcept {
  const uint64_t tail = header_->tail.load(std::memory_order_relaxed);
  const uint64_t head = header_->head.load(std::memory_order_acquire);  // pairs with Push
  size_t n = 0;
  while (n < max && tail + n != head) {
    out[n] = header_->records()[(tail + n) & header_->mask];
    ++n;
  }
  // Release: our copies are done before the producer may write those slots again.
  header_->tail.store(tail + n, std::memory_order_release);
  return n;
}

uint64_t SessionRing::dropped() const noexcept {
  return header_->dropped.load(std::memory_order_relaxed);
}

uint32_t SessionRing::capacity() const noexcept { return header_->mask + 1; }

SessionRecord ToRecord(const SessionEvent& event, uint64_t monotonic_ns) {
  SessionRecord r{};
  r.monotonic_ns = monotonic_ns;
  r.bytes_in = event.bytes_in;
  r.bytes_out = event.bytes_out;
  r.rule_id = event.rule_id;
  r.result = static_cast<uint8_t>(event.result);
  r.client_family = static_cast<uint8_t>(event.client.ss_family);
  if (event.client.ss_family == AF_INET) {
    const auto* sin = reinterpret_cast<const sockaddr_in*>(&event.client);
    std::memcpy(r.client_addr, &sin->sin_addr, 4);
    r.client_port = ntohs(sin->sin_port);
  } else if (event.client.ss_family == AF_INET6) {
    const auto* sin6 = reinterpret_cast<const sockaddr_in6*>(&event.client);
    std::memcpy(r.client_addr, &sin6->sin6_addr, 16);
    r.client_port = ntohs(sin6->sin6_port);
  }
  return r;
}

SessionEvent FromRecord(const SessionRecord& record, int64_t realtime_offset_ns) {
  SessionEvent e;
  e.unix_ns = static_cast<int64_t>(record.monotonic_ns) + realtime_offset_ns;
  e.rule_id = record.rule_id;
  e.bytes_in = record.bytes_in;
  e.bytes_out = record.bytes_out;
  e.result = static_cast<SessionResult>(record.result);
  if (record.client_family == AF_INET) {
    auto* sin = reinterpret_cast<sockaddr_in*>(&e.client);
    sin->sin_family = AF_INET;
    std::memcpy(&sin->sin_addr, record.client_addr, 4);
    sin->sin_port = htons(record.client_port);
  } else if (record.client_family == AF_INET6) {
    auto* sin6 = reinterpret_cast<sockaddr_in6*>(&e.client);
    sin6->sin6_family = AF_INET6;
    std::memcpy(&sin6->sin6_addr, record.client_addr, 16);
    sin6->sin6_port = htons(record.client_port);
  }
  return e;
}

}  // namespace xdpfwd
