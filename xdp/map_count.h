// The kernel's own element count of one BPF map, read in a few syscalls whatever the map holds:
// `show counters`, /metrics and the stats line report the flow map's size through it.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>

#include "os/result.h"

namespace xdpfwd {

// bpf_map_sum_elem_count (kernel 6.6+: the per-CPU element counter that hash maps keep,
// preallocated or not, LRU or not), read through a bpf_map iterator (xdp/map_count.bpf.c). A
// read walks the ids of the system's maps (tens), not the map's entries: at 1.75 million flow
// entries the walk it replaces cost the control process 0.4-1.0 s of CPU (docs/benchmarks.md).
// The count is exact while the map stands still; while programs write it, it is a moment's
// value, as a walk's would be.
class MapElementCount {
 public:
  // Loads and attaches the iterator for the map whose id is `map_id`. An error says why the
  // kernel refused it (an older kernel without the kfunc, tracing programs not allowed), for the
  // caller to count another way.
  static Result<std::unique_ptr<MapElementCount>> Load(uint32_t map_id);
  // The same for the map behind `map_fd`.
  static Result<std::unique_ptr<MapElementCount>> LoadForFd(int map_fd);
  ~MapElementCount();
  MapElementCount(const MapElementCount&) = delete;
  MapElementCount& operator=(const MapElementCount&) = delete;

  // The map's element count now; nullopt when the iterator could not be read or no longer
  // finds the map.
  std::optional<uint64_t> Read() const;

 private:
  struct Skeleton;
  MapElementCount();
  std::unique_ptr<Skeleton> skel_;
};

}  // namespace xdpfwd
