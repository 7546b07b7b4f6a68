// The invariant every relay test checks at the end: each accepted connection ended in exactly
// one way, or is still open. Shared by the kernel path's and the fast path's tests.
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "forwarder/relay_counters.h"

namespace xdpfwd::test {

// accepted == active + every end reason (a client refused for max_connections is in
// over_limit, not in accepted). `context` is shown on failure (all counters).
void ExpectEachEndedOnce(const RelayTotals& r, const std::string& context);

// The relay counters of one path from a ForwarderProcess::Stats() map ("kernel.accepted"...),
// `prefix` being "kernel." or "fast.".
RelayTotals RelayFromStats(const std::map<std::string, uint64_t>& stats, const std::string& prefix);

}  // namespace xdpfwd::test
