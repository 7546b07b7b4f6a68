// xdpfwd-loadgen: the benchmark's load generator and backend. `serve` answers requests;
// `rr` (request/response latency and rate), `rate` (new connections per second) and `hold`
// (many idle connections, for memory per connection) drive a server through the forwarder.
#include <cstdio>
#include <string>
#include <vector>

#include "bench/loadgen/args.h"
#include "bench/loadgen/modes.h"
#include "bench/loadgen/process.h"
#include "bench/loadgen/report.h"

int main(int argc, char** argv) {
  using namespace xdpfwd::loadgen;
  auto options = ParseArgs(std::vector<std::string>(argv + 1, argv + argc));
  if (!options) {
    Log(options.error().message());
    Log("run 'xdpfwd-loadgen --help' for usage");
    return 2;
  }
  if (options->help) {
    std::fputs(Usage(), stdout);
    return 0;
  }
  if (options->cpu >= 0) {
    if (auto pinned = PinToCpu(options->cpu); !pinned) {
      Log(pinned.error().message());
      return 1;
    }
  }
  return options->mode == Mode::kServe ? RunServe(*options) : RunClient(*options);
}
