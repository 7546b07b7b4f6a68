// Where each rule of the fast path goes (see fast_path_impl.h's RulePlace): its interfaces at
// start, the rules table the workers serve from, and a reload into the running workers.
#include <net/if.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
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

// A rule's [src=ADDR] replaces --backend-source for its backend legs.
std::vector<in_addr> RuleSources(const Rule& rule, const FastPathConfig& config) {
  if (rule.source.is_ipv4()) return {rule.source.ipv4().addr};
  return config.backend_sources;
}

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

// The interface `name` as the fast path serves it, answering on `addr` with `gateway` as the
// next hop of what is not on-link (0: none). While starting, a new interface is added and a
// gateway learned; after that (a reload) the interfaces are fixed, and a rule that would need
// one changed is refused with why.
Result<FastPathInterface*> GetInterface(FastPath::Impl& impl, const std::string& name, in_addr addr,
                                        in_addr gateway, bool starting) {
  for (auto& i : impl.ifaces) {
    if (i->name != name) continue;
    if (i->addr.s_addr != addr.s_addr) {
      return Error{
          {},
          name + ": the fast path answers on one address per interface, and rules need both " +
              ToString(i->addr) + " and " + ToString(addr) + " there"};
    }
    if (gateway.s_addr != 0 && gateway.s_addr != i->gateway.s_addr) {
      if (!starting) {
        return Error{
            {},
            name + ": the route goes through " + ToString(gateway) +
                ", and the running workers send through " +
                (i->gateway.s_addr == 0 ? std::string("no gateway") : ToString(i->gateway)) +
                " there"};
      }
      i->gateway = gateway;
    }
    return i.get();
  }
  if (!starting) {
    return Error{{}, name + " is not an interface the fast path attached at its start"};
  }
  auto i = std::make_unique<FastPathInterface>();
  i->name = name;
  i->addr = addr;
  i->gateway = gateway;
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
  return impl.ifaces.back().get();
}

}  // namespace

// Where one rule's clients arrive and its backend legs leave, found from the kernel's addresses
// and routes; `starting`: as GetInterface's.
Result<RulePlace> PlaceRule(FastPath::Impl& impl, const Rule& rule, bool starting) {
  const FastPathConfig& config = impl.config;
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
  RulePlace place;
  place.backend_if = config.backend_iface.empty() ? route->ifname : config.backend_iface;
  place.prime = place.backend_if == route->ifname;
  place.next_hops = {route->next_hop};
  // Its other backends go out the same way: a rule's backend legs share its backend-side
  // interface and source addresses (forwarder/relay.h's RelayBackend).
  for (const RuleBackend& more : rule.more_backends) {
    if (!more.address.is_ipv4()) {
      return Error{{},
                   what + ": backend " + ToString(more.address) +
                       ": the fast path is IPv4 only (use --path kernel or auto)"};
    }
    auto other = LookupRoute(more.address.ipv4().addr);
    if (!other) {
      return Error{{},
                   what + ": no route to backend " + ToString(more.address) + ": " +
                       other.error().message()};
    }
    if (other->ifname != route->ifname || other->gateway.s_addr != route->gateway.s_addr) {
      return Error{{},
                   what + ": backend " + ToString(more.address) + " is reached via " +
                       other->ifname + ", the rule's first backend via " + route->ifname +
                       ": the fast path serves a rule's backends through one interface and "
                       "gateway"};
    }
    place.next_hops.push_back(other->next_hop);
  }
  in_addr source = route->prefsrc;
  if (place.backend_if == listen_if) source = listen.addr;
  if (source.s_addr == 0) {
    return Error{{},
                 what + ": the kernel's route to " + ToString(backend.addr) + " via " +
                     place.backend_if + " has no source address"};
  }
  auto client_side = GetInterface(impl, listen_if, listen.addr, in_addr{}, starting);
  if (!client_side) return Error{{}, what + ": " + client_side.error().message()};
  auto backend_side = GetInterface(impl, place.backend_if, source, route->gateway, starting);
  if (!backend_side) return Error{{}, what + ": " + backend_side.error().message()};
  // --backend-source (or the rule's [src=ADDR]): each address must be the kernel's on the
  // backend-side interface, so the kernel answers ARP for it; lwIP answers TCP on it.
  const char* source_option = rule.source.is_ipv4() ? "[src=]" : "--backend-source";
  for (in_addr extra : RuleSources(rule, config)) {
    auto holder = InterfaceWithAddress(extra);
    if (!holder || holder->second != place.backend_if) {
      return Error{{},
                   what + ": " + source_option + " " + ToString(extra) + " is not an address of " +
                       place.backend_if +
                       " (the interface toward the backend); add it with: ip addr " + "add " +
                       ToString(extra) + "/32 dev " + place.backend_if};
    }
    auto& aliases = (*backend_side)->aliases;
    if (extra.s_addr == source.s_addr ||
        std::any_of(aliases.begin(), aliases.end(),
                    [&](in_addr a) { return a.s_addr == extra.s_addr; })) {
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
    if (impl.ifaces[k].get() == *backend_side) place.backend = k;
  }
  return place;
}

void FastPath::Impl::PrimeOnce(const RulePlace& place) {
  if (!place.prime) return;
  for (in_addr next_hop : place.next_hops) {
    if (primed.insert({place.backend_if, next_hop.s_addr}).second) {
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
    w.listen = rules[k].listen.ipv4();
    w.backend = rules[k].backend.ipv4();
    w.sources = RuleSources(rules[k], config);
    w.access = rules[k].access;
    w.proxy = rules[k].proxy;
    w.accept_proxy = rules[k].accept_proxy;
    w.retry_empty_response = rules[k].retry_empty_response;
    w.backend_weight = rules[k].backend_weight;
    w.balance = rules[k].balance;
    for (const RuleBackend& b : rules[k].more_backends) {
      w.more_backends.push_back(RelayBackend{b.address.ipv4(), b.weight, b.backup});
    }
    set.rules.push_back(std::move(w));
  }
  return set;
}

std::vector<std::string> FastPath::CheckRules(const std::vector<Rule>& rules) {
  std::vector<std::string> why_not;
  std::vector<Endpoint> listens;
  const size_t most = std::min<size_t>(LwipListenerCapacity(), STEER_MAX_LISTENERS);
  for (const Rule& rule : rules) {
    auto place = PlaceRule(*impl_, rule, /*starting=*/false);
    if (!place) {
      why_not.push_back(place.error().message());
      continue;
    }
    const Endpoint listen = rule.listen.ipv4();
    const bool known = std::any_of(listens.begin(), listens.end(), [&](const Endpoint& e) {
      return e.addr.s_addr == listen.addr.s_addr && e.port == listen.port;
    });
    if (!known && listens.size() == most) {
      why_not.push_back("rule " + ToString(rule.listen) + " -> " + ToString(rule.backend) +
                        ": a fast-path worker listens on " + std::to_string(most) +
                        " addresses at most (MEMP_NUM_TCP_PCB_LISTEN in stack/lwip/lwipopts.h)");
      continue;
    }
    if (!known) listens.push_back(listen);
    why_not.emplace_back();
  }
  return why_not;
}

Result<void> FastPath::SetRules(const std::vector<Rule>& rules,
                                const std::vector<AccessPattern>& global_access) {
  Impl& m = *impl_;
  std::lock_guard lock(m.rules_mu);
  if (m.stopped) return Error{{}, "the fast path has stopped"};
  std::vector<RulePlace> places;
  for (const Rule& rule : rules) {
    // CheckRules took it; only a change of the kernel's routes since can refuse it here.
    auto place = PlaceRule(m, rule, /*starting=*/false);
    if (!place) return place.error();
    places.push_back(*place);
  }
  // A new backend's first SYN finds its next hop in the kernel's table.
  for (const RulePlace& place : places) m.PrimeOnce(place);
  auto has_listen = [&](const Endpoint& e) {
    return std::any_of(rules.begin(), rules.end(), [&](const Rule& r) {
      return r.listen.ipv4().addr.s_addr == e.addr.s_addr && r.listen.ipv4().port == e.port;
    });
  };
  // Listen addresses that go: no new client is steered to them from here on, and the workers
  // close their listeners below.
  const std::vector<Impl::SteeredListener> steered = m.steered_listeners;
  for (const Impl::SteeredListener& l : steered) {
    if (!has_listen(l.listen)) StopAccepting(l.listen);
  }
  auto generation = m.RuleTable().Write(m.WorkerRules(rules, places, global_access));
  if (!generation) return generation.error();
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
    const Endpoint listen = rules[k].listen.ipv4();
    SteerProgram* steer = m.ifaces[places[k].client]->steer.get();
    if (auto r = steer->AddListener(listen.addr, listen.port, rules[k].id); !r) {
      note(r.error().message());
      continue;
    }
    const bool known =
        std::any_of(m.steered_listeners.begin(), m.steered_listeners.end(), [&](const auto& l) {
          return l.listen.addr.s_addr == listen.addr.s_addr && l.listen.port == listen.port;
        });
    if (!known) m.steered_listeners.push_back({steer, listen});
  }
  if (!problems.empty()) return Error{{}, problems};
  return {};
}

}  // namespace xdpfwd
