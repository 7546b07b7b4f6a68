// The fast path's insides, shared by the control process (fast_path.cpp) and the worker
// processes it forks (fast_path_worker.cpp); private to forwarder/. The control process finds
// and attaches the interfaces, then forks one worker per CPU: each worker opens its own AF_XDP
// ports on its queues and runs its own lwIP and relay, and talks to the control process only
// through the SharedMemory below (its slot, and the handoff rings between workers).
#pragma once

#include <netinet/in.h>
#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include "forwarder/fast_path.h"
#include "forwarder/relay.h"
#include "forwarder/session_ring.h"
#include "forwarder/worker_memory.h"
#include "forwarder/worker_rules.h"
#include "os/flight_recorder.h"
#include "os/shared_memory.h"
#include "stack/lwip_netif.h"
#include "stack/rss.h"
#include "stack/xsk_port.h"

namespace xdpfwd {

// One interface as the control process found and attached it.
struct FastPathInterface {
  std::string name;
  int ifindex = 0;
  // The one IPv4 address lwIP answers on here (0: none, only IPv6 rules use the interface).
  in_addr addr{};
  in_addr gateway{};             // next hop for destinations that are not on-link (0: all on-link)
  std::vector<in_addr> aliases;  // more local addresses (--backend-source)
  // The one IPv6 address lwIP answers on here, its on-link prefix and the gateway of what is not
  // on-link (the kernel's route to a backend; none on the client side). :: : no IPv6 rule here.
  Ipv6Interface ipv6;
  std::vector<in6_addr> aliases6;  // more local IPv6 addresses (rules' IPv6 [src=])
  uint32_t queues = 1;             // RX queues: worker w serves those with q mod N == w
  std::unique_ptr<SteerProgram> steer;
  XskPortConfig port_config;  // each worker sets the queue
  LwipNetifConfig netif_config;
  std::optional<RssTable> rss;  // the device's, where readable (not veth): backend ports
  // What the start-up probe socket found, for the description.
  bool zero_copy = false;
  bool multi_buffer = false;
  std::string tx_status;
  bool packet_tx = false;
};

// Where one rule's clients arrive and its backend legs leave: indexes into FastPath::Impl's
// interfaces, and the backend's next hop (primed in the kernel's neighbour table once).
struct RulePlace {
  size_t client = 0;
  size_t backend = 0;
  std::string backend_if;
  std::vector<IpAddress> next_hops;  // one per backend (on-link ones: the backend itself)
  bool prime = false;  // the route's own interface: its next hops are resolved at once
};

// A listen address as the steering program's listener map takes it.
inline SteerAddress SteerListenAddress(const IpAddress& a) {
  return a.is_v6() ? SteerAddress::V6(a.v6()) : SteerAddress::V4(a.v4());
}

enum class WorkerState : uint32_t { kStarting, kReady, kFailed, kExited };

// One worker's connection table for `show sess`, and its `shutdown session` mailbox, in the
// shared memory after the recorders. The control process asks for a listing by raising
// `wanted`; the worker copies kRows at most, a slice per iteration (Relay::ListConnections),
// and then sets `published` to it (release): a reader that saw published == wanted (acquire)
// reads whole rows. A shutdown is one word each way, the question's number in its high half:
// the asker writes (number, Relay's id), the worker answers (number, 1 reset or 0 no such
// connection). A question asked again after a worker did not answer in time cannot mix with
// the late answer to the first: each answer names its question.
struct WorkerConnectionTable {
  static constexpr uint32_t kRows = 16384;
  std::atomic<uint64_t> wanted;
  std::atomic<uint64_t> published;
  uint64_t now_ms;      // the worker's clock when the listing ended: ages count to it
  uint64_t not_listed;  // connections beyond kRows
  uint32_t count;
  uint32_t reserved;
  std::atomic<uint64_t> shutdown_asked;   // number << 32 | the connection's id
  std::atomic<uint64_t> shutdown_answer;  // number << 32 | found
  RelayConnectionInfo rows[kRows];
};

// The halves of a shutdown question or answer.
inline uint32_t ShutdownNumber(uint64_t word) { return static_cast<uint32_t>(word >> 32); }
inline uint32_t ShutdownValue(uint64_t word) { return static_cast<uint32_t>(word); }
inline uint64_t ShutdownWord(uint32_t number, uint32_t value) {
  return uint64_t{number} << 32 | value;
}
static_assert(std::is_trivially_copyable_v<RelayConnectionInfo>);

// The most (interface, queue) counts a worker publishes.
inline constexpr uint32_t kMaxWorkerQueues = 256;
// The most rules a worker publishes counters for apart; the rest are summed as other rules.
inline constexpr uint32_t kMaxWorkerRules = 64;

// One worker's corner of the shared memory. The control process asks for numbers by raising
// `wanted`; the worker writes them and then sets `published` to it (release), and writes
// nothing more until asked again, so a reader that saw published == wanted (acquire) reads a
// consistent set without a lock.
struct WorkerSlot {
  std::atomic<WorkerState> state;
  std::atomic<bool> stop;  // set by the control process: reset connections, exit
  std::atomic<uint64_t> wanted;
  std::atomic<uint64_t> published;
  std::atomic<uint64_t> heartbeat;  // the worker's clock at its last iteration (the watchdog's)
  FastPathCounters counters;
  uint32_t queue_count;
  struct QueueCount {
    uint16_t iface;
    uint16_t queue;
    uint32_t pad;
    uint64_t packets;
  } queues[kMaxWorkerQueues];
  uint32_t rule_count;
  RuleTotals rules[kMaxWorkerRules];
  // The rule table's generation this worker serves (forwarder/worker_rules.h), and how many of
  // its rules lwIP refused to listen for then (its log says which).
  std::atomic<uint64_t> rules_applied;
  uint32_t rules_refused;
  // --tune memory-lock: 0 once the worker locked its memory (or was not asked to), else
  // mlockall's errno (it runs unlocked); written before kReady.
  std::atomic<int32_t> lock_error;
  char error[512];  // kFailed: why, for the control process's message
};
static_assert(std::atomic<WorkerState>::is_always_lock_free &&
              std::atomic<uint64_t>::is_always_lock_free &&
              std::atomic<int32_t>::is_always_lock_free);

struct FastPath::Impl {
  FastPathConfig config;
  uint32_t workers = 1;
  std::vector<int> cpus;     // one per worker, -1: not pinned
  bool cpus_chosen = false;  // picked by xdpfwd (the least busy), not given with --cpus
  std::vector<std::unique_ptr<FastPathInterface>> ifaces;
  // Each rule's listener entry in its client-side interface's steering program (StopAccepting
  // removes them; a reload adds and removes them).
  struct SteeredListener {
    SteerProgram* steer;
    IpEndpoint listen;
  };
  std::vector<SteeredListener> steered_listeners;
  bool accepting = true;  // false once StopAccepting() took every listener away (a drain)
  std::set<std::pair<std::string, IpAddress>> primed;  // next hops resolved so far
  void PrimeOnce(const RulePlace& place);
  std::mutex rules_mu;  // one SetRules or CheckRules at a time
  std::vector<PortRange> backend_ports;
  uint32_t max_connections_per_worker = 0;
  pid_t control_pid = 0;

  // The memory shared with the workers (forwarder/worker_memory.h): a header that says where
  // each region lies, then the slots, the hand-off rings (N > 1 only), each worker's access log
  // ring (with a logfile only), flight recorder (unless off) and connection table.
  SharedMemory shared;
  const WorkerMemoryHeader& layout() const {
    return *reinterpret_cast<const WorkerMemoryHeader*>(shared.data());
  }
  uint8_t* Part(const WorkerMemoryRegion& r, uint32_t w = 0) const {
    return shared.data() + r.offset + r.bytes_each * w;
  }
  WorkerSlot& Slot(uint32_t w) const {
    return *reinterpret_cast<WorkerSlot*>(Part(layout().slots, w));
  }
  uint8_t* Rings() const { return Part(layout().handoff); }
  size_t RingsBytes() const { return layout().handoff.bytes_each; }
  uint8_t* SessionRingMemory(uint32_t w) const { return Part(layout().session_rings, w); }
  // 16,384 records (768 KiB): at 35,000 connections/s, two records each, 230 ms of them, for a
  // writer thread that drains every 10 ms.
  static constexpr uint32_t kSessionRecords = 1u << 14;
  std::vector<SessionRing> session_rings;  // the control process's views
  // Each worker's flight recorder (os/flight_recorder.h). 2^18 records of 32 bytes, 8 MiB a
  // worker: about a second of a worker at full load (an iteration record each), minutes of
  // connection events when it idles.
  static constexpr uint32_t kRecorderRecords = 1u << 18;
  bool recording() const { return layout().recorders.present(); }
  uint8_t* RecorderMemory(uint32_t w) const { return Part(layout().recorders, w); }
  size_t RecorderBytes() const { return layout().recorders.bytes_each; }
  // Each worker's connection table: 2 MiB a worker, its pages touched only by a listing.
  WorkerConnectionTable& Table(uint32_t w) const {
    return *reinterpret_cast<WorkerConnectionTable*>(Part(layout().tables, w));
  }
  std::mutex tables_mu;  // one `show sess` or shutdown at a time
  // The rules every worker serves (forwarder/worker_rules.h).
  uint8_t* RuleMemory() const { return Part(layout().rules); }
  WorkerRuleTable RuleTable() const { return WorkerRuleTable(RuleMemory()); }
  // Every interface's IPv6 address (ifaces' order), and the same put back: what a reload's
  // placing learns is forgotten when the reload does not go through.
  std::vector<Ipv6Interface> Ipv6Addresses() const;
  void RestoreIpv6Addresses(const std::vector<Ipv6Interface>& saved);
  // `rules` as the workers take them (places: each rule's, same order), with every interface's
  // IPv6 address.
  WorkerRuleSet WorkerRules(const std::vector<Rule>& rules, const std::vector<RulePlace>& places,
                            const std::vector<AccessPattern>& global_access) const;

  struct Child {
    pid_t pid = -1;         // -1: not running (exited, being restarted)
    FastPathCounters last;  // its numbers as last published, kept if it dies
    std::vector<QueueRx> last_queues;
    std::vector<RuleTotals> last_rules;
    uint64_t heartbeat = 0;  // the watchdog's last reading, and when it last moved
    std::chrono::steady_clock::time_point moved;
    bool respawn = false;  // dead, and not forked again yet: the monitor's next round tries
  };
  std::mutex mu;  // children, retired, snapshot requests
  // How long Spawn waits for the process's other threads to be between two stretches of work
  // (os/fork_gate.h; a worker restarted while one was in ASan's allocator hung in its first
  // malloc, WorkerDeathTest). Longer only if a thread holds its pass while waiting on another.
  static constexpr std::chrono::milliseconds kForkPatience{2000};
  std::vector<Child> children;
  FastPathCounters retired;  // what dead workers had counted (their gauges left out)
  std::vector<RuleTotals> retired_rules;
  uint64_t restarts = 0;
  FastPathSnapshot final_snapshot;
  bool stopped = false;
  SteerCounters final_steer{};

  // The control thread: stray-flow reaping, watching the workers, restarting one that died.
  std::thread monitor;
  std::mutex monitor_mu;
  std::condition_variable monitor_cv;
  bool monitor_stop = false;  // under monitor_mu
  std::atomic<uint64_t> stray_flows_reaped{0};

  Result<void> Spawn(uint32_t w);  // fork worker w; its slot reset first
  Result<void> WaitReady(uint32_t w, std::chrono::milliseconds limit);
  void StopWorkers();
  void Monitor();
  void Restart(uint32_t w, int status);
  void Respawn(uint32_t w);  // Spawn and WaitReady for a worker that died; retried if not forked
  void Watch(uint32_t w);    // kills worker w if its heartbeat stood still past the watchdog
  // each: per worker, or null
  FastPathSnapshot Collect(std::vector<FastPathSnapshot>* each, FastPath::Flows flows);
  void CountFlows(FastPathSnapshot& s, FastPath::Flows flows) const;
};

// How PlaceRule may change the interfaces. At start: interfaces are added and learn their
// addresses, gateways and --backend-source aliases. At a reload (and its check) they are fixed
// but for an interface's first IPv6 address and its gateway (the workers had none there: they
// add it); a rule that would change anything else is refused with why (fast_path_rules.cpp).
enum class Placing { kStart, kReload };

// Where `rule`'s clients arrive and its backend legs leave, from the kernel's addresses and
// routes.
Result<RulePlace> PlaceRule(FastPath::Impl& impl, const Rule& rule, Placing placing);

// The worker process's life after the fork: ports, lwIP, relay, the busy-poll loop until the
// control process says stop (or is gone), then a clean teardown. Never returns.
[[noreturn]] void RunWorkerProcess(FastPath::Impl& impl, uint32_t index);

}  // namespace xdpfwd
