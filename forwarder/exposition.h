// The service's report (forwarder/service_report.h) as the control socket and the metrics
// endpoint show it: Prometheus's text format, JSON, and the tables of `show stat`, `show info`,
// `show workers` and `show steer`. Every counter comes from the counter lists' X-macros, so a
// counter added there appears everywhere without another edit.
#pragma once

#include <string>
#include <vector>

#include "forwarder/connection_table.h"
#include "forwarder/service_report.h"

namespace xdpfwd {

// Prometheus's text exposition format 0.0.4: xdpfwd_ names, base units (seconds, bytes),
// counters end in _total; labels path, worker, reason (docs/observability.md lists them).
std::string MetricsText(const ServiceReport& r);

// Every counter as one JSON object: {"version":..., "fast_path":{"total":{...},
// "workers":[...]}, "kernel_path":{...}, ...}; what tests and bench/run read.
std::string ReportJson(const ServiceReport& r);

// `show stat`: CSV with a header line ("# path,rules,open,..."), one row per path.
std::string StatCsv(const ServiceReport& r);
// `show info`: "name: value" lines (version, uptime, paths, workers and their CPUs, limits,
// warnings).
std::string InfoText(const ServiceReport& r);
// `show workers`: one block per fast-path worker: CPU, busy share, iterations, per queue the
// packets received, the AF_XDP socket's drops and fill ring, lwIP's pools.
std::string WorkersText(const ServiceReport& r);
// `show backends`: CSV, a line per backend of the rules on the health board (rule, backend,
// state, checks' verdict, weight, sessions, bytes, checks and the last failure).
std::string BackendsCsv(const std::vector<HealthChecker::BackendView>& backends);
// `show steer`: the steering program's decisions, one reason a line with packets and bytes.
std::string SteerText(const ServiceReport& r);

}  // namespace xdpfwd
