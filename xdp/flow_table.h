// The flow entries the fast path's relay keeps in a steering map, as a narrow interface: the
// relay's bookkeeping depends on this, not on the BPF loader. SteerProgram (xdp/steer.h)
// implements it over its flow map; tests implement it in memory.
#pragma once

#include <netinet/in.h>

#include <cstdint>
#include <optional>
#include <span>

#include "os/ip_address.h"
#include "os/result.h"

namespace xdpfwd {

// A flow's 4-tuple as its packets arrive (source first); ports in host order. Both addresses
// are of one family.
struct FlowTuple {
  IpAddress saddr;
  IpAddress daddr;
  uint16_t sport = 0;
  uint16_t dport = 0;
};

// Whether a newer connection may already hold a tuple's entry when its old connection's removal
// comes due: the worker's lwIP has a pcb on the 4-tuple (the client reused it, its handshake
// under way or done). Then the removal looks before it deletes, so that a live connection's
// entry is never out of the map, not even for the moment it takes to put it back.
enum class FlowReuse : uint8_t { kNone, kPossible };

// The map calls a flow table made for the calls below (one bpf() syscall each; a batch counts
// once in syscalls and once in batches).
struct FlowMapCalls {
  uint64_t syscalls = 0;
  uint64_t batches = 0;
};

class FlowTable {
 public:
  virtual ~FlowTable() = default;

  // Enters (or overwrites) a flow served by worker `owner`, stamped with the time of insertion.
  virtual Result<void> AddFlow(const FlowTuple& tuple, uint32_t owner, uint32_t rule_id) = 0;
  // Flags an existing client flow as taken by the worker (so the stray reaper leaves it alone)
  // and stamps it with `stamp_ns` (CLOCK_MONOTONIC; the caller keeps it, to tell at the close
  // whether the entry is still its connection's). An error if the entry is gone.
  virtual Result<void> MarkAccepted(const FlowTuple& tuple, uint32_t owner, uint32_t rule_id,
                                    uint64_t stamp_ns) = 0;
  virtual Result<void> RemoveFlow(const FlowTuple& tuple) = 0;
  // Removes these entries (worker-entered ones: no stamp to check), in as few calls as the table
  // can; an entry already gone is skipped. How many were removed. The steering map takes them in
  // one BPF_MAP_DELETE_BATCH; the default removes them one by one.
  virtual size_t RemoveFlows(std::span<const FlowTuple> tuples) {
    size_t n = 0;
    for (const FlowTuple& t : tuples) n += RemoveFlow(t) ? 1 : 0;
    return n;
  }
  // Removes the tuple's entry unless it was stamped after `stamp_ns` (a SYN or an accept since:
  // a newer connection's entry). True if it was removed. The steering program may stamp it
  // while this runs; such an entry is not lost (SteerProgram puts it back at once). `reuse`:
  // kPossible looks first and leaves a newer entry untouched; kNone deletes and reads in one
  // call, and puts back what a SYN stamped meanwhile.
  virtual bool RemoveFlowStampedBy(const FlowTuple& tuple, uint64_t stamp_ns, FlowReuse reuse) = 0;
  // When the tuple's entry was stamped (CLOCK_MONOTONIC ns, the clock bpf_ktime_get_ns reads),
  // or nullopt if there is none.
  virtual std::optional<uint64_t> FlowCreatedNs(const FlowTuple& tuple) const = 0;
  // What the calls above cost in map calls so far (a steering map's; none in memory).
  virtual FlowMapCalls map_calls() const { return {}; }
};

}  // namespace xdpfwd
