// Snapshots and formatting of the relay counters for log lines and the exit summary.
#include "forwarder/relay_counters.h"

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
