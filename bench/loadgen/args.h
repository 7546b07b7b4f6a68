// The load generator's command line: a mode (serve, rr, rate, hold) and its options.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "bench/loadgen/net.h"
#include "os/result.h"

namespace xdpfwd::loadgen {

enum class Mode { kServe, kRequestResponse, kRate, kHold };
// rate: which end closes each connection first (and so keeps its TIME_WAIT).
enum class CloseOrder { kServer, kClient };

struct Options {
  Mode mode = Mode::kServe;
  bool help = false;
  SockAddr listen;                    // serve
  SockAddr connect;                   // rr, rate, hold
  std::vector<SockAddr> sources;      // client source addresses, used in turn
  uint32_t connections = 0;           // rr, hold
  uint32_t concurrency = 0;           // rate: slots; hold: connects in progress at once (256)
  uint64_t request = 0;               // bytes per request
  uint64_t response = 0;              // bytes per response
  double seconds = 0;                 // measured time (rr, rate)
  double warmup = 1.0;                // before it, excluded from statistics
  double timeout = 5.0;               // per connect and per exchange; counts as a timeout error
  bool close_after_response = false;  // serve
  bool reuse_port = false;            // serve: SO_REUSEPORT, several servers on one port
  bool accept_proxy = false;          // serve: a PROXY header (v1 or v2) first on each connection
  double report_every = 0;            // serve: a progress line this often (0: none)
  CloseOrder close = CloseOrder::kServer;  // rate
  uint64_t max_failures = 0;               // hold: stop opening after this many (0: never)
  int cpu = -1;
};

const char* Usage();
// args without the program name. Errors name the option at fault.
Result<Options> ParseArgs(const std::vector<std::string>& args);
const char* ModeName(Mode mode);

}  // namespace xdpfwd::loadgen
