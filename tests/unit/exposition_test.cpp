// The report's renderings without a running service: Prometheus text that promtool accepts,
// known-answer lines for names, labels, units and escaping; JSON that parses, with every
// counter of every list; the CSV's columns; the host diagnosis's refused-lock warning.
#include "forwarder/exposition.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

#include "forwarder/diagnosis.h"

namespace xdpfwd {
namespace {

// A report with both TCP paths, two fast-path workers, a datagram relay and an access log,
// every number distinct.
ServiceReport SampleReport() {
  ServiceReport r;
  r.version = "1.2.3";
  r.pid = 100;
  r.start_time_unix_ms = 1'795'000'000'250;
  r.uptime_ms = 2'000;
  r.path_choice = "auto";
  r.config_file = "/etc/xdpfwd.conf";
  r.reloads = 3;
  r.reloads_refused = 1;
  r.warnings = {"worker 0's CPU 1 is not isolated: add isolcpus=1"};
  r.rules = {{0, "10.0.1.1:9000", "10.0.0.2:9001", "tcp", "fast"},
             {1, "[::]:9002", "10.0.0.2:9001", "tcp", "kernel"},
             {2, "10.0.1.1:53", "10.0.0.2:53", "udp -> udp", "datagram"}};
  HealthChecker::BackendView b;
  b.rule_id = 0;
  b.backend = "10.0.0.2:9001";
  b.weight = 3;
  b.current = 1;
  b.sessions = 6;
  b.connect_failures = 2;
  b.bytes_to_backend = 4096;
  b.bytes_from_backend = 512;
  HealthChecker::BackendView c = b;
  c.backend = "10.0.0.3:9001";
  c.admin = BackendAdmin::kDrain;
  c.checked = true;
  c.up = false;
  c.checks = 9;
  c.failures = 4;
  c.last_error = "Connection refused";
  r.backends = {b, c};
  FastPathSnapshot total;
  total.relay.accepted = 7;
  total.relay.active = 2;
  total.relay.completed = 5;
  total.relay.bytes_to_backend = 4096;
  total.relay.backend_nagle_peers = 3;
  total.worker_busy_ns = 1'500'000'000;
  total.flows = 9;
  total.rx_packets = 30;
  // Connect times 0.5 us, 3 us, 3 us and 100 s (past the last bound).
  for (uint64_t ns : {500u, 3'000u, 3'000u}) {
    ++total.relay.connect.buckets[LatencyBucket(ns)];
    ++total.relay.connect.count;
    total.relay.connect.sum_ns += ns;
  }
  ++total.relay.connect.buckets[LatencyBucket(100'000'000'000)];
  ++total.relay.connect.count;
  total.relay.connect.sum_ns += 100'000'000'000;
  total.rules = {{0, total.relay}, {RuleTotals::kOtherRules, RelayTotals{}}};
  r.fast = total;
  r.fast_description = "veth-c (10.0.1.1, XDP generic)";
  for (uint32_t w = 0; w < 2; ++w) {
    WorkerReport wr;
    wr.index = w;
    wr.pid = 200 + static_cast<int>(w);
    wr.cpu = static_cast<int>(w);
    wr.counters.rx_packets = 10 + 10 * w;
    wr.counters.worker_busy_ns = 500'000'000 + 500'000'000 * w;
    wr.counters.rx_by_queue = {{"veth-c", w, 10 + 10 * w}};
    wr.locked_bytes = (300u + w) << 20;
    wr.lock_error = w == 1 ? ENOMEM : 0;
    r.workers.push_back(wr);
  }
  r.steer = {{"redirect_new_flow", 7, 518}, {"pass_not_ipv4", 1, 90}};
  KernelPathTotals k;
  k.relay.accepted = 4;
  k.relay.client_reset = 1;
  k.splice_bytes = 123;
  k.pooled_pipes = 2;
  k.rules = {{1, k.relay}};
  r.kernel = k;
  r.kernel_threads = 2;
  DatagramPathTotals d;
  d.associations_open = 1;
  d.datagrams_in = 8;
  r.datagram = d;
  r.access_log = SessionLog::Stats{11, 0, 0, 1};
  r.access_log_file = "/var/log/xdpfwd.log";
  return r;
}

bool HasLine(const std::string& text, const std::string& line) {
  std::istringstream lines(text);
  for (std::string l; std::getline(lines, l);) {
    if (l == line) return true;
  }
  return false;
}

TEST(MetricsText, PromtoolFindsNothingToFix) {
  const std::string text = MetricsText(SampleReport());
  char path[] = "/tmp/xdpfwd-exposition-XXXXXX";
  const int fd = mkstemp(path);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(write(fd, text.data(), text.size()), static_cast<ssize_t>(text.size()));
  close(fd);
  const std::string command = std::string(XDPFWD_PROMTOOL) + " check metrics < " + path + " 2>&1";
  FILE* p = popen(command.c_str(), "r");
  ASSERT_NE(p, nullptr);
  std::string said;
  char buffer[4096];
  for (size_t n; (n = fread(buffer, 1, sizeof buffer, p)) > 0;) said.append(buffer, n);
  const int status = pclose(p);
  unlink(path);
  EXPECT_EQ(status, 0) << said << "\n" << text;
}

TEST(MetricsText, NamesLabelsAndUnits) {
  const std::string t = MetricsText(SampleReport());
  EXPECT_TRUE(HasLine(t, "xdpfwd_build_info{version=\"1.2.3\"} 1"));
  EXPECT_TRUE(HasLine(t, "xdpfwd_start_time_seconds 1795000000.25"));
  EXPECT_TRUE(HasLine(t, "xdpfwd_reloads_total{result=\"applied\"} 2"));
  EXPECT_TRUE(HasLine(t, "xdpfwd_reloads_total{result=\"refused\"} 1"));
  EXPECT_TRUE(HasLine(t, "xdpfwd_warnings 1"));
  EXPECT_TRUE(HasLine(t, "# TYPE xdpfwd_connections_accepted_total counter"));
  EXPECT_TRUE(HasLine(t, "xdpfwd_connections_accepted_total{path=\"fast\"} 7"));
  EXPECT_TRUE(HasLine(t, "xdpfwd_connections_accepted_total{path=\"kernel\"} 4"));
  EXPECT_TRUE(HasLine(t, "# TYPE xdpfwd_connections_open gauge"));
  EXPECT_TRUE(HasLine(t, "xdpfwd_connections_open{path=\"fast\"} 2"));
  EXPECT_TRUE(HasLine(t, "xdpfwd_connections_ended_total{path=\"fast\",how=\"completed\"} 5"));
  EXPECT_TRUE(HasLine(t, "xdpfwd_connections_ended_total{path=\"kernel\",how=\"client_reset\"} 1"));
  EXPECT_TRUE(
      HasLine(t, "xdpfwd_relayed_bytes_total{path=\"fast\",direction=\"to_backend\"} 4096"));
  // Nagle peers are legs, not ways a connection ended.
  EXPECT_TRUE(HasLine(t, "xdpfwd_nagle_peers_total{path=\"fast\",side=\"backend\"} 3"));
  EXPECT_EQ(t.find("how=\"backend_nagle_peers\""), std::string::npos);
  // Per worker, nanoseconds as seconds; the control process's own counters unlabelled.
  EXPECT_TRUE(HasLine(t, "xdpfwd_fast_path_rx_packets_total{worker=\"1\"} 20"));
  EXPECT_TRUE(HasLine(t, "# TYPE xdpfwd_fast_path_worker_busy_seconds_total counter"));
  EXPECT_TRUE(HasLine(t, "xdpfwd_fast_path_worker_busy_seconds_total{worker=\"0\"} 0.5"));
  EXPECT_TRUE(HasLine(t, "xdpfwd_fast_path_flows 9"));
  EXPECT_TRUE(HasLine(t, "# TYPE xdpfwd_fast_path_flows gauge"));
  EXPECT_TRUE(HasLine(
      t,
      "xdpfwd_fast_path_queue_rx_packets_total{worker=\"1\",interface=\"veth-c\",queue=\"1\"} "
      "20"));
  EXPECT_TRUE(HasLine(t, "xdpfwd_fast_path_worker_info{worker=\"1\",pid=\"201\",cpu=\"1\"} 1"));
  EXPECT_TRUE(HasLine(t, "xdpfwd_steer_packets_total{reason=\"redirect_new_flow\"} 7"));
  EXPECT_TRUE(HasLine(t, "xdpfwd_steer_bytes_total{reason=\"pass_not_ipv4\"} 90"));
  EXPECT_TRUE(HasLine(t, "xdpfwd_kernel_path_splice_bytes_total 123"));
  EXPECT_TRUE(HasLine(t, "# TYPE xdpfwd_kernel_path_pooled_pipes gauge"));
  EXPECT_TRUE(HasLine(t, "xdpfwd_datagram_associations_open 1"));
  EXPECT_TRUE(HasLine(t, "xdpfwd_datagram_datagrams_in_total 8"));
  EXPECT_TRUE(HasLine(t, "xdpfwd_access_log_lines_total 11"));
  EXPECT_TRUE(HasLine(t,
                      "xdpfwd_rule_info{rule=\"1\",listen=\"[::]:9002\",backend=\"10.0.0.2:9001\","
                      "protocol=\"tcp\",path=\"kernel\"} 1"));
}

TEST(MetricsText, LatencyHistogramsAreCumulativeInSeconds) {
  const std::string t = MetricsText(SampleReport());
  EXPECT_TRUE(HasLine(t, "# TYPE xdpfwd_connect_seconds histogram"));
  EXPECT_TRUE(HasLine(t, "xdpfwd_connect_seconds_bucket{path=\"fast\",le=\"0.000001\"} 1"));
  EXPECT_TRUE(HasLine(t, "xdpfwd_connect_seconds_bucket{path=\"fast\",le=\"0.000002\"} 1"));
  EXPECT_TRUE(HasLine(t, "xdpfwd_connect_seconds_bucket{path=\"fast\",le=\"0.000004\"} 3"));
  EXPECT_TRUE(HasLine(t, "xdpfwd_connect_seconds_bucket{path=\"fast\",le=\"33.554432\"} 3"));
  EXPECT_TRUE(HasLine(t, "xdpfwd_connect_seconds_bucket{path=\"fast\",le=\"+Inf\"} 4"));
  EXPECT_TRUE(HasLine(t, "xdpfwd_connect_seconds_sum{path=\"fast\"} 100.0000065"));
  EXPECT_TRUE(HasLine(t, "xdpfwd_connect_seconds_count{path=\"fast\"} 4"));
  EXPECT_TRUE(HasLine(t, "xdpfwd_first_byte_seconds_count{path=\"kernel\"} 0"));
}

TEST(LatencyBucket, PowersOfTwoMicroseconds) {
  EXPECT_EQ(LatencyBucket(0), 0);
  EXPECT_EQ(LatencyBucket(999), 0);    // under 1 us
  EXPECT_EQ(LatencyBucket(1'000), 1);  // under 2 us
  EXPECT_EQ(LatencyBucket(1'999), 1);
  EXPECT_EQ(LatencyBucket(2'000), 2);        // under 4 us
  EXPECT_EQ(LatencyBucket(40'000'000), 16);  // 40 ms: under 65.536 ms
  EXPECT_EQ(LatencyBucket(~uint64_t{0}), kLatencyBuckets - 1);
}

TEST(MetricsText, LabelValuesAreEscaped) {
  ServiceReport r;
  r.version = "a\"b\\c\nd";
  EXPECT_TRUE(HasLine(MetricsText(r), "xdpfwd_build_info{version=\"a\\\"b\\\\c\\nd\"} 1"));
}

TEST(ReportJson, ParsesAndHoldsEveryCounter) {
  const ServiceReport r = SampleReport();
  const nlohmann::json j = nlohmann::json::parse(ReportJson(r));
  EXPECT_EQ(j["version"], "1.2.3");
  EXPECT_EQ(j["reloads_refused"], 1);
  EXPECT_EQ(j["rules"].size(), 3u);
  EXPECT_EQ(j["warnings"][0], r.warnings[0]);
  const nlohmann::json& fast = j["fast_path"];
  EXPECT_EQ(fast["total"]["accepted"], 7);
  EXPECT_EQ(fast["total"]["worker_busy_ns"], 1'500'000'000);
  EXPECT_EQ(fast["workers"][1]["counters"]["rx_packets"], 20);
  EXPECT_EQ(fast["workers"][1]["rx_by_queue"][0]["interface"], "veth-c");
  EXPECT_EQ(fast["steer"]["redirect_new_flow"]["bytes"], 518);
  EXPECT_EQ(j["kernel_path"]["total"]["splice_bytes"], 123);
  EXPECT_EQ(fast["rules"][0]["rule"], "0");
  EXPECT_EQ(fast["rules"][0]["accepted"], 7);
  EXPECT_EQ(fast["rules"][1]["rule"], "other");
  EXPECT_EQ(j["kernel_path"]["rules"][0]["client_reset"], 1);
  EXPECT_EQ(j["datagram_path"]["datagrams_in"], 8);
  EXPECT_EQ(j["access_log"]["lines"], 11);
  // Every counter of every list, by the name the stats line gives it.
#define XDPFWD_CHECK(name, kind, what) EXPECT_TRUE(fast["total"].contains(#name)) << #name;
  XDPFWD_RELAY_COUNTERS(XDPFWD_CHECK)
#undef XDPFWD_CHECK
#define XDPFWD_CHECK(field, kind, name) EXPECT_TRUE(fast["total"].contains(name)) << name;
  XDPFWD_FAST_PATH_COUNTERS(XDPFWD_CHECK)
#undef XDPFWD_CHECK
#define XDPFWD_CHECK(name, kind, what) EXPECT_TRUE(j["kernel_path"]["total"].contains(#name));
  XDPFWD_KERNEL_PATH_COUNTERS(XDPFWD_CHECK)
#undef XDPFWD_CHECK
#define XDPFWD_CHECK(name, kind, what) EXPECT_TRUE(j["datagram_path"].contains(#name));
  XDPFWD_DATAGRAM_COUNTERS(XDPFWD_CHECK)
#undef XDPFWD_CHECK
}

// Each worker's locked memory, and a refused lock, in show workers, the JSON and /metrics.
TEST(WorkersText, LockedMemoryAndARefusedLock) {
  const ServiceReport r = SampleReport();
  const std::string text = WorkersText(r);
  EXPECT_TRUE(HasLine(text, "worker 0: pid 200, cpu 0, locked 300.0 MiB")) << text;
  EXPECT_TRUE(HasLine(text,
                      "worker 1: pid 201, cpu 1, locked 301.0 MiB (mlockall refused: Cannot "
                      "allocate memory; runs unlocked)"))
      << text;
  const nlohmann::json j = nlohmann::json::parse(ReportJson(r));
  EXPECT_EQ(j["fast_path"]["workers"][0]["locked_bytes"], 300u << 20);
  EXPECT_EQ(j["fast_path"]["workers"][1]["lock_error"], ENOMEM);
  EXPECT_TRUE(HasLine(MetricsText(r), "xdpfwd_fast_path_worker_locked_bytes{worker=\"1\"} " +
                                          std::to_string(301u << 20)));
}

// A refused lock is a state: warned at the first look, with the fix, kept active while it holds,
// logged (returned as fresh) once.
TEST(HostDiagnosis, ARefusedLockIsWarnedOnceWithItsFix) {
  const ServiceReport r = SampleReport();
  HostDiagnosis d;
  const auto t0 = std::chrono::steady_clock::time_point{} + std::chrono::hours(1);
  const auto fresh = d.Check(r, t0);
  ASSERT_EQ(fresh.size(), 1u);
  EXPECT_EQ(fresh[0].kind, "worker_memory_unlocked");
  EXPECT_EQ(fresh[0].worker, 1);
  EXPECT_NE(fresh[0].text.find("Cannot allocate memory"), std::string::npos) << fresh[0].text;
  EXPECT_NE(fresh[0].text.find("LimitMEMLOCK=infinity"), std::string::npos) << fresh[0].text;
  EXPECT_NE(fresh[0].text.find("CAP_IPC_LOCK"), std::string::npos) << fresh[0].text;
  for (int i = 1; i <= 40; ++i) {
    EXPECT_TRUE(d.Check(r, t0 + std::chrono::seconds(2 * i)).empty()) << i;
  }
  EXPECT_EQ(d.active(t0 + std::chrono::seconds(80)).size(), 1u);
  EXPECT_EQ(d.raised().at("worker_memory_unlocked"), 41u);
}

// The kernel path's Nagle peers are warned about like the fast path's, naming the path; a rule
// that was not in the last report (a path lists a rule from its first connection) counts from 0,
// so a peer found in its first interval is not missed.
TEST(HostDiagnosis, KernelPathNaglePeerIsWarnedAlsoInItsRulesFirstInterval) {
  ServiceReport before = SampleReport();
  before.workers.clear();  // no lock warning in the way
  before.kernel->rules.clear();
  HostDiagnosis d;
  const auto t0 = std::chrono::steady_clock::time_point{} + std::chrono::hours(1);
  EXPECT_TRUE(d.Check(before, t0).empty());
  ServiceReport now = before;
  RelayTotals k = now.kernel->relay;
  k.backend_nagle_peers = 1;
  now.kernel->relay = k;
  now.kernel->rules = {{1, k}};
  const auto fresh = d.Check(now, t0 + std::chrono::seconds(2));
  ASSERT_EQ(fresh.size(), 1u);
  EXPECT_EQ(fresh[0].kind, "backend_nagle_stall");
  EXPECT_NE(fresh[0].text.find("backend 10.0.0.2:9001 (rule 1, [::]:9002 -> 10.0.0.2:9001, "
                               "kernel path): on 1 connection(s)"),
            std::string::npos)
      << fresh[0].text;
  EXPECT_NE(fresh[0].text.find("quickack 1"), std::string::npos) << fresh[0].text;
}

TEST(ReportJson, EscapesStrings) {
  ServiceReport r;
  r.config_file = "a\"b\\c\n\x01";
  EXPECT_EQ(nlohmann::json::parse(ReportJson(r))["config_file"], r.config_file);
}

TEST(StatCsv, ARowPerPathThenOnePerRule) {
  const std::string csv = StatCsv(SampleReport());
  std::istringstream lines(csv);
  std::vector<std::string> rows;
  for (std::string line; std::getline(lines, line);) rows.push_back(line);
  ASSERT_EQ(rows.size(), 6u) << csv;
  EXPECT_EQ(rows[0].rfind("# path,rule,listen,backend,accepted,active,completed,", 0), 0u);
  EXPECT_EQ(rows[1].rfind("fast,*,,,7,2,5,", 0), 0u) << rows[1];
  EXPECT_EQ(rows[2].rfind("fast,0,10.0.1.1:9000,10.0.0.2:9001,7,2,5,", 0), 0u) << rows[2];
  EXPECT_EQ(rows[3].rfind("fast,other,,,0,0,0,", 0), 0u) << rows[3];
  EXPECT_EQ(rows[4].rfind("kernel,*,,,4,0,0,", 0), 0u) << rows[4];
  EXPECT_EQ(rows[5].rfind("kernel,1,[::]:9002,10.0.0.2:9001,4,0,0,", 0), 0u) << rows[5];
  const auto commas = [](const std::string& s) { return std::count(s.begin(), s.end(), ','); };
  for (const std::string& row : rows) EXPECT_EQ(commas(row), commas(rows[0])) << row;
}

TEST(MetricsText, PerRuleFamilies) {
  const std::string t = MetricsText(SampleReport());
  EXPECT_TRUE(HasLine(t, "xdpfwd_rule_connections_accepted_total{path=\"fast\",rule=\"0\"} 7"));
  EXPECT_TRUE(HasLine(t, "xdpfwd_rule_connections_accepted_total{path=\"fast\",rule=\"other\"} 0"));
  EXPECT_TRUE(HasLine(
      t, "xdpfwd_rule_connections_ended_total{path=\"kernel\",rule=\"1\",how=\"client_reset\"} 1"));
  EXPECT_TRUE(HasLine(t,
                      "xdpfwd_rule_relayed_bytes_total{path=\"fast\",rule=\"0\",direction="
                      "\"to_backend\"} 4096"));
  // The latency histograms per rule too: rule 0 holds the fast path's four connect times.
  EXPECT_TRUE(HasLine(t, "# TYPE xdpfwd_rule_connect_seconds histogram"));
  EXPECT_TRUE(HasLine(t, "xdpfwd_rule_connect_seconds_count{path=\"fast\",rule=\"0\"} 4"));
  EXPECT_TRUE(
      HasLine(t, "xdpfwd_rule_connect_seconds_bucket{path=\"fast\",rule=\"0\",le=\"+Inf\"} 4"));
  EXPECT_TRUE(HasLine(t, "xdpfwd_rule_first_byte_seconds_count{path=\"kernel\",rule=\"1\"} 0"));
}

// Per backend: state as one series per state, weight, sessions, failures and bytes; the same
// in the JSON report and `show backends`' CSV.
TEST(MetricsText, PerBackendFamilies) {
  const ServiceReport r = SampleReport();
  const std::string t = MetricsText(r);
  const std::string b = "rule=\"0\",backend=\"10.0.0.2:9001\"";
  const std::string c = "rule=\"0\",backend=\"10.0.0.3:9001\"";
  EXPECT_TRUE(HasLine(t, "xdpfwd_backend_state{" + b + ",state=\"ready\"} 1"));
  EXPECT_TRUE(HasLine(t, "xdpfwd_backend_state{" + c + ",state=\"ready\"} 0"));
  EXPECT_TRUE(HasLine(t, "xdpfwd_backend_state{" + c + ",state=\"drain\"} 1"));
  EXPECT_TRUE(HasLine(t, "xdpfwd_backend_up{" + c + "} 0"));
  EXPECT_TRUE(HasLine(t, "xdpfwd_backend_weight{" + b + "} 3"));
  EXPECT_TRUE(HasLine(t, "# TYPE xdpfwd_backend_sessions_open gauge"));
  EXPECT_TRUE(HasLine(t, "xdpfwd_backend_sessions_open{" + b + "} 1"));
  EXPECT_TRUE(HasLine(t, "xdpfwd_backend_sessions_total{" + b + "} 6"));
  EXPECT_TRUE(HasLine(t, "xdpfwd_backend_connect_failures_total{" + b + "} 2"));
  EXPECT_TRUE(
      HasLine(t, "xdpfwd_backend_relayed_bytes_total{" + b + ",direction=\"to_backend\"} 4096"));
  EXPECT_TRUE(
      HasLine(t, "xdpfwd_backend_relayed_bytes_total{" + b + ",direction=\"to_client\"} 512"));
  EXPECT_TRUE(HasLine(t, "xdpfwd_backend_check_failures_total{" + c + "} 4"));
  const nlohmann::json j = nlohmann::json::parse(ReportJson(r));
  ASSERT_EQ(j["backends"].size(), 2u);
  EXPECT_EQ(j["backends"][1]["admin"], "drain");
  EXPECT_EQ(j["backends"][0]["sessions"], 6);
  EXPECT_EQ(BackendsCsv(r.backends),
            "# rule,backend,admin,check,weight,current,sessions,connect_failures,"
            "bytes_to_backend,bytes_from_backend,checks,failures,last_failure\n"
            "0,10.0.0.2:9001,ready,unchecked,3,1,6,2,4096,512,0,0,\n"
            "0,10.0.0.3:9001,drain,down,3,1,6,2,4096,512,9,4,Connection refused\n");
}

TEST(InfoText, SaysWhatRunsAndWhatIsWrong) {
  const std::string info = InfoText(SampleReport());
  EXPECT_TRUE(HasLine(info, "state: serving"));
  EXPECT_TRUE(HasLine(info, "rule 2: 10.0.1.1:53 -> 10.0.0.2:53 (udp -> udp, datagram path)"));
  EXPECT_TRUE(
      HasLine(info, "fast path workers: 2: worker 0 pid 200 cpu 0, worker 1 pid 201 cpu 1"));
  EXPECT_TRUE(HasLine(info, "warnings: 1"));
  EXPECT_TRUE(HasLine(info, "warning: worker 0's CPU 1 is not isolated: add isolcpus=1"));
}

}  // namespace
}  // namespace xdpfwd
