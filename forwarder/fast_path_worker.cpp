// A fast-path worker process (see fast_path_impl.h): forked by the control process, it serves
// the RX queues q with q mod N == its index on every interface, with its own ports, lwIP and
// relay, and publishes its numbers into its shared-memory slot when asked.
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstring>

#include "forwarder/fast_path_impl.h"
#include "os/clock.h"
#include "os/log.h"
#include "stack/lwip_pools.h"
#include "stack/worker.h"
#include "stack/worker_handoff.h"

extern "C" {
#include "lwip/memp.h"
#include "lwip/stats.h"
}

namespace xdpfwd {
namespace {

// The access log's producer end in a worker: each event, stamped with the monotonic clock
// (vDSO, no syscall), goes into the worker's shared ring; a full ring drops it (counted there)
// rather than wait for the control process.
class RingSessionSink final : public SessionSink {
 public:
  explicit RingSessionSink(SessionRing ring) : ring_(ring) {}
  void Record(const SessionEvent& event) noexcept override {
    ring_.Push(ToRecord(event, MonotonicNs()));
  }

 private:
  SessionRing ring_;
};

class WorkerProcess {
 public:
  WorkerProcess(FastPath::Impl& impl, uint32_t index)
      : impl_(impl), index_(index), slot_(impl.Slot(index)), worker_(impl.cpus[index]) {}

  Result<void> Setup();
  // After Setup, before the loop: locks every page mapped now and later (--tune memory-lock).
  Result<void> LockMemory();
  void Run();
  void Teardown();

 private:
  struct Port {
    size_t iface;
    std::unique_ptr<XskPort> port;
  };
  void Publish();
  // `show sess` and `shutdown session` (WorkerConnectionTable): a slice of a listing per
  // iteration while one is asked for; two loads when none is.
  void ServeTable(uint64_t now_ns);
  // The ports of `relay` config's worker_ports: this worker's share of each backend's ports.
  std::vector<uint16_t> PortsToward(const IpAddress& source, const IpEndpoint& backend) const;
  // The shared rule table's rules as the relay serves them, on this process's interfaces.
  std::vector<RelayRule> RelayRules(const std::vector<WorkerRule>& rules) const;
  // A reload: the table's generation moved since the relay took it.
  void TakeRules();
  // The table's IPv6 addresses: an interface's first one (a reload's) goes onto its netif, and
  // into this process's copy of the interface (RelayRules' and PortsToward's), before any rule
  // that answers on it is served. Never replaces an address.
  void TakeIpv6Addresses(const std::vector<Ipv6Interface>& ipv6);

  FastPath::Impl& impl_;
  const uint32_t index_;
  WorkerSlot& slot_;
  std::vector<Port> ports_;
  std::vector<std::unique_ptr<LwipNetif>> netifs_;  // one per interface, impl_.ifaces' order
  std::optional<WorkerHandoff> handoff_;
  std::optional<RingSessionSink> sessions_;  // with an access log only
  FlightRecorder recorder_;                  // records nothing unless attached
  Worker worker_;
  std::unique_ptr<Relay> relay_;
  std::atomic<bool> stop_{false};
  WorkerRuleTable rule_table_{impl_.RuleMemory()};
  uint64_t rules_generation_ = 0;  // the table's generation the relay serves
  uint64_t listing_ = 0;           // the listing being copied (its `wanted`); 0: none
  uint32_t listed_ = 0;            // rows copied so far
};

// Rows a listing copies per iteration: a few microseconds of a worker's time (a pcb's fields
// each), so a table of 16,384 takes 256 iterations and never one long pause. (256 a slice
// measured +48 us on rr p99 with a 10 Hz listing of 10,000 connections: bench/run's watched
// row, docs/observability.md.)
constexpr size_t kListingSlice = 64;

void WorkerProcess::ServeTable(uint64_t now_ns) {
  WorkerConnectionTable& t = impl_.Table(index_);
  if (listing_ == 0) {
    const uint64_t want = t.wanted.load(std::memory_order_acquire);
    if (want != t.published.load(std::memory_order_relaxed)) {
      listing_ = want;
      listed_ = 0;
      relay_->StartListing();
    }
  }
  if (listing_ != 0) {
    size_t n = 0;
    const size_t room = WorkerConnectionTable::kRows - listed_;
    bool done = relay_->ListConnections(t.rows + listed_, std::min(kListingSlice, room), n);
    listed_ += static_cast<uint32_t>(n);
    t.not_listed = 0;
    if (!done && listed_ == WorkerConnectionTable::kRows) {
      const size_t live = relay_->state().connections;
      t.not_listed = live > listed_ ? live - listed_ : 0;
      done = true;
    }
    if (done) {
      t.count = listed_;
      t.now_ms = now_ns / 1'000'000u;
      // Release: the rows and the numbers above before the listing reads as done.
      t.published.store(listing_, std::memory_order_release);
      listing_ = 0;
    }
  }
  const uint64_t question = t.shutdown_asked.load(std::memory_order_acquire);
  const uint32_t number = ShutdownNumber(question);
  if (number != ShutdownNumber(t.shutdown_answer.load(std::memory_order_relaxed))) {
    const bool found = relay_->Shutdown(ShutdownValue(question));
    t.shutdown_answer.store(ShutdownWord(number, found ? 1 : 0), std::memory_order_release);
  }
}

std::vector<uint16_t> WorkerProcess::PortsToward(const IpAddress& source,
                                                 const IpEndpoint& backend) const {
  for (const auto& i : impl_.ifaces) {
    const bool holds =
        source.is_v6()
            ? IpAddress::V6(i->ipv6.addr) == source ||
                  std::any_of(i->aliases6.begin(), i->aliases6.end(),
                              [&](const in6_addr& a) { return IpAddress::V6(a) == source; })
            : i->addr.s_addr == source.v4().s_addr ||
                  std::any_of(i->aliases.begin(), i->aliases.end(),
                              [&](in_addr a) { return a.s_addr == source.v4().s_addr; });
    if (!i->rss || !holds) continue;
    // The backend's replies land on the queue the device's RSS picks: ports whose replies
    // land on one of ours make the handoff rare.
    std::vector<uint32_t> mine;
    for (uint32_t q = index_; q < i->queues; q += impl_.workers) mine.push_back(q);
    auto ports =
        PortsLandingOn(*i->rss, mine, source, backend.addr, backend.port, impl_.backend_ports);
    if (!ports.empty()) return ports;
  }
  return SliceOfPorts(impl_.backend_ports, index_, impl_.workers);
}

std::vector<RelayRule> WorkerProcess::RelayRules(const std::vector<WorkerRule>& rules) const {
  std::vector<RelayRule> out;
  for (const WorkerRule& w : rules) {
    if (w.client_iface >= impl_.ifaces.size() || w.backend_iface >= impl_.ifaces.size()) continue;
    const FastPathInterface& backend_side = *impl_.ifaces[w.backend_iface];
    RelayRule rr;
    rr.id = w.id;
    rr.listen = w.listen;
    rr.backend = w.backend;
    rr.access = w.access;
    rr.proxy = w.proxy;
    rr.accept_proxy = w.accept_proxy;
    rr.retry_empty_response = w.retry_empty_response;
    rr.backend_weight = w.backend_weight;
    rr.more_backends = w.more_backends;
    rr.balance = w.balance;
    // Each family of the rule's backends with no source of its own in the rule (no
    // --backend-source of that family): the backend side's netif's address of that family.
    rr.backend_sources = w.sources;
    for (const sa_family_t family : {sa_family_t{AF_INET}, sa_family_t{AF_INET6}}) {
      const auto of_family = [&](const IpEndpoint& e) { return e.addr.family == family; };
      const bool needed = of_family(w.backend) ||
                          std::any_of(w.more_backends.begin(), w.more_backends.end(),
                                      [&](const RelayBackend& b) { return of_family(b.address); });
      const bool given = std::any_of(w.sources.begin(), w.sources.end(),
                                     [&](const IpAddress& a) { return a.family == family; });
      if (!needed || given) continue;
      rr.backend_sources.push_back(family == AF_INET6 ? IpAddress::V6(backend_side.ipv6.addr)
                                                      : IpAddress(backend_side.addr));
    }
    rr.client_side = impl_.ifaces[w.client_iface]->steer.get();
    rr.backend_side = backend_side.steer.get();
    out.push_back(std::move(rr));
  }
  return out;
}

void WorkerProcess::TakeIpv6Addresses(const std::vector<Ipv6Interface>& ipv6) {
  for (size_t k = 0; k < ipv6.size() && k < netifs_.size() && k < impl_.ifaces.size(); ++k) {
    FastPathInterface& i = *impl_.ifaces[k];
    if (i.ipv6.enabled() || !ipv6[k].enabled()) continue;
    if (netifs_[k]->AddIpv6(ipv6[k])) i.ipv6 = ipv6[k];
  }
}

void WorkerProcess::TakeRules() {
  auto copy = rule_table_.Read();
  if (!copy) return;  // being written: the next iteration reads it
  TakeIpv6Addresses(copy->set.ipv6);
  auto r = relay_->SetRules(RelayRules(copy->set.rules), copy->set.global_access);
  if (!r) Log("worker " + std::to_string(index_) + ": reload: " + r.error().message());
  slot_.rules_refused = r ? 0 : 1;
  rules_generation_ = copy->generation;
  // Release: rules_refused before the control process reads the generation as taken.
  slot_.rules_applied.store(rules_generation_, std::memory_order_release);
}

Result<void> WorkerProcess::Setup() {
  for (size_t k = 0; k < impl_.ifaces.size(); ++k) {
    FastPathInterface& i = *impl_.ifaces[k];
    for (uint32_t q = index_; q < i.queues; q += impl_.workers) {
      XskPortConfig pc = i.port_config;
      pc.queue = q;
      auto port = XskPort::Open(pc);
      if (!port) return port.error();
      if (auto r = i.steer->BindQueue(q, (*port)->fd()); !r) return r.error();
      ports_.push_back(Port{k, std::move(*port)});
    }
  }
  InitLwipOnce();
  if (impl_.workers > 1) {
    auto h = WorkerHandoff::Attach(impl_.Rings(), impl_.RingsBytes(), impl_.workers, index_);
    if (!h) return h.error();
    handoff_ = std::move(*h);
    worker_.SetHandoff(&*handoff_);
  }
  for (size_t k = 0; k < impl_.ifaces.size(); ++k) {
    std::vector<XskPort*> mine;
    for (Port& p : ports_) {
      if (p.iface == k) mine.push_back(p.port.get());
    }
    auto netif = LwipNetif::Create(mine, impl_.ifaces[k]->netif_config);
    if (!netif) return netif.error();
    if (handoff_) (*netif)->SetHandoff(&*handoff_, static_cast<uint16_t>(k));
    netifs_.push_back(std::move(*netif));
    worker_.Add(netifs_.back().get());
  }
  if (impl_.recording()) {
    uint8_t* ring = impl_.RecorderMemory(index_);
    // The control process populated these pages, but a forked process maps shared memory
    // afresh: touched here, not on the first records of the loop (a minor fault each).
    for (size_t at = 0; at < impl_.RecorderBytes(); at += 4096) {
      std::atomic_ref<uint8_t>(ring[at]).fetch_add(0, std::memory_order_relaxed);
    }
    recorder_ = FlightRecorder::Attach(ring);
    worker_.SetRecorder(&recorder_);
  }
  // The rules as the control process last wrote them (a worker restarted after a reload serves
  // the reloaded ones); a write under way is over in microseconds.
  std::optional<WorkerRuleTable::Copy> rules;
  for (int tries = 0; tries < 1000 && !(rules = rule_table_.Read()); ++tries) usleep(1000);
  if (!rules) return Error{{}, "the rule table in shared memory cannot be read"};
  TakeIpv6Addresses(rules->set.ipv6);  // a worker restarted after a reload that added one
  RelayConfig rc;
  rc.rules = RelayRules(rules->set.rules);
  if (recorder_.attached()) rc.recorder = &recorder_;
  rc.health = impl_.config.health;
  rc.global_access = rules->set.global_access;
  if (impl_.layout().session_rings.present()) {
    sessions_.emplace(SessionRing::Attach(impl_.SessionRingMemory(index_)));
    rc.sessions = &*sessions_;
  }
  rc.limits = impl_.config.limits;
  rc.limits.max_connections = impl_.max_connections_per_worker;
  rc.backend_ports = impl_.backend_ports;
  rc.worker = index_;
  if (!impl_.config.zero_copy_relay) rc.zero_copy_refs = 0;
  worker_.HoldOutOfOrderAcks(impl_.config.ooseq_ack_hold);
  if (impl_.workers > 1) {
    rc.worker_ports = [this](const IpAddress& source, const IpEndpoint& backend) {
      return PortsToward(source, backend);
    };
  }
  auto r = Relay::Create(rc);
  if (!r) return r.error();
  relay_ = std::move(*r);
  rules_generation_ = rules->generation;
  slot_.rules_applied.store(rules_generation_, std::memory_order_release);
  return {};
}

// Setup mapped what the loop touches (ports, lwIP's pools, the relay's tables), so from here
// every page is faulted in once and stays: the loop waits for no page fault, not even on a
// host short of memory (docs/operations.md has the cost). Refused (RLIMIT_MEMLOCK without
// CAP_IPC_LOCK), the worker runs unlocked: the host diagnosis says so with the fix. lwIP's pcb
// pool beyond the default cap is the exception: locked as it is first used (stack/lwip_pools.h).
// An error is fatal (that part of the pool could not be mapped back).
Result<void> WorkerProcess::LockMemory() {
  if (!impl_.config.lock_memory) return {};
  int lock_error = 0;
  auto r = LockWorkerMemory(&lock_error);
  slot_.lock_error.store(lock_error, std::memory_order_relaxed);
  return r;
}

void WorkerProcess::Publish() {
  FastPathCounters& s = slot_.counters;
  s = FastPathCounters{};
  s.relay = relay_->counters().Snapshot();
  const RelayState st = relay_->state();
  s.connections = st.connections;
  s.closing_flows = st.closing_flows;
  s.oow_acks = st.oow_acks;
  s.oow_acks_limited = st.oow_acks_limited;
  s.ooseq_dropped = st.ooseq_dropped;
  s.bytes_referenced = st.bytes_referenced;
  s.send_refs = st.send_refs;
  for (auto& n : netifs_) {
    const NetifStats ns = n->stats();
    s.tx_no_neighbor += ns.tx_no_neighbor;
    s.tx_chains += ns.tx_chains;
    s.tx_socket_packets += ns.packet_tx.packets;
    s.tx_socket_segments += ns.packet_tx.segments;
    s.tx_socket_gso += ns.packet_tx.gso_packets;
    s.tx_socket_sends += ns.packet_tx.sends;
    s.worker_tx_syscall_ns += ns.packet_tx.send_ns;
    s.tx_socket_deferred += ns.packet_tx.deferred;
    s.tx_socket_dropped += ns.packet_tx.dropped;
    s.tx_socket_full += ns.packet_tx.full;
    s.tx_singles_af_xdp += ns.tx_singles_af_xdp;
    s.tx_singles_kept_to_packet += ns.tx_singles_kept_to_packet;
    s.tx_refused_flows_retried += ns.tx_refused_flows_retried;
    s.tx_refused_walks += ns.tx_refused_walks;
    s.tx_refused_retry_ns += ns.tx_refused_retry_ns;
    s.rx_copied += ns.rx_copied;
    s.rx_copy_no_pool += ns.rx_copy_no_pool;
    s.next_hops += n->next_hops().size();
  }
  // This worker's own map calls on flow entries (each interface's program, as forked into it).
  for (const auto& i : impl_.ifaces) {
    const FlowMapCalls calls = i->steer->map_calls();
    s.flow_map_syscalls += calls.syscalls;
    s.flow_map_batches += calls.batches;
  }
  uint32_t queues = 0;
  for (Port& p : ports_) {
    const FrameAccount f = p.port->frames();
    s.frames_held += f.held;
    s.fill_ring_frames += f.in_fill;
    s.tx_ring_frames += f.in_tx;
    const XskStats x = p.port->stats();
    s.rx_packets += x.rx_packets;
    s.rx_frames += x.rx_descriptors;
    s.rx_chains += x.rx_chains;
    s.rx_chains_dropped += x.rx_chains_dropped;
    s.tx_packets += x.tx_packets;
    s.tx_kicks += x.tx_kicks;
    s.worker_tx_syscall_ns += x.tx_kick_ns;
    s.tx_checksum_offloaded += x.tx_checksum_offloaded;
    s.xsk_rx_dropped += x.kernel_rx_dropped;
    s.xsk_rx_ring_full += x.kernel_rx_ring_full;
    s.xsk_fill_ring_empty += x.kernel_fill_ring_empty;
    s.fill_depth += x.fill_depth;
    s.fill_depth_grows += x.fill_depth_grows;
    s.rx_ring_waiting += x.rx_ring_waiting;
    if (queues < kMaxWorkerQueues) {
      slot_.queues[queues++] = WorkerSlot::QueueCount{
          static_cast<uint16_t>(p.iface), static_cast<uint16_t>(p.port->queue()), 0, x.rx_packets};
    }
  }
  slot_.queue_count = queues;
  // Each rule apart, up to kMaxWorkerRules; beyond that the last entry sums the rest.
  const auto& by_rule = relay_->rule_counters();
  const bool overflow = by_rule.size() > kMaxWorkerRules;
  uint32_t rules = 0;
  for (size_t i = 0; i < by_rule.size(); ++i) {
    const RelayTotals t = by_rule[i].second->Snapshot();
    if (!overflow || i + 1 < kMaxWorkerRules) {
      slot_.rules[rules++] = RuleTotals{by_rule[i].first, t};
      continue;
    }
    if (i + 1 == kMaxWorkerRules) slot_.rules[rules++] = RuleTotals{RuleTotals::kOtherRules, {}};
    slot_.rules[kMaxWorkerRules - 1].totals += t;
  }
  slot_.rule_count = rules;
  s.lwip_pcbs = lwip_stats.memp[MEMP_TCP_PCB]->used;
  s.lwip_heap_bytes = lwip_stats.mem.used;
  const WorkerStats w = worker_.stats();
  s.minor_faults = w.minor_faults;
  s.involuntary_switches = w.involuntary_switches;
  s.worker_busy_ns = w.busy_ns;
  s.worker_iterations = w.iterations;
  s.lwip_retransmits = w.lwip_tcp_retransmits;
  s.ooseq_acks_held = w.ooseq_acks_held;
  s.ooseq_acks_sent_late = w.ooseq_acks_sent_late;
  s.lwip_drops = w.lwip_ip_drops + w.lwip_tcp_drops;
  s.lwip_pool_errors = w.lwip_memp_errors + w.lwip_heap_errors;
  s.lwip_segment_errors = w.lwip_segment_errors;
  s.lwip_pbuf_pool_errors = w.lwip_pbuf_pool_errors;
  // Release: the numbers above are written before the control process may read them.
  slot_.published.store(slot_.wanted.load(std::memory_order_relaxed), std::memory_order_release);
}

void WorkerProcess::Run() {
  // The control process is this one's parent; if it is gone (killed), nobody will say stop.
  // getppid() is a syscall, so it is asked four times a second, not per iteration.
  uint64_t next_parent_check_ns = 0;
  auto r = worker_.Run(stop_, [this, &next_parent_check_ns](uint64_t now_ns) {
    const bool worked = relay_->Tick(now_ns / 1'000'000u, now_ns);
    slot_.heartbeat.store(now_ns, std::memory_order_relaxed);
    if (slot_.wanted.load(std::memory_order_acquire) !=
        slot_.published.load(std::memory_order_relaxed)) {
      Publish();
    }
    ServeTable(now_ns);
    if (rule_table_.generation() != rules_generation_) TakeRules();
    if (slot_.stop.load(std::memory_order_relaxed)) stop_.store(true, std::memory_order_relaxed);
    if (now_ns >= next_parent_check_ns) {
      next_parent_check_ns = now_ns + 250'000'000u;
      if (getppid() != impl_.control_pid) {
        Log("worker " + std::to_string(index_) + ": the control process is gone; stopping");
        stop_.store(true, std::memory_order_relaxed);
      }
    }
    return worked;
  });
  if (!r) Log("worker " + std::to_string(index_) + ": " + r.error().message());
}

void WorkerProcess::Teardown() {
  if (relay_) {
    relay_.reset();  // resets open connections: let the RSTs go out
    for (int i = 0; i < 3; ++i) worker_.RunOnce();
    worker_.Drain();
  }
  for (Port& p : ports_) (void)impl_.ifaces[p.iface]->steer->UnbindQueue(p.port->queue());
  netifs_.clear();
  ports_.clear();
}

}  // namespace

void RunWorkerProcess(FastPath::Impl& impl, uint32_t index) {
  WorkerSlot& slot = impl.Slot(index);
  // Built in place and never destroyed by the normal exit path: _exit below skips the
  // destructors of everything this process inherited from the control process (its XDP
  // attachments above all, which must outlive any one worker).
  auto* w = new WorkerProcess(impl, index);
  auto fail = [&](const Error& e) {
    w->Teardown();
    const std::string why = e.message();
    const size_t n = std::min(why.size(), sizeof(slot.error) - 1);
    std::memcpy(slot.error, why.data(), n);
    slot.error[n] = '\0';
    slot.state.store(WorkerState::kFailed, std::memory_order_release);
    _exit(1);
  };
  if (auto r = w->Setup(); !r) fail(r.error());
  if (auto r = w->LockMemory(); !r) fail(r.error());
  // Release: lock_error before the control process reads the worker as ready.
  slot.state.store(WorkerState::kReady, std::memory_order_release);
  w->Run();
  w->Teardown();
  slot.state.store(WorkerState::kExited, std::memory_order_release);
  std::fflush(stderr);
  _exit(0);
}

}  // namespace xdpfwd
