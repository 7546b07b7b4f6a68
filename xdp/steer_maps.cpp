// The steering program's maps: listeners, flow entries (the FlowTable the relay uses, and the
// reaping of strays), the rx queues' sockets and workers, and the per-reason counters.
#include "xdp/steer.h"

#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <netinet/in.h>

#include <atomic>
#include <cerrno>
#include <cstddef>
#include <vector>

#include "os/clock.h"
#include "xdp/steer_private.h"

namespace xdpfwd {

// The C++ view of the shared structs must match what the BPF program was compiled with.
static_assert(sizeof(steer_listener_key) == 8 && offsetof(steer_listener_key, port) == 4);
static_assert(sizeof(steer_listener) == 4);
static_assert(sizeof(steer_flow_key) == 12 && offsetof(steer_flow_key, sport) == 8 &&
              offsetof(steer_flow_key, dport) == 10);
static_assert(sizeof(steer_flow) == 32 && offsetof(steer_flow, created_ns) == 8 &&
              offsetof(steer_flow, origin) == 16 && offsetof(steer_flow, flags) == 20 &&
              offsetof(steer_flow, in_place) == 24);
static_assert(sizeof(steer_owner) == 16 && offsetof(steer_owner, start_time) == 8);
static_assert(sizeof(steer_counter) == 16);
static_assert(sizeof(steer_rx_meta) == 8 && offsetof(steer_rx_meta, magic) == 4);

namespace {

steer_flow_key KeyOf(const FlowTuple& t) {
  steer_flow_key key{};
  key.saddr = t.saddr.s_addr;
  key.daddr = t.daddr.s_addr;
  key.sport = htons(t.sport);
  key.dport = htons(t.dport);
  return key;
}

bool IsStray(const steer_flow& v, uint64_t created_before_ns) {
  return v.origin == STEER_FLOW_FROM_SYN && (v.flags & STEER_FLOW_ACCEPTED) == 0 &&
         v.created_ns < created_before_ns;
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
  switch (reason) {
    case SteerReason::kRedirectNewFlow:
      return "redirect_new_flow";
    case SteerReason::kRedirectFlow:
      return "redirect_flow";
    case SteerReason::kPassNotIpv4:
      return "pass_not_ipv4";
    case SteerReason::kPassTruncated:
      return "pass_truncated";
    case SteerReason::kPassMalformed:
      return "pass_malformed";
    case SteerReason::kPassFragment:
      return "pass_fragment";
    case SteerReason::kPassIpOptions:
      return "pass_ip_options";
    case SteerReason::kPassNotTcp:
      return "pass_not_tcp";
    case SteerReason::kPassUnknownFlow:
      return "pass_unknown_flow";
    case SteerReason::kPassNotListener:
      return "pass_not_listener";
    case SteerReason::kPassFlowTableFull:
      return "pass_flow_table_full";
    case SteerReason::kPassKernelOwns:
      return "pass_kernel_owns";
    case SteerReason::kPassNoSocket:
      return "pass_no_socket";
    case SteerReason::kRedirectHandoff:
      return "redirect_handoff";
    case SteerReason::kDropNoSocket:
      return "drop_no_socket";
  }
  return "unknown";
}

Result<void> SteerProgram::AddListener(in_addr addr, uint16_t port, uint32_t rule_id) {
  steer_listener_key key{addr.s_addr, htons(port), 0};
  steer_listener value{rule_id};
  if (bpf_map__update_elem(skel_->s->maps.steer_listeners, &key, sizeof(key), &value, sizeof(value),
                           BPF_ANY) != 0) {
    return SystemError(ifname_ + ": adding listener port " + std::to_string(port));
  }
  return {};
}

Result<void> SteerProgram::RemoveListener(in_addr addr, uint16_t port) {
  steer_listener_key key{addr.s_addr, htons(port), 0};
  if (bpf_map__delete_elem(skel_->s->maps.steer_listeners, &key, sizeof(key), 0) != 0) {
    return SystemError(ifname_ + ": removing listener port " + std::to_string(port));
  }
  return {};
}

Result<void> SteerProgram::AddFlow(const FlowTuple& tuple, uint32_t owner, uint32_t rule_id) {
  const steer_flow_key key = KeyOf(tuple);
  steer_flow value{};
  value.owner = owner;
  value.rule_id = rule_id;
  value.created_ns = MonotonicNs();  // the clock bpf_ktime_get_ns() reads
  value.origin = STEER_FLOW_FROM_WORKER;
  if (bpf_map__update_elem(skel_->s->maps.steer_flows, &key, sizeof(key), &value, sizeof(value),
                           BPF_ANY) != 0) {
    return SystemError(ifname_ + ": adding flow");  // E2BIG: the flow table is full
  }
  return {};
}

Result<void> SteerProgram::RemoveFlow(const FlowTuple& tuple) {
  const steer_flow_key key = KeyOf(tuple);
  steer_flow value{};
  if (bpf_map__lookup_and_delete_elem(skel_->s->maps.steer_flows, &key, sizeof(key), &value,
                                      sizeof(value), 0) != 0) {
    return SystemError(ifname_ + ": removing flow");
  }
  // The program counts the client flows it inserts against its budget; give the slot back.
  if (value.origin == STEER_FLOW_FROM_SYN) std::atomic_ref(skel_->s->bss->syn_flows).fetch_sub(1);
  return {};
}

bool SteerProgram::RemoveFlowStampedBy(const FlowTuple& tuple, uint64_t stamp_ns) {
  const steer_flow_key key = KeyOf(tuple);
  const int fd = bpf_map__fd(skel_->s->maps.steer_flows);
  steer_flow v{};
  // A reused 4-tuple's entry is usually newer already: a lookup says so without touching it.
  if (bpf_map_lookup_elem(fd, &key, &v) != 0 || v.created_ns > stamp_ns) return false;
  // A client SYN the program takes between that lookup and the delete stamps the entry anew
  // and goes on to lwIP; deleted, its connection's next packet would reach the kernel, which
  // resets it (a capture showed a reset that fits: the client's ACK of our SYN-ACK, 50 us
  // after its SYN, met no entry at the moment a removal came due; docs/relay.md). Deleting and
  // reading in one step shows the new stamp, and the entry goes back at once, before that next
  // packet, a round trip later, can arrive.
  if (bpf_map_lookup_and_delete_elem(fd, &key, &v) != 0) return false;
  if (v.created_ns > stamp_ns) {
    if (bpf_map_update_elem(fd, &key, &v, BPF_NOEXIST) == 0) return false;
    // The program entered the 4-tuple afresh meanwhile (another SYN): that entry stays, and
    // counts for itself against the budget.
  }
  if (v.origin == STEER_FLOW_FROM_SYN) std::atomic_ref(skel_->s->bss->syn_flows).fetch_sub(1);
  return v.created_ns <= stamp_ns;
}

Result<void> SteerProgram::MarkAccepted(const FlowTuple& tuple, uint32_t owner, uint32_t rule_id,
                                        uint64_t stamp_ns) {
  const steer_flow_key key = KeyOf(tuple);
  steer_flow value{};
  value.owner = owner;
  value.rule_id = rule_id;
  value.created_ns = stamp_ns;
  value.origin = STEER_FLOW_FROM_SYN;  // it keeps its slot in the client budget
  value.flags = STEER_FLOW_ACCEPTED;
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

size_t SteerProgram::ReapStrayFlows(uint64_t created_before_ns) {
  const int fd = bpf_map__fd(skel_->s->maps.steer_flows);
  std::vector<steer_flow_key> strays;
  ForEachFlow(fd, [&](const steer_flow_key& k, const steer_flow& v) {
    if (IsStray(v, created_before_ns)) strays.push_back(k);
  });
  return RemoveStrays(strays, created_before_ns);
}

SteerProgram::ReapSlice SteerProgram::ReapStrayFlowsSlice(uint64_t created_before_ns,
                                                          uint32_t max_entries) {
  const int fd = bpf_map__fd(skel_->s->maps.steer_flows);
  std::vector<steer_flow_key> strays;
  if (!reap_walk_) reap_walk_ = std::make_unique<FlowWalk>();
  ReapSlice slice;
  slice.pass_done =
      reap_walk_->Next(fd, max_entries, [&](const steer_flow_key& k, const steer_flow& v) {
        if (IsStray(v, created_before_ns)) strays.push_back(k);
      });
  slice.reaped = RemoveStrays(strays, created_before_ns);
  return slice;
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
      (void)bpf_map_update_elem(fd, &k, &v, BPF_NOEXIST);
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
      (void)bpf_map_update_elem(fd, &k, &v, BPF_NOEXIST);
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

std::optional<steer_flow> SteerProgram::LookupFlow(const FlowTuple& tuple) const {
  const steer_flow_key key = KeyOf(tuple);
  steer_flow value{};
  if (bpf_map__lookup_elem(skel_->s->maps.steer_flows, &key, sizeof(key), &value, sizeof(value),
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
  return CountKeys(bpf_map__fd(skel_->s->maps.steer_flows));
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
