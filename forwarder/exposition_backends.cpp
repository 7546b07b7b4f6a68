// Each backend of the rules on the health board as the control socket, the metrics and the
// JSON report show it: its state, its checks, its weight and both paths' counts (exposition.h).
#include <string>

#include "forwarder/exposition.h"
#include "forwarder/exposition_format.h"

namespace xdpfwd {
namespace {

using View = HealthChecker::BackendView;

const char* CheckText(const View& b) {
  if (!b.checked) return "unchecked";
  return b.up ? "up" : "down";
}

}  // namespace

std::string BackendsCsv(const std::vector<View>& backends) {
  // The last failure last: it is free text.
  std::string out =
      "# rule,backend,admin,check,weight,current,sessions,connect_failures,bytes_to_backend,"
      "bytes_from_backend,checks,failures,last_failure\n";
  for (const View& b : backends) {
    out += std::to_string(b.rule_id) + "," + b.backend + "," + HealthChecker::AdminName(b.admin) +
           "," + CheckText(b) + "," + std::to_string(b.weight) + "," + std::to_string(b.current) +
           "," + std::to_string(b.sessions) + "," + std::to_string(b.connect_failures) + "," +
           std::to_string(b.bytes_to_backend) + "," + std::to_string(b.bytes_from_backend) + "," +
           std::to_string(b.checks) + "," + std::to_string(b.failures) + "," + b.last_error + "\n";
  }
  return out;
}

namespace exposition {

void BackendMetrics(Prometheus& p, const ServiceReport& r) {
  auto family = [&](const std::string& name, bool gauge, const std::string& help, auto value) {
    p.Family(name, gauge, help);
    for (const View& b : r.backends) {
      p.Sample(name, {{"rule", std::to_string(b.rule_id)}, {"backend", b.backend}},
               static_cast<uint64_t>(value(b)));
    }
  };
  p.Family("xdpfwd_backend_state", true,
           "1 for the backend's state (ready, drain, maint: `set backend`, [state=]), 0 for the "
           "others");
  for (const View& b : r.backends) {
    for (auto a : {BackendAdmin::kReady, BackendAdmin::kDrain, BackendAdmin::kMaint}) {
      p.Sample("xdpfwd_backend_state",
               {{"rule", std::to_string(b.rule_id)},
                {"backend", b.backend},
                {"state", std::string(BackendAdminName(a))}},
               uint64_t{b.admin == a ? 1u : 0u});
    }
  }
  family("xdpfwd_backend_up", true,
         "1 while the backend passes its health checks (always, for a rule without checks)",
         [](const View& b) { return b.up ? 1 : 0; });
  family("xdpfwd_backend_weight", true, "the backend's weight (the file's, or `set weight`'s)",
         [](const View& b) { return b.weight; });
  family("xdpfwd_backend_sessions_open", true,
         "sessions on the backend now: handshake completed, not ended (both paths)",
         [](const View& b) { return b.current; });
  family("xdpfwd_backend_sessions_total", false,
         "backend handshakes completed: sessions the backend took (both paths)",
         [](const View& b) { return b.sessions; });
  family("xdpfwd_backend_connect_failures_total", false,
         "backend handshakes that failed: refused, timed out, unreachable (both paths)",
         [](const View& b) { return b.connect_failures; });
  p.Family("xdpfwd_backend_relayed_bytes_total", false,
           "payload bytes of the backend's ended sessions, by direction (both paths)");
  for (const View& b : r.backends) {
    for (const auto& [direction, n] : {std::pair{"to_backend", b.bytes_to_backend},
                                       std::pair{"to_client", b.bytes_from_backend}}) {
      p.Sample(
          "xdpfwd_backend_relayed_bytes_total",
          {{"rule", std::to_string(b.rule_id)}, {"backend", b.backend}, {"direction", direction}},
          n);
    }
  }
  family("xdpfwd_backend_checks_total", false, "health checks of the backend",
         [](const View& b) { return b.checks; });
  family("xdpfwd_backend_check_failures_total", false, "health checks of the backend that failed",
         [](const View& b) { return b.failures; });
}

void BackendsJson(Json& j, const ServiceReport& r) {
  j.Open("backends", '[');
  for (const View& b : r.backends) {
    j.Open({}, '{')
        .Number("rule", b.rule_id)
        .String("backend", b.backend)
        .String("admin", HealthChecker::AdminName(b.admin))
        .String("check", CheckText(b))
        .Number("weight", b.weight)
        .Bool("backup", b.backup)
        .Number("current", b.current)
        .Number("sessions", b.sessions)
        .Number("connect_failures", b.connect_failures)
        .Number("bytes_to_backend", b.bytes_to_backend)
        .Number("bytes_from_backend", b.bytes_from_backend)
        .Number("checks", b.checks)
        .Number("failures", b.failures)
        .String("last_failure", b.last_error)
        .Close('}');
  }
  j.Close(']');
}

}  // namespace exposition
}  // namespace xdpfwd
