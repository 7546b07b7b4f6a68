// The flight recorder's ring: layout, the writer's attach, and the reader's consistent copy
// (see flight_recorder.h).
#include "os/flight_recorder.h"

#include <algorithm>
#include <cstring>
#include <iterator>
#include <new>
#include <string>
#include <system_error>

namespace xdpfwd {

namespace {

constexpr RecorderEventInfo kEventInfo[] = {
#define XDPFWD_RECORDER_INFO(name, text, a0, a1, a2, a3) {text, {a0, a1, a2, a3}},
    XDPFWD_RECORDER_EVENTS(XDPFWD_RECORDER_INFO)
#undef XDPFWD_RECORDER_INFO
};
static_assert(std::size(kEventInfo) == static_cast<size_t>(RecorderEvent::kCount));
constexpr RecorderEventInfo kUnknownEvent = {"unknown", {"arg0", "arg1", "arg2", "arg3"}};

Error LayoutError(std::string what) {
  return Error{std::make_error_code(std::errc::invalid_argument), "flight recorder: " + what};
}

}  // namespace

const RecorderEventInfo& RecorderEventInfoOf(uint16_t kind) {
  return kind < std::size(kEventInfo) ? kEventInfo[kind] : kUnknownEvent;
}

size_t FlightRecorder::MemoryBytes(uint32_t records) {
  return sizeof(RecorderHeader) + sizeof(RecorderRecord) * records;
}

void FlightRecorder::Format(void* memory, uint32_t records) {
  auto* h = new (memory) RecorderHeader{};
  h->magic = kRecorderMagic;
  h->version = kRecorderVersion;
  h->record_bytes = sizeof(RecorderRecord);
  h->capacity = records;
}

FlightRecorder FlightRecorder::Attach(void* memory) {
  FlightRecorder r;
  r.header_ = static_cast<RecorderHeader*>(memory);
  r.slots_ = reinterpret_cast<uint64_t*>(r.header_ + 1);
  r.mask_ = r.header_->capacity - 1;
  // A dead writer's half-written slot (claimed > published) is simply written again.
  r.next_ = r.header_->published.load(std::memory_order_relaxed);
  return r;
}

Result<RecorderSnapshot> ReadRecorder(const void* memory, size_t bytes) {
  if (bytes < sizeof(RecorderHeader)) return LayoutError("smaller than its header");
  // The reader only loads; std::atomic_ref wants a mutable reference even for that.
  auto* header = static_cast<RecorderHeader*>(const_cast<void*>(memory));
  if (header->magic != kRecorderMagic) return LayoutError("no ring here (magic)");
  if (header->version != kRecorderVersion || header->record_bytes != sizeof(RecorderRecord)) {
    return LayoutError("layout version " + std::to_string(header->version) + " with " +
                       std::to_string(header->record_bytes) + "-byte records; this reader knows " +
                       std::to_string(kRecorderVersion) + " with " +
                       std::to_string(sizeof(RecorderRecord)));
  }
  const uint64_t capacity = header->capacity;
  if (capacity == 0 || (capacity & (capacity - 1)) != 0 ||
      FlightRecorder::MemoryBytes(header->capacity) > bytes) {
    return LayoutError("capacity " + std::to_string(capacity) + " does not fit " +
                       std::to_string(bytes) + " bytes as a power of two");
  }
  uint64_t* slots = reinterpret_cast<uint64_t*>(header + 1);

  // Acquire: pairs with the writer's release of `published`; every record before it is whole
  // and visible to the loads below (unless overwritten since, which the claim check catches).
  const uint64_t published = header->published.load(std::memory_order_acquire);
  const uint64_t first = published > capacity ? published - capacity : 0;
  RecorderSnapshot snapshot;
  snapshot.published = published;
  snapshot.records.resize(published - first);
  for (uint64_t position = first; position < published; ++position) {
    const uint64_t* slot = slots + (position & (capacity - 1)) * 4;
    uint64_t words[4];
    // Relaxed: the acquire load above and the fence below give the ordering; atomic loads
    // make the copy racing the writer's stores defined behaviour.
    for (int i = 0; i < 4; ++i) {
      words[i] =
          std::atomic_ref<uint64_t>(const_cast<uint64_t&>(slot[i])).load(std::memory_order_relaxed);
    }
    std::memcpy(&snapshot.records[position - first], words, sizeof(words));
  }
  // Acquire fence: pairs with the writer's release fence between its claim and its slot
  // stores. If any word copied above came from a write that began after `published`, the
  // claim of that write is visible to the load below.
  std::atomic_thread_fence(std::memory_order_acquire);
  const uint64_t claimed = header->claimed.load(std::memory_order_relaxed);
  // A write at position q may have overwritten the slot of q - capacity. Writes up to
  // claimed - 1 may have begun, so positions below claimed - capacity are not to be trusted.
  const uint64_t trusted = claimed > capacity ? claimed - capacity : 0;
  if (trusted > first) {
    const uint64_t drop = std::min(trusted, published) - first;
    snapshot.records.erase(snapshot.records.begin(),
                           snapshot.records.begin() + static_cast<ptrdiff_t>(drop));
  }
  snapshot.lost = published - snapshot.records.size();
  return snapshot;
}

}  // namespace xdpfwd
