// Fast-path set-up and lifetime (see fast_path.h): interface discovery from the kernel, XDP per
// interface, the worker processes (fast_path_worker.cpp) and the control thread that watches
// them.
#include "forwarder/fast_path.h"

#include <net/if.h>
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <mutex>
#include <thread>

#include "forwarder/fast_path_impl.h"
#include "forwarder/link_fit.h"
#include "os/clock.h"
#include "os/cpu_list.h"
#include "os/log.h"
#include "stack/packet_tx.h"
#include "stack/worker.h"
#include "stack/worker_handoff.h"

namespace xdpfwd {
namespace {

// Attaches the steering program and settles what every worker's ports on this interface will
// be, from one probe socket on queue 0 (closed again: each worker opens its own).
Result<void> OpenInterface(FastPath::Impl& impl, FastPathInterface& i) {
  const FastPathConfig& config = impl.config;
  auto mac = InterfaceMac(i.ifindex);
  if (!mac) return mac.error();
  auto mtu = InterfaceMtu(i.ifindex);
  if (!mtu) return mtu.error();
  XskPortConfig& pc = i.port_config;
  pc.ifname = i.name;
  pc.tx_checksum_offload = config.tx_checksum_offload;
  pc.tx_budget = config.tx_budget;
  if (!config.adaptive_fill) pc.fill_floor = pc.ring_size;
  pc.multi_buffer = config.multi_buffer;
  pc.queue = 0;
  auto probe = XskPort::Open(pc);  // whether the sockets take chains decides the attach mode
  if (!probe) return probe.error();
  i.zero_copy = (*probe)->zero_copy();
  i.multi_buffer = (*probe)->multi_buffer();
  i.tx_status = (*probe)->tx_status();
  const uint32_t tx_frame_bytes = (*probe)->tx_frame_bytes();
  probe->reset();
  SteerOptions so = config.steer;
  auto known_driver = InterfaceDriver(i.name);
  const std::string driver = known_driver ? *known_driver : std::string();
  // Generic XDP on a veth reads the sender's TX queue k as RX queue k-1 (queue 0 for k = 0):
  // the last queue gets nothing, queue 0 twice its share (tests/netns/multi_queue_test). With
  // N workers xdpfwd therefore attaches natively there (measured on this 2-core machine,
  // iperf3 -P 8, N = 1 -> 2: native 1.47 -> 2.93 and 1.28 -> 2.45 Gbit/s; generic with flows
  // shared out by hash 2.60 -> 2.56 and 2.38 -> 2.14: the one receiving worker copies
  // everything; docs/stack.md). If the user asks for generic mode, new flows are shared out
  // by a hash of their 4-tuple and the receiving worker hands them to their owner.
  const bool many_on_veth = impl.workers > 1 && driver == "veth";
  if (config.choose_xdp_mode && PreferGenericXdp(driver, i.multi_buffer) && !many_on_veth) {
    so.force_generic = true;
    so.generic_reason = "chosen on " + driver + ": the peer keeps its TSO, segments arrive whole";
  }
  if (many_on_veth && so.force_generic) so.hash_owners = impl.workers;
  auto steer = SteerProgram::Attach(i.name, so);
  if (!steer) return steer.error();
  i.steer = std::move(*steer);
  LinkFacts facts = ReadLinkFacts(i.name, static_cast<uint32_t>(*mtu),
                                  i.steer->mode() == XdpMode::kGeneric, i.steer->why_generic());
  facts.rx_frame_bytes = RxFrameBytes(pc);
  facts.chains = i.multi_buffer;
  facts.tx_frame_bytes = tx_frame_bytes;
  if (auto fit = CheckLinkFit(facts); !fit) return fit.error();
  for (uint32_t q = 0; q < i.queues; ++q) {
    if (auto r = i.steer->SetQueueWorker(q, q % impl.workers); !r) return r.error();
  }
  if (impl.workers > 1) {
    if (auto rss = ReadRssTable(i.name)) {
      i.rss = std::move(*rss);
    } else if (!RssUnavailable(rss.error())) {
      Log("fast path: " + i.name + ": RSS table not usable (" + rss.error().message() +
          "); backend ports are sliced between workers, replies handed over where they land");
    }
  }
  LwipNetifConfig& nc = i.netif_config;
  nc.ifindex = i.ifindex;
  nc.mac = *mac;
  nc.addr = i.addr;
  // A /32 with the route's gateway: on-link destinations only where there is no gateway (the
  // client side), everything through the gateway where the kernel routes the backend via one.
  nc.netmask.s_addr = i.gateway.s_addr == 0 ? 0 : 0xffffffffu;
  nc.gateway = i.gateway;
  nc.mtu = static_cast<uint16_t>(*mtu);
  nc.aliases = i.aliases;
  nc.ipv6 = i.ipv6;  // :: : no IPv6 rule uses this interface
  nc.aliases6 = i.aliases6;
  nc.verify_tcp_checksum = ShouldVerifyTcpChecksum(i.name);
  // Copy mode builds an skb per AF_XDP frame and has no GSO: a packet socket sends each flow's
  // segments of a batch as one GSO packet instead (docs/stack.md, "TX through a packet
  // socket": about twice the bulk throughput on veth). Zero-copy ports keep AF_XDP TX.
  i.packet_tx = config.packet_tx.value_or(!i.zero_copy);
  if (i.packet_tx) {
    // Opened once here (each worker opens its own) so that a refusal is said at start.
    auto packet = PacketTx::Open(i.ifindex, i.name);
    if (!packet && config.packet_tx) return packet.error();
    if (packet) {
      i.tx_status = "TX through a packet socket with GSO";
    } else {
      i.packet_tx = false;
      i.tx_status += " (no packet socket for TX: " + packet.error().message() + ")";
    }
  }
  nc.packet_tx = i.packet_tx;
  nc.small_batches = config.small_batches;
  return {};
}

// How many workers, on which CPUs, and how many connections each may hold: one per --cpus CPU,
// or as many as the interface with the fewest queues has (a worker sends through its own
// queue's socket on every interface, so each needs a queue on each interface).
Result<void> PlanWorkers(FastPath::Impl& impl) {
  const FastPathConfig& config = impl.config;
  uint32_t fewest = STEER_MAX_QUEUES;
  const FastPathInterface* narrowest = nullptr;
  for (const auto& i : impl.ifaces) {
    if (i->queues < fewest) {
      fewest = i->queues;
      narrowest = i.get();
    }
  }
  if (config.cpus.empty()) {
    // Never more spinning workers than CPUs this process may use: on a 2-CPU machine with
    // 4-queue devices, 2 workers of 2 queues each.
    cpu_set_t allowed;
    CPU_ZERO(&allowed);
    const int usable =
        sched_getaffinity(0, sizeof(allowed), &allowed) == 0 ? CPU_COUNT(&allowed) : 1;
    impl.workers = std::clamp<uint32_t>(static_cast<uint32_t>(usable), 1, fewest);
    // Pinned to the least busy of them over a short sample: a spinning worker that migrates
    // takes its caches along and lands beside whatever else runs.
    std::vector<int> candidates;
    for (int c = 0; c < CPU_SETSIZE; ++c) {
      if (CPU_ISSET(c, &allowed)) candidates.push_back(c);
    }
    const auto before = ReadCpuTimes();
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    impl.cpus = LeastBusyCpus(candidates, impl.workers, before, ReadCpuTimes());
    impl.cpus_chosen = true;
    if (impl.cpus.size() != impl.workers) impl.cpus.assign(impl.workers, -1);
  } else {
    impl.workers = static_cast<uint32_t>(config.cpus.size());
    impl.cpus = config.cpus;
    if (impl.workers > fewest) {
      const std::string n = std::to_string(impl.workers);
      return Error{{},
                   "--cpus " + FormatCpuList(config.cpus) + ": " + n + " workers need at least " +
                       n + " RX queues on every interface, and " + narrowest->name + " has " +
                       std::to_string(fewest) + "; raise them (veth: ethtool -L " +
                       narrowest->name + " rx " + n + " tx " + n + "; a NIC: ethtool -L " +
                       narrowest->name + " combined " + n + ") or give fewer CPUs"};
    }
  }
  const uint64_t capacity = LwipConnectionCapacity();
  const uint64_t total =
      config.max_connections.value_or(uint64_t{LwipDefaultConnections()} * impl.workers);
  impl.max_connections_per_worker =
      static_cast<uint32_t>((total + impl.workers - 1) / impl.workers);
  if (impl.max_connections_per_worker > capacity) {
    return Error{{},
                 "fast path: --max-connections " + std::to_string(total) + " is above the " +
                     std::to_string(capacity * impl.workers) + " connections " +
                     std::to_string(impl.workers) + " worker(s) hold (" + std::to_string(capacity) +
                     " each: lwIP's pcb pool, MEMP_NUM_TCP_PCB in "
                     "stack/lwip/lwipopts.h)"};
  }
  return {};
}

// The workers' shared memory (forwarder/worker_memory.h): its header, then each region, each
// formatted before any worker reads it; the rules written into it.
Result<void> FormatWorkerMemory(FastPath::Impl& impl, const std::vector<RulePlace>& places) {
  using Impl = FastPath::Impl;
  const FastPathConfig& config = impl.config;
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  WorkerMemoryPlan plan;
  plan.workers = impl.workers;
  plan.slot_bytes = sizeof(WorkerSlot);
  const size_t rings = WorkerHandoff::MemoryBytes(impl.workers);
  plan.handoff_bytes = rings;
  if (config.log_sessions)
    plan.session_ring_bytes = SessionRing::MemoryBytes(Impl::kSessionRecords);
  if (config.flight_recorder) {
    plan.recorder_bytes = FlightRecorder::MemoryBytes(Impl::kRecorderRecords);
  }
  plan.table_bytes = sizeof(WorkerConnectionTable);
  plan.rules_bytes = WorkerRuleTable::kMemoryBytes;
  const WorkerMemoryHeader layout = plan.Layout(page);
  auto shared = SharedMemory::Create("xdpfwd-workers", layout.total_bytes);
  if (!shared) return shared.error();
  impl.shared = std::move(*shared);
  std::memcpy(impl.shared.data(), &layout, sizeof layout);
  for (uint32_t w = 0; w < impl.workers; ++w) new (&impl.Slot(w)) WorkerSlot{};
  // Zeroed memory is a connection table's empty state (atomics at 0, no rows).
  // Formatted once: a restarted worker goes on in the ring its predecessor left, so that what
  // led to a crash is still there to dump.
  for (uint32_t w = 0; w < impl.workers && impl.recording(); ++w) {
    FlightRecorder::Format(impl.RecorderMemory(w), Impl::kRecorderRecords);
  }
  if (config.log_sessions) {
    for (uint32_t w = 0; w < impl.workers; ++w) {
      SessionRing::Format(impl.SessionRingMemory(w), Impl::kSessionRecords);
      impl.session_rings.push_back(SessionRing::Attach(impl.SessionRingMemory(w)));
    }
  }
  if (rings != 0) {
    if (auto r = WorkerHandoff::Format(impl.Rings(), rings, impl.workers); !r) {
      return r.error();
    }
  }
  // The rules, before any worker reads them.
  WorkerRuleTable::Format(impl.RuleMemory());
  if (auto r = impl.RuleTable().Write(impl.WorkerRules(config.rules, places, config.global_access));
      !r) {
    return r.error();
  }
  return {};
}

// The steering program takes each rule's clients once every worker listens for them; then the
// workers are forked, one at a time, each ready before the next, and the monitor thread starts.
Result<void> Launch(FastPath::Impl& impl, const std::vector<RulePlace>& places) {
  const FastPathConfig& config = impl.config;
  for (size_t k = 0; k < config.rules.size(); ++k) {
    const IpEndpoint listen = config.rules[k].listen.ip();
    FastPathInterface& client = *impl.ifaces[places[k].client];
    if (auto r = client.steer->AddListener(SteerListenAddress(listen.addr), listen.port,
                                           config.rules[k].id);
        !r) {
      return r.error();
    }
    impl.steered_listeners.push_back({client.steer.get(), listen});
  }
  impl.children.resize(impl.workers);
  for (uint32_t w = 0; w < impl.workers; ++w) {
    auto r = impl.Spawn(w);
    if (r) r = impl.WaitReady(w, std::chrono::seconds(15));
    if (!r) {
      impl.StopWorkers();
      return r.error();
    }
  }
  FastPath::Impl* p = &impl;
  impl.monitor = std::thread([p] { p->Monitor(); });
  return {};
}

// The start-up line: each interface as it was attached, the backend ports, the workers.
std::string Describe(const FastPath::Impl& m) {
  const FastPathConfig& config = m.config;
  std::string d;
  for (const auto& i : m.ifaces) {
    if (!d.empty()) d += ", ";
    std::string addrs = i->addr.s_addr != 0 ? ToString(i->addr) : "";
    for (in_addr a : i->aliases) addrs += "+" + ToString(a);
    if (i->ipv6.enabled()) {
      addrs += (addrs.empty() ? "" : " ") + ToString(IpAddress::V6(i->ipv6.addr)) + "/" +
               std::to_string(i->ipv6.prefix_len);
      for (const in6_addr& a : i->aliases6) addrs += "+" + ToString(IpAddress::V6(a));
    }
    const bool generic = i->steer->mode() == XdpMode::kGeneric;
    std::string served =
        std::to_string(i->queues) + (i->queues == 1 ? " RX queue" : " RX queues, all");
    served += m.workers == 1 ? " served" : " served by " + std::to_string(m.workers) + " workers";
    d += i->name + " (" + addrs + ", XDP " + std::string(ModeName(i->steer->mode())) +
         (generic ? " (" + i->steer->why_generic() + ")" : "") + ", " + served + ", " +
         (i->zero_copy ? "zero-copy" : "copy mode") + (i->multi_buffer ? ", multi-buffer RX" : "") +
         ", " + i->tx_status + ")";
  }
  d += "; backend ports " + ToString(m.backend_ports);
  if (m.workers > 1) {
    d += " (split between workers" +
         std::string(std::any_of(m.ifaces.begin(), m.ifaces.end(),
                                 [](const auto& i) { return i->rss.has_value(); })
                         ? " by the NIC's RSS"
                         : "") +
         ")";
  }
  d += "; " + std::to_string(m.workers) + (m.workers == 1 ? " worker" : " workers");
  const bool pinned = m.cpus.front() >= 0;
  d += pinned ? " on CPU" + std::string(m.workers == 1 ? " " : "s ") + FormatCpuList(m.cpus)
              : " (not pinned)";
  if (pinned && m.cpus_chosen) d += " (the least busy; --cpus to choose)";
  d += "; up to " + std::to_string(uint64_t{m.max_connections_per_worker} * m.workers) +
       " connections, " + std::to_string(config.steer.flow_capacity) + " client flows";
  // The flows gauge (show counters, /metrics, the stats line): every interface's program loads
  // its counter alike, so the first one's says how all are counted.
  if (!m.ifaces.empty()) d += "; flows counted by " + m.ifaces.front()->steer->flow_count_source();
  return d;
}

}  // namespace

FastPath::FastPath(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

uint32_t FastPath::MaxConnections() { return LwipConnectionCapacity(); }

uint32_t FastPath::DefaultConnections() { return LwipDefaultConnections(); }

Result<std::unique_ptr<FastPath>> FastPath::Start(const FastPathConfig& config) {
  auto impl = std::make_unique<Impl>();
  impl->config = config;
  impl->control_pid = getpid();
  if (config.rules.empty()) return Error{{}, "fast path: no rules"};
  auto ephemeral = KernelEphemeralPorts();
  if (!ephemeral) return Error{{}, "fast path: " + ephemeral.error().message()};
  if (config.backend_ports.automatic()) {
    impl->backend_ports = DefaultBackendPorts(*ephemeral);
  } else {
    if (auto r = CheckOutsideEphemeral(config.backend_ports, *ephemeral); !r) return r.error();
    impl->backend_ports = {config.backend_ports};
  }

  std::vector<RulePlace> places;
  for (const Rule& rule : config.rules) {
    auto place = PlaceRule(*impl, rule, Placing::kStart);
    if (!place) return place.error();
    impl->PrimeOnce(*place);
    places.push_back(*place);
  }

  if (auto r = PlanWorkers(*impl); !r) return r.error();
  for (auto& i : impl->ifaces) {
    if (auto r = OpenInterface(*impl, *i); !r) return r.error();
  }
  if (auto r = FormatWorkerMemory(*impl, places); !r) return r.error();
  if (auto r = Launch(*impl, places); !r) return r.error();
  std::unique_ptr<FastPath> fp(new FastPath(std::move(impl)));
  fp->description_ = Describe(*fp->impl_);
  return fp;
}

std::vector<int> FastPath::worker_cpus() const { return impl_->cpus; }

std::vector<int> FastPath::worker_pids() const {
  std::lock_guard lock(impl_->mu);
  std::vector<int> pids;
  for (const Impl::Child& c : impl_->children) pids.push_back(c.pid);
  return pids;
}

std::vector<int> FastPath::worker_lock_errors() const {
  std::vector<int> errors;
  for (uint32_t w = 0; w < impl_->workers; ++w) {
    errors.push_back(impl_->Slot(w).lock_error.load(std::memory_order_relaxed));
  }
  return errors;
}

FastPathSnapshot FastPath::Snapshot(std::vector<FastPathSnapshot>* per_worker, Flows flows) {
  return impl_->Collect(per_worker, flows);
}

SteerCounters FastPath::SteerDecisions() const {
  if (impl_->ifaces.empty()) return impl_->final_steer;
  SteerCounters sum{};
  for (const auto& i : impl_->ifaces) {
    const SteerCounters c = i->steer->ReadCounters();
    for (size_t r = 0; r < kSteerReasonCount; ++r) {
      sum[r].packets += c[r].packets;
      sum[r].bytes += c[r].bytes;
    }
  }
  return sum;
}

std::string FastPath::SteerCountersLine() const {
  const SteerCounters sum = SteerDecisions();
  std::string out;
  for (size_t r = 0; r < kSteerReasonCount; ++r) {
    if (sum[r].packets == 0) continue;
    if (!out.empty()) out += ' ';
    out +=
        std::string(ReasonName(static_cast<SteerReason>(r))) + "=" + std::to_string(sum[r].packets);
  }
  return out.empty() ? "(no packets)" : out;
}

void FastPath::StopAccepting() {
  if (!impl_ || impl_->stopped) return;
  impl_->accepting = false;
  while (!impl_->steered_listeners.empty()) {
    StopAccepting(impl_->steered_listeners.back().listen);
  }
}

void FastPath::StopAccepting(const IpEndpoint& listen) {
  if (!impl_ || impl_->stopped) return;
  auto& all = impl_->steered_listeners;
  for (auto it = all.begin(); it != all.end();) {
    if (!(it->listen == listen)) {
      ++it;
      continue;
    }
    if (auto r = it->steer->RemoveListener(SteerListenAddress(listen.addr), listen.port); !r) {
      Log("fast path: stop accepting on " + ToString(listen) + ": " + r.error().message());
    }
    it = all.erase(it);
  }
}

void FastPath::Stop() {
  if (!impl_ || impl_->stopped) return;
  // A last snapshot, so the exit summary has the final numbers; the monitor stops first, so
  // that no worker is restarted while they stop.
  FastPathSnapshot last = impl_->Collect(nullptr, Flows::kNotCounted);
  {
    std::lock_guard lock(impl_->monitor_mu);
    impl_->monitor_stop = true;
  }
  impl_->monitor_cv.notify_all();
  if (impl_->monitor.joinable()) impl_->monitor.join();
  impl_->StopWorkers();
  impl_->final_steer = SteerDecisions();
  impl_->CountFlows(last, Flows::kCounted);  // what the workers left behind, for the exit summary
  {
    std::lock_guard lock(impl_->mu);
    impl_->final_snapshot = std::move(last);
    impl_->stopped = true;
  }
  for (auto& i : impl_->ifaces) {
    if (!i->steer) continue;
    for (uint32_t q = 0; q < i->queues; ++q) (void)i->steer->UnbindQueue(q);
  }
  impl_->ifaces.clear();  // detaches XDP
}

FastPath::~FastPath() { Stop(); }

std::string FastPathSnapshot::RxByQueue() const {
  std::string out;
  for (const QueueRx& q : rx_by_queue) {
    out += " rx_packets." + q.ifname + ".q" + std::to_string(q.queue) + "=" +
           std::to_string(q.packets);
  }
  return out;
}

std::string FastPathSnapshot::Format() const {
  std::string out = relay.Format();
#define XDPFWD_FORMAT(field, kind, name) out += " " name "=" + std::to_string(field);
  XDPFWD_FAST_PATH_COUNTERS(XDPFWD_FORMAT)
#undef XDPFWD_FORMAT
  return out + RxByQueue();
}

void FastPath::DrainSessions(std::vector<SessionEvent>& out) {
  timespec real{}, mono{};
  clock_gettime(CLOCK_REALTIME, &real);
  clock_gettime(CLOCK_MONOTONIC, &mono);
  const int64_t offset =
      (int64_t{real.tv_sec} - mono.tv_sec) * 1'000'000'000 + (int64_t{real.tv_nsec} - mono.tv_nsec);
  SessionRecord batch[256];
  for (SessionRing& ring : impl_->session_rings) {
    for (;;) {
      const size_t n = ring.Pop(batch, std::size(batch));
      for (size_t i = 0; i < n; ++i) out.push_back(FromRecord(batch[i], offset));
      if (n < std::size(batch)) break;
    }
  }
}

uint64_t FastPath::SessionRecordsDropped() const {
  uint64_t dropped = 0;
  for (const SessionRing& ring : impl_->session_rings) dropped += ring.dropped();
  return dropped;
}

}  // namespace xdpfwd
