// Where each rule of the fast path goes (see fast_path_impl.h's RulePlace): its interfaces at
// start, the rules table the workers serve from, and a reload into the running workers.
#include <net/if.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <optional>
#include <thread>

#include "forwarder/fast_path_impl.h"
#include "os/log.h"
#include "stack/neighbor.h"
#include "stack/worker.h"

namespace xdpfwd {
namespace {

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

// Whether one of `rule`'s backends is of `family`.
bool HasBackendOf(const Rule& rule, sa_family_t family) {
  for (size_t k = 0; k < rule.backend_count(); ++k) {
    if (rule.backend_address(k).family() == family) return true;
  }
  return false;
}

// A rule's [src=ADDR] replaces --backend-source for its backend legs (the parser has checked
// it is of its backends' family). Of --backend-source, the addresses of its backends' families
// (as on the kernel path, a leg takes those of its backend's: FlowLedger::LeaseBackendPort); a
// family with none: the route's source (the worker adds the netif's address).
std::vector<IpAddress> RuleSources(const Rule& rule, const FastPathConfig& config) {
  if (rule.source.family() != AF_UNSPEC) return {rule.source.ip().addr};
  std::vector<IpAddress> out;
  for (const IpAddress& a : config.backend_sources) {
    if (HasBackendOf(rule, a.family)) out.push_back(a);
  }
  return out;
}

// The backend's next hop, resolved by the kernel now, on the starting thread: the first
// connection's SYN then finds it in the kernel's table, where it would otherwise wait on the
// worker for a resolution (NextHopCache::kRetryMs). Peers that send us a SYN or SYN-ACK are
// learned from it; nothing sends before our first SYN to a backend. Either family: an IPv6 next
// hop (the backend on-link, or a router's link-local address) is asked by neighbour discovery.
void PrimeNextHop(const std::string& ifname, const IpAddress& next_hop) {
  const int ifindex = static_cast<int>(if_nametoindex(ifname.c_str()));
  if (ifindex == 0) return;
  if (auto mac = ResolveNeighbor(ifindex, next_hop, std::chrono::milliseconds(500)); !mac) {
    Log("fast path: next hop " + ToString(next_hop) + " on " + ifname + " not resolved yet (" +
        mac.error().message() + "); the first connection waits for it");
  }
}

// One local address an interface needs for a rule: of either family, with (IPv6) its on-link
// prefix, and the gateway of what is not on-link (unspecified: none).
struct LocalAddress {
  IpAddress addr;
  IpAddress gateway;
  uint8_t prefix_len = 128;
};

// The interface `name` as the fast path serves it, answering on `local` (one address per family
// per interface). While starting, a new interface is added, and an address of a family the
// interface has none of yet, or a gateway, learned. At a reload the interfaces are fixed but for
// one thing: an interface the workers answer on no IPv6 address on (its netif_config, what they
// were given) learns its first, and that address's gateway, which the workers then add
// (WorkerRuleSet::ipv6). A rule that would need anything else changed is refused with why.
Result<FastPathInterface*> GetInterface(FastPath::Impl& impl, const std::string& name,
                                        const LocalAddress& local, Placing placing) {
  const bool starting = placing == Placing::kStart;
  FastPathInterface* found = nullptr;
  for (auto& i : impl.ifaces) {
    if (i->name == name) found = i.get();
  }
  if (found == nullptr) {
    if (!starting) {
      return Error{{}, name + " is not an interface the fast path attached at its start"};
    }
    auto i = std::make_unique<FastPathInterface>();
    i->name = name;
    i->ifindex = static_cast<int>(if_nametoindex(name.c_str()));
    if (i->ifindex == 0) return SystemError("interface " + name);
    // Every RX queue gets a socket in some worker: a packet on a queue without one would reach
    // the kernel, which has no listener (a refused client) and no socket for a backend leg's
    // return traffic.
    i->queues = std::max<uint32_t>(RxQueueCount(name), 1);
    if (i->queues > STEER_MAX_QUEUES) {
      return Error{{},
                   name + ": " + std::to_string(i->queues) + " RX queues, above the " +
                       std::to_string(STEER_MAX_QUEUES) +
                       " the steering program serves; lower them with: ethtool -L " + name +
                       " combined N (veth: rx N tx N)"};
    }
    impl.ifaces.push_back(std::move(i));
    found = impl.ifaces.back().get();
  }
  FastPathInterface& i = *found;
  const bool v6 = local.addr.is_v6();
  const IpAddress have = v6 ? IpAddress::V6(i.ipv6.addr) : IpAddress(i.addr);
  const IpAddress have_gateway = v6 ? IpAddress::V6(i.ipv6.gateway) : IpAddress(i.gateway);
  // As at a start: the workers have no IPv6 address there yet.
  const bool learning = starting || (v6 && !i.netif_config.ipv6.enabled());
  if (have.is_unspecified()) {
    if (!learning) {
      return Error{{},
                   name + ": the running workers answer on no " + (v6 ? "IPv6" : "IPv4") +
                       " address there (a restart adds " + ToString(local.addr) + ")"};
    }
    if (v6) {
      i.ipv6.addr = local.addr.v6();
      i.ipv6.prefix_len = local.prefix_len;
    } else {
      i.addr = local.addr.v4();
    }
  } else if (!(have == local.addr)) {
    return Error{{},
                 name +
                     ": the fast path answers on one address of each family per interface, "
                     "and rules need both " +
                     ToString(have) + " and " + ToString(local.addr) + " there"};
  }
  if (!local.gateway.is_unspecified() && !(local.gateway == have_gateway)) {
    if (!learning) {
      return Error{
          {},
          name + ": the route goes through " + ToString(local.gateway) +
              ", and the running workers send through " +
              (have_gateway.is_unspecified() ? std::string("no gateway") : ToString(have_gateway)) +
              " there"};
    }
    if (v6) {
      i.ipv6.gateway = local.gateway.v6();
    } else {
      i.gateway = local.gateway.v4();
    }
  }
  return found;
}

// The client side: the interface holding the listen address (or --iface), and the address with
// its prefix (IPv6: what is on-link; the client side has no gateway, as for IPv4).
Result<std::pair<std::string, LocalAddress>> ClientSide(const FastPathConfig& config,
                                                        const IpAddress& listen) {
  LocalAddress local;
  local.addr = listen;
  if (!listen.is_v6()) {
    if (!config.listen_iface.empty()) return std::pair{config.listen_iface, local};
    auto holder = InterfaceWithAddress(listen.v4());
    if (!holder) return holder.error();
    return std::pair{holder->second, local};
  }
  auto holder = InterfaceWithAddress(listen.v6());
  if (!holder) return holder.error();
  local.prefix_len = holder->prefix_len;
  return std::pair{config.listen_iface.empty() ? holder->name : config.listen_iface, local};
}

// The kernel's route to one backend, of either family, as the fast path uses it.
struct BackendRoute {
  std::string ifname;
  int oif = 0;
  IpAddress gateway;  // unspecified: on-link
  IpAddress prefsrc;  // unspecified: the kernel chose none
  IpAddress next_hop;
};

Result<BackendRoute> RouteTo(const IpAddress& backend) {
  if (backend.is_v6()) {
    auto r = LookupRoute(backend.v6());
    if (!r) return r.error();
    return BackendRoute{r->ifname, r->oif, IpAddress::V6(r->gateway), IpAddress::V6(r->prefsrc),
                        IpAddress::V6(r->next_hop)};
  }
  auto r = LookupRoute(backend.v4());
  if (!r) return r.error();
  return BackendRoute{r->ifname, r->oif, r->gateway, r->prefsrc, r->next_hop};
}

// The backend side's address of one family, the one its netif answers on: the route's source,
// else (IPv6) the interface's first global address, with the prefix that is on-link there; the
// listen address where the backend side is the client side's interface and the family is the
// listen address's.
Result<LocalAddress> BackendSideAddress(const std::string& backend_if, const std::string& listen_if,
                                        const LocalAddress& client_local, const BackendRoute& route,
                                        const IpAddress& backend) {
  const bool v6 = backend.is_v6();
  LocalAddress source;
  source.addr = route.prefsrc;
  source.gateway = route.gateway;
  if (backend_if == listen_if && client_local.addr.family == backend.family) {
    source.addr = client_local.addr;
  }
  if (v6 && source.addr == client_local.addr) {
    source.prefix_len = client_local.prefix_len;
  } else if (v6) {
    if (source.addr.is_unspecified()) {
      auto global = InterfaceIpv6Address(static_cast<int>(if_nametoindex(backend_if.c_str())));
      if (!global) return global.error();
      source.addr = IpAddress::V6(global->addr);
    }
    auto holder = InterfaceWithAddress(source.addr.v6());
    if (!holder) return Error{{}, "source " + holder.error().message()};
    source.prefix_len = holder->prefix_len;
  }
  if (source.addr.is_unspecified()) {
    return Error{{},
                 "the kernel's route to " + ToString(backend) + " via " + backend_if +
                     " has no source address"};
  }
  return source;
}

}  // namespace

// Where one rule's clients arrive and its backend legs leave, found from the kernel's addresses
// and routes; `placing`: as GetInterface's. The listen address and the backends may be of either
// family, each on its own (rinetd's 4-to-6 and 6-to-4), and a rule's backends of both: they share
// the backend-side interface, and those of one family its address and gateway of that family
// (the netif has one address of each family; each leg leaves from its backend's family's).
Result<RulePlace> PlaceRule(FastPath::Impl& impl, const Rule& rule, Placing placing) {
  const bool starting = placing == Placing::kStart;
  const FastPathConfig& config = impl.config;
  const std::string what = "rule " + ToString(rule.listen) + " -> " + ToString(rule.backend);
  const IpEndpoint listen = rule.listen.ip();
  if (rule.listen.is_any()) {
    return Error{{},
                 what + ": the fast path needs a concrete listen address, not " +
                     (listen.addr.is_v6() ? "::" : "0.0.0.0")};
  }
  auto client = ClientSide(config, listen.addr);
  if (!client) return Error{{}, what + ": " + client.error().message()};
  const std::string& listen_if = client->first;
  RulePlace place;
  // Per family (IPv4, IPv6): the route of the rule's first backend of that family, which the
  // family's other backends share.
  std::optional<BackendRoute> first[2];
  IpAddress first_addr[2];
  std::string first_name[2];
  std::string route_if;  // the route's interface toward the rule's first backend
  for (size_t k = 0; k < rule.backend_count(); ++k) {
    const SocketAddress& address = rule.backend_address(k);
    const IpAddress addr = address.ip().addr;
    const std::string name = k == 0 ? "the backend" : "backend " + ToString(address);
    if (addr.is_v6() && IN6_IS_ADDR_V4MAPPED(&addr.v6())) {
      return Error{{},
                   what + ": " + name +
                       ": the fast path takes no IPv4-mapped IPv6 backend; write it as IPv4"};
    }
    auto route = RouteTo(addr);
    if (!route) return Error{{}, what + ": no route to " + name + ": " + route.error().message()};
    if (k == 0) {
      route_if = route->ifname;
      place.backend_if = config.backend_iface.empty() ? route->ifname : config.backend_iface;
      place.prime = place.backend_if == route->ifname;
    } else if (route->ifname != route_if) {
      return Error{{},
                   what + ": backend " + ToString(address) + " is reached via " + route->ifname +
                       ", the rule's first backend via " + route_if +
                       ": the fast path serves a rule's backends through one interface"};
    }
    std::optional<BackendRoute>& family_first = first[addr.is_v6() ? 1 : 0];
    if (!family_first) {
      family_first = *route;
      first_addr[addr.is_v6() ? 1 : 0] = addr;
      first_name[addr.is_v6() ? 1 : 0] = ToString(address);
    } else if (!(route->gateway == family_first->gateway)) {
      return Error{{},
                   what + ": backend " + ToString(address) + " is reached through " +
                       (route->gateway.is_unspecified() ? std::string("no gateway")
                                                        : ToString(route->gateway)) +
                       ", backend " + first_name[addr.is_v6() ? 1 : 0] + " through " +
                       (family_first->gateway.is_unspecified() ? std::string("none")
                                                               : ToString(family_first->gateway)) +
                       ": the fast path serves a rule's backends of one family through one "
                       "gateway"};
    }
    place.next_hops.push_back(route->next_hop);
  }
  // The backend side's address of each family the backends have.
  std::optional<LocalAddress> source[2];
  for (int v6 = 0; v6 < 2; ++v6) {
    if (!first[v6]) continue;
    auto local =
        BackendSideAddress(place.backend_if, listen_if, client->second, *first[v6], first_addr[v6]);
    if (!local) return Error{{}, what + ": " + local.error().message()};
    source[v6] = *local;
  }
  auto client_side = GetInterface(impl, listen_if, client->second, placing);
  if (!client_side) return Error{{}, what + ": " + client_side.error().message()};
  FastPathInterface* backend_side = nullptr;
  for (int v6 = 0; v6 < 2; ++v6) {
    if (!source[v6]) continue;
    auto side = GetInterface(impl, place.backend_if, *source[v6], placing);
    if (!side) return Error{{}, what + ": " + side.error().message()};
    backend_side = *side;
  }
  // --backend-source (or the rule's [src=ADDR]): each address must be the kernel's on the
  // backend-side interface, so the kernel answers ARP for it; lwIP answers TCP on it.
  const char* source_option = rule.source.family() != AF_UNSPEC ? "[src=]" : "--backend-source";
  for (const IpAddress& extra_address : RuleSources(rule, config)) {
    if (!source[extra_address.is_v6() ? 1 : 0]) {
      return Error{{},
                   what + ": " + source_option + " " + ToString(extra_address) +
                       " is of no backend's family"};
    }
    const IpAddress& own = source[extra_address.is_v6() ? 1 : 0]->addr;
    if (extra_address.is_v6()) {
      // An IPv6 [src=]: one more netif with that address, as IPv4's aliases.
      auto holder = InterfaceWithAddress(extra_address.v6());
      if (!holder || holder->name != place.backend_if) {
        return Error{{},
                     what + ": " + source_option + " " + ToString(extra_address) +
                         " is not an address of " + place.backend_if +
                         " (the interface toward the backend); add it with: ip -6 addr add " +
                         ToString(extra_address) + "/128 dev " + place.backend_if};
      }
      auto& aliases6 = backend_side->aliases6;
      if (extra_address == own ||
          std::any_of(aliases6.begin(), aliases6.end(),
                      [&](const in6_addr& a) { return IpAddress::V6(a) == extra_address; })) {
        continue;
      }
      if (!starting) {
        return Error{{},
                     what + ": " + source_option + " " + ToString(extra_address) +
                         " is not an address the running workers answer on (a restart adds it)"};
      }
      aliases6.push_back(extra_address.v6());
      continue;
    }
    const in_addr extra = extra_address.v4();
    auto holder = InterfaceWithAddress(extra);
    if (!holder || holder->second != place.backend_if) {
      return Error{{},
                   what + ": " + source_option + " " + ToString(extra) + " is not an address of " +
                       place.backend_if +
                       " (the interface toward the backend); add it with: ip addr " + "add " +
                       ToString(extra) + "/32 dev " + place.backend_if};
    }
    auto& aliases = backend_side->aliases;
    if (IpAddress(extra) == own || std::any_of(aliases.begin(), aliases.end(), [&](in_addr a) {
          return a.s_addr == extra.s_addr;
        })) {
      continue;
    }
    if (!starting) {
      return Error{{},
                   what + ": " + source_option + " " + ToString(extra) +
                       " is not an address the running workers answer on (a restart adds it)"};
    }
    aliases.push_back(extra);
  }
  for (size_t k = 0; k < impl.ifaces.size(); ++k) {
    if (impl.ifaces[k].get() == *client_side) place.client = k;
    if (impl.ifaces[k].get() == backend_side) place.backend = k;
  }
  return place;
}

void FastPath::Impl::PrimeOnce(const RulePlace& place) {
  if (!place.prime) return;
  for (const IpAddress& next_hop : place.next_hops) {
    if (primed.insert({place.backend_if, next_hop}).second) {
      PrimeNextHop(place.backend_if, next_hop);  // once per next hop: it may wait 500 ms
    }
  }
}

WorkerRuleSet FastPath::Impl::WorkerRules(const std::vector<Rule>& rules,
                                          const std::vector<RulePlace>& places,
                                          const std::vector<AccessPattern>& global_access) const {
  WorkerRuleSet set;
  set.global_access = global_access;
  for (size_t k = 0; k < rules.size(); ++k) {
    WorkerRule w;
    w.id = rules[k].id;
    w.client_iface = static_cast<uint16_t>(places[k].client);
    w.backend_iface = static_cast<uint16_t>(places[k].backend);
    w.listen = rules[k].listen.ip();
    w.backend = rules[k].backend.ip();
    w.sources = RuleSources(rules[k], config);
    w.access = rules[k].access;
    w.proxy = rules[k].proxy;
    w.accept_proxy = rules[k].accept_proxy;
    w.retry_empty_response = rules[k].retry_empty_response;
    w.backend_weight = rules[k].backend_weight;
    w.balance = rules[k].balance;
    for (const RuleBackend& b : rules[k].more_backends) {
      w.more_backends.push_back(RelayBackend{b.address.ip(), b.weight, b.backup});
    }
    set.rules.push_back(std::move(w));
  }
  for (const auto& i : ifaces) set.ipv6.push_back(i->ipv6);
  return set;
}

std::vector<Ipv6Interface> FastPath::Impl::Ipv6Addresses() const {
  std::vector<Ipv6Interface> out;
  for (const auto& i : ifaces) out.push_back(i->ipv6);
  return out;
}

void FastPath::Impl::RestoreIpv6Addresses(const std::vector<Ipv6Interface>& saved) {
  for (size_t k = 0; k < saved.size() && k < ifaces.size(); ++k) ifaces[k]->ipv6 = saved[k];
}

std::vector<std::string> FastPath::CheckRules(const std::vector<Rule>& rules) {
  Impl& m = *impl_;
  std::lock_guard lock(m.rules_mu);
  // Placed as SetRules will place them, in order: a rule may give an interface its first IPv6
  // address, which the next rules then must agree with; forgotten after (SetRules learns it).
  const std::vector<Ipv6Interface> before = m.Ipv6Addresses();
  std::vector<std::string> why_not;
  std::vector<IpEndpoint> listens;
  const size_t most = std::min<size_t>(LwipListenerCapacity(), STEER_MAX_LISTENERS);
  for (const Rule& rule : rules) {
    const std::vector<Ipv6Interface> saved = m.Ipv6Addresses();
    auto place = PlaceRule(m, rule, Placing::kReload);
    if (!place) {
      m.RestoreIpv6Addresses(saved);  // what it learned before it failed: SetRules won't
      why_not.push_back(place.error().message());
      continue;
    }
    const IpEndpoint listen = rule.listen.ip();
    const bool known = std::find(listens.begin(), listens.end(), listen) != listens.end();
    if (!known && listens.size() == most) {
      why_not.push_back("rule " + ToString(rule.listen) + " -> " + ToString(rule.backend) +
                        ": a fast-path worker listens on " + std::to_string(most) +
                        " addresses at most (MEMP_NUM_TCP_PCB_LISTEN in stack/lwip/lwipopts.h)");
      continue;
    }
    if (!known) listens.push_back(listen);
    why_not.emplace_back();
  }
  m.RestoreIpv6Addresses(before);
  return why_not;
}

Result<void> FastPath::SetRules(const std::vector<Rule>& rules,
                                const std::vector<AccessPattern>& global_access) {
  Impl& m = *impl_;
  std::lock_guard lock(m.rules_mu);
  if (m.stopped) return Error{{}, "the fast path has stopped"};
  std::vector<RulePlace> places;
  const std::vector<Ipv6Interface> before = m.Ipv6Addresses();
  for (const Rule& rule : rules) {
    // CheckRules took it; only a change of the kernel's routes since can refuse it here.
    auto place = PlaceRule(m, rule, Placing::kReload);
    if (!place) {
      m.RestoreIpv6Addresses(before);
      return place.error();
    }
    places.push_back(*place);
  }
  // A new backend's first SYN finds its next hop in the kernel's table.
  for (const RulePlace& place : places) m.PrimeOnce(place);
  auto has_listen = [&](const IpEndpoint& e) {
    return std::any_of(rules.begin(), rules.end(),
                       [&](const Rule& r) { return r.listen.ip() == e; });
  };
  // Listen addresses that go: no new client is steered to them from here on, and the workers
  // close their listeners below.
  const std::vector<Impl::SteeredListener> steered = m.steered_listeners;
  for (const Impl::SteeredListener& l : steered) {
    if (!has_listen(l.listen)) StopAccepting(l.listen);
  }
  auto generation = m.RuleTable().Write(m.WorkerRules(rules, places, global_access));
  if (!generation) {
    m.RestoreIpv6Addresses(before);
    return generation.error();
  }
  // An interface's first IPv6 address is the workers' now (they add it as they take the table),
  // and a worker restarted from here on starts with it.
  for (auto& i : m.ifaces) i->netif_config.ipv6 = i->ipv6;
  m.config.rules = rules;
  m.config.global_access = global_access;

  // Every running worker takes the table within an iteration or two; one that is starting reads
  // it in its set-up, and one stopped (a debugger) or wedged takes it when it runs again or when
  // the watchdog has restarted it.
  std::string problems;
  auto note = [&](const std::string& what) { problems += (problems.empty() ? "" : "; ") + what; };
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(2);
  for (uint32_t w = 0; w < m.workers; ++w) {
    WorkerSlot& slot = m.Slot(w);
    for (;;) {
      if (slot.rules_applied.load(std::memory_order_acquire) >= *generation) {
        if (slot.rules_refused != 0) {
          note("worker " + std::to_string(w) +
               " could not listen on every new address (its log says which)");
        }
        break;
      }
      pid_t pid = -1;
      {
        std::lock_guard children(m.mu);
        pid = m.children[w].pid;
      }
      const WorkerState state = slot.state.load(std::memory_order_acquire);
      if (pid <= 0 || (state != WorkerState::kStarting && state != WorkerState::kReady)) break;
      if (std::chrono::steady_clock::now() >= deadline) {
        note("worker " + std::to_string(w) +
             " did not take the new rules within 2 s: it takes them when it runs again");
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  }
  // Now the workers listen: new addresses are steered to them, kept ones carry the new rule id.
  for (size_t k = 0; k < rules.size() && m.accepting; ++k) {
    const IpEndpoint listen = rules[k].listen.ip();
    SteerProgram* steer = m.ifaces[places[k].client]->steer.get();
    if (auto r = steer->AddListener(SteerListenAddress(listen.addr), listen.port, rules[k].id);
        !r) {
      note(r.error().message());
      continue;
    }
    const bool known = std::any_of(m.steered_listeners.begin(), m.steered_listeners.end(),
                                   [&](const auto& l) { return l.listen == listen; });
    if (!known) m.steered_listeners.push_back({steer, listen});
  }
  if (!problems.empty()) return Error{{}, problems};
  return {};
}

}  // namespace xdpfwd
