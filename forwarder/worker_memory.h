// The memory the fast path's control process shares with its worker processes, as one
// versioned layout: a header the control process writes once (magic, version, and where each
// region lies), then the regions, each page-aligned. Every access goes through the header's
// regions, so a region added or resized changes one place, and a reader of another build (or a
// debugger attached to a worker) can check what it reads before trusting an offset.
#pragma once

#include <cstddef>
#include <cstdint>

namespace xdpfwd {

inline constexpr uint32_t kWorkerMemoryMagic = 0x57504458;  // "XDPW" in memory
inline constexpr uint16_t kWorkerMemoryVersion =
    5;  // 2: the rule table; 3, 4: [accept-proxy], [retry-on] in it; 5: shutdown words, TX syscall
        // time

// One region: `count` parts of `bytes_each`, back to back (count 1 for a shared one); 0 bytes:
// not there (the access log's rings without a logfile, the recorder when off).
struct WorkerMemoryRegion {
  uint64_t offset = 0;
  uint64_t bytes_each = 0;
  uint32_t count = 0;
  uint32_t reserved = 0;
  bool present() const { return bytes_each != 0; }
  uint64_t end() const { return offset + bytes_each * count; }
};

// What each region holds (forwarder/fast_path_impl.h has the types): a worker's slot (counters,
// heartbeat, state), the hand-off rings between workers, each worker's access log ring, its
// flight recorder and its connection table for `show sess`, and the rules every worker serves
// (forwarder/worker_rules.h).
struct WorkerMemoryHeader {
  uint32_t magic = kWorkerMemoryMagic;
  uint16_t version = kWorkerMemoryVersion;
  uint16_t workers = 0;
  uint64_t total_bytes = 0;
  WorkerMemoryRegion slots, handoff, session_rings, recorders, tables, rules;
};
static_assert(sizeof(WorkerMemoryHeader) == 160);

// The sizes each region needs (0: none); the header comes first, on a page of its own.
struct WorkerMemoryPlan {
  uint32_t workers = 1;
  size_t slot_bytes = 0;          // per worker
  size_t handoff_bytes = 0;       // all workers together
  size_t session_ring_bytes = 0;  // per worker
  size_t recorder_bytes = 0;      // per worker
  size_t table_bytes = 0;         // per worker
  size_t rules_bytes = 0;         // all workers together

  // Lays the regions out after the header, each part rounded up to `page`.
  WorkerMemoryHeader Layout(size_t page) const {
    auto round = [page](uint64_t n) { return (n + page - 1) / page * page; };
    WorkerMemoryHeader h;
    h.workers = static_cast<uint16_t>(workers);
    uint64_t at = round(sizeof(WorkerMemoryHeader));
    auto place = [&](WorkerMemoryRegion& r, size_t bytes, uint32_t count) {
      r.offset = at;
      r.bytes_each = bytes == 0 ? 0 : round(bytes);
      r.count = count;
      at = r.end();
    };
    place(h.slots, slot_bytes, workers);
    place(h.handoff, handoff_bytes, 1);
    place(h.session_rings, session_ring_bytes, workers);
    place(h.recorders, recorder_bytes, workers);
    place(h.tables, table_bytes, workers);
    place(h.rules, rules_bytes, 1);
    h.total_bytes = at;
    return h;
  }
};

}  // namespace xdpfwd
