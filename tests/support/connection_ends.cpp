// See connection_ends.h.
#include "tests/support/connection_ends.h"

#include <gtest/gtest.h>

namespace xdpfwd::test {

void ExpectEachEndedOnce(const RelayTotals& r, const std::string& context) {
  EXPECT_EQ(r.accepted, r.active + r.completed + r.backend_refused + r.backend_timeout +
                            r.backend_error + r.backend_no_port + r.idle_timeout + r.stall_timeout +
                            r.client_reset + r.backend_reset + r.shutdown_reset + r.admin_shutdown)
      << context;
}

RelayTotals RelayFromStats(const std::map<std::string, uint64_t>& stats,
                           const std::string& prefix) {
  RelayTotals r;
  auto get = [&](const char* name) {
    const auto it = stats.find(prefix + name);
    return it == stats.end() ? uint64_t{0} : it->second;
  };
#define XDPFWD_FROM_STATS(name, kind, what) r.name = get(#name);
  XDPFWD_RELAY_COUNTERS(XDPFWD_FROM_STATS)
#undef XDPFWD_FROM_STATS
  return r;
}

}  // namespace xdpfwd::test
