// The service's report as metrics, JSON and the control socket's tables (exposition.h).
#include "forwarder/exposition.h"

#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <string_view>
#include <utility>
#include <vector>

#include "forwarder/diagnosis.h"
#include "forwarder/exposition_format.h"

namespace xdpfwd {
namespace {

using exposition::Decimal;
using exposition::Field;
using exposition::Json;
using exposition::Prometheus;

std::vector<Field> RelayFields(const RelayTotals& t) {
  std::vector<Field> out;
#define XDPFWD_FIELD(name, kind, what) out.push_back({#name, #kind[0] == 'g', what, t.name});
  XDPFWD_RELAY_COUNTERS(XDPFWD_FIELD)
#undef XDPFWD_FIELD
  return out;
}

std::vector<Field> FastFields(const FastPathCounters& c) {
  std::vector<Field> out;
#define XDPFWD_FIELD(field, kind, name) out.push_back({name, #kind[0] == 'g', {}, c.field});
  XDPFWD_FAST_PATH_COUNTERS(XDPFWD_FIELD)
#undef XDPFWD_FIELD
  return out;
}

std::vector<Field> KernelFields(const KernelPathTotals& t) {
  std::vector<Field> out;
#define XDPFWD_FIELD(name, kind, what) out.push_back({#name, #kind[0] == 'g', what, t.name});
  XDPFWD_KERNEL_PATH_COUNTERS(XDPFWD_FIELD)
#undef XDPFWD_FIELD
  return out;
}

std::vector<Field> DatagramFields(const DatagramPathTotals& t) {
  std::vector<Field> out;
#define XDPFWD_FIELD(name, kind, what) out.push_back({#name, #kind[0] == 'g', what, t.name});
  XDPFWD_DATAGRAM_COUNTERS(XDPFWD_FIELD)
#undef XDPFWD_FIELD
  return out;
}

// The fast path's counters that the control process keeps (flow maps, restarts): they are in
// the sum only, never in a worker's numbers, so they carry no worker label.
bool ControlProcessField(std::string_view name) {
  return name == "flows" || name == "client_flows" || name == "stray_flows_reaped" ||
         name == "workers" || name == "worker_restarts";
}

bool EndsWith(std::string_view s, std::string_view tail) {
  return s.size() >= tail.size() && s.substr(s.size() - tail.size()) == tail;
}

std::string Seconds(uint64_t ms) {
  char text[32];
  std::snprintf(text, sizeof text, "%.3f", static_cast<double>(ms) / 1000.0);
  return text;
}

// A counter list's field as a metric: `prefix` + name, nanoseconds as seconds, _total on
// counters.
struct MetricName {
  std::string name;
  bool nanoseconds = false;
};
MetricName NameFor(std::string_view prefix, const Field& f) {
  MetricName m{std::string(prefix), false};
  std::string_view base = f.name;
  if (EndsWith(base, "_ns")) {
    base.remove_suffix(3);
    m.nanoseconds = true;
  }
  m.name += base;
  if (m.nanoseconds) m.name += "_seconds";
  if (!f.gauge) m.name += "_total";
  return m;
}

// The text of a rule's id in labels and tables ("other": rules beyond what a worker or thread
// keeps apart).
std::string RuleText(uint32_t id) {
  return id == RuleTotals::kOtherRules ? "other" : std::to_string(id);
}

// One set of relay counters and the labels that say whose they are (a path, or a path's rule).
struct RelaySeries {
  Prometheus::Labels labels;
  std::vector<Field> fields;
};

// Relay counters as families named `prefix`...: accepted, open, bytes and Nagle peers by name,
// every other counter a way a connection ended (relay_counters.h), one family with a `how`
// label.
void RelayFamilies(Prometheus& p, const std::string& prefix, std::string_view whose,
                   const std::vector<RelaySeries>& series) {
  auto family = [&](const std::string& name, bool gauge, const std::string& help, auto pick) {
    p.Family(prefix + name, gauge, help + std::string(whose));
    for (const RelaySeries& one : series) {
      for (const Field& f : one.fields) {
        if (auto labels = pick(f)) {
          labels->insert(labels->begin(), one.labels.begin(), one.labels.end());
          p.Sample(prefix + name, *labels, f.value);
        }
      }
    }
  };
  using Labels = std::optional<Prometheus::Labels>;
  family("connections_accepted_total", false, "client connections taken", [](const Field& f) {
    return f.name == "accepted" ? Labels(Prometheus::Labels{}) : Labels();
  });
  family(
      "connections_open", true, "connections open now: client or backend leg alive",
      [](const Field& f) { return f.name == "active" ? Labels(Prometheus::Labels{}) : Labels(); });
  family("relayed_bytes_total", false, "payload bytes relayed, by direction", [](const Field& f) {
    if (f.name == "bytes_to_backend")
      return Labels(Prometheus::Labels{{"direction", "to_backend"}});
    if (f.name == "bytes_to_client") return Labels(Prometheus::Labels{{"direction", "to_client"}});
    return Labels();
  });
  family("nagle_peers_total", false,
         "connection legs whose peer held small segments back for our delayed ACK (Nagle on "
         "the peer), by side",
         [](const Field& f) {
           if (f.name == "client_nagle_peers")
             return Labels(Prometheus::Labels{{"side", "client"}});
           if (f.name == "backend_nagle_peers") {
             return Labels(Prometheus::Labels{{"side", "backend"}});
           }
           return Labels();
         });
  family("connections_ended_total", false,
         "connections that ended, by how (completed, refused, reset, timed out: "
         "forwarder/relay_counters.h says what each counts)",
         [](const Field& f) {
           if (f.name == "accepted" || f.name == "active" || f.name == "bytes_to_backend" ||
               f.name == "bytes_to_client" || f.name == "client_nagle_peers" ||
               f.name == "backend_nagle_peers") {
             return Labels();
           }
           return Labels(Prometheus::Labels{{"how", std::string(f.name)}});
         });
}

// Both TCP paths' relay counters, per path and per rule, and their latency histograms.
void RelayMetrics(Prometheus& p, const ServiceReport& r) {
  std::vector<std::pair<std::string, const RelayTotals*>> paths;
  std::vector<std::pair<std::string, const std::vector<RuleTotals>*>> rules;
  if (r.fast) {
    paths.emplace_back("fast", &r.fast->relay);
    rules.emplace_back("fast", &r.fast->rules);
  }
  if (r.kernel) {
    paths.emplace_back("kernel", &r.kernel->relay);
    rules.emplace_back("kernel", &r.kernel->rules);
  }
  if (paths.empty()) return;
  std::vector<RelaySeries> per_path, per_rule;
  for (const auto& [path, totals] : paths)
    per_path.push_back({{{"path", path}}, RelayFields(*totals)});
  for (const auto& [path, list] : rules) {
    for (const RuleTotals& t : *list) {
      per_rule.push_back({{{"path", path}, {"rule", RuleText(t.rule_id)}}, RelayFields(t.totals)});
    }
  }
  RelayFamilies(p, "xdpfwd_", "", per_path);
  RelayFamilies(p, "xdpfwd_rule_", ", per rule", per_rule);
  // Histograms, per path and per rule: cumulative buckets with upper bounds in seconds, then
  // the sum and the count.
  std::vector<std::pair<Prometheus::Labels, const RelayTotals*>> path_totals, rule_totals;
  for (const auto& [path, totals] : paths) path_totals.push_back({{{"path", path}}, totals});
  for (const auto& [path, list] : rules) {
    for (const RuleTotals& t : *list) {
      rule_totals.push_back({{{"path", path}, {"rule", RuleText(t.rule_id)}}, &t.totals});
    }
  }
  auto histogram = [&](const std::string& name, std::string_view help, auto pick,
                       const std::vector<std::pair<Prometheus::Labels, const RelayTotals*>>& of) {
    p.Family(name, "histogram", help);
    for (const auto& [labels, totals] : of) {
      const LatencyHistogram& h = pick(*totals);
      uint64_t below = 0;
      for (int i = 0; i < kLatencyBuckets; ++i) {
        below += h.buckets[i];
        Prometheus::Labels with_le = labels;
        with_le.push_back(
            {"le", i + 1 < kLatencyBuckets ? Decimal(LatencyBucketSeconds(i)) : "+Inf"});
        p.Sample(name + "_bucket", with_le, below);
      }
      p.Sample(name + "_sum", labels, static_cast<double>(h.sum_ns) / 1e9);
      p.Sample(name + "_count", labels, h.count);
    }
  };
  auto connect = [](const RelayTotals& t) -> const LatencyHistogram& { return t.connect; };
  auto first_byte = [](const RelayTotals& t) -> const LatencyHistogram& { return t.first_byte; };
  constexpr std::string_view kConnectHelp =
      "from the client's connection taken to the backend leg established";
  constexpr std::string_view kFirstByteHelp =
      "from the client's connection taken to the backend's first byte";
  histogram("xdpfwd_connect_seconds", kConnectHelp, connect, path_totals);
  histogram("xdpfwd_first_byte_seconds", kFirstByteHelp, first_byte, path_totals);
  histogram("xdpfwd_rule_connect_seconds", std::string(kConnectHelp) + ", per rule", connect,
            rule_totals);
  histogram("xdpfwd_rule_first_byte_seconds", std::string(kFirstByteHelp) + ", per rule",
            first_byte, rule_totals);
}

void FastPathMetrics(Prometheus& p, const ServiceReport& r) {
  if (!r.fast) return;
  p.Family("xdpfwd_fast_path_worker_info", true, "a fast-path worker process: its pid and CPU");
  for (const WorkerReport& w : r.workers) {
    p.Sample("xdpfwd_fast_path_worker_info",
             {{"worker", std::to_string(w.index)},
              {"pid", std::to_string(w.pid)},
              {"cpu", std::to_string(w.cpu)}},
             uint64_t{1});
  }
  p.Family("xdpfwd_fast_path_worker_locked_bytes", true,
           "memory a fast-path worker has locked (VmLck): all it maps with --tune memory-lock=on, "
           "its AF_XDP frame areas alone with off");
  for (const WorkerReport& w : r.workers) {
    p.Sample("xdpfwd_fast_path_worker_locked_bytes", {{"worker", std::to_string(w.index)}},
             w.locked_bytes);
  }
  const std::vector<Field> total = FastFields(*r.fast);
  std::vector<std::vector<Field>> each;
  for (const WorkerReport& w : r.workers) each.push_back(FastFields(w.counters));
  for (size_t i = 0; i < total.size(); ++i) {
    const Field& f = total[i];
    const MetricName m = NameFor("xdpfwd_fast_path_", f);
    const std::string help = "fast path: " + std::string(f.name) +
                             (ControlProcessField(f.name) ? "" : ", per worker") +
                             " (docs/observability.md)";
    p.Family(m.name, f.gauge, help);
    auto sample = [&](const Prometheus::Labels& labels, uint64_t v) {
      if (m.nanoseconds) {
        p.Sample(m.name, labels, static_cast<double>(v) / 1e9);
      } else {
        p.Sample(m.name, labels, v);
      }
    };
    if (ControlProcessField(f.name) || each.empty()) {
      sample({}, f.value);
      continue;
    }
    for (size_t w = 0; w < each.size(); ++w) {
      sample({{"worker", std::to_string(r.workers[w].index)}}, each[w][i].value);
    }
  }
  p.Family("xdpfwd_fast_path_queue_rx_packets_total", false,
           "packets an AF_XDP socket received, by worker, interface and RX queue");
  for (const WorkerReport& w : r.workers) {
    for (const QueueRx& q : w.counters.rx_by_queue) {
      p.Sample("xdpfwd_fast_path_queue_rx_packets_total",
               {{"worker", std::to_string(w.index)},
                {"interface", q.ifname},
                {"queue", std::to_string(q.queue)}},
               q.packets);
    }
  }
  p.Family("xdpfwd_steer_packets_total", false,
           "the steering program's decisions, by reason (docs/steering.md)");
  for (const SteerReasonCount& s : r.steer) {
    p.Sample("xdpfwd_steer_packets_total", {{"reason", s.reason}}, s.packets);
  }
  p.Family("xdpfwd_steer_bytes_total", false,
           "bytes of the packets the steering program decided on, by reason");
  for (const SteerReasonCount& s : r.steer) {
    p.Sample("xdpfwd_steer_bytes_total", {{"reason", s.reason}}, s.bytes);
  }
}

void ListMetrics(Prometheus& p, std::string_view prefix, const std::vector<Field>& fields) {
  for (const Field& f : fields) {
    const MetricName m = NameFor(prefix, f);
    p.Family(m.name, f.gauge, f.what);
    p.Sample(m.name, {}, f.value);
  }
}

}  // namespace

std::string MetricsText(const ServiceReport& r) {
  Prometheus p;
  p.Family("xdpfwd_build_info", true, "the running version");
  p.Sample("xdpfwd_build_info", {{"version", r.version}}, uint64_t{1});
  p.Family("xdpfwd_start_time_seconds", true, "when the process started, Unix time");
  p.Sample("xdpfwd_start_time_seconds", {}, static_cast<double>(r.start_time_unix_ms) / 1000.0);
  p.Family("xdpfwd_draining", true, "1 while draining: no path accepts new connections");
  p.Sample("xdpfwd_draining", {}, uint64_t{r.draining ? 1u : 0u});
  p.Family("xdpfwd_reloads_total", false, "configuration reloads, by result");
  p.Sample("xdpfwd_reloads_total", {{"result", "applied"}}, r.reloads - r.reloads_refused);
  p.Sample("xdpfwd_reloads_total", {{"result", "refused"}}, r.reloads_refused);
  p.Family("xdpfwd_warnings", true, "warnings about the host now (show info lists them)");
  p.Sample("xdpfwd_warnings", {}, static_cast<uint64_t>(r.warnings.size()));
  p.Family("xdpfwd_warnings_raised_total", false,
           "intervals in which the host diagnosis saw something wrong with the host or a peer, "
           "by kind (forwarder/diagnosis.h)");
  for (const char* kind : kHostWarningKinds) {
    const auto it = r.warnings_raised.find(kind);
    p.Sample("xdpfwd_warnings_raised_total", {{"kind", kind}},
             it == r.warnings_raised.end() ? uint64_t{0} : it->second);
  }
  p.Family("xdpfwd_rule_info", true,
           "a rule of the running configuration and the path that takes it");
  for (const RuleReport& rule : r.rules) {
    p.Sample("xdpfwd_rule_info",
             {{"rule", std::to_string(rule.id)},
              {"listen", rule.listen},
              {"backend", rule.backend},
              {"protocol", rule.protocol},
              {"path", rule.path}},
             uint64_t{1});
  }
  RelayMetrics(p, r);
  exposition::BackendMetrics(p, r);
  FastPathMetrics(p, r);
  if (r.kernel) ListMetrics(p, "xdpfwd_kernel_path_", KernelFields(*r.kernel));
  if (r.datagram) ListMetrics(p, "xdpfwd_datagram_", DatagramFields(*r.datagram));
  if (r.access_log) {
    const SessionLog::Stats& s = *r.access_log;
    const std::vector<Field> fields = {
        {"lines", false, "access log lines written", s.lines},
        {"dropped", false, "access log lines lost: the writer was behind", s.dropped},
        {"write_errors", false, "access log lines lost: write(2) failed", s.write_errors},
        {"reopens", false, "access log reopened (SIGHUP, reload)", s.reopens},
    };
    ListMetrics(p, "xdpfwd_access_log_", fields);
  }
  return p.Take();
}

// A histogram as {"count":N,"sum_ns":N,"buckets_us":{"1":N,"2":N,...,"inf":N}}: each bucket
// keyed by its upper bound in µs, not cumulative.
void HistogramJson(Json& j, std::string_view key, const LatencyHistogram& h) {
  j.Open(key, '{').Number("count", h.count).Number("sum_ns", h.sum_ns);
  j.Open("buckets_us", '{');
  for (int i = 0; i < kLatencyBuckets; ++i) {
    j.Number(i + 1 < kLatencyBuckets ? std::to_string(uint64_t{1} << i) : "inf", h.buckets[i]);
  }
  j.Close('}').Close('}');
}

// A path's counters per rule: [{"rule": "0", "accepted": N, ...}, ...].
void RulesJson(Json& j, const std::vector<RuleTotals>& rules) {
  j.Open("rules", '[');
  for (const RuleTotals& t : rules) {
    j.Open({}, '{').String("rule", RuleText(t.rule_id)).Fields(RelayFields(t.totals)).Close('}');
  }
  j.Close(']');
}

std::string ReportJson(const ServiceReport& r) {
  Json j;
  j.Open({}, '{')
      .String("version", r.version)
      .Signed("pid", r.pid)
      .Signed("start_time_unix_ms", r.start_time_unix_ms)
      .Number("uptime_ms", r.uptime_ms)
      .String("path", r.path_choice)
      .String("config_file", r.config_file)
      .Bool("draining", r.draining)
      .Number("reloads", r.reloads)
      .Number("reloads_refused", r.reloads_refused);
  j.Open("warnings", '[');
  for (const std::string& w : r.warnings) j.String({}, w);
  j.Close(']');
  j.Open("warnings_raised", '{');
  for (const auto& [kind, n] : r.warnings_raised) j.Number(kind, n);
  j.Close('}');
  j.Open("rules", '[');
  for (const RuleReport& rule : r.rules) {
    j.Open({}, '{')
        .Number("id", rule.id)
        .String("listen", rule.listen)
        .String("backend", rule.backend)
        .String("protocol", rule.protocol)
        .String("path", rule.path)
        .Close('}');
  }
  j.Close(']');
  exposition::BackendsJson(j, r);
  if (r.fast) {
    j.Open("fast_path", '{').String("description", r.fast_description);
    j.Open("total", '{').Fields(RelayFields(r.fast->relay)).Fields(FastFields(*r.fast));
    HistogramJson(j, "connect", r.fast->relay.connect);
    HistogramJson(j, "first_byte", r.fast->relay.first_byte);
    j.Close('}');
    RulesJson(j, r.fast->rules);
    j.Open("workers", '[');
    for (const WorkerReport& w : r.workers) {
      j.Open({}, '{')
          .Number("index", w.index)
          .Signed("pid", w.pid)
          .Signed("cpu", w.cpu)
          .Number("locked_bytes", w.locked_bytes)
          .Signed("lock_error", w.lock_error);
      j.Open("counters", '{')
          .Fields(RelayFields(w.counters.relay))
          .Fields(FastFields(w.counters))
          .Close('}');
      j.Open("rx_by_queue", '[');
      for (const QueueRx& q : w.counters.rx_by_queue) {
        j.Open({}, '{')
            .String("interface", q.ifname)
            .Number("queue", q.queue)
            .Number("packets", q.packets)
            .Close('}');
      }
      j.Close(']').Close('}');
    }
    j.Close(']');
    j.Open("steer", '{');
    for (const SteerReasonCount& s : r.steer) {
      j.Open(s.reason, '{').Number("packets", s.packets).Number("bytes", s.bytes).Close('}');
    }
    j.Close('}').Close('}');
  }
  if (r.kernel) {
    j.Open("kernel_path", '{')
        .Number("threads", static_cast<uint64_t>(r.kernel_threads))
        .Bool("busy_poll", r.kernel_busy_poll);
    j.Open("total", '{').Fields(RelayFields(r.kernel->relay)).Fields(KernelFields(*r.kernel));
    HistogramJson(j, "connect", r.kernel->relay.connect);
    HistogramJson(j, "first_byte", r.kernel->relay.first_byte);
    j.Close('}');
    RulesJson(j, r.kernel->rules);
    j.Close('}');
  }
  if (r.datagram) j.Open("datagram_path", '{').Fields(DatagramFields(*r.datagram)).Close('}');
  if (r.access_log) {
    j.Open("access_log", '{')
        .String("file", r.access_log_file)
        .Number("lines", r.access_log->lines)
        .Number("dropped", r.access_log->dropped)
        .Number("write_errors", r.access_log->write_errors)
        .Number("reopens", r.access_log->reopens)
        .Close('}');
  }
  j.Close('}');
  return j.Take() + "\n";
}

std::string StatCsv(const ServiceReport& r) {
  std::string out = "# path,rule,listen,backend";
  for (const Field& f : RelayFields({})) out += "," + std::string(f.name);
  out += '\n';
  auto row = [&](const char* path, const std::string& rule, const std::string& listen,
                 const std::string& backend, const RelayTotals& t) {
    out += std::string(path) + "," + rule + "," + listen + "," + backend;
    for (const Field& f : RelayFields(t)) out += "," + std::to_string(f.value);
    out += '\n';
  };
  auto path_rows = [&](const char* path, const RelayTotals& total,
                       const std::vector<RuleTotals>& rules) {
    row(path, "*", "", "", total);  // the path's sum, as HAProxy's TOTAL line
    for (const RuleTotals& t : rules) {
      std::string listen, backend;
      for (const RuleReport& rule : r.rules) {
        if (rule.id != t.rule_id) continue;
        listen = rule.listen;
        backend = rule.backend;
      }
      row(path, RuleText(t.rule_id), listen, backend, t.totals);
    }
  };
  if (r.fast) path_rows("fast", r.fast->relay, r.fast->rules);
  if (r.kernel) path_rows("kernel", r.kernel->relay, r.kernel->rules);
  return out;
}

std::string InfoText(const ServiceReport& r) {
  std::string out;
  auto line = [&](const std::string& name, const std::string& value) {
    out += name + ": " + value + '\n';
  };
  line("version", r.version);
  line("pid", std::to_string(r.pid));
  line("uptime", Seconds(r.uptime_ms) + " s");
  line("configuration", r.config_file.empty() ? "command line" : r.config_file);
  line("path", r.path_choice);
  line("state", r.draining ? "draining" : "serving");
  line("reloads",
       std::to_string(r.reloads) + " (" + std::to_string(r.reloads_refused) + " refused)");
  for (const RuleReport& rule : r.rules) {
    line("rule " + std::to_string(rule.id),
         rule.listen + " -> " + rule.backend + " (" + rule.protocol + ", " + rule.path + " path)");
  }
  if (r.fast) {
    line("fast path", r.fast_description);
    std::string workers = std::to_string(r.workers.size());
    for (const WorkerReport& w : r.workers) {
      workers += (w.index == 0 ? ": " : ", ") + std::string("worker ") + std::to_string(w.index) +
                 " pid " + std::to_string(w.pid) + " cpu " +
                 (w.cpu < 0 ? std::string("any") : std::to_string(w.cpu));
    }
    line("fast path workers", workers);
    line("fast path connections", std::to_string(r.fast->connections));
  }
  if (r.kernel) {
    line("kernel path", std::to_string(r.kernel_threads) + " thread(s)" +
                            (r.kernel_busy_poll ? ", busy-polling" : ""));
    line("kernel path connections", std::to_string(r.kernel->relay.active));
  }
  if (r.datagram) {
    line("datagram relay", std::to_string(r.datagram->associations_open) + " association(s)");
  }
  if (r.access_log) line("access log", r.access_log_file);
  line("warnings", std::to_string(r.warnings.size()));
  for (const std::string& w : r.warnings) line("warning", w);
  return out;
}

std::string WorkersText(const ServiceReport& r) {
  if (!r.fast) return "no fast path runs\n";
  std::string out;
  for (const WorkerReport& w : r.workers) {
    const FastPathSnapshot& c = w.counters;
    char busy[64] = "";
    if (r.uptime_ms > 0) {
      std::snprintf(
          busy, sizeof busy, " (%.1f%% of uptime)",
          100.0 * static_cast<double>(c.worker_busy_ns) / 1e6 / static_cast<double>(r.uptime_ms));
    }
    char locked[48];
    std::snprintf(locked, sizeof locked, ", locked %.1f MiB",
                  static_cast<double>(w.locked_bytes) / (1u << 20));
    out += "worker " + std::to_string(w.index) + ": pid " + std::to_string(w.pid) + ", cpu " +
           (w.cpu < 0 ? std::string("any") : std::to_string(w.cpu)) + locked +
           (w.lock_error == 0 ? std::string()
                              : " (mlockall refused: " + std::string(std::strerror(w.lock_error)) +
                                    "; runs unlocked)") +
           "\n";
    out += "  iterations " + std::to_string(c.worker_iterations) + ", busy " +
           Seconds(c.worker_busy_ns / 1'000'000) + " s" + busy + ", minor faults " +
           std::to_string(c.minor_faults) + ", involuntary switches " +
           std::to_string(c.involuntary_switches) + "\n";
    out += "  connections " + std::to_string(c.connections) + ", lwip pcbs " +
           std::to_string(c.lwip_pcbs) + ", lwip heap " + std::to_string(c.lwip_heap_bytes) +
           " bytes, pool errors " + std::to_string(c.lwip_pool_errors) + ", frames held " +
           std::to_string(c.frames_held) + ", send refs " + std::to_string(c.send_refs) + "\n";
    out += "  rx packets " + std::to_string(c.rx_packets) + " (chains " +
           std::to_string(c.rx_chains) + ", dropped " + std::to_string(c.rx_chains_dropped) +
           "), tx packets " + std::to_string(c.tx_packets) + ", kicks " +
           std::to_string(c.tx_kicks) + ", retransmits " + std::to_string(c.lwip_retransmits) +
           "\n";
    out += "  AF_XDP: rx dropped " + std::to_string(c.xsk_rx_dropped) + ", rx ring full " +
           std::to_string(c.xsk_rx_ring_full) + ", fill ring empty " +
           std::to_string(c.xsk_fill_ring_empty) + ", fill depth " + std::to_string(c.fill_depth) +
           " (grown " + std::to_string(c.fill_depth_grows) + " times)\n";
    out += "  rings now: fill " + std::to_string(c.fill_ring_frames) +
           " frames given to the kernel, RX " + std::to_string(c.rx_ring_waiting) +
           " waiting for the worker, TX " + std::to_string(c.tx_ring_frames) +
           " not yet completed\n";
    out += "  handoffs: out " + std::to_string(c.handoffs_out) + ", in " +
           std::to_string(c.handoffs_in) + ", dropped " + std::to_string(c.handoffs_dropped) + "\n";
    for (const QueueRx& q : c.rx_by_queue) {
      out += "  queue " + q.ifname + " q" + std::to_string(q.queue) + ": rx packets " +
             std::to_string(q.packets) + "\n";
    }
  }
  return out;
}

std::string SteerText(const ServiceReport& r) {
  if (!r.fast) return "no fast path runs: nothing is steered\n";
  std::string out = "# reason,packets,bytes\n";
  for (const SteerReasonCount& s : r.steer) {
    out += s.reason + "," + std::to_string(s.packets) + "," + std::to_string(s.bytes) + "\n";
  }
  return out;
}

std::string FormatConnections(const std::vector<ConnectionRow>& rows) {
  std::string out = "# id,path,worker,rule,client,backend,age_ms,bytes_to_backend,bytes_to_client";
  for (const char* leg : {"client", "backend"}) {
    for (const char* field : {"state", "srtt_us", "rto_ms", "cwnd", "in_flight", "retransmits",
                              "send_queue", "peer_window"}) {
      out += std::string(",") + leg + "_" + field;
    }
  }
  out += '\n';
  for (const ConnectionRow& r : rows) {
    out += std::to_string(r.id) + "," + r.path + "," + std::to_string(r.worker) + "," +
           std::to_string(r.rule) + "," + r.client + "," + r.backend + "," +
           std::to_string(r.age_ms) + "," + std::to_string(r.bytes_to_backend) + "," +
           std::to_string(r.bytes_to_client);
    for (const LegTcpInfo* leg : {&r.client_leg, &r.backend_leg}) {
      out += "," + leg->state + "," + std::to_string(leg->srtt_us) + "," +
             std::to_string(leg->rto_ms) + "," + std::to_string(leg->cwnd_bytes) + "," +
             std::to_string(leg->in_flight) + "," + std::to_string(leg->retransmits) + "," +
             std::to_string(leg->send_queue) + "," + std::to_string(leg->peer_window);
    }
    out += '\n';
  }
  return out;
}

}  // namespace xdpfwd
