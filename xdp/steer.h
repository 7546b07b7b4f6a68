// The steering program as C++ sees it: attach it to one interface (native XDP, generic as a
// logged fallback), fill its listener/flow/socket maps, read its per-reason counters, and
// detach it on destruction. One instance per interface: each has its own maps, because the
// socket map is indexed by that interface's rx queue.
#pragma once

#include <netinet/in.h>

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "os/result.h"
#include "xdp/flow_table.h"
#include "xdp/steer_shared.h"

namespace xdpfwd {

class FlowWalk;         // steer_private.h: a resumable walk over the flow map in batches
class MapElementCount;  // map_count.h: the kernel's element count of one map

enum class SteerReason : uint32_t {
  kRedirectNewFlow = STEER_REDIRECT_NEW_FLOW,
  kRedirectFlow = STEER_REDIRECT_FLOW,
  kPassNotIp = STEER_PASS_NOT_IP,
  kPassTruncated = STEER_PASS_TRUNCATED,
  kPassMalformed = STEER_PASS_MALFORMED,
  kPassFragment = STEER_PASS_FRAGMENT,
  kPassIpOptions = STEER_PASS_IP_OPTIONS,
  kPassNotTcp = STEER_PASS_NOT_TCP,
  kPassUnknownFlow = STEER_PASS_UNKNOWN_FLOW,
  kPassNotListener = STEER_PASS_NOT_LISTENER,
  kPassFlowTableFull = STEER_PASS_FLOW_TABLE_FULL,
  kPassKernelOwns = STEER_PASS_KERNEL_OWNS,
  kPassNoSocket = STEER_PASS_NO_SOCKET,
  kRedirectHandoff = STEER_REDIRECT_HANDOFF,
  kDropNoSocket = STEER_DROP_NO_SOCKET,
  kPassIpv6ExtHeader = STEER_PASS_IPV6_EXT_HEADER,
};
inline constexpr size_t kSteerReasonCount = STEER_NR_REASONS;

// Stable short name for stats output ("redirect_new_flow", "pass_flow_table_full", ...).
std::string_view ReasonName(SteerReason reason);

using SteerCounters = std::array<steer_counter, kSteerReasonCount>;

// An address of either family as the steering maps hold it (the same shape as IpAddress).
struct SteerAddress {
  sa_family_t family = AF_INET;
  in6_addr addr{};  // AF_INET: the IPv4 address in the first 4 bytes, the rest zero

  static SteerAddress V4(in_addr a);
  static SteerAddress V6(const in6_addr& a);
};

// A flow of either family as its packets arrive (source first); ports in host order. Both
// addresses must be of one family.
struct SteerTuple {
  SteerAddress saddr;
  SteerAddress daddr;
  uint16_t sport = 0;
  uint16_t dport = 0;

  static SteerTuple Of(const FlowTuple& t);
};

enum class XdpMode { kNative, kGeneric };
std::string_view ModeName(XdpMode mode);

inline constexpr uint32_t kMaxFlowCapacity = 1u << 24;

struct SteerOptions {
  // Client flows the program steers at once; SYNs beyond it pass to the kernel. The map is
  // sized for these and their backend legs.
  uint32_t flow_capacity = STEER_DEFAULT_FLOW_CAPACITY;
  bool check_kernel_sockets = true;
  bool allow_generic = true;   // fall back to generic (SKB) mode when native attach fails
  bool force_generic = false;  // skip native mode
  // Why generic mode was chosen (force_generic), for the log and why_generic(); empty: the user
  // asked for it.
  std::string generic_reason;
  // N > 0: a new client flow's owner is a hash of its 4-tuple mod N, not its rx queue's worker
  // (generic XDP on an N-queue veth leaves queues empty: the flows are shared out all the
  // same, by handoff). 0: the queue's worker.
  uint32_t hash_owners = 0;
};

class SteerProgram final : public FlowTable {
 public:
  // Attaches to `ifname`. Replaces a stale xdpfwd program left by a process that is gone;
  // refuses (with an error saying what to do) when another live xdpfwd or a foreign program
  // is attached.
  static Result<std::unique_ptr<SteerProgram>> Attach(const std::string& ifname,
                                                      const SteerOptions& options = {});
  // Loads without attaching (BPF_PROG_TEST_RUN fixtures); AttachTo attaches it later.
  static Result<std::unique_ptr<SteerProgram>> Load(const SteerOptions& options = {});
  Result<void> AttachTo(const std::string& ifname);
  ~SteerProgram() override;  // detaches, if the attached program is still this one
  SteerProgram(const SteerProgram&) = delete;
  SteerProgram& operator=(const SteerProgram&) = delete;

  const std::string& ifname() const { return ifname_; }
  int ifindex() const { return ifindex_; }
  XdpMode mode() const { return mode_; }
  // Why the program runs in generic mode ("generic mode requested", the native attach's
  // error); empty in native mode.
  const std::string& why_generic() const { return why_generic_; }
  uint32_t prog_id() const { return prog_id_; }
  int prog_fd() const;

  // A listener of SYNs to `addr` (all zero: any address of its family) and `port`.
  Result<void> AddListener(const SteerAddress& addr, uint16_t port, uint32_t rule_id);
  Result<void> RemoveListener(const SteerAddress& addr, uint16_t port);
  Result<void> AddListener(in_addr addr, uint16_t port, uint32_t rule_id) {  // addr 0 = any
    return AddListener(SteerAddress::V4(addr), port, rule_id);
  }
  Result<void> RemoveListener(in_addr addr, uint16_t port) {
    return RemoveListener(SteerAddress::V4(addr), port);
  }
  // The flow map, for flows of either family. A tuple whose addresses are not of one family
  // (AF_INET or AF_INET6) is an error, or not found.
  Result<void> AddFlow(const SteerTuple& tuple, uint32_t owner, uint32_t rule_id);
  Result<void> RemoveFlow(const SteerTuple& tuple);
  bool RemoveFlowStampedBy(const SteerTuple& tuple, uint64_t stamp_ns,
                           FlowReuse reuse = FlowReuse::kPossible);
  // Removes these entries in one BPF_MAP_DELETE_BATCH (another for what follows an entry
  // already gone), giving a client flow's slot back only through the single calls above: for
  // entries the worker entered (backend legs).
  size_t RemoveFlows(std::span<const SteerTuple> tuples);
  // Flags a client flow as taken by the worker, so ReapStrayFlows leaves it alone.
  Result<void> MarkAccepted(const SteerTuple& tuple, uint32_t owner, uint32_t rule_id,
                            uint64_t stamp_ns);
  std::optional<steer_flow> LookupFlow(const SteerTuple& tuple) const;
  // FlowTable, over the same map: the relay's IPv4 flows.
  Result<void> AddFlow(const FlowTuple& tuple, uint32_t owner, uint32_t rule_id) override {
    return AddFlow(SteerTuple::Of(tuple), owner, rule_id);
  }
  Result<void> RemoveFlow(const FlowTuple& tuple) override {
    return RemoveFlow(SteerTuple::Of(tuple));
  }
  bool RemoveFlowStampedBy(const FlowTuple& tuple, uint64_t stamp_ns, FlowReuse reuse) override {
    return RemoveFlowStampedBy(SteerTuple::Of(tuple), stamp_ns, reuse);
  }
  size_t RemoveFlows(std::span<const FlowTuple> tuples) override;
  Result<void> MarkAccepted(const FlowTuple& tuple, uint32_t owner, uint32_t rule_id,
                            uint64_t stamp_ns) override {
    return MarkAccepted(SteerTuple::Of(tuple), owner, rule_id, stamp_ns);
  }
  std::optional<uint64_t> FlowCreatedNs(const FlowTuple& tuple) const override;
  // The map calls the flow calls above made in this process (the worker's own, in a worker).
  FlowMapCalls map_calls() const override;
  std::optional<steer_flow> LookupFlow(const FlowTuple& tuple) const {
    return LookupFlow(SteerTuple::Of(tuple));
  }
  // Removes client flows never accepted and created before `created_before_ns` (CLOCK_MONOTONIC),
  // giving their slots back to the client budget. Batched map reads; for a control thread.
  size_t ReapStrayFlows(uint64_t created_before_ns);
  // The same over at most `max_entries` entries of the map, from where the last slice stopped:
  // a pass over a large map in slices, so that no one call holds a CPU for long. `pass_done`:
  // this slice reached the end of the map (the next one starts a new pass). A pass is skipped
  // (nothing visited, pass_done) while no unaccepted client entry has been written since the
  // start of a whole pass that left none: only such an entry can become a stray, and an idle
  // million connections would otherwise be walked over and over for nothing.
  struct ReapSlice {
    size_t reaped = 0;
    size_t visited = 0;  // entries this slice read (0: the pass was skipped)
    bool pass_done = false;
  };
  ReapSlice ReapStrayFlowsSlice(uint64_t created_before_ns, uint32_t max_entries);
  // Removes every flow `owner` serves (a worker that died: its connections are gone with its
  // lwIP); their packets then reach the kernel, which resets them. For a control thread.
  size_t RemoveFlowsOwnedBy(uint32_t owner);
  // Entries in the flow map: the kernel's count (MapElementCount: the same cost whatever the map
  // holds) where the kernel gives it, else one whole walk of the map (WalkFlowCount), chosen at
  // Load; flow_count_source() says which.
  size_t FlowCount() const;
  // The same by walking the whole map in batches: what FlowCount falls back to; for tests that
  // check the two agree.
  size_t WalkFlowCount() const;
  // How FlowCount counts, for the start-up line: "the kernel (...)", or "walking the flow map
  // (why the kernel gives no count)".
  std::string flow_count_source() const;
  // Client flows (inserted on SYNs) counted against the flow capacity.
  uint64_t ClientFlowCount() const;
  Result<void> BindQueue(uint32_t queue, int xsk_fd);
  Result<void> UnbindQueue(uint32_t queue);
  // Which worker serves rx queue `queue`: new flows arriving there are stamped with it, and a
  // known flow's packet there whose owner differs counts as redirect_handoff. Every queue is
  // STEER_SOLE_WORKER's until this is called (N workers: docs/stack.md).
  Result<void> SetQueueWorker(uint32_t queue, uint32_t worker);
  SteerCounters ReadCounters() const;

  // Detaches now (also what the destructor does). Safe to call twice.
  void Detach() noexcept;

 private:
  struct Skeleton;
  SteerProgram() = default;

  // Deletes each of `strays` that is still a stray when deleted (see ReapStrayFlows).
  size_t RemoveStrays(const std::vector<steer_flow_key>& strays, uint64_t created_before_ns);
  // The program's count of unaccepted client entries written (steer.bpf.c's
  // unaccepted_writes), and its +1 for an entry userspace puts back unaccepted.
  uint64_t UnacceptedWrites() const;
  void NoteUnacceptedWrite(const steer_flow& put_back);

  std::unique_ptr<Skeleton> skel_;
  std::string ifname_;
  int ifindex_ = 0;
  SteerOptions options_;
  XdpMode mode_ = XdpMode::kNative;
  std::string why_generic_;
  uint32_t prog_id_ = 0;
  bool attached_ = false;
  // ReapStrayFlowsSlice's place in the map, and whether its next pass may be skipped: the last
  // whole pass left no unaccepted client entry (`reap_clean_`) and unaccepted_writes stood at
  // `clean_writes_` when that pass started (it moves with every entry written since).
  std::unique_ptr<FlowWalk> reap_walk_;
  // FlowCount's kernel count; null where the kernel refused it (`flow_count_refused_` says why).
  std::unique_ptr<MapElementCount> flow_count_;
  std::string flow_count_refused_;
  bool reap_clean_ = false;
  uint64_t clean_writes_ = 0;
  uint64_t pass_writes_ = 0;      // unaccepted_writes when the pass under way started
  uint64_t pass_unaccepted_ = 0;  // unaccepted client entries the pass under way left in place
  // Counted by the flow calls (FlowTable's and their SteerTuple forms); atomic because the
  // control process's threads may make some of them too.
  mutable std::atomic<uint64_t> map_syscalls_{0};
  std::atomic<uint64_t> map_batches_{0};
};

// What is attached to an interface, as `xdpfwd-xdp status` shows it.
struct AttachedSteer {
  uint32_t prog_id = 0;
  XdpMode mode = XdpMode::kNative;
  steer_owner owner{};
  bool owner_alive = false;
  size_t flows = 0;
  SteerCounters counters{};
};
// Error if nothing or a foreign program is attached to `ifname`.
Result<AttachedSteer> InspectSteer(const std::string& ifname);
// Detaches a stale xdpfwd program (its owner is gone). Refuses a live owner's or a foreign one.
Result<void> DetachStaleSteer(const std::string& ifname);

}  // namespace xdpfwd
