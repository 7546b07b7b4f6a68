// Fast-path set-up and lifetime (see fast_path.h): interface discovery from the kernel, XDP per
// interface and AF_XDP per RX queue, the worker thread that owns lwIP and the relay.
#include "forwarder/fast_path.h"

#include <net/if.h>
#include <time.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <future>
#include <mutex>
#include <set>
#include <thread>

#include "forwarder/link_fit.h"
#include "forwarder/relay.h"
#include "os/clock.h"
#include "os/log.h"
#include "stack/lwip_netif.h"
#include "stack/neighbor.h"
#include "stack/worker.h"
#include "stack/xsk_port.h"

extern "C" {
#include "lwip/memp.h"
#include "lwip/stats.h"
}

namespace xdpfwd {
namespace {

// The backend's next hop, resolved by the kernel now, on the starting thread: the first
// connection's SYN then finds it in the kernel's table, where it would otherwise wait on the
// worker for a resolution (NextHopCache::kRetryMs). Peers that send us a SYN or SYN-ACK are
// learned from it; nothing sends before our first SYN to a backend.
void PrimeNextHop(const std::string& ifname, in_addr next_hop) {
  const int ifindex = static_cast<int>(if_nametoindex(ifname.c_str()));
  if (ifindex == 0) return;
  if (auto mac = ResolveNeighbor(ifindex, next_hop, std::chrono::milliseconds(500)); !mac) {
    Log("fast path: next hop " + ToString(next_hop) + " on " + ifname + " not resolved yet (" +
        mac.error().message() + "); the first connection waits for it");
  }
}

// The kernel's real RX queue count (sysfs lists rx-N for each; `ethtool -L` changes it). An
// AF_XDP socket can bind to each of them and to no other.
uint32_t RxQueueCount(const std::string& ifname) {
  std::error_code ec;
  uint32_t n = 0;
  for (const auto& e :
       std::filesystem::directory_iterator("/sys/class/net/" + ifname + "/queues", ec)) {
    if (e.path().filename().string().rfind("rx-", 0) == 0) ++n;
  }
  return n;
}

}  // namespace

struct FastPath::Impl {
  struct Interface {
    std::string name;
    int ifindex = 0;
    in_addr addr{};     // the one address lwIP answers on here
    in_addr gateway{};  // next hop for destinations that are not on-link (0: all on-link)
    std::vector<in_addr> aliases;  // more local addresses (--backend-source)
    std::unique_ptr<SteerProgram> steer;
    std::vector<std::unique_ptr<XskPort>> ports;  // one per RX queue, index = queue
    std::unique_ptr<LwipNetif> netif;             // created and destroyed on the worker thread
    LwipNetifConfig netif_config;
  };

  FastPathConfig config;
  std::vector<std::unique_ptr<Interface>> ifaces;
  std::vector<RelayRule> relay_rules;
  std::vector<PortRange> backend_ports;
  std::unique_ptr<Worker> worker;
  std::thread thread;
  std::atomic<bool> stop{false};
  std::unique_ptr<Relay> relay;  // worker thread only

  std::mutex mu;
  std::condition_variable cv;
  std::atomic<bool> snapshot_wanted{false};
  uint64_t snapshot_seq = 0;     // under mu
  FastPathSnapshot snapshot;     // under mu
  std::string final_steer_line;  // the steering counters as they were at Stop

  // The stray-flow reaper: a control thread, so its map scans never stall the worker.
  std::thread reaper;
  std::mutex reaper_mu;
  std::condition_variable reaper_cv;
  bool reaper_stop = false;  // under reaper_mu
  std::atomic<uint64_t> stray_flows_reaped{0};
  void ReapStrays();
  void CountFlows(FastPathSnapshot& s) const;

  Result<Interface*> GetInterface(const std::string& name, in_addr addr, in_addr gateway);
  Result<void> OpenInterface(Interface& i);
  Result<void> WorkerSetup();
  void WorkerTeardown();
  void Publish();
};

Result<FastPath::Impl::Interface*> FastPath::Impl::GetInterface(const std::string& name,
                                                                in_addr addr, in_addr gateway) {
  for (auto& i : ifaces) {
    if (i->name != name) continue;
    if (i->addr.s_addr != addr.s_addr) {
      return Error{
          {},
          name + ": the fast path answers on one address per interface, and rules need both " +
              ToString(i->addr) + " and " + ToString(addr) + " there"};
    }
    if (gateway.s_addr != 0) i->gateway = gateway;
    return i.get();
  }
  auto i = std::make_unique<Interface>();
  i->name = name;
  i->addr = addr;
  i->gateway = gateway;
  ifaces.push_back(std::move(i));
  return ifaces.back().get();
}

Result<void> FastPath::Impl::OpenInterface(Interface& i) {
  i.ifindex = static_cast<int>(if_nametoindex(i.name.c_str()));
  if (i.ifindex == 0) return SystemError("interface " + i.name);
  auto mac = InterfaceMac(i.ifindex);
  if (!mac) return mac.error();
  auto mtu = InterfaceMtu(i.ifindex);
  if (!mtu) return mtu.error();
  // Every RX queue gets a socket: a packet on a queue without one would reach the kernel,
  // which has no listener (a refused client) and no socket for a backend leg's return traffic.
  const uint32_t queues = std::max<uint32_t>(RxQueueCount(i.name), 1);
  if (queues > STEER_MAX_QUEUES) {
    return Error{{},
                 i.name + ": " + std::to_string(queues) + " RX queues, above the " +
                     std::to_string(STEER_MAX_QUEUES) +
                     " the steering program serves; lower them with: ethtool -L " + i.name +
                     " combined N (veth: rx N tx N)"};
  }
  // The sockets first: whether they take chains decides the attach mode and what fits.
  XskPortConfig pc;
  pc.ifname = i.name;
  pc.tx_checksum_offload = config.tx_checksum_offload;
  pc.tx_budget = config.tx_budget;
  pc.multi_buffer = config.multi_buffer;
  for (uint32_t q = 0; q < queues; ++q) {
    pc.queue = q;
    auto port = XskPort::Open(pc);
    if (!port) return port.error();
    i.ports.push_back(std::move(*port));
  }
  const XskPort& first = *i.ports.front();
  SteerOptions so = config.steer;
  auto known_driver = InterfaceDriver(i.name);
  const std::string driver = known_driver ? *known_driver : std::string();
  if (config.choose_xdp_mode && PreferGenericXdp(driver, first.multi_buffer())) {
    so.force_generic = true;
    so.generic_reason = "chosen on " + driver + ": the peer keeps its TSO, segments arrive whole";
  }
  auto steer = SteerProgram::Attach(i.name, so);
  if (!steer) return steer.error();
  i.steer = std::move(*steer);
  LinkFacts facts = ReadLinkFacts(i.name, static_cast<uint32_t>(*mtu),
                                  i.steer->mode() == XdpMode::kGeneric, i.steer->why_generic());
  facts.rx_frame_bytes = RxFrameBytes(pc);
  facts.chains = first.multi_buffer();
  facts.tx_frame_bytes = first.tx_frame_bytes();
  if (auto fit = CheckLinkFit(facts); !fit) return fit.error();
  for (auto& port : i.ports) {
    if (auto r = i.steer->BindQueue(port->queue(), port->fd()); !r) return r.error();
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
  nc.verify_tcp_checksum = ShouldVerifyTcpChecksum(i.name);
  return {};
}

Result<void> FastPath::Impl::WorkerSetup() {
  InitLwipOnce();
  worker = std::make_unique<Worker>(config.cpu);
  for (auto& i : ifaces) {
    std::vector<XskPort*> ports;
    for (auto& port : i->ports) ports.push_back(port.get());
    auto netif = LwipNetif::Create(ports, i->netif_config);
    if (!netif) return netif.error();
    i->netif = std::move(*netif);
    worker->Add(i->netif.get());
  }
  RelayConfig rc;
  rc.rules = relay_rules;
  rc.limits = config.limits;
  rc.backend_ports = backend_ports;
  rc.worker = STEER_SOLE_WORKER;
  auto r = Relay::Create(rc);
  if (!r) return r.error();
  relay = std::move(*r);
  return {};
}

void FastPath::Impl::WorkerTeardown() {
  relay.reset();  // resets open connections: let the RSTs go out
  for (int i = 0; i < 3; ++i) worker->RunOnce();
  worker->Drain();
  for (auto& i : ifaces) i->netif.reset();
}

void FastPath::Impl::Publish() {
  FastPathSnapshot s;
  s.relay = relay->counters().Snapshot();
  const RelayState st = relay->state();
  s.connections = st.connections;
  s.closing_flows = st.closing_flows;
  s.oow_acks = st.oow_acks;
  s.oow_acks_limited = st.oow_acks_limited;
  s.ooseq_dropped = st.ooseq_dropped;
  for (auto& i : ifaces) {
    s.tx_no_neighbor += i->netif->stats().tx_no_neighbor;
    s.tx_chains += i->netif->stats().tx_chains;
    s.next_hops += i->netif->next_hops().size();
    for (auto& port : i->ports) {
      const FrameAccount f = port->frames();
      s.frames_held += f.held;
      const XskStats x = port->stats();
      s.rx_packets += x.rx_packets;
      s.rx_frames += x.rx_descriptors;
      s.rx_chains += x.rx_chains;
      s.rx_chains_dropped += x.rx_chains_dropped;
      s.rx_by_queue.push_back(QueueRx{i->name, port->queue(), x.rx_packets});
      s.tx_packets += x.tx_packets;
      s.tx_kicks += x.tx_kicks;
      s.tx_checksum_offloaded += x.tx_checksum_offloaded;
      s.xsk_rx_dropped += x.kernel_rx_dropped;
      s.xsk_rx_ring_full += x.kernel_rx_ring_full;
      s.xsk_fill_ring_empty += x.kernel_fill_ring_empty;
    }
  }
  s.lwip_pcbs = lwip_stats.memp[MEMP_TCP_PCB]->used;
  s.lwip_heap_bytes = lwip_stats.mem.used;
  const WorkerStats w = worker->stats();
  s.minor_faults = w.minor_faults;
  s.involuntary_switches = w.involuntary_switches;
  s.worker_busy_ns = w.busy_ns;
  s.worker_iterations = w.iterations;
  s.lwip_retransmits = w.lwip_tcp_retransmits;
  s.lwip_drops = w.lwip_ip_drops + w.lwip_tcp_drops;
  s.lwip_pool_errors = w.lwip_memp_errors + w.lwip_heap_errors;
  std::lock_guard lock(mu);
  snapshot = s;
  ++snapshot_seq;
  cv.notify_all();
}

// A client flow whose handshake has not completed within lwIP's SYN_RCVD timeout never will:
// lwIP has dropped its half-open pcb (a later SYN from the client starts over). One second of
// margin keeps the reaper from racing a handshake that completes at the last moment.
constexpr uint64_t kStrayFlowAgeNs = (TCP_SYN_RCVD_TIMEOUT + 1000) * 1'000'000ull;

void FastPath::Impl::ReapStrays() {
  std::unique_lock lock(reaper_mu);
  while (!reaper_cv.wait_for(lock, std::chrono::seconds(1), [this] { return reaper_stop; })) {
    const uint64_t now = MonotonicNs();
    if (now < kStrayFlowAgeNs) continue;
    for (auto& i : ifaces) {
      stray_flows_reaped.fetch_add(i->steer->ReapStrayFlows(now - kStrayFlowAgeNs),
                                   std::memory_order_relaxed);
    }
  }
}

// On the caller's thread: map scans do not belong on the worker.
void FastPath::Impl::CountFlows(FastPathSnapshot& s) const {
  s.flows = s.client_flows = 0;
  for (const auto& i : ifaces) {
    s.flows += i->steer->FlowCount();
    s.client_flows += i->steer->ClientFlowCount();
  }
  s.stray_flows_reaped = stray_flows_reaped.load(std::memory_order_relaxed);
}

FastPath::FastPath(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

uint32_t FastPath::MaxConnections() { return LwipConnectionCapacity(); }

Result<std::unique_ptr<FastPath>> FastPath::Start(const FastPathConfig& config) {
  auto impl = std::make_unique<Impl>();
  impl->config = config;
  if (config.rules.empty()) return Error{{}, "fast path: no IPv4 rules"};
  if (config.limits.max_connections > LwipConnectionCapacity()) {
    return Error{{},
                 "fast path: --max-connections " + std::to_string(config.limits.max_connections) +
                     " is above the " + std::to_string(LwipConnectionCapacity()) +
                     " connections lwIP's pcb pool holds (MEMP_NUM_TCP_PCB in "
                     "stack/lwip/lwipopts.h)"};
  }
  auto ephemeral = KernelEphemeralPorts();
  if (!ephemeral) return Error{{}, "fast path: " + ephemeral.error().message()};
  if (config.backend_ports.automatic()) {
    impl->backend_ports = DefaultBackendPorts(*ephemeral);
  } else {
    if (auto r = CheckOutsideEphemeral(config.backend_ports, *ephemeral); !r) return r.error();
    impl->backend_ports = {config.backend_ports};
  }

  struct Sides {
    Impl::Interface* client;
    Impl::Interface* backend;
  };
  std::vector<Sides> sides;
  std::set<std::pair<std::string, uint32_t>> primed;  // next hops resolved so far
  for (const Rule& rule : config.rules) {
    const std::string what = "rule " + ToString(rule.listen) + " -> " + ToString(rule.backend);
    if (!rule.listen.is_ipv4() || !rule.backend.is_ipv4()) {
      return Error{{}, what + ": the fast path is IPv4 only (use --path kernel or auto)"};
    }
    const Endpoint listen = rule.listen.ipv4();
    const Endpoint backend = rule.backend.ipv4();
    if (rule.listen.is_any()) {
      return Error{{}, what + ": the fast path needs a concrete listen address, not 0.0.0.0"};
    }
    std::string listen_if = config.listen_iface;
    if (listen_if.empty()) {
      auto holder = InterfaceWithAddress(listen.addr);
      if (!holder) return Error{{}, what + ": " + holder.error().message()};
      listen_if = holder->second;
    }
    auto route = LookupRoute(backend.addr);
    if (!route) return Error{{}, what + ": no route to the backend: " + route.error().message()};
    std::string backend_if = config.backend_iface.empty() ? route->ifname : config.backend_iface;
    if (backend_if == route->ifname && primed.insert({backend_if, route->next_hop.s_addr}).second) {
      PrimeNextHop(backend_if, route->next_hop);  // once per next hop: it may wait 500 ms
    }
    in_addr source = route->prefsrc;
    if (backend_if == listen_if) source = listen.addr;
    if (source.s_addr == 0) {
      return Error{{},
                   what + ": the kernel's route to " + ToString(backend.addr) + " via " +
                       backend_if + " has no source address"};
    }
    auto client_side = impl->GetInterface(listen_if, listen.addr, in_addr{});
    if (!client_side) return Error{{}, what + ": " + client_side.error().message()};
    auto backend_side = impl->GetInterface(backend_if, source, route->gateway);
    if (!backend_side) return Error{{}, what + ": " + backend_side.error().message()};
    // --backend-source: each address must be the kernel's on the backend-side interface, so the
    // kernel answers ARP for it; lwIP answers TCP on it.
    for (in_addr extra : config.backend_sources) {
      auto holder = InterfaceWithAddress(extra);
      if (!holder || holder->second != backend_if) {
        return Error{{},
                     what + ": --backend-source " + ToString(extra) + " is not an address of " +
                         backend_if + " (the interface toward the backend); add it with: ip addr " +
                         "add " + ToString(extra) + "/32 dev " + backend_if};
      }
      auto& aliases = (*backend_side)->aliases;
      if (extra.s_addr != source.s_addr &&
          std::none_of(aliases.begin(), aliases.end(),
                       [&](in_addr a) { return a.s_addr == extra.s_addr; })) {
        aliases.push_back(extra);
      }
    }
    sides.push_back({*client_side, *backend_side});
  }
  for (auto& i : impl->ifaces) {
    if (auto r = impl->OpenInterface(*i); !r) return r.error();
  }
  for (size_t k = 0; k < config.rules.size(); ++k) {
    const Rule& rule = config.rules[k];
    RelayRule rr;
    rr.id = rule.id;
    rr.listen = rule.listen.ipv4();
    rr.backend = rule.backend.ipv4();
    rr.backend_sources = config.backend_sources;
    if (rr.backend_sources.empty()) rr.backend_sources = {sides[k].backend->addr};
    rr.client_side = sides[k].client->steer.get();
    rr.backend_side = sides[k].backend->steer.get();
    if (auto r = sides[k].client->steer->AddListener(rr.listen.addr, rr.listen.port, rule.id); !r) {
      return r.error();
    }
    impl->relay_rules.push_back(rr);
  }

  // The worker owns lwIP from here on; set-up errors come back through the promise.
  std::promise<Result<void>> started;
  auto ready = started.get_future();
  Impl* p = impl.get();
  impl->thread = std::thread([p, &started] {
    if (auto r = p->WorkerSetup(); !r) {
      if (p->relay) p->relay.reset();
      for (auto& i : p->ifaces) i->netif.reset();
      started.set_value(r);
      return;
    }
    started.set_value(Result<void>());
    auto r = p->worker->Run(p->stop, [p](uint64_t now_ns) {
      const bool worked = p->relay->Tick(now_ns / 1'000'000u);
      if (p->snapshot_wanted.exchange(false, std::memory_order_relaxed)) p->Publish();
      return worked;
    });
    if (!r) Log("worker: " + r.error().message());
    p->WorkerTeardown();
  });
  if (auto r = ready.get(); !r) {
    impl->thread.join();
    return r.error();
  }

  impl->reaper = std::thread([p] { p->ReapStrays(); });
  std::unique_ptr<FastPath> fp(new FastPath(std::move(impl)));
  std::string d;
  for (const auto& i : fp->impl_->ifaces) {
    if (!d.empty()) d += ", ";
    std::string addrs = ToString(i->addr);
    for (in_addr a : i->aliases) addrs += "+" + ToString(a);
    const size_t queues = i->ports.size();
    const XskPort& port = *i->ports.front();
    const bool generic = i->steer->mode() == XdpMode::kGeneric;
    d += i->name + " (" + addrs + ", XDP " + std::string(ModeName(i->steer->mode())) +
         (generic ? " (" + i->steer->why_generic() + ")" : "") + ", " + std::to_string(queues) +
         (queues == 1 ? " RX queue" : " RX queues, all") + " served, " +
         (port.zero_copy() ? "zero-copy" : "copy mode") +
         (port.multi_buffer() ? ", multi-buffer RX" : "") + ", " + port.tx_status() + ")";
  }
  d += "; backend ports " + ToString(fp->impl_->backend_ports);
  d += "; up to " + std::to_string(config.limits.max_connections) + " connections, " +
       std::to_string(config.steer.flow_capacity) + " client flows";
  fp->description_ = d;
  return fp;
}

FastPathSnapshot FastPath::Snapshot() {
  std::unique_lock lock(impl_->mu);
  if (!impl_->thread.joinable()) return impl_->snapshot;
  const uint64_t seen = impl_->snapshot_seq;
  impl_->snapshot_wanted = true;
  impl_->cv.wait_for(lock, std::chrono::seconds(2), [&] { return impl_->snapshot_seq != seen; });
  FastPathSnapshot s = impl_->snapshot;
  lock.unlock();
  impl_->CountFlows(s);
  return s;
}

std::string FastPath::SteerCountersLine() const {
  if (impl_->ifaces.empty()) return impl_->final_steer_line;
  SteerCounters sum{};
  for (const auto& i : impl_->ifaces) {
    const SteerCounters c = i->steer->ReadCounters();
    for (size_t r = 0; r < kSteerReasonCount; ++r) {
      sum[r].packets += c[r].packets;
      sum[r].bytes += c[r].bytes;
    }
  }
  std::string out;
  for (size_t r = 0; r < kSteerReasonCount; ++r) {
    if (sum[r].packets == 0) continue;
    if (!out.empty()) out += ' ';
    out +=
        std::string(ReasonName(static_cast<SteerReason>(r))) + "=" + std::to_string(sum[r].packets);
  }
  return out.empty() ? "(no packets)" : out;
}

void FastPath::Stop() {
  if (!impl_ || !impl_->thread.joinable()) return;
  {
    // A last snapshot, so the exit summary has the final numbers.
    std::unique_lock lock(impl_->mu);
    const uint64_t seen = impl_->snapshot_seq;
    impl_->snapshot_wanted = true;
    impl_->cv.wait_for(lock, std::chrono::seconds(2), [&] { return impl_->snapshot_seq != seen; });
  }
  {
    std::lock_guard lock(impl_->reaper_mu);
    impl_->reaper_stop = true;
  }
  impl_->reaper_cv.notify_all();
  impl_->reaper.join();
  impl_->stop = true;
  impl_->thread.join();
  impl_->final_steer_line = SteerCountersLine();
  {
    std::lock_guard lock(impl_->mu);
    impl_->CountFlows(impl_->snapshot);  // what the worker left behind, for the exit summary
  }
  for (auto& i : impl_->ifaces) {
    if (!i->steer) continue;
    for (auto& port : i->ports) (void)i->steer->UnbindQueue(port->queue());
  }
  impl_->ifaces.clear();  // closes the ports, detaches XDP
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
  return relay.Format() + " connections=" + std::to_string(connections) +
         " flows=" + std::to_string(flows) + " client_flows=" + std::to_string(client_flows) +
         " stray_flows_reaped=" + std::to_string(stray_flows_reaped) +
         " closing_flows=" + std::to_string(closing_flows) +
         " lwip_pcbs=" + std::to_string(lwip_pcbs) +
         " lwip_heap_bytes=" + std::to_string(lwip_heap_bytes) +
         " frames_held=" + std::to_string(frames_held) +
         " rx_packets=" + std::to_string(rx_packets) + RxByQueue() +
         " rx_frames=" + std::to_string(rx_frames) + " rx_chains=" + std::to_string(rx_chains) +
         " rx_chains_dropped=" + std::to_string(rx_chains_dropped) +
         " tx_packets=" + std::to_string(tx_packets) + " tx_kicks=" + std::to_string(tx_kicks) +
         " tx_chains=" + std::to_string(tx_chains) +
         " tx_checksum_offloaded=" + std::to_string(tx_checksum_offloaded) +
         " tx_no_neighbor=" + std::to_string(tx_no_neighbor) +
         " next_hops=" + std::to_string(next_hops) +
         " xsk_rx_dropped=" + std::to_string(xsk_rx_dropped) +
         " xsk_rx_ring_full=" + std::to_string(xsk_rx_ring_full) +
         " xsk_fill_ring_empty=" + std::to_string(xsk_fill_ring_empty) +
         " retransmits=" + std::to_string(lwip_retransmits) +
         " lwip_drops=" + std::to_string(lwip_drops) +
         " lwip_pool_errors=" + std::to_string(lwip_pool_errors) +
         " oow_acks=" + std::to_string(oow_acks) +
         " oow_acks_limited=" + std::to_string(oow_acks_limited) +
         " ooseq_dropped=" + std::to_string(ooseq_dropped) +
         " worker_busy_ns=" + std::to_string(worker_busy_ns) +
         " worker_iterations=" + std::to_string(worker_iterations) +
         " worker_minor_faults=" + std::to_string(minor_faults) +
         " worker_involuntary_switches=" + std::to_string(involuntary_switches);
}

}  // namespace xdpfwd
