// The control process seen from outside, through the real binary on both paths: every control
// command after scripted traffic (values the traffic must have moved), `xdpfwd ctl`'s exit
// status, /metrics checked by promtool, reload over the socket, the socket's file (in use,
// stale, mode, removed at exit), and answers while draining.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "os/endpoint.h"
#include "tests/netns/control_support.h"
#include "tests/support/child_process.h"
#include "tests/support/forwarder_process.h"
#include "tests/support/lossy_link.h"
#include "tests/support/netns_topology.h"
#include "tests/support/packet_builder.h"
#include "tests/support/tcp.h"

namespace xdpfwd::test {
namespace {

using namespace std::chrono_literals;

// A CSV answer (`show stat`, `show sess`) as rows of column name -> value: its first line is
// "# " and the column names; lines after the rows that start with '#' are notes, left out.
std::vector<std::map<std::string, std::string>> CsvRows(const std::string& csv,
                                                        const std::string& header_starts) {
  std::istringstream lines(csv);
  std::string header;
  std::getline(lines, header);
  EXPECT_EQ(header.rfind("# " + header_starts, 0), 0u) << csv;
  std::vector<std::string> names;
  std::istringstream h(header.substr(std::min<size_t>(2, header.size())));
  for (std::string name; std::getline(h, name, ',');) names.push_back(name);
  std::vector<std::map<std::string, std::string>> rows;
  for (std::string line; std::getline(lines, line) && !line.empty() && line[0] != '#';) {
    std::istringstream c(line);
    std::map<std::string, std::string> row;
    size_t i = 0;
    for (std::string cell; std::getline(c, cell, ',') && i < names.size(); ++i) {
      row[names[i]] = cell;
    }
    EXPECT_EQ(i, names.size()) << line;
    rows.push_back(row);
  }
  return rows;
}

// One row of `show stat`: a path's sum (rule "*") or one of its rules.
std::map<std::string, std::string> StatRow(const std::string& csv, const std::string& path,
                                           const std::string& rule = "*") {
  for (auto& row : CsvRows(csv, "path,rule,listen,backend,accepted,")) {
    if (row["path"] == path && row["rule"] == rule) return row;
  }
  ADD_FAILURE() << "no row for path " << path << ", rule " << rule << " in:\n" << csv;
  return {};
}

TEST_P(ControlTest, EveryCommandShowsWhatTrafficDid) {
  const std::string path = GetParam();
  const std::string fast = path == "xdp" ? "fast" : "kernel";
  ForwarderProcess fwd(path, Addr(topo_.client_gw(), kPort), Addr(topo_.server_addr(), kPort),
                       {"--metrics", Addr(topo_.client_gw(), kMetricsPort)});
  Traffic();
  // Every connection ended: the counters below are final. (Both: a path counts a connection
  // completed a few syscalls before it is no longer active, its sockets closed between; a CI run
  // of 2026-11-28 read `show stat` in between, active 1, on the kernel path.)
  fwd.WaitForStats([&](const auto& s) {
    return fwd.Relay(s, "completed") == kConnections && fwd.Relay(s, "active") == 0;
  });

  const std::string info = fwd.Control("show info");
  EXPECT_NE(info.find("state: serving"), std::string::npos) << info;
  EXPECT_NE(info.find("rule 0: " + Addr(topo_.client_gw(), kPort) + " -> " +
                      Addr(topo_.server_addr(), kPort) + " (tcp, " + fast + " path)"),
            std::string::npos)
      << info;

  const std::string stat = fwd.Control("show stat");
  auto row = StatRow(stat, fast);
  EXPECT_EQ(row["accepted"], std::to_string(kConnections));
  EXPECT_EQ(row["completed"], std::to_string(kConnections));
  EXPECT_EQ(row["active"], "0");
  EXPECT_EQ(row["bytes_to_backend"], std::to_string(kConnections * kBytes));
  EXPECT_EQ(row["bytes_to_client"], std::to_string(kConnections * kBytes));
  // The one rule's row: the same numbers, with its addresses.
  auto rule = StatRow(stat, fast, "0");
  EXPECT_EQ(rule["listen"], Addr(topo_.client_gw(), kPort));
  EXPECT_EQ(rule["backend"], Addr(topo_.server_addr(), kPort));
  for (const char* column : {"accepted", "completed", "active", "bytes_to_backend"}) {
    EXPECT_EQ(rule.at(column), row.at(column)) << column;
  }

  const nlohmann::json j = nlohmann::json::parse(fwd.Control("show counters"));
  const std::string section = fast + "_path";
  EXPECT_EQ(j[section]["total"]["accepted"], kConnections);
  EXPECT_EQ(j["rules"][0]["path"], fast);

  const std::string workers = fwd.Control("show workers");
  const std::string steer = fwd.Control("show steer");
  if (path == "xdp") {
    EXPECT_EQ(workers.rfind("worker 0: pid ", 0), 0u) << workers;
    EXPECT_EQ(workers.find("worker 0: pid " + std::to_string(fwd.pid()) + ","), std::string::npos)
        << workers;  // a worker is a process of its own, not the control process
    EXPECT_NE(workers.find("AF_XDP: rx dropped"), std::string::npos) << workers;
    EXPECT_NE(workers.find("rings now: fill "), std::string::npos) << workers;
    EXPECT_NE(steer.find("redirect_new_flow," + std::to_string(kConnections) + ","),
              std::string::npos)
        << steer;
  } else {
    EXPECT_EQ(workers, "no fast path runs\n\n");
    EXPECT_EQ(steer, "no fast path runs: nothing is steered\n\n");
  }

  // /metrics: promtool finds nothing wrong, and the traffic's numbers are there.
  const std::string response =
      Http(topo_.client_gw(), kMetricsPort, "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n");
  ASSERT_EQ(response.rfind("HTTP/1.1 200 OK\r\n", 0), 0u) << response;
  EXPECT_NE(response.find("Content-Type: text/plain; version=0.0.4"), std::string::npos);
  const std::string metrics = Body(response);
  const CommandResult lint = Promtool(metrics);
  EXPECT_EQ(lint.status, 0) << lint.output << "\n" << metrics;
  EXPECT_EQ(Sample(metrics, "xdpfwd_connections_accepted_total{path=\"" + fast + "\"}"),
            std::to_string(kConnections));
  EXPECT_EQ(
      Sample(metrics, "xdpfwd_connections_ended_total{path=\"" + fast + "\",how=\"completed\"}"),
      std::to_string(kConnections));
  EXPECT_EQ(
      Sample(metrics, "xdpfwd_relayed_bytes_total{path=\"" + fast + "\",direction=\"to_backend\"}"),
      std::to_string(kConnections * kBytes));
  // Each connection's backend connect time and first byte, once each.
  EXPECT_EQ(Sample(metrics, "xdpfwd_connect_seconds_count{path=\"" + fast + "\"}"),
            std::to_string(kConnections));
  EXPECT_EQ(Sample(metrics, "xdpfwd_first_byte_seconds_count{path=\"" + fast + "\"}"),
            std::to_string(kConnections));
  EXPECT_EQ(Sample(metrics, "xdpfwd_connect_seconds_bucket{path=\"" + fast + "\",le=\"+Inf\"}"),
            std::to_string(kConnections));
  if (path == "xdp") {
    EXPECT_EQ(Sample(metrics, "xdpfwd_steer_packets_total{reason=\"redirect_new_flow\"}"),
              std::to_string(kConnections));
    const auto rx = Sample(metrics, "xdpfwd_fast_path_rx_packets_total{worker=\"0\"}");
    ASSERT_TRUE(rx.has_value()) << metrics;
    EXPECT_GT(std::stoull(*rx), 4u * kConnections);
    EXPECT_TRUE(Sample(metrics, "xdpfwd_fast_path_worker_busy_seconds_total{worker=\"0\"}"));
    // Frames posted for RX: the fill ring is never left empty while the worker runs.
    const auto fill = Sample(metrics, "xdpfwd_fast_path_fill_ring_frames{worker=\"0\"}");
    ASSERT_TRUE(fill.has_value()) << metrics;
    EXPECT_GT(std::stoull(*fill), 0u);
  }
  // `show metrics` is the same text as /metrics (but for a moment's worth of gauges).
  EXPECT_EQ(Sample(fwd.Control("show metrics"),
                   "xdpfwd_connections_accepted_total{path=\"" + fast + "\"}"),
            std::to_string(kConnections));

  // Other requests than GET /metrics.
  EXPECT_EQ(
      Http(topo_.client_gw(), kMetricsPort, "GET / HTTP/1.1\r\n\r\n").rfind("HTTP/1.1 404 ", 0),
      0u);
  EXPECT_EQ(Http(topo_.client_gw(), kMetricsPort, "POST /metrics HTTP/1.1\r\n\r\n")
                .rfind("HTTP/1.1 405 ", 0),
            0u);

  // xdpfwd ctl: the answer on stdout, exit 0; an unknown command exits 1 and says so.
  const std::string ctl = ForwarderProcess::BinaryPath() + " ctl --control " + fwd.control_path();
  const CommandResult ok = RunCommand("", ctl + " show info");
  EXPECT_EQ(ok.status, 0) << ok.output;
  EXPECT_EQ(ok.output.rfind("version: ", 0), 0u) << ok.output;
  const CommandResult bad = RunCommand("", ctl + " show nothing");
  EXPECT_EQ(bad.status, 1) << bad.output;
  EXPECT_EQ(bad.output, "error: unknown command 'show nothing' (help lists them)\n");
  const CommandResult gone = RunCommand(
      "", ForwarderProcess::BinaryPath() + " ctl --control /tmp/xdpfwd-no-such.sock help");
  EXPECT_EQ(gone.status, 2) << gone.output;
  EXPECT_NE(gone.output.find("cannot connect to /tmp/xdpfwd-no-such.sock"), std::string::npos);
}

// Every counter the SIGUSR1 line shows is in the JSON, under the same name, and in /metrics.
TEST_P(ControlTest, MetricsHoldEveryCounterOfTheStatsLine) {
  const std::string path = GetParam();
  const std::string fast = path == "xdp" ? "fast" : "kernel";
  ForwarderProcess fwd(path, Addr(topo_.client_gw(), kPort), Addr(topo_.server_addr(), kPort),
                       {"--metrics", Addr(topo_.client_gw(), kMetricsPort)});
  Traffic();
  const std::string prefix =
      "xdpfwd: " + std::string(path == "xdp" ? "fast" : "kernel") + " path: accepted=";
  const size_t from = fwd.output().size();
  kill(fwd.pid(), SIGUSR1);
  ASSERT_TRUE(fwd.WaitForOutput(prefix, 10s));
  ASSERT_TRUE(fwd.WaitForOutput("\n", 2s));
  std::string line = fwd.output().substr(fwd.output().find(prefix, from));
  line = line.substr(0, line.find('\n'));
  const nlohmann::json total =
      nlohmann::json::parse(fwd.Control("show counters"))[fast + "_path"]["total"];
  const std::string metrics =
      Body(Http(topo_.client_gw(), kMetricsPort, "GET /metrics HTTP/1.1\r\n\r\n"));
  std::istringstream words(line.substr(std::string("xdpfwd: ").size()));
  int checked = 0;
  for (std::string w; words >> w;) {
    const size_t eq = w.find('=');
    if (eq == std::string::npos) continue;
    std::string name = w.substr(0, eq);
    if (name.rfind("rx_packets.", 0) == 0) {  // per queue: a family of its own
      EXPECT_NE(metrics.find("xdpfwd_fast_path_queue_rx_packets_total{"), std::string::npos);
      continue;
    }
    EXPECT_TRUE(total.contains(name)) << name;
    const std::string base = name.size() > 3 && name.ends_with("_ns")
                                 ? name.substr(0, name.size() - 3) + "_seconds"
                                 : name;
    const bool found = metrics.find("how=\"" + name + "\"") != std::string::npos ||
                       metrics.find("_" + base + "{") != std::string::npos ||
                       metrics.find("_" + base + "_total{") != std::string::npos ||
                       metrics.find("_" + base + " ") != std::string::npos ||
                       metrics.find("_" + base + "_total ") != std::string::npos ||
                       (name.ends_with("_nagle_peers") &&
                        metrics.find("xdpfwd_nagle_peers_total{") != std::string::npos) ||
                       name == "accepted" || name == "active" || name.starts_with("bytes_to_");
    EXPECT_TRUE(found) << name << " is in the stats line but not in /metrics";
    ++checked;
  }
  EXPECT_GT(checked, 20) << line;
}

// `show sess`'s rows.
std::vector<std::map<std::string, std::string>> SessRows(const std::string& csv) {
  return CsvRows(csv, "id,path,worker,rule,client,backend,age_ms,");
}

// Every open connection in `show sess` with its peers, bytes and TCP state; one of them reset
// by `shutdown session ID` while the others go on.
TEST_P(ControlTest, ShowSessAndShutdownSession) {
  const std::string path = GetParam();
  const std::string fast = path == "xdp" ? "fast" : "kernel";
  UniqueFd listener = TcpListen(topo_.server_ns(), topo_.server_addr(), kPort);
  ForwarderProcess fwd(path, Addr(topo_.client_gw(), kPort), Addr(topo_.server_addr(), kPort));
  constexpr int kOpen = 3;
  std::vector<UniqueFd> clients, servers;
  for (int i = 0; i < kOpen; ++i) {
    clients.push_back(TcpConnect(topo_.client_ns(), topo_.client_gw(), kPort));
    servers.emplace_back(accept(listener.get(), nullptr, nullptr));
    ASSERT_TRUE(servers.back());
    // Connection i sends 100 * (i + 1) bytes and gets 10 * (i + 1) back.
    const std::string up(100 * (i + 1), 'u'), down(10 * (i + 1), 'd');
    ASSERT_EQ(send(clients[i].get(), up.data(), up.size(), 0), static_cast<ssize_t>(up.size()));
    std::string got(up.size(), '\0');
    ASSERT_EQ(recv(servers[i].get(), got.data(), got.size(), MSG_WAITALL),
              static_cast<ssize_t>(got.size()));
    ASSERT_EQ(send(servers[i].get(), down.data(), down.size(), 0),
              static_cast<ssize_t>(down.size()));
    got.assign(down.size(), '\0');
    ASSERT_EQ(recv(clients[i].get(), got.data(), got.size(), MSG_WAITALL),
              static_cast<ssize_t>(got.size()));
  }
  auto rows = SessRows(fwd.Control("show sess"));
  ASSERT_EQ(rows.size(), static_cast<size_t>(kOpen));
  std::map<uint16_t, std::map<std::string, std::string>> by_port;  // client port -> row
  std::set<std::string> ids;
  for (auto& row : rows) {
    EXPECT_EQ(row["path"], fast);
    EXPECT_EQ(row["rule"], "0");
    EXPECT_EQ(row["backend"], Addr(topo_.server_addr(), kPort));
    EXPECT_EQ(row["client"].rfind(ToString(topo_.client_addr()) + ":", 0), 0u) << row["client"];
    EXPECT_EQ(row["client_state"], "ESTABLISHED");
    EXPECT_EQ(row["backend_state"], "ESTABLISHED");
    EXPECT_NE(row["client_cwnd"], "0");
    EXPECT_NE(row["backend_peer_window"], "0");
    if (path == "kernel") {
      EXPECT_NE(row["client_srtt_us"], "0");  // lwIP times in 10 ms ticks: 0 on a veth
    }
    ids.insert(row["id"]);
    by_port[static_cast<uint16_t>(std::stoi(row["client"].substr(row["client"].find(':') + 1)))] =
        row;
  }
  EXPECT_EQ(ids.size(), static_cast<size_t>(kOpen));
  for (int i = 0; i < kOpen; ++i) {
    auto& row = by_port[LocalPort(clients[i].get())];
    EXPECT_EQ(row["bytes_to_backend"], std::to_string(100 * (i + 1)));
    EXPECT_EQ(row["bytes_to_client"], std::to_string(10 * (i + 1)));
  }

  // Reset the second one; the others still relay.
  const std::string victim = by_port[LocalPort(clients[1].get())]["id"];
  EXPECT_EQ(fwd.Control("shutdown session " + victim), "session " + victim + " reset\n\n");
  char byte;
  EXPECT_EQ(recv(clients[1].get(), &byte, 1, 0), -1);
  EXPECT_EQ(errno, ECONNRESET);
  for (int i : {0, 2}) {
    ASSERT_EQ(send(clients[i].get(), "x", 1, 0), 1);
    ASSERT_EQ(recv(servers[i].get(), &byte, 1, MSG_WAITALL), 1);
  }
  rows = SessRows(fwd.Control("show sess"));
  EXPECT_EQ(rows.size(), static_cast<size_t>(kOpen - 1));
  EXPECT_EQ(fwd.Control("shutdown session " + victim).rfind("error: ", 0), 0u);
  EXPECT_EQ(fwd.Control("shutdown session nonsense"),
            "error: shutdown session: 'nonsense' is not a session id (show sess)\n\n");
  const auto stats = fwd.Stats();
  EXPECT_EQ(fwd.Relay(stats, "admin_shutdown"), 1u);
}

INSTANTIATE_TEST_SUITE_P(BothPaths, ControlTest, ::testing::Values("xdp", "kernel"));

// The socket's directory is made, the file is 0600, a second xdpfwd on it is refused (exit
// 1) while the first runs, a stale file is replaced, and the file goes at exit.
TEST_F(ControlSocketTest, FileLifeAndOwnership) {
  {
    ForwarderProcess first("kernel", listen_, "127.0.0.1:9", {"--control", path_});
    struct stat st {};
    ASSERT_EQ(stat(path_.c_str(), &st), 0);
    EXPECT_TRUE(S_ISSOCK(st.st_mode));
    EXPECT_EQ(st.st_mode & 0777, 0600u);
    const CommandResult second =
        RunCommand("", ForwarderProcess::BinaryPath() + " --path kernel --control " + path_ + " " +
                           listen_ + " 127.0.0.1:9");
    EXPECT_EQ(second.status, 1) << second.output;
    EXPECT_NE(second.output.find("control socket " + path_ + " is in use"), std::string::npos)
        << second.output;
    EXPECT_EQ(first.Stop(), 0);
  }
  struct stat st {};
  EXPECT_NE(stat(path_.c_str(), &st), 0) << "the socket file outlived xdpfwd";

  // A stale file: bound, never listened on, left behind (as by a SIGKILL).
  {
    sockaddr_un a{};
    a.sun_family = AF_UNIX;
    std::memcpy(a.sun_path, path_.data(), path_.size());
    const int fd = socket(AF_UNIX, SOCK_STREAM, 0);
    ASSERT_EQ(bind(fd, reinterpret_cast<const sockaddr*>(&a), sizeof a), 0);
    close(fd);
  }
  ForwarderProcess again("kernel", listen_, "127.0.0.1:9", {"--control", path_});
  EXPECT_EQ(again.Control("show info").rfind("version: ", 0), 0u);
  EXPECT_EQ(again.Stop(), 0);

  // Not a socket: refused, and the file is left alone.
  { std::ofstream(path_) << "mine\n"; }
  const CommandResult refused =
      RunCommand("", ForwarderProcess::BinaryPath() + " --path kernel --control " + path_ + " " +
                         listen_ + " 127.0.0.1:9");
  EXPECT_EQ(refused.status, 1) << refused.output;
  EXPECT_NE(refused.output.find("a file that is not a socket"), std::string::npos);
  std::ifstream kept(path_);
  std::string content;
  std::getline(kept, content);
  EXPECT_EQ(content, "mine");
}

// `reload` over the socket: the summary, or the reason and "error:"; counted in /metrics.
TEST_F(ControlSocketTest, ReloadOverTheSocket) {
  const std::string config = path_.substr(0, path_.rfind('/')) + ".conf";
  const std::string port = listen_.substr(listen_.find(':') + 1);
  { std::ofstream(config) << "127.0.0.1 " << port << " 127.0.0.1 9\n"; }
  auto fwd = ForwarderProcess::WithConfig("kernel", config, {"--control", path_});
  EXPECT_EQ(fwd->Control("reload"), config + ": kept 1, changed 0, added 0, removed 0\n\n");
  { std::ofstream(config) << "127.0.0.1 " << port << " 127.0.0.1\n"; }
  const std::string refused = fwd->Control("reload");
  EXPECT_EQ(refused.rfind("error: " + config + ":1:", 0), 0u) << refused;
  const std::string metrics = fwd->Control("show metrics");
  EXPECT_EQ(Sample(metrics, "xdpfwd_reloads_total{result=\"applied\"}"), "1") << metrics;
  EXPECT_EQ(Sample(metrics, "xdpfwd_reloads_total{result=\"refused\"}"), "1") << metrics;
  EXPECT_NE(fwd->Control("show info").find("reloads: 2 (1 refused)"), std::string::npos);
  EXPECT_EQ(fwd->Stop(), 0);
  unlink(config.c_str());
}

// While draining, the socket still answers and says so.
TEST_F(ControlSocketTest, AnswersWhileDraining) {
  Topology topo;
  UniqueFd listener = TcpListen(topo.server_ns(), topo.server_addr(), kPort);
  ForwarderProcess fwd("kernel", Addr(topo.client_gw(), kPort), Addr(topo.server_addr(), kPort),
                       {"--control", path_, "--drain-timeout", "20s"});
  UniqueFd client = TcpConnect(topo.client_ns(), topo.client_gw(), kPort);
  UniqueFd server(accept(listener.get(), nullptr, nullptr));
  ASSERT_TRUE(server);
  kill(fwd.pid(), SIGTERM);
  ASSERT_TRUE(fwd.WaitForOutput("drain: accepting no new connections; 1 open", 10s));
  EXPECT_NE(fwd.Control("show info").find("state: draining"), std::string::npos);
  EXPECT_EQ(Sample(fwd.Control("show metrics"), "xdpfwd_draining"), "1");
  EXPECT_EQ(fwd.Control("reload"), "draining: nothing reloaded\n\n");
  client.reset();
  server.reset();
  EXPECT_EQ(fwd.WaitExit(15s), 0) << fwd.output();
  EXPECT_NE(fwd.output().find("drain: every connection ended"), std::string::npos);
}

}  // namespace
}  // namespace xdpfwd::test
