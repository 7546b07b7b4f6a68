// The load generator's modes, each run to completion: the process exit code (0 success, 1 a
// runtime failure already reported on stderr). Results go to stdout as JSON lines.
#pragma once

#include "bench/loadgen/args.h"

namespace xdpfwd::loadgen {

int RunServe(const Options& o);   // serve.cpp
int RunClient(const Options& o);  // client.cpp: rr, rate and hold

}  // namespace xdpfwd::loadgen
