// What the two halves of SteerProgram share, private to xdp/: the skeleton that owns the
// loaded program and its maps, and the flow map's batched walk. steer_attach.cpp loads,
// attaches and detaches the program and tells whose it is; steer_maps.cpp fills and reads its
// maps.
#pragma once

#include <bpf/bpf.h>

#include <cerrno>
#include <cstdint>
#include <vector>

#include "steer.skel.h"
#include "xdp/steer.h"

namespace xdpfwd {

// A walk over the flow map in batches (a few syscalls per 4096 entries, where walking key by
// key costs two per entry), resumable: Next visits up to `max_entries` entries from where the
// last call stopped and says whether it reached the end (the next call then starts over). The
// map may change meanwhile: entries added or removed during a walk may or may not be seen, as
// with any walk of a live hash map.
class FlowWalk {
 public:
  template <typename Visit>
  bool Next(int map_fd, uint32_t max_entries, Visit&& visit) {
    keys_.resize(max_entries);
    values_.resize(max_entries);
    uint32_t n = max_entries;
    const int r = bpf_map_lookup_batch(map_fd, in_pass_ ? token_ : nullptr, token_, keys_.data(),
                                       values_.data(), &n, nullptr);
    const int err = r == 0 ? 0 : errno;
    if (r != 0 && err != ENOENT) n = 0;  // not expected: this pass just ends early
    for (uint32_t i = 0; i < n; ++i) visit(keys_[i], values_[i]);
    in_pass_ = r == 0;
    return !in_pass_;
  }
  // Whether the last Next stopped inside a pass (the next call goes on from there).
  bool in_pass() const { return in_pass_; }

 private:
  std::vector<steer_flow_key> keys_;
  std::vector<steer_flow> values_;
  alignas(8) unsigned char token_[16] = {};  // the hash map's batch cursor (a bucket index)
  bool in_pass_ = false;
};

struct SteerProgram::Skeleton {
  steer* s = nullptr;
  ~Skeleton() {
    if (s != nullptr) steer__destroy(s);
  }
};

// The flow map's size for `options` (steer_maps.cpp says why).
uint32_t FlowMapEntries(const SteerOptions& options);
// The per-CPU counters of a program's counter map, summed.
SteerCounters SumCounters(int map_fd);
// Entries in a program's flow map (one whole walk).
size_t CountKeys(int map_fd);

}  // namespace xdpfwd
