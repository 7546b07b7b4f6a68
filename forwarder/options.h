// The xdpfwd command line: one rule as two words (LISTEN BACKEND) or a rules file (-c), the path
// to run, its limits, and the measurement levers as one Tuning (--tune, forwarder/tuning.h).
#pragma once

#include <netinet/in.h>

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "forwarder/fast_path.h"
#include "forwarder/kernel_path.h"
#include "forwarder/rules.h"
#include "forwarder/tuning.h"
#include "os/ip_address.h"
#include "os/result.h"

namespace xdpfwd {

enum class PathChoice { kAuto, kXdp, kKernel };

struct Options {
  // The rules and rinetd settings: one rule from LISTEN BACKEND, or empty with config_file set
  // (main loads the file, so a configuration error is told apart from a usage error and a
  // reload reads the file again).
  Config config;
  std::string config_file;                             // -c FILE
  BalanceMethod balance = BalanceMethod::kRoundRobin;  // --balance, for LISTEN BACKEND's rule
  bool check_only = false;  // -t: check the file, print it as understood, exit
  PathChoice path = PathChoice::kAuto;
  RelayLimits limits;
  // --cpus (or --cpu): cores for fast-path workers, one worker process each, ascending; empty:
  // one unpinned worker per RX queue (FastPathConfig::cpus).
  std::vector<int> cpus;
  std::chrono::milliseconds watchdog{5000};  // FastPathConfig::watchdog
  // SIGTERM/SIGINT: stop accepting, let open connections finish this long, reset the rest.
  std::chrono::milliseconds drain_timeout{30'000};
  int kernel_threads = 0;
  // --busy-poll: the kernel path's loop threads spin instead of sleeping. An operator's choice
  // (latency for a CPU per thread), not a lever: docs/tuning.md says why.
  bool kernel_busy_poll = false;
  // --backend-source: local addresses backend legs are bound to, either family: a leg uses those
  // of its backend's family in turn. None of that family (or none at all): the kernel's choice
  // (the route's source address).
  std::vector<IpAddress> backend_sources;
  std::string listen_iface, backend_iface;
  PortRange backend_ports;
  uint32_t flow_capacity = 0;  // 0: the steering program's default
  // --max-connections, for each path; unset: each path's own default (the fast path's lwIP pool,
  // the kernel path's RelayLimits default, which its open-file limit has to allow).
  std::optional<uint32_t> max_connections;
  // --generic / --native: the fast path's XDP attach mode. Neither: chosen per interface
  // (generic on veth, native elsewhere, forwarder/link_fit.h), native falling back to generic.
  bool force_generic = false;
  bool force_native = false;
  // --tune KEY=VALUE: the measurement levers, one value for both paths (forwarder/tuning.h).
  Tuning tuning;
  int stats_interval_s = 0;
  // --control PATH: the control socket (forwarder/control_socket.h); "none": no socket. Left at
  // the default, a socket another process holds is a warning, not an error.
  std::string control_path;
  bool control_given = false;
  // --metrics ADDR:PORT: Prometheus's /metrics over HTTP; unset: none.
  std::optional<SocketAddress> metrics;
  int verbosity = 0;
  bool help = false;       // -h, --help; also set by --help-tune
  bool help_tune = false;  // --help-tune
  bool version = false;
};

// argv without the program name. Errors say which option and why. "--opt=value" is "--opt
// value"; "--" ends the options.
Result<Options> ParseCommandLine(const std::vector<std::string>& args);
const char* Usage();
// What --help (Usage) or --help-tune (TuningHelp) prints.
std::string HelpText(const Options& o);
std::string_view PathName(PathChoice path);

// "ADDR[,ADDR...]": distinct unicast addresses, IPv4 or IPv6 (global: a link-local address
// would need an interface), at least one.
Result<std::vector<IpAddress>> ParseAddressList(const std::string& option, const std::string& text);

// "5s", "250ms", "2m", or a plain number of seconds.
Result<std::chrono::milliseconds> ParseDuration(const std::string& text);

}  // namespace xdpfwd
