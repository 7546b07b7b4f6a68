// The xdpfwd command line: one rule as two words (LISTEN BACKEND) or a rules file (-c), the path
// to run, and the limits and knobs of each path.
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
#include "os/result.h"

namespace xdpfwd {

enum class PathChoice { kAuto, kXdp, kKernel };

struct Options {
  // The rules and rinetd settings: one rule from LISTEN BACKEND, or empty with config_file set
  // (main loads the file, so a configuration error is told apart from a usage error and a
  // reload reads the file again).
  Config config;
  std::string config_file;  // -c FILE
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
  bool kernel_copy = false;       // buffered copy instead of splice on the kernel path
  bool kernel_busy_poll = false;  // kernel path loop threads spin instead of sleeping
  size_t kernel_buffer = 64 * 1024;
  // --backend-source: local IPv4 addresses backend legs are bound to, used in turn. Empty: the
  // kernel's choice (the route's source address).
  std::vector<in_addr> backend_sources;
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
  // --multi-buffer off: AF_XDP sockets without XDP_USE_SG (one packet per frame; A/B runs).
  bool multi_buffer = true;
  // --tx-checksum software / --tx-budget off: the fast path's TX offloads off (A/B runs).
  bool tx_checksum_offload = true;
  bool tx_budget = true;
  // --fill-depth adaptive|full: the fill ring keeps few frames posted under steady load (warm
  // ones) and deepens after a burst, or always all of them (A/B runs).
  bool adaptive_fill = true;
  // --tx af-xdp|packet: how the fast path sends. Unset: a packet socket with GSO on interfaces
  // whose AF_XDP sockets run in copy mode, the AF_XDP socket where it is zero-copy.
  std::optional<bool> packet_tx;
  // --tx-small af-xdp|packet: with the packet socket, where batches of single segments go.
  SmallBatchTx small_batches = SmallBatchTx::kAcksThroughPacket;
  // --relay-copy always|when-queued: false copies every relayed byte (lwIP's tcp_write with
  // COPY); true sends bytes that leave at once from their receive frame (lwIP patch 0032).
  bool zero_copy_relay = true;
  // --ooseq-ack hold|now: the ACK of out-of-order data waits one worker iteration (lwIP patch
  // 0033: through veth a peer's segments arrive out of order without loss), or leaves at once.
  bool ooseq_ack_hold = true;
  // --congestion-control cubic|bbr: the fast path's lwIP legs (lwIP patches 0018 and 0031).
  // BBR by default: measured faster under random loss and no slower without (docs/stack.md).
  bool bbr = true;
  int stats_interval_s = 0;
  int verbosity = 0;
  bool help = false;
  bool version = false;
};

// argv without the program name. Errors say which option and why. "--opt=value" is "--opt
// value"; "--" ends the options.
Result<Options> ParseCommandLine(const std::vector<std::string>& args);
const char* Usage();
std::string_view PathName(PathChoice path);

// "ADDR[,ADDR...]": distinct IPv4 unicast addresses, at least one.
Result<std::vector<in_addr>> ParseAddressList(const std::string& option, const std::string& text);

// "5s", "250ms", "2m", or a plain number of seconds.
Result<std::chrono::milliseconds> ParseDuration(const std::string& text);

}  // namespace xdpfwd
