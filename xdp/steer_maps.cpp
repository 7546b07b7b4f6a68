// The steering program's maps: listeners, flow entries (the FlowTable the relay uses, and the
// reaping of strays), the rx queues' sockets and workers, and the per-reason counters.
#include "xdp/steer.h"

#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <netinet/in.h>

#include <atomic>
#include <cerrno>
#include <cstddef>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "os/clock.h"
#include "xdp/map_count.h"
#include "xdp/steer_private.h"

namespace xdpfwd {

// The C++ view of the shared structs must match what the BPF program was compiled with.
static_assert(STEER_AF_INET == AF_INET && STEER_AF_INET6 == AF_INET6);
static_assert(sizeof(steer_listener_key) == 20 && offsetof(steer_listener_key, port) == 16 &&
              offsetof(steer_listener_key, family) == 18);
static_assert(sizeof(steer_listener) == 4);
static_assert(sizeof(steer_flow_key) == 40 && offsetof(steer_flow_key, daddr) == 16 &&
              offsetof(steer_flow_key, sport) == 32 && offsetof(steer_flow_key, dport) == 34 &&
              offsetof(steer_flow_key, family) == 36);
static_assert(sizeof(steer_flow) == 32 && offsetof(steer_flow, created_ns) == 8 &&
              offsetof(steer_flow, origin) == 16 && offsetof(steer_flow, flags) == 20 &&
              offsetof(steer_flow, in_place) == 24);
// One reason per X-macro entry, numbered 0 to STEER_NR_REASONS - 1 (the names below rely on it).
#define XDPFWD_STEER_REASON_COUNT(name, number, text) +1
static_assert(0 STEER_REASONS(XDPFWD_STEER_REASON_COUNT) == STEER_NR_REASONS);
#undef XDPFWD_STEER_REASON_COUNT
static_assert(sizeof(steer_owner) == 16 && offsetof(steer_owner, start_time) == 8);
static_assert(sizeof(steer_counter) == 16);
static_assert(sizeof(steer_rx_meta) == 8 && offsetof(steer_rx_meta, magic) == 4);

namespace {

// Bytes of an address of `family` in a key: 4 (in word 0) or 16; 0 for any other family.
size_t AddressBytes(sa_family_t family) {
  return family == AF_INET ? 4 : family == AF_INET6 ? 16 : 0;
}

// The flow map's key, or nullopt when the tuple's addresses are not of one known family.
std::optional<steer_flow_key> KeyOf(const SteerTuple& t) {
  const size_t n = AddressBytes(t.saddr.family);
  if (n == 0 || t.daddr.family != t.saddr.family) return std::nullopt;
  steer_flow_key key{};  // zero: an IPv4 key's words 1-3, the padding the hash covers
  std::memcpy(key.saddr, &t.saddr.addr, n);
  std::memcpy(key.daddr, &t.daddr.addr, n);
  key.sport = htons(t.sport);
  key.dport = htons(t.dport);
  key.family = static_cast<uint8_t>(t.saddr.family);
  return key;
}

std::optional<steer_listener_key> ListenerKeyOf(const SteerAddress& addr, uint16_t port) {
  const size_t n = AddressBytes(addr.family);
  if (n == 0) return std::nullopt;
  steer_listener_key key{};
  std::memcpy(key.addr, &addr.addr, n);
  key.port = htons(port);
  key.family = static_cast<uint8_t>(addr.family);
  return key;
}

Error NoFamily(const std::string& ifname, const char* what) {
  return Error{{},
               ifname + ": " + what + ": not an IPv4 or IPv6 address, or two families in one flow"};
}

// A client entry the worker has not accepted (yet): a stray once old enough.
bool IsUnaccepted(const steer_flow& v) {
  return v.origin == STEER_FLOW_FROM_SYN && (v.flags & STEER_FLOW_ACCEPTED) == 0;
}

bool IsStray(const steer_flow& v, uint64_t created_before_ns) {
  return IsUnaccepted(v) && v.created_ns < created_before_ns;
}

// Visits every flow entry (one whole pass of a FlowWalk).
template <typename Visit>
void ForEachFlow(int map_fd, Visit&& visit) {
  FlowWalk walk;
  while (!walk.Next(map_fd, 4096, visit)) {
  }
}

}  // namespace

// The flow map holds the client flows (at most `flow_capacity`, the program's budget) and the
// backend legs' entries the worker adds for them, plus room for the budget's overshoot when
// CPUs race (one entry per CPU at most).
uint32_t FlowMapEntries(const SteerOptions& options) { return 2 * options.flow_capacity + 256; }

SteerCounters SumCounters(int map_fd) {
  SteerCounters total{};
  const int ncpu = libbpf_num_possible_cpus();
  std::vector<steer_counter> per_cpu(static_cast<size_t>(ncpu > 0 ? ncpu : 1));
  for (uint32_t r = 0; r < kSteerReasonCount; ++r) {
    if (bpf_map_lookup_elem(map_fd, &r, per_cpu.data()) != 0) continue;
    for (const steer_counter& c : per_cpu) {
      total[r].packets += c.packets;
      total[r].bytes += c.bytes;
    }
  }
  return total;
}

size_t CountKeys(int map_fd) {
  size_t n = 0;
  ForEachFlow(map_fd, [&n](const steer_flow_key&, const steer_flow&) { ++n; });
  return n;
}

std::string_view ReasonName(SteerReason reason) {
  switch (static_cast<uint32_t>(reason)) {
#define XDPFWD_STEER_REASON_NAME(name, number, text) \
  case STEER_##name:                                 \
    return text;
    STEER_REASONS(XDPFWD_STEER_REASON_NAME)
#undef XDPFWD_STEER_REASON_NAME
  }
  return "unknown";
}

SteerAddress SteerAddress::V4(in_addr a) {
  SteerAddress s;
  s.family = AF_INET;
  std::memcpy(&s.addr, &a, sizeof(a));
  return s;
}

SteerAddress SteerAddress::V6(const in6_addr& a) {
  SteerAddress s;
  s.family = AF_INET6;
  s.addr = a;
  return s;
}

SteerTuple SteerTuple::Of(const FlowTuple& t) {
  auto address = [](const IpAddress& a) {
    return a.is_v6() ? SteerAddress::V6(a.v6()) : SteerAddress::V4(a.v4());
  };
  return {address(t.saddr), address(t.daddr), t.sport, t.dport};
}

Result<void> SteerProgram::AddListener(const SteerAddress& addr, uint16_t port, uint32_t rule_id) {
  const auto key = ListenerKeyOf(addr, port);
  if (!key) return NoFamily(ifname_, "adding a listener");
  steer_listener value{rule_id};
  if (bpf_map__update_elem(skel_->s->maps.steer_listeners, &*key, sizeof(*key), &value,
                           sizeof(value), BPF_ANY) != 0) {
    return SystemError(ifname_ + ": adding listener port " + std::to_string(port));
  }
  return {};
}

Result<void> SteerProgram::RemoveListener(const SteerAddress& addr, uint16_t port) {
  const auto key = ListenerKeyOf(addr, port);
  if (!key) return NoFamily(ifname_, "removing a listener");
  if (bpf_map__delete_elem(skel_->s->maps.steer_listeners, &*key, sizeof(*key), 0) != 0) {
    return SystemError(ifname_ + ": removing listener port " + std::to_string(port));
  }
  return {};
}

Result<void> SteerProgram::AddFlow(const SteerTuple& tuple, uint32_t owner, uint32_t rule_id) {
  const auto found = KeyOf(tuple);
  if (!found) return NoFamily(ifname_, "adding a flow");
  const steer_flow_key key = *found;
  steer_flow value{};
  value.owner = owner;
  value.rule_id = rule_id;
  value.created_ns = MonotonicNs();  // the clock bpf_ktime_get_ns() reads
  value.origin = STEER_FLOW_FROM_WORKER;
  map_syscalls_.fetch_add(1, std::memory_order_relaxed);
  if (bpf_map__update_elem(skel_->s->maps.steer_flows, &key, sizeof(key), &value, sizeof(value),
                           BPF_ANY) != 0) {
    return SystemError(ifname_ + ": adding flow");  // E2BIG: the flow table is full
  }
  return {};
}

Result<void> SteerProgram::RemoveFlow(const SteerTuple& tuple) {
  const auto found = KeyOf(tuple);
  if (!found) return NoFamily(ifname_, "removing a flow");
  const steer_flow_key key = *found;
  steer_flow value{};
  map_syscalls_.fetch_add(1, std::memory_order_relaxed);
  if (bpf_map__lookup_and_delete_elem(skel_->s->maps.steer_flows, &key, sizeof(key), &value,
                                      sizeof(value), 0) != 0) {
    return SystemError(ifname_ + ": removing flow");
  }
  // The program counts the client flows it inserts against its budget; give the slot back.
  if (value.origin == STEER_FLOW_FROM_SYN) std::atomic_ref(skel_->s->bss->syn_flows).fetch_sub(1);
  return {};
}

bool SteerProgram::RemoveFlowStampedBy(const SteerTuple& tuple, uint64_t stamp_ns,
                                       FlowReuse reuse) {
  const auto found = KeyOf(tuple);
  if (!found) return false;
  const steer_flow_key key = *found;
  const int fd = bpf_map__fd(skel_->s->maps.steer_flows);
  steer_flow v{};
  // A reused 4-tuple's entry is usually newer already: a lookup says so without touching it.
  // Not needed where no newer connection has reached the worker's lwIP (FlowReuse::kNone):
  // then nothing but that connection's SYN can arrive on the tuple (no SYN-ACK has left for
  // it), and the entry goes back below before lwIP has even read the SYN.
  if (reuse == FlowReuse::kPossible) {
    map_syscalls_.fetch_add(1, std::memory_order_relaxed);
    if (bpf_map_lookup_elem(fd, &key, &v) != 0 || v.created_ns > stamp_ns) return false;
  }
  // A client SYN the program takes between that lookup and the delete stamps the entry anew
  // and goes on to lwIP; deleted, its connection's next packet would reach the kernel, which
  // resets it (a capture showed a reset that fits: the client's ACK of our SYN-ACK, 50 us
  // after its SYN, met no entry at the moment a removal came due; docs/relay.md). Deleting and
  // reading in one step shows the new stamp, and the entry goes back at once, before that next
  // packet, a round trip later, can arrive.
  map_syscalls_.fetch_add(1, std::memory_order_relaxed);
  if (bpf_map_lookup_and_delete_elem(fd, &key, &v) != 0) return false;
  if (v.created_ns > stamp_ns) {
    map_syscalls_.fetch_add(1, std::memory_order_relaxed);
    if (bpf_map_update_elem(fd, &key, &v, BPF_NOEXIST) == 0) {
      NoteUnacceptedWrite(v);
      return false;
    }
    // The program entered the 4-tuple afresh meanwhile (another SYN): that entry stays, and
    // counts for itself against the budget.
  }
  if (v.origin == STEER_FLOW_FROM_SYN) std::atomic_ref(skel_->s->bss->syn_flows).fetch_sub(1);
  return v.created_ns <= stamp_ns;
}

Result<void> SteerProgram::MarkAccepted(const SteerTuple& tuple, uint32_t owner, uint32_t rule_id,
                                        uint64_t stamp_ns) {
  const auto found = KeyOf(tuple);
  if (!found) return NoFamily(ifname_, "marking a flow accepted");
  const steer_flow_key key = *found;
  steer_flow value{};
  value.owner = owner;
  value.rule_id = rule_id;
  value.created_ns = stamp_ns;
  value.origin = STEER_FLOW_FROM_SYN;  // it keeps its slot in the client budget
  value.flags = STEER_FLOW_ACCEPTED;
  map_syscalls_.fetch_add(1, std::memory_order_relaxed);
  // In place: the connection's next packet, a few microseconds behind the ACK that completed
  // it, must find the entry while it changes. Replaced (a new element at the bucket's head,
  // then the old one unlinked), it could be missed by a lookup already past the head, and the
  // packet would pass to the kernel, which resets the connection (docs/relay.md).
  if (bpf_map__update_elem(skel_->s->maps.steer_flows, &key, sizeof(key), &value, sizeof(value),
                           BPF_EXIST | BPF_F_LOCK) != 0) {
    return SystemError(ifname_ + ": marking a flow accepted");
  }
  return {};
}

size_t SteerProgram::RemoveFlows(std::span<const SteerTuple> tuples) {
  const int fd = bpf_map__fd(skel_->s->maps.steer_flows);
  std::vector<steer_flow_key> keys;
  keys.reserve(tuples.size());
  for (const SteerTuple& t : tuples) {
    if (const auto key = KeyOf(t)) keys.push_back(*key);
  }
  size_t removed = 0;
  // The kernel deletes the keys in order and stops at the first it cannot (ENOENT: gone
  // already), saying how many it went through: the rest follow in another call.
  for (size_t at = 0; at < keys.size();) {
    auto count = static_cast<uint32_t>(keys.size() - at);
    map_syscalls_.fetch_add(1, std::memory_order_relaxed);
    map_batches_.fetch_add(1, std::memory_order_relaxed);
    const int r = bpf_map_delete_batch(fd, &keys[at], &count, nullptr);
    removed += count;
    at += count;
    if (r == 0) break;
    if (errno != ENOENT) break;  // nothing else is expected; the lingering entries stay
    ++at;                        // the one gone already
  }
  return removed;
}

size_t SteerProgram::RemoveFlows(std::span<const FlowTuple> tuples) {
  std::vector<SteerTuple> steer;
  steer.reserve(tuples.size());
  for (const FlowTuple& t : tuples) steer.push_back(SteerTuple::Of(t));
  return RemoveFlows(std::span<const SteerTuple>(steer));
}

FlowMapCalls SteerProgram::map_calls() const {
  return FlowMapCalls{map_syscalls_.load(std::memory_order_relaxed),
                      map_batches_.load(std::memory_order_relaxed)};
}

size_t SteerProgram::ReapStrayFlows(uint64_t created_before_ns) {
  const int fd = bpf_map__fd(skel_->s->maps.steer_flows);
  std::vector<steer_flow_key> strays;
  ForEachFlow(fd, [&](const steer_flow_key& k, const steer_flow& v) {
    if (IsStray(v, created_before_ns)) strays.push_back(k);
  });
  return RemoveStrays(strays, created_before_ns);
}

// A pass that left no unaccepted entry saw every entry that was in the map when it started
// (entries do not move between buckets). An unaccepted one written since counts itself in
// unaccepted_writes after it is in the map, so while that count stands where it stood at the
// pass's start, no entry can have become a stray. Measured at 200,000 idle connections: the
// walks were ~58% of the control process's CPU while they closed (docs/benchmarks.md).
SteerProgram::ReapSlice SteerProgram::ReapStrayFlowsSlice(uint64_t created_before_ns,
                                                          uint32_t max_entries) {
  const int fd = bpf_map__fd(skel_->s->maps.steer_flows);
  std::vector<steer_flow_key> strays;
  if (!reap_walk_) reap_walk_ = std::make_unique<FlowWalk>();
  ReapSlice slice;
  if (!reap_walk_->in_pass()) {
    const uint64_t writes = UnacceptedWrites();
    if (reap_clean_ && writes == clean_writes_) {
      slice.pass_done = true;
      return slice;
    }
    pass_writes_ = writes;
    pass_unaccepted_ = 0;
  }
  slice.pass_done =
      reap_walk_->Next(fd, max_entries, [&](const steer_flow_key& k, const steer_flow& v) {
        ++slice.visited;
        if (!IsUnaccepted(v)) return;
        if (v.created_ns < created_before_ns) {
          strays.push_back(k);
        } else {
          ++pass_unaccepted_;
        }
      });
  slice.reaped = RemoveStrays(strays, created_before_ns);
  pass_unaccepted_ += strays.size() - slice.reaped;  // put back, or gone meanwhile: not known clean
  if (slice.pass_done) {
    reap_clean_ = pass_unaccepted_ == 0;
    clean_writes_ = pass_writes_;
  }
  return slice;
}

uint64_t SteerProgram::UnacceptedWrites() const {
  return std::atomic_ref(skel_->s->bss->unaccepted_writes).load(std::memory_order_acquire);
}

void SteerProgram::NoteUnacceptedWrite(const steer_flow& put_back) {
  if (IsUnaccepted(put_back)) std::atomic_ref(skel_->s->bss->unaccepted_writes).fetch_add(1);
}

size_t SteerProgram::RemoveStrays(const std::vector<steer_flow_key>& strays,
                                  uint64_t created_before_ns) {
  const int fd = bpf_map__fd(skel_->s->maps.steer_flows);
  size_t reaped = 0;
  for (const steer_flow_key& k : strays) {
    steer_flow v{};
    if (bpf_map_lookup_and_delete_elem(fd, &k, &v) != 0) continue;  // gone meanwhile
    if ((v.flags & STEER_FLOW_ACCEPTED) != 0 || v.origin != STEER_FLOW_FROM_SYN ||
        v.created_ns >= created_before_ns) {
      // Accepted, replaced, or stamped by a new SYN between the scan and the delete: put it
      // back as it was.
      if (bpf_map_update_elem(fd, &k, &v, BPF_NOEXIST) == 0) NoteUnacceptedWrite(v);
      continue;
    }
    std::atomic_ref(skel_->s->bss->syn_flows).fetch_sub(1);
    ++reaped;
  }
  return reaped;
}

size_t SteerProgram::RemoveFlowsOwnedBy(uint32_t owner) {
  const int fd = bpf_map__fd(skel_->s->maps.steer_flows);
  std::vector<steer_flow_key> owned;
  ForEachFlow(fd, [&](const steer_flow_key& k, const steer_flow& v) {
    if (v.owner == owner) owned.push_back(k);
  });
  size_t removed = 0;
  for (const steer_flow_key& k : owned) {
    steer_flow v{};
    if (bpf_map_lookup_and_delete_elem(fd, &k, &v) != 0) continue;  // gone meanwhile
    if (v.owner != owner) {  // a new connection on the same 4-tuple since the scan
      if (bpf_map_update_elem(fd, &k, &v, BPF_NOEXIST) == 0) NoteUnacceptedWrite(v);
      continue;
    }
    if (v.origin == STEER_FLOW_FROM_SYN) std::atomic_ref(skel_->s->bss->syn_flows).fetch_sub(1);
    ++removed;
  }
  return removed;
}

uint64_t SteerProgram::ClientFlowCount() const {
  return std::atomic_ref(skel_->s->bss->syn_flows).load(std::memory_order_relaxed);
}

std::optional<steer_flow> SteerProgram::LookupFlow(const SteerTuple& tuple) const {
  const auto key = KeyOf(tuple);
  if (!key) return std::nullopt;
  steer_flow value{};
  map_syscalls_.fetch_add(1, std::memory_order_relaxed);
  if (bpf_map__lookup_elem(skel_->s->maps.steer_flows, &*key, sizeof(*key), &value, sizeof(value),
                           0) != 0) {
    return std::nullopt;
  }
  return value;
}

std::optional<uint64_t> SteerProgram::FlowCreatedNs(const FlowTuple& tuple) const {
  const auto flow = LookupFlow(tuple);
  if (!flow) return std::nullopt;
  return flow->created_ns;
}

size_t SteerProgram::FlowCount() const {
  if (flow_count_) {
    if (const std::optional<uint64_t> n = flow_count_->Read()) return *n;
  }
  return WalkFlowCount();
}

size_t SteerProgram::WalkFlowCount() const {
  return CountKeys(bpf_map__fd(skel_->s->maps.steer_flows));
}

std::string SteerProgram::flow_count_source() const {
  if (flow_count_) return "the kernel (bpf_map_sum_elem_count)";
  return "walking the flow map (" + flow_count_refused_ + ")";
}

Result<void> SteerProgram::BindQueue(uint32_t queue, int xsk_fd) {
  if (queue >= STEER_MAX_QUEUES) {
    return Error{{},
                 ifname_ + ": queue " + std::to_string(queue) + " is above the " +
                     std::to_string(STEER_MAX_QUEUES) + " the program supports"};
  }
  uint32_t fd = static_cast<uint32_t>(xsk_fd);
  if (bpf_map__update_elem(skel_->s->maps.steer_xsks, &queue, sizeof(queue), &fd, sizeof(fd),
                           BPF_ANY) != 0) {
    return SystemError(ifname_ + ": binding the AF_XDP socket of queue " + std::to_string(queue));
  }
  return {};
}

Result<void> SteerProgram::UnbindQueue(uint32_t queue) {
  if (bpf_map__delete_elem(skel_->s->maps.steer_xsks, &queue, sizeof(queue), 0) != 0) {
    return SystemError(ifname_ + ": unbinding queue " + std::to_string(queue));
  }
  return {};
}

Result<void> SteerProgram::SetQueueWorker(uint32_t queue, uint32_t worker) {
  if (queue >= STEER_MAX_QUEUES) {
    return Error{{},
                 ifname_ + ": queue " + std::to_string(queue) + " is above the " +
                     std::to_string(STEER_MAX_QUEUES) + " the program supports"};
  }
  if (bpf_map__update_elem(skel_->s->maps.steer_queue_workers, &queue, sizeof(queue), &worker,
                           sizeof(worker), BPF_ANY) != 0) {
    return SystemError(ifname_ + ": assigning queue " + std::to_string(queue) + " to worker " +
                       std::to_string(worker));
  }
  return {};
}

SteerCounters SteerProgram::ReadCounters() const {
  return SumCounters(bpf_map__fd(skel_->s->maps.steer_counters));
}

}  // namespace xdpfwd
