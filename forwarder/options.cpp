// Command-line parsing for xdpfwd (see options.h).
#include "forwarder/options.h"

#include <arpa/inet.h>

#include <algorithm>
#include <charconv>
#include <thread>

#include "forwarder/control_socket.h"
#include "os/cpu_list.h"
#include "os/parse_number.h"

namespace xdpfwd {
namespace {

template <typename T>
Result<T> ParseNumber(const std::string& option, const std::string& text, T min, T max) {
  const std::optional<T> value = ParseDecimal<T>(text, min, max);
  if (!value) {
    return Error{{},
                 option + ": '" + text + "' is not a number from " + std::to_string(min) + " to " +
                     std::to_string(max)};
  }
  return *value;
}

Result<PortRange> ParsePortRange(const std::string& text) {
  const size_t dash = text.find('-');
  if (dash == std::string::npos)
    return Error{{}, "--backend-ports: expected LOW-HIGH, got '" + text + "'"};
  auto lo = ParseNumber<unsigned>("--backend-ports", text.substr(0, dash), 1024, 65535);
  if (!lo) return lo.error();
  auto hi = ParseNumber<unsigned>("--backend-ports", text.substr(dash + 1), 1024, 65535);
  if (!hi) return hi.error();
  if (*hi < *lo) return Error{{}, "--backend-ports: '" + text + "' is an empty range"};
  return PortRange{static_cast<uint16_t>(*lo), static_cast<uint16_t>(*hi)};
}

// "--tx-small packet" or "--copy", a lever's spelling before --tune: refused now, with the
// --tune that says the same; the value is the next argument where the key takes it.
std::string OldLeverHint(const TuningKey& lever, const std::vector<std::string>& args, size_t i) {
  std::string value = lever.Values();
  if (Tuning scratch; i + 1 < args.size() && lever.Set(scratch, args[i + 1])) value = args[i + 1];
  return "the measurement levers are set with --tune KEY=VALUE: --tune " + std::string(lever.key) +
         "=" + value + " (xdpfwd --help-tune lists them)";
}

}  // namespace

const char* Usage() {
  return "usage: xdpfwd [options] LISTEN BACKEND   e.g. xdpfwd 10.0.1.1:9000 10.0.0.2:9001\n"
         "       xdpfwd [options] -c RULES_FILE    rinetd's format (xdpfwd.conf(5))\n"
         "       xdpfwd ctl [--control PATH] COMMAND   ask a running xdpfwd (ctl help)\n"
         "\n"
         "Rules\n"
         "  LISTEN BACKEND           one rule: ADDR:PORT to listen on, ADDR:PORT to forward to;\n"
         "                           several backends: ADDR:PORT[@W][,ADDR:PORT@W+backup...]\n"
         "                           with weight W (default 1), +backup: used only when no\n"
         "                           other is usable\n"
         "  --balance METHOD         how a connection picks among several backends: roundrobin\n"
         "                           (default, weighted), leastconn, source (client hash)\n"
         "  -c, --conf-file FILE     the rules from a file: bindaddr bindport connaddr connport\n"
         "  -t, --check              with -c: check the file, print the rules as understood,\n"
         "                           exit 0 (valid) or 2 (not)\n"
         "\n"
         "Paths\n"
         "  --path auto|xdp|kernel   auto (default): XDP/AF_XDP fast path for the flows it can\n"
         "                           take, kernel sockets for the rest; xdp: fast path only;\n"
         "                           kernel: no XDP\n"
         "  --cpus LIST              CPUs for the fast path's busy-polling workers, e.g. 2 or\n"
         "                           2-5,7: one worker process per CPU, pinned, worker w\n"
         "                           serving RX queues q with q mod N = w (every interface\n"
         "                           needs N queues). Default: one unpinned worker per RX\n"
         "                           queue of the interface with fewest (--cpu N: the same)\n"
         "  --threads N              kernel path event-loop threads (default: one per CPU)\n"
         "  --busy-poll              kernel path: threads never sleep (lower latency; each\n"
         "                           thread keeps a CPU 100% busy)\n"
         "  --iface NAME             fast path: the client-side interface (default: the one\n"
         "                           with the listen address)\n"
         "  --backend-iface NAME     fast path: the backend-side interface (default: the\n"
         "                           route's)\n"
         "  --generic                fast path: attach XDP in generic (SKB) mode\n"
         "  --native                 fast path: attach XDP in native (driver) mode, no fallback\n"
         "                           (default: generic on veth, where the peer keeps its TSO\n"
         "                           and 64 KiB segments arrive whole; native elsewhere)\n"
         "\n"
         "Limits (DUR: 5s, 250ms, 2m)\n"
         "  --max-connections N      per path; beyond it new clients are reset (default: fast\n"
         "                           path 131072 per worker, up to 1179648 (lwIP's pcb pool),\n"
         "                           shared out between workers when given; kernel path 16384)\n"
         "  --connect-timeout DUR    backend handshake limit (default 5s)\n"
         "  --idle-timeout DUR       reset connections idle this long (default: never)\n"
         "  --stall-timeout DUR      reset a connection whose peer takes no bytes this long\n"
         "                           while some wait for it, e.g. a zero window (default\n"
         "                           120s; 0: never; kernel path: TCP_USER_TIMEOUT)\n"
         "  --drain-timeout DUR      on SIGTERM/SIGINT stop accepting and let open connections\n"
         "                           finish this long, then reset the rest (default 30s; 0:\n"
         "                           reset at once); a second signal ends at once\n"
         "  --watchdog DUR           a fast-path worker that makes no progress this long\n"
         "                           (stopped, wedged) is killed and restarted: its own\n"
         "                           connections are lost, no other's (default 5s; 0: never)\n"
         "  --flow-capacity N        fast path: client flows steered at once per interface;\n"
         "                           new connections beyond it go to the kernel path\n"
         "                           (default 131072)\n"
         "  --backend-ports LO-HI    fast path: local ports of backend legs (default: every port\n"
         "                           from 1024 outside net.ipv4.ip_local_port_range)\n"
         "  --backend-source ADDR[,ADDR...]\n"
         "                           local addresses of backend legs, IPv4 or IPv6: a leg\n"
         "                           uses those of its backend's family in turn (default,\n"
         "                           and for a family not given: the route's source); each\n"
         "                           adds a port range towards every backend (about 36,000\n"
         "                           ports with Linux's defaults): more connections to one\n"
         "                           backend than that need more addresses. Both paths; the\n"
         "                           fast path needs them on the backend-side interface\n"
         "\n"
         "Logs and control\n"
         "  --control PATH           the control socket (default /run/xdpfwd/control; none:\n"
         "                           no socket); xdpfwd ctl help lists its commands\n"
         "  --metrics ADDR:PORT      serve Prometheus metrics at http://ADDR:PORT/metrics\n"
         "  --stats-interval SEC     print counters every SEC seconds (also on SIGUSR1)\n"
         "  -v                       more detail\n"
         "\n"
         "Tuning\n"
         "  --tune KEY=VALUE         set a measurement lever (repeatable, the last one wins);\n"
         "                           the defaults are what measured best (docs/tuning.md)\n"
         "  --help-tune              the levers: their values, defaults and measured effects\n"
         "\n"
         "Other\n"
         "  -f                       accepted for rinetd's command line (xdpfwd never forks)\n"
         "  -V, --version            the version\n"
         "  -h, --help               this text\n";
}

std::string HelpText(const Options& o) { return o.help_tune ? TuningHelp() : Usage(); }

std::string_view PathName(PathChoice path) {
  switch (path) {
    case PathChoice::kAuto:
      return "auto";
    case PathChoice::kXdp:
      return "xdp";
    case PathChoice::kKernel:
      return "kernel";
  }
  return "?";
}

Result<std::vector<IpAddress>> ParseAddressList(const std::string& option,
                                                const std::string& text) {
  if (text.empty()) return Error{{}, option + ": needs at least one address (ADDR[,ADDR...])"};
  std::vector<IpAddress> out;
  size_t begin = 0;
  for (;;) {
    const size_t comma = text.find(',', begin);
    const std::string item =
        text.substr(begin, comma == std::string::npos ? std::string::npos : comma - begin);
    if (item.empty()) {
      return Error{{}, option + ": '" + text + "' has an empty address (ADDR[,ADDR...])"};
    }
    in_addr a{};
    in6_addr a6{};
    IpAddress address;
    if (inet_pton(AF_INET, item.c_str(), &a) == 1) {
      const uint32_t host = ntohl(a.s_addr);
      // A socket bound to these would not have a source address of its own.
      if (host == INADDR_ANY || host == INADDR_BROADCAST || IN_MULTICAST(host)) {
        return Error{{}, option + ": " + item + " is not a unicast address"};
      }
      address = IpAddress(a);
    } else if (inet_pton(AF_INET6, item.c_str(), &a6) == 1) {
      if (IN6_IS_ADDR_UNSPECIFIED(&a6) || IN6_IS_ADDR_MULTICAST(&a6) || IN6_IS_ADDR_V4MAPPED(&a6)) {
        return Error{{}, option + ": " + item + " is not a unicast address"};
      }
      if (IN6_IS_ADDR_LINKLOCAL(&a6)) {
        return Error{{},
                     option + ": " + item +
                         " is link-local, which means something only on one interface; give a "
                         "global address"};
      }
      address = IpAddress::V6(a6);
    } else {
      return Error{{}, option + ": '" + item + "' is not an IPv4 or IPv6 address"};
    }
    if (std::find(out.begin(), out.end(), address) != out.end()) {
      return Error{{}, option + ": " + item + " is given twice"};
    }
    out.push_back(address);
    if (comma == std::string::npos) return out;
    begin = comma + 1;
  }
}

Result<std::chrono::milliseconds> ParseDuration(const std::string& text) {
  size_t digits = 0;
  while (digits < text.size() && text[digits] >= '0' && text[digits] <= '9') ++digits;
  const std::string unit = text.substr(digits);
  uint64_t n = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + digits, n);
  uint64_t scale = 0;
  if (unit.empty() || unit == "s") scale = 1000;
  if (unit == "ms") scale = 1;
  if (unit == "m") scale = 60'000;
  if (digits == 0 || ec != std::errc() || end != text.data() + digits || scale == 0 ||
      n > 365ull * 24 * 3600 * 1000 / scale) {
    return Error{{}, "'" + text + "' is not a duration (for example 5s, 250ms, 2m)"};
  }
  return std::chrono::milliseconds(n * scale);
}

namespace {

// The command line's BACKEND: ADDR:PORT, or several separated by commas, each with an optional
// "@WEIGHT", "@backup" or "@WEIGHT+backup" (docs/configuration.md's `backend` lines in one word).
Result<std::vector<RuleBackend>> ParseBackendList(const std::string& text) {
  std::vector<RuleBackend> out;
  size_t at = 0;
  while (at <= text.size()) {
    const size_t comma = std::min(text.find(',', at), text.size());
    const std::string item = text.substr(at, comma - at);
    const size_t mark = item.find('@');
    RuleBackend b;
    auto address = ParseSocketAddress(item.substr(0, mark));
    if (!address) return Error{{}, "BACKEND: " + address.error().message()};
    if (address->is_any()) return Error{{}, "BACKEND: " + item + " is not connectable"};
    b.address = *address;
    b.host = HostText(*address);
    if (mark != std::string::npos) {
      std::string rest = item.substr(mark + 1);
      if (const size_t plus = rest.find('+'); plus != std::string::npos) {
        if (rest.substr(plus + 1) != "backup") {
          return Error{{}, "BACKEND: " + item + ": expected +backup after the weight"};
        }
        b.backup = true;
        rest.resize(plus);
      }
      if (rest == "backup") {
        b.backup = true;
      } else {
        unsigned weight = 0;
        const auto [p, ec] = std::from_chars(rest.data(), rest.data() + rest.size(), weight);
        if (ec != std::errc() || p != rest.data() + rest.size() || weight < 1 || weight > 256) {
          return Error{{}, "BACKEND: " + item + ": expected a weight from 1 to 256 after '@'"};
        }
        b.weight = weight;
      }
    }
    if (std::any_of(out.begin(), out.end(),
                    [&](const RuleBackend& x) { return x.address == b.address; })) {
      return Error{{}, "BACKEND: " + ToString(b.address) + " is given twice"};
    }
    out.push_back(std::move(b));
    at = comma + 1;
  }
  if (out.front().backup) {
    return Error{{}, "BACKEND: the first backend cannot be a backup (list it later)"};
  }
  if (out.size() > kMaxBackends) {
    return Error{{}, "BACKEND: at most " + std::to_string(kMaxBackends) + " backends"};
  }
  return out;
}

}  // namespace

Result<Options> ParseCommandLine(const std::vector<std::string>& argv) {
  Options o;
  o.control_path = kDefaultControlPath;
  std::vector<std::string> positional;
  std::vector<std::string> args;
  for (size_t i = 0; i < argv.size(); ++i) {
    const std::string& a = argv[i];
    if (a == "--") {
      positional.insert(positional.end(), argv.begin() + static_cast<long>(i) + 1, argv.end());
      break;
    }
    if (const size_t eq = a.find('='); a.rfind("--", 0) == 0 && eq != std::string::npos) {
      args.push_back(a.substr(0, eq));
      args.push_back(a.substr(eq + 1));
    } else {
      args.push_back(a);
    }
  }
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    auto value = [&]() -> Result<std::string> {
      if (i + 1 >= args.size()) return Error{{}, a + " needs a value"};
      return args[++i];
    };
#define XDPFWD_VALUE(var) \
  auto var = value();     \
  if (!var) return var.error();
    if (a == "-h" || a == "--help") {
      o.help = true;
      return o;
    } else if (a == "--help-tune") {
      o.help = true;  // what a main that knows only --help prints: the usage, not a run
      o.help_tune = true;
      return o;
    } else if (a == "--version" || a == "-V") {
      o.version = true;
      return o;
    } else if (a == "-v") {
      ++o.verbosity;
    } else if (a == "-f" || a == "--foreground") {
      // rinetd's "stay in the foreground": xdpfwd never forks into the background.
    } else if (a == "-t" || a == "--check") {
      o.check_only = true;
    } else if (a == "-c" || a == "--conf-file") {
      XDPFWD_VALUE(v);
      if (v->empty()) return Error{{}, a + " needs a file name"};
      o.config_file = *v;
    } else if (a == "--path") {
      XDPFWD_VALUE(v);
      if (*v == "auto")
        o.path = PathChoice::kAuto;
      else if (*v == "xdp")
        o.path = PathChoice::kXdp;
      else if (*v == "kernel")
        o.path = PathChoice::kKernel;
      else
        return Error{{}, "--path: '" + *v + "' is not auto, xdp or kernel"};
    } else if (a == "--cpus" || a == "--cpu") {
      XDPFWD_VALUE(v);
      const int cpus = static_cast<int>(std::thread::hardware_concurrency());
      auto list = ParseCpuList(*v, cpus > 0 ? cpus - 1 : 1023);
      if (!list) return Error{{}, a + " " + *v + ": " + list.error().message()};
      if (list->empty()) return Error{{}, a + ": needs at least one CPU (e.g. 2 or 2-5,7)"};
      o.cpus = std::move(*list);
    } else if (a == "--threads") {
      XDPFWD_VALUE(v);
      auto n = ParseNumber<int>(a, *v, 1, 1024);
      if (!n) return n.error();
      o.kernel_threads = *n;
    } else if (a == "--watchdog") {
      XDPFWD_VALUE(v);
      auto d = ParseDuration(*v);
      if (!d) return Error{{}, a + ": " + d.error().message()};
      o.watchdog = *d;
    } else if (a == "--balance") {
      XDPFWD_VALUE(v);
      if (*v != "roundrobin" && *v != "leastconn" && *v != "source") {
        return Error{{}, "--balance: '" + *v + "' is not roundrobin, leastconn or source"};
      }
      o.balance = *v == "roundrobin"  ? BalanceMethod::kRoundRobin
                  : *v == "leastconn" ? BalanceMethod::kLeastConnections
                                      : BalanceMethod::kSourceHash;
    } else if (a == "--drain-timeout") {
      XDPFWD_VALUE(v);
      auto d = ParseDuration(*v);
      if (!d) return Error{{}, a + ": " + d.error().message()};
      o.drain_timeout = *d;
    } else if (a == "--connect-timeout" || a == "--idle-timeout" || a == "--stall-timeout") {
      XDPFWD_VALUE(v);
      auto d = ParseDuration(*v);
      if (!d) return Error{{}, a + ": " + d.error().message()};
      if (a == "--connect-timeout") {
        if (d->count() == 0) return Error{{}, "--connect-timeout must be above zero"};
        o.limits.connect_timeout = *d;
      } else if (a == "--idle-timeout") {
        o.limits.idle_timeout = *d;
      } else {
        o.limits.stall_timeout = *d;
      }
    } else if (a == "--max-connections") {
      XDPFWD_VALUE(v);
      // The bound is only a sanity check: each path refuses at start what it cannot hold (the
      // fast path's pcb pool holds 1,179,648 a worker; bench/run asks 1,100,000 for its
      // million idle connections, which a bound of 1,000,000 refused).
      auto n = ParseNumber<uint32_t>(a, *v, 1, 1u << 24);
      if (!n) return n.error();
      o.max_connections = *n;
    } else if (a == "--iface") {
      XDPFWD_VALUE(v);
      o.listen_iface = *v;
    } else if (a == "--backend-iface") {
      XDPFWD_VALUE(v);
      o.backend_iface = *v;
    } else if (a == "--backend-ports") {
      XDPFWD_VALUE(v);
      auto r = ParsePortRange(*v);
      if (!r) return r.error();
      o.backend_ports = *r;
    } else if (a == "--flow-capacity") {
      XDPFWD_VALUE(v);
      auto n = ParseNumber<uint32_t>(a, *v, 1, kMaxFlowCapacity);
      if (!n) return n.error();
      o.flow_capacity = *n;
    } else if (a == "--generic") {
      o.force_generic = true;
    } else if (a == "--native") {
      o.force_native = true;
    } else if (a == "--busy-poll") {
      o.kernel_busy_poll = true;
    } else if (a == "--tune") {
      XDPFWD_VALUE(v);
      if (auto set = ParseTune(o.tuning, *v); !set) return set.error();
    } else if (a == "--backend-source") {
      XDPFWD_VALUE(v);
      auto list = ParseAddressList(a, *v);
      if (!list) return list.error();
      // Repeating the option adds to the list; an address may still appear only once.
      for (const IpAddress& addr : *list) {
        if (std::find(o.backend_sources.begin(), o.backend_sources.end(), addr) !=
            o.backend_sources.end()) {
          return Error{{}, a + ": " + ToString(addr) + " is given twice"};
        }
        o.backend_sources.push_back(addr);
      }
    } else if (a == "--control") {
      XDPFWD_VALUE(v);
      if (v->empty()) return Error{{}, "--control: give a socket path, or none"};
      o.control_path = *v == "none" ? "" : *v;
      o.control_given = true;
    } else if (a == "--metrics") {
      XDPFWD_VALUE(v);
      auto address = ParseSocketAddress(*v);
      if (!address) return Error{{}, "--metrics: " + address.error().message()};
      o.metrics = *address;
    } else if (a == "--stats-interval") {
      XDPFWD_VALUE(v);
      auto n = ParseNumber<int>(a, *v, 0, 86400);
      if (!n) return n.error();
      o.stats_interval_s = *n;
    } else if (a.size() > 1 && a[0] == '-') {
      if (const TuningKey* lever = a.rfind("--", 0) == 0 ? FindTuningKey(a.substr(2)) : nullptr) {
        return Error{{}, "unknown option " + a + ": " + OldLeverHint(*lever, args, i)};
      }
      return Error{{}, "unknown option " + a + " (xdpfwd --help lists them)"};
    } else {
      positional.push_back(a);
    }
#undef XDPFWD_VALUE
  }
  if (o.force_generic && o.force_native) {
    return Error{{}, "--generic and --native: give one XDP attach mode, or neither (automatic)"};
  }
  if (!o.config_file.empty()) {
    if (!positional.empty()) {
      return Error{{}, "give either -c RULES_FILE or LISTEN BACKEND, not both"};
    }
  } else {
    if (o.check_only) return Error{{}, "-t checks a configuration file: give -c FILE"};
    if (positional.size() != 2) {
      return Error{{},
                   positional.empty()
                       ? "no rule: give LISTEN BACKEND or -c RULES_FILE"
                       : "expected LISTEN BACKEND, got " + std::to_string(positional.size()) +
                             " argument" + (positional.size() == 1 ? "" : "s")};
    }
    auto listen = ParseSocketAddress(positional[0]);
    if (!listen) return Error{{}, "LISTEN: " + listen.error().message()};
    auto backends = ParseBackendList(positional[1]);
    if (!backends) return backends.error();
    Rule rule;
    rule.listen = *listen;
    rule.backend = backends->front().address;
    rule.backend_weight = backends->front().weight;
    rule.more_backends.assign(backends->begin() + 1, backends->end());
    rule.balance = o.balance;
    o.config.rules.push_back(rule);
  }
  return o;
}

}  // namespace xdpfwd
