// The benchmark runner's smoke run (`bench/run --quick`), as CI runs it: it must finish, and
// every configuration must have produced every number: throughput and latency, the connection
// rate in both close orders with its failures and the forwarder's CPU (the fast path's worker
// busy time), and idle connections all held and proven; every configuration on ports of its own.
// The fast path with its access log on (xdpfwd-xdp-log: the connection-rate rows only) beside it,
// and its log counted after it stopped: 2 whole lines per connection accepted, none dropped. The
// fast path sending a PROXY v2 header to its backends (xdpfwd-xdp-proxy: the connection-rate rows
// only), its servers reading one valid header per connection. The fast path with its flight
// recorder off (xdpfwd-xdp-norec) and watched (xdpfwd-xdp-watched:
// 10,000 idle connections held, /metrics and show sess 10 times a second), each in its table
// against xdpfwd-xdp. The fast path's bulk rows once more on each fair topology (plain veths,
// RPS to the load's CPU), one short row each, beside its row of the main table's topology.
// And the loss rows (`bench/run --loss-only`), which run in rounds and judge the median of the
// rounds' ratios; and the churn rows (one of three backends killed and restarted), briefly. Each
// run has its own namespaces, interface names and subnets, so it cannot meet another run's.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "tests/support/child_process.h"

namespace xdpfwd::test {
namespace {

using namespace std::chrono_literals;

std::string ReadFile(const std::filesystem::path& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// The table rows (lines starting with "| ") of results.md that name `label`: one per table.
std::vector<std::string> RowsFor(const std::string& table, const std::string& label) {
  std::vector<std::string> rows;
  std::istringstream lines(table);
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind("| " + label + " |", 0) == 0) rows.push_back(line);
  }
  return rows;
}

// A table row's cells, without the outer bars.
std::vector<std::string> Cells(const std::string& row) {
  std::vector<std::string> cells;
  for (size_t begin = 2; begin < row.size();) {
    const size_t end = row.find(" |", begin);
    if (end == std::string::npos) break;
    cells.push_back(row.substr(begin, end - begin));
    begin = end + 3;
  }
  return cells;
}

size_t Count(const std::string& text, const std::string& needle) {
  size_t n = 0;
  for (size_t at = text.find(needle); at != std::string::npos; at = text.find(needle, at + 1)) ++n;
  return n;
}

// The table rows (lines starting with "| ", headers excepted) between the first `begin` and the
// `end` after it: the rows of one titled table of results.md.
std::vector<std::string> RowsBetween(const std::string& table, const std::string& begin,
                                     const std::string& end) {
  std::vector<std::string> rows;
  const size_t from = table.find(begin);
  if (from == std::string::npos) return rows;
  const size_t to = table.find(end, from);
  std::istringstream lines(table.substr(from, to == std::string::npos ? to : to - from));
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind("| ", 0) == 0 && line.rfind("| metric |", 0) != 0 &&
        line.rfind("| watcher |", 0) != 0) {
      rows.push_back(line);
    }
  }
  return rows;
}

// A table row's last cell.
std::string LastCell(const std::string& row) {
  const size_t end = row.rfind(" |");
  const size_t begin = end == std::string::npos ? end : row.rfind("| ", end - 1);
  return begin == std::string::npos ? "" : row.substr(begin + 2, end - begin - 2);
}

// Every row measured: a number in each cell ("—" is a measurement without one), and neither
// "not measured" nor "FAILED".
void ExpectMeasured(const std::vector<std::string>& rows) {
  for (const std::string& row : rows) {
    EXPECT_EQ(row.find("—"), std::string::npos) << "a measurement produced no number: " << row;
    EXPECT_EQ(row.find("not measured"), std::string::npos) << row;
    EXPECT_EQ(row.find("FAILED"), std::string::npos) << row;
  }
}

// A fast-path connection-rate row: its CPU per connection is the worker's busy time, and its
// ports ("client / server", the last cell) are its own among those `ports` has seen.
void ExpectOwnFastRateRow(const std::string& label, const std::string& row,
                          std::set<std::string>& ports) {
  EXPECT_NE(row.find("busy"), std::string::npos) << row;
  const std::string own = LastCell(row);
  EXPECT_NE(own.find(" / "), std::string::npos) << "no ports in the rate row: " << row;
  EXPECT_TRUE(ports.insert(own).second) << label << " shares its ports " << own;
}

// bench/run's exit code, or nullopt when it outlived `limit`. Then it gets SIGTERM, on which it
// ends what it started (its forwarders, load generators and namespaces) as after Ctrl-C, and
// 20 s to do so: ChildProcess's destructor sends SIGKILL, which left a busy-polling xdpfwd and
// the run's namespaces behind once (a run that was not refused, killed at the 30 s limit).
std::optional<int> WaitOrStop(ChildProcess& run, std::chrono::seconds limit) {
  if (auto code = run.Wait(limit)) return code;
  run.Signal(SIGTERM);
  run.Wait(20s);
  return std::nullopt;
}

TEST(BenchmarkSmoke, QuickRunMeasuresEveryConfiguration) {
  if (geteuid() != 0) GTEST_SKIP() << "the benchmark needs root";
  const std::filesystem::path out =
      std::filesystem::temp_directory_path() / ("xdpfwd-bench-" + std::to_string(getpid()));
  std::filesystem::remove_all(out);
  const std::string prefix = "xq" + std::to_string(getpid() % 100000);
  // Subnets of its own too: two runs (other worktrees) with the same addresses on two veths of
  // the root namespace would route each other's packets. 198.18.100-199 is used by no other test
  // (tests/support/netns_topology.cpp keeps out of it), and bench/run refuses a routed subnet.
  const std::string net = std::to_string(100 + getpid() % 100);
  ChildProcess run({BENCH_RUNNER, "--quick", "--ipv6", "--out", out.string(), "--prefix", prefix,
                    "--client-net", "198.18." + net, "--server-net", "198.19." + net, "--xdpfwd",
                    XDPFWD_BINARY, "--loadgen", LOADGEN_BINARY});
  // About 100 s on the quiet 2-core machine, 120 s under load (2026-11-28, with the IPv6 pass);
  // with the 20 s to stop, under ctest's 300 s a test (tests/CMakeLists.txt).
  const auto code = WaitOrStop(run, 270s);
  ASSERT_TRUE(code.has_value()) << "bench/run --quick took over 270 s:\n" << run.output();
  EXPECT_EQ(*code, 0) << run.output();
  const std::string table = ReadFile(out / "results.md");
  ASSERT_FALSE(table.empty()) << "no results.md:\n" << run.output();
  EXPECT_NE(ReadFile(out / "results.json").find("\"xdpfwd-xdp\""), std::string::npos);
  const std::string json = ReadFile(out / "results.json");
  for (const char* field : {"\"verified_close\"", "\"connections_total\"", "\"rate_client\"",
                            "\"us_per_conn\"", "\"own_us_per_conn\""}) {
    EXPECT_NE(json.find(field), std::string::npos) << field << " missing from results.json";
  }
  // The bulk rows per topology: in --quick the fast path alone on plain veths and on RPS to the
  // load's CPU (each topology set up for its table), then the main table's (GRO + threaded
  // NAPI); each with both throughputs, and its topology in results.json.
  for (const std::string topology :
       {"plain veths", "RPS to the load's CPU", "GRO + threaded NAPI"}) {
    const auto rows = RowsFor(table, topology);
    ASSERT_EQ(rows.size(), 1u) << topology << " missing from the per-topology table:\n" << table;
    const auto cells = Cells(rows[0]);
    ASSERT_EQ(cells.size(), 5u) << rows[0];
    EXPECT_EQ(cells[1], "xdpfwd --path xdp") << rows[0];
    EXPECT_NE(cells[2], "—") << "no -P 1 figure: " << rows[0];
    EXPECT_NE(cells[3], "—") << "no -P 8 figure: " << rows[0];
    EXPECT_EQ(rows[0].find("FAILED"), std::string::npos) << rows[0];
  }
  for (const char* topology : {"plain", "rps", "gro-napi"}) {
    EXPECT_NE(json.find("\"topology\": \"" + std::string(topology) + "\""), std::string::npos)
        << topology << ": no row of that topology in results.json";
  }
  // The rate tests' ports (listen -> server) of the configurations seen so far: what one
  // configuration leaves in TIME_WAIT must not meet the next one's connections.
  std::set<std::string> ports;
  // The labels bench/run prints; socat and HAProxy are installed by scripts/setup.
  for (const std::string label :
       {"direct kernel routing (no proxy)", "xdpfwd --path kernel", "xdpfwd --path xdp",
        "socat (fork per connection)", "HAProxy (mode tcp, 1 thread)"}) {
    // Throughput and latency; connection rate; idle connections.
    const auto rows = RowsFor(table, label);
    ASSERT_EQ(rows.size(), 3u) << label << " missing from a table:\n" << table;
    // direct routing has no forwarder process: no CPU figure (1), no syscall figures (strace's,
    // and perf's for -P 1 and -P 8: 3), no forwarder CPU per connection in either close order
    // (2), no forwarder PSS (1).
    const bool direct = label.rfind("direct", 0) == 0;
    size_t missing = 0;
    for (const std::string& row : rows) {
      for (size_t at = row.find("—"); at != std::string::npos; at = row.find("—", at + 1)) {
        ++missing;
      }
      EXPECT_EQ(row.find("not measured"), std::string::npos) << row;
      EXPECT_EQ(row.find("FAILED"), std::string::npos) << row;
    }
    EXPECT_EQ(missing, direct ? 7u : 0u) << "a measurement produced no number:\n"
                                         << rows[0] << "\n"
                                         << rows[1] << "\n"
                                         << rows[2];
    const std::string own = LastCell(rows[1]);
    EXPECT_NE(own.find(" / "), std::string::npos) << "no ports in the rate row: " << rows[1];
    EXPECT_TRUE(ports.insert(own).second) << label << " shares its ports " << own;
    // The fast path's CPU per connection is its worker's busy time, never wall time.
    if (label == "xdpfwd --path xdp") {
      EXPECT_NE(rows[1].find("busy"), std::string::npos) << rows[1];
    }
  }
  // The access log's row: its connection rate (both close orders, ports of its own) and the
  // access-log table's row (connections/s off -> on per close order, whole lines, expected,
  // torn, dropped, write errors, the control process's CPU per connection).
  {
    const std::string label = "xdpfwd --path xdp, access log on";
    const auto rows = RowsFor(table, label);
    ASSERT_EQ(rows.size(), 2u) << label << ": a connection-rate row and an access-log row:\n"
                               << table;
    ExpectMeasured(rows);
    ExpectOwnFastRateRow(label, rows[0], ports);
    const auto cells = Cells(rows[1]);
    ASSERT_EQ(cells.size(), 9u) << rows[1];
    // "2,000" whole lines against "2,000 (1,000 accepted)" expected; none torn, dropped or
    // failed to write.
    EXPECT_NE(cells[3], "0") << rows[1];
    EXPECT_EQ(cells[3], cells[4].substr(0, cells[4].find(" ("))) << rows[1];
    EXPECT_EQ(cells[5], "0") << "torn lines: " << rows[1];
    EXPECT_EQ(cells[6], "0") << "dropped records: " << rows[1];
    EXPECT_EQ(cells[7], "0") << "failed writes: " << rows[1];
    EXPECT_NE(json.find("\"forwarder_lines\""), std::string::npos)
        << "no access_log in results.json";
  }
  // The PROXY header's row: its connection rate (ports of its own) and the PROXY table's row
  // (connections/s off -> on per close order, headers read / connections per close order, none
  // malformed or missing).
  {
    const std::string label = "xdpfwd --path xdp, PROXY v2 header";
    const auto rows = RowsFor(table, label);
    ASSERT_EQ(rows.size(), 2u) << label << ": a connection-rate row and a PROXY row:\n" << table;
    ExpectMeasured(rows);
    ExpectOwnFastRateRow(label, rows[0], ports);
    const auto cells = Cells(rows[1]);
    ASSERT_EQ(cells.size(), 6u) << rows[1];
    // "1,000 / 1,000": as many headers as connections, and some.
    for (size_t i : {3u, 4u}) {
      const size_t slash = cells[i].find(" / ");
      ASSERT_NE(slash, std::string::npos) << rows[1];
      EXPECT_EQ(cells[i].substr(0, slash), cells[i].substr(slash + 3)) << rows[1];
      EXPECT_NE(cells[i].substr(0, slash), "0") << rows[1];
    }
    EXPECT_EQ(cells[5], "0") << "malformed or missing headers: " << rows[1];
  }
  // The flight recorder off and the watched fast path: a throughput row each (its strace cell
  // "—": no strace row), the recorder's connection-rate row (ports of its own), then their tables.
  for (const std::string label :
       {"xdpfwd --path xdp, recorder off", "xdpfwd --path xdp, watched"}) {
    const bool norec = label.find("recorder") != std::string::npos;
    const auto rows = RowsFor(table, label);
    ASSERT_EQ(rows.size(), norec ? 2u : 1u) << label << " missing from a table:\n" << table;
    EXPECT_EQ(Count(rows[0], "—"), 1u) << "a measurement produced no number: " << rows[0];
    for (const std::string& row : rows) {
      EXPECT_EQ(row.find("not measured"), std::string::npos) << row;
      EXPECT_EQ(row.find("FAILED"), std::string::npos) << row;
    }
    if (norec) {
      ExpectMeasured({rows[1]});
      ExpectOwnFastRateRow(label, rows[1], ports);
    }
  }
  // "Flight recorder cost": 8 metrics (bulk -P 1 / -P 8, rr 1 and 64 connections p50 / p99,
  // both connection rates), each on, off, on / off or on − off, target and verdict (met or
  // missed: at 1 s a row the verdict is noise; only "not measured" is wrong here).
  {
    const auto rows = RowsBetween(table, "Flight recorder cost, MTU", "Watched, MTU");
    ASSERT_EQ(rows.size(), 8u) << "no flight recorder table:\n" << table;
    for (const std::string& row : rows) {
      const auto cells = Cells(row);
      ASSERT_EQ(cells.size(), 6u) << row;
      EXPECT_EQ(row.find("—"), std::string::npos) << "a measurement produced no number: " << row;
      EXPECT_TRUE(cells[5] == "met" || cells[5] == "**missed**" ||
                  (cells[5].empty() && cells[4] == "none"))
          << row;
    }
  }
  // "Watched": 6 metrics against xdpfwd-xdp, then the watcher: GET /metrics and show sess both
  // answered, none failed, and show sess listed at least the 10,000 connections held each time.
  {
    const auto rows = RowsBetween(table, "Watched, MTU", "Idle connections, MTU");
    ASSERT_EQ(rows.size(), 8u) << "no watched table:\n" << table;
    for (size_t i = 0; i < 6; ++i) {
      EXPECT_EQ(rows[i].find("—"), std::string::npos) << "no number: " << rows[i];
      EXPECT_EQ(rows[i].find("not measured"), std::string::npos) << rows[i];
    }
    for (size_t i = 6; i < 8; ++i) {
      const auto cells = Cells(rows[i]);
      ASSERT_EQ(cells.size(), 5u) << rows[i];
      EXPECT_EQ(cells[0], i == 6 ? "GET /metrics" : "show sess") << rows[i];
      EXPECT_NE(cells[1].rfind("0 ", 0), 0u) << "no answer: " << rows[i];
      EXPECT_NE(cells[1].find(" (0)"), std::string::npos) << "failed answers: " << rows[i];
    }
    // "10,064 / 10,130": the fewest, thousands separators dropped.
    const std::string listed = Cells(rows[7])[4];
    std::string digits;
    for (char ch : listed.substr(0, listed.find(" / "))) {
      if (ch >= '0' && ch <= '9') digits += ch;
    }
    EXPECT_GE(std::stol(digits), 10000) << "show sess listed fewer than held: " << rows[7];
  }
  // The IPv6 pass (--ipv6; with --quick one row of each kind, the connection rate on the fast
  // path only): both paths measured over IPv6, each ratio beside the IPv4 rows' of the same
  // run, and no flow of a rule passed to the kernel.
  {
    const auto rows = RowsBetween(table, "## IPv6: ", "\n## ");
    for (const std::string what :
         {"iperf3 -P 8", "request/response, 1 connection, p50",
          "idle connections held: memory per connection (process + kernel)",
          "connections/s, client closes first"}) {
      std::vector<std::string> found;
      for (const std::string& row : rows) {
        if (row.rfind("| " + what + " |", 0) == 0) found.push_back(row);
      }
      ASSERT_EQ(found.size(), 1u) << what << " missing from the IPv6 table:\n" << table;
      const auto cells = Cells(found[0]);
      ASSERT_EQ(cells.size(), 6u) << found[0];
      const bool fast_only = what.rfind("connections/s", 0) == 0;
      for (size_t i = fast_only ? 2 : 1; i < (fast_only ? 3 : 6); ++i) {
        EXPECT_NE(cells[i], "—") << "no figure: " << found[0];
      }
    }
    bool flows_kept = false;
    for (const std::string& row : rows) {
      if (row.find("IPv6: no rule's flow passed to the kernel") != std::string::npos) {
        flows_kept = LastCell(row) == "met";
        EXPECT_TRUE(flows_kept) << row;
      }
    }
    EXPECT_TRUE(flows_kept || HasFailure()) << "no steering target in the IPv6 table:\n" << table;
    EXPECT_NE(json.find("\"family\": \"ipv6\""), std::string::npos)
        << "no IPv6 row in results.json";
  }
  std::filesystem::remove_all(out);
}

// The loss rows in two rounds of a small transfer: each level (one segment a drop, and a whole GSO
// packet a drop: burst) shows both rounds' ratios and their median, each round's rows and
// forwarder logs are kept apart, and a round count whose rows would run out of ports of their
// own is refused before anything starts.
TEST(BenchmarkSmoke, LossRowsRunInRoundsAndJudgeTheMedianRatio) {
  if (geteuid() != 0) GTEST_SKIP() << "the benchmark needs root";
  const std::filesystem::path out =
      std::filesystem::temp_directory_path() / ("xdpfwd-loss-" + std::to_string(getpid()));
  std::filesystem::remove_all(out);
  const std::string prefix = "xl" + std::to_string(getpid() % 100000);
  // 198.18.150-199: the quick run above keeps to 100-149.
  const std::string net = std::to_string(150 + getpid() % 50);
  const std::vector<std::string> common = {
      BENCH_RUNNER,   "--loss-only",   "--prefix",     prefix,
      "--client-net", "198.18." + net, "--server-net", "198.19." + net,
      "--xdpfwd",     XDPFWD_BINARY,   "--lossy",      LOSSY_BINARY,
      "--out",        out.string(),    "--loss-mib",   "4"};
  for (const char* rounds : {"0", "11"}) {
    std::vector<std::string> argv = common;
    argv.insert(argv.end(), {"--loss-rounds", rounds});
    ChildProcess refused(argv);
    const auto code = WaitOrStop(refused, 30s);
    ASSERT_TRUE(code.has_value());
    EXPECT_NE(*code, 0) << "--loss-rounds " << rounds << " was taken:\n" << refused.output();
    EXPECT_NE(refused.output().find("--loss-rounds must be 1 to 10"), std::string::npos)
        << refused.output();
    EXPECT_FALSE(std::filesystem::exists(out / "results.md")) << "it ran with " << rounds;
  }
  std::vector<std::string> argv = common;
  argv.insert(argv.end(), {"--loss-rounds", "2"});
  ChildProcess run(argv);
  const auto code = WaitOrStop(run, 180s);
  ASSERT_TRUE(code.has_value()) << "4 MiB loss rows in 2 rounds took over 3 minutes:\n"
                                << run.output();
  EXPECT_EQ(*code, 0) << run.output();
  const std::string table = ReadFile(out / "results.md");
  ASSERT_NE(table.find("## Loss"), std::string::npos) << "no loss table:\n" << run.output();
  ASSERT_NE(table.find("on plain veths"), std::string::npos) << "no topology named:\n" << table;
  for (const std::string level : {"0%", "1%", "3%", "1% burst", "3% burst"}) {
    const auto rows = RowsFor(table, level);
    ASSERT_EQ(rows.size(), 1u) << level << " missing:\n" << table;
    const auto cells = Cells(rows[0]);
    ASSERT_EQ(cells.size(), 6u) << rows[0];
    EXPECT_EQ(rows[0].find("FAILED"), std::string::npos) << rows[0];
    // Two rounds' ratios, then their median: between the two, as a median of two is.
    double first = 0, second = 0, median = 0;
    ASSERT_EQ(std::sscanf(cells[3].c_str(), "%lfx, %lfx", &first, &second), 2) << rows[0];
    ASSERT_EQ(std::sscanf(cells[4].c_str(), "%lfx", &median), 1) << rows[0];
    EXPECT_NEAR(median, (first + second) / 2, 0.011) << rows[0];
    EXPECT_EQ(cells[5] == "(reference)", level == "0%") << rows[0];
  }
  EXPECT_NE(table.find("2 rounds"), std::string::npos) << table;
  // What one drop took, per level and path, read from the loss injector's counters.
  EXPECT_NE(table.find("Bytes one drop took"), std::string::npos) << table;
  // Every row of both rounds on both paths is in results.json, and each round kept its own logs.
  const std::string json = ReadFile(out / "results.json");
  EXPECT_EQ(Count(json, "\"upload_s\""), 2u * 2u * 5u) << json;
  EXPECT_EQ(Count(json, "\"kind\": \"burst\""), 2u * 2u * 2u) << json;
  EXPECT_EQ(Count(json, "\"loss_rounds\": 2"), 1u) << json;
  for (const char* round : {"round1", "round2"}) {
    for (const char* path : {"xdpfwd-kernel", "xdpfwd-xdp"}) {
      EXPECT_TRUE(std::filesystem::exists(out / "loss" / round / (std::string(path) + ".log")))
          << round << " " << path;
      for (const char* level : {"-loss3.json", "-loss3-burst.json"}) {
        EXPECT_TRUE(std::filesystem::exists(out / "loss" / round / (std::string(path) + level)))
            << round << " " << path << level;
      }
    }
  }
  std::filesystem::remove_all(out);
}

// The churn rows, one short death each (`--churn-seconds 4`, 1.5 s up, 1 s down): a row per path
// with the deaths, xdpfwd's failed handshakes read around the death and the killed backend's
// connections per life; the targets judged, not "not measured". Client connections open on the
// killed backend fail with it (a reset at the kill), so the run may exit 1, but for that
// reason only.
TEST(BenchmarkSmoke, ChurnRowsKillABackendAndCountWhatItCost) {
  if (geteuid() != 0) GTEST_SKIP() << "the benchmark needs root";
  const std::filesystem::path out =
      std::filesystem::temp_directory_path() / ("xdpfwd-churn-" + std::to_string(getpid()));
  std::filesystem::remove_all(out);
  const std::string prefix = "xk" + std::to_string(getpid() % 100000);
  // 198.18.150-199, as the loss rows: these tests run one at a time (RUN_SERIAL).
  const std::string net = std::to_string(150 + getpid() % 50);
  ChildProcess run({BENCH_RUNNER,
                    "--configs",
                    "xdpfwd-xdp-churn,xdpfwd-kernel-churn",
                    "--mtu",
                    "1500",
                    "--churn-seconds",
                    "4",
                    "--churn-up",
                    "1.5",
                    "--churn-down",
                    "1",
                    "--out",
                    out.string(),
                    "--prefix",
                    prefix,
                    "--client-net",
                    "198.18." + net,
                    "--server-net",
                    "198.19." + net,
                    "--xdpfwd",
                    XDPFWD_BINARY,
                    "--loadgen",
                    LOADGEN_BINARY});
  const auto code = WaitOrStop(run, 150s);
  ASSERT_TRUE(code.has_value()) << "two 4 s churn rows took over 150 s:\n" << run.output();
  const std::string table = ReadFile(out / "results.md");
  ASSERT_FALSE(table.empty()) << "no results.md:\n" << run.output();
  for (const std::string path : {"xdp", "kernel"}) {
    const auto rows = RowsFor(table, "xdpfwd --path " + path + ", a backend killed and restarted");
    ASSERT_EQ(rows.size(), 1u) << path << " missing from the churn table:\n" << table;
    const auto cells = Cells(rows[0]);
    ASSERT_EQ(cells.size(), 11u) << rows[0];
    EXPECT_GT(std::stol(cells[1].substr(0, cells[1].find(','))), 0) << "connections: " << rows[0];
    EXPECT_EQ(cells[4], "1") << "deaths: " << rows[0];
    // Failed handshakes: at least one (the dead backend refused) and as many as the death's
    // two parts ("N+M").
    int total = 0, soon = 0, later = 0;
    ASSERT_EQ(std::sscanf(cells[5].c_str(), "%d", &total), 1) << rows[0];
    ASSERT_EQ(std::sscanf(cells[6].c_str(), "%d+%d", &soon, &later), 2) << rows[0];
    EXPECT_GE(total, 1) << rows[0];
    EXPECT_EQ(total, soon + later) << rows[0];
    // The killed backend's two lives, each counted, the second (after the restart) serving.
    EXPECT_NE(cells[10].find("(2 lives)"), std::string::npos) << rows[0];
    EXPECT_EQ(cells[10].find('?'), std::string::npos) << rows[0];
    const std::string name = "xdpfwd-" + path + "-churn";
    for (const std::string& target :
         {name + ": 0 failed client connections", name + ": ≤ 3 (fall) failed backend handshakes",
          name + ": the killed backend serves again"}) {
      const size_t at = table.find(target);
      ASSERT_NE(at, std::string::npos) << target << " not in the targets:\n" << table;
      const std::string row = table.substr(at, table.find('\n', at) - at);
      EXPECT_EQ(row.find("not measured"), std::string::npos) << row;
    }
  }
  // What may fail the run: client connections reset by the kill, nothing else.
  const size_t failed = table.find("**Failed measurements:**");
  if (failed != std::string::npos) {
    const std::string line = table.substr(failed, table.find('\n', failed) - failed);
    EXPECT_EQ(Count(line, "client connections failed"), Count(line, " churn: ")) << line;
    EXPECT_EQ(line.find("served no connection"), std::string::npos) << line;
  } else {
    EXPECT_EQ(*code, 0) << run.output();
  }
  std::filesystem::remove_all(out);
}

}  // namespace
}  // namespace xdpfwd::test
