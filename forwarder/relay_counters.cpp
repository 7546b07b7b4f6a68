// Snapshots and formatting of the relay counters for log lines and the exit summary.
#include "forwarder/relay_counters.h"

#include <cstdlib>

namespace xdpfwd {

RelayTotals& RelayTotals::operator+=(const RelayTotals& o) {
#define XDPFWD_FIELD(name, kind, what) name += o.name;
  XDPFWD_RELAY_COUNTERS(XDPFWD_FIELD)
#undef XDPFWD_FIELD
  connect += o.connect;
  first_byte += o.first_byte;
  return *this;
}

std::string RelayTotals::Format() const {
  std::string out;
#define XDPFWD_FIELD(name, kind, what) \
  if (!out.empty()) out += ' ';        \
  out += #name "=" + std::to_string(name);
  XDPFWD_RELAY_COUNTERS(XDPFWD_FIELD)
#undef XDPFWD_FIELD
  return out;
}

void AddRuleTotals(std::vector<RuleTotals>& rules, uint32_t rule_id, const RelayTotals& t) {
  for (RuleTotals& r : rules) {
    if (r.rule_id == rule_id) {
      r.totals += t;
      return;
    }
  }
  rules.push_back({rule_id, t});
}

std::atomic<uint64_t>& RelayCounters::Same(const RelayCounters& of,
                                           const std::atomic<uint64_t>& field) {
#define XDPFWD_FIELD(name, kind, what) \
  if (&field == &of.name) return name;
  XDPFWD_RELAY_COUNTERS(XDPFWD_FIELD)
#undef XDPFWD_FIELD
  std::abort();  // not one of `of`'s counters: a caller's bug
}

RelayTotals RelayCounters::Snapshot() const {
  RelayTotals t;
#define XDPFWD_FIELD(name, kind, what) t.name = name.load(std::memory_order_relaxed);
  XDPFWD_RELAY_COUNTERS(XDPFWD_FIELD)
#undef XDPFWD_FIELD
  t.connect = connect.Snapshot();
  t.first_byte = first_byte.Snapshot();
  return t;
}

}  // namespace xdpfwd
