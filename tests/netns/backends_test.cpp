// Rules with several backends, through the binary on both paths (`backend` lines in the rules
// file): connections spread by the weights, a dead backend is failed over without a client
// noticing, and one killed and restarted over and over costs no client connection.
#include <gtest/gtest.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <fstream>
#include <map>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "os/endpoint.h"
#include "tests/support/forwarder_process.h"
#include "tests/support/netns_topology.h"
#include "tests/support/tcp.h"
#include "tests/support/temp_dir.h"

namespace xdpfwd::test {
namespace {

using namespace std::chrono_literals;

constexpr uint16_t kPort = 9000, kFirstBackendPort = 9100;

// A backend that says its name to each client and closes; it can go away and come back (its
// listener closed: the kernel refuses new handshakes, as for a killed process). With
// `read_first`, it reads what the client sends until the client's FIN before it answers.
class NamedBackend {
 public:
  NamedBackend(const Topology& topo, uint16_t port, std::string name, bool read_first = false)
      : topo_(topo), port_(port), name_(std::move(name)), read_first_(read_first) {
    Start();
  }
  ~NamedBackend() { Stop(); }
  void Start() {
    listener_ = TcpListen(topo_.server_ns(), topo_.server_addr(), port_);
    stop_ = false;
    thread_ = std::thread([this] { Serve(); });
  }
  void Stop() {
    if (!thread_.joinable()) return;
    // As a killed backend's: the listener stops at once (new SYNs are refused, what waits in
    // its accept queue is reset), then the serving thread ends. Closing it only after the join
    // left it accepting for up to one 20 ms poll with nobody serving, and the handshakes queued
    // then were reset after the relay had taken them: 1 client in 33,622 failed once (kernel
    // path, -j2).
    shutdown(listener_.get(), SHUT_RDWR);
    stop_ = true;
    thread_.join();
    listener_.reset();
  }

 private:
  void Serve() {
    while (!stop_) {
      pollfd p{listener_.get(), POLLIN, 0};
      if (poll(&p, 1, 20) != 1) continue;
      UniqueFd c(accept4(listener_.get(), nullptr, nullptr, SOCK_CLOEXEC));
      if (!c) continue;
      if (read_first_) {
        const timeval limit{5, 0};
        setsockopt(c.get(), SOL_SOCKET, SO_RCVTIMEO, &limit, sizeof limit);
        char buf[4096];
        while (recv(c.get(), buf, sizeof buf, 0) > 0) {
        }
      }
      (void)send(c.get(), name_.data(), name_.size(), MSG_NOSIGNAL);
    }
  }
  const Topology& topo_;
  uint16_t port_;
  std::string name_;
  bool read_first_ = false;
  UniqueFd listener_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

// An open connection (client end, backend end) still carries a byte each way.
void ExpectCarriesBothWays(int client, int backend) {
  char byte = 0;
  ASSERT_EQ(send(client, "x", 1, 0), 1);
  ASSERT_EQ(recv(backend, &byte, 1, 0), 1);
  EXPECT_EQ(byte, 'x');
  ASSERT_EQ(send(backend, "y", 1, 0), 1);
  ASSERT_EQ(recv(client, &byte, 1, 0), 1);
  EXPECT_EQ(byte, 'y');
}

class BackendsTest : public ::testing::TestWithParam<const char*> {
 protected:
  // One kernel-path thread (one picker), as the fast path has one worker here: round robin's
  // order is then the order the clients come in.
  std::unique_ptr<ForwarderProcess> StartWithOnePicker(const std::string& config) {
    return ForwarderProcess::WithConfig(GetParam(), config,
                                        std::string(GetParam()) == "kernel"
                                            ? std::vector<std::string>{"--threads", "1"}
                                            : std::vector<std::string>{});
  }
  void SetUp() override {
    if (geteuid() != 0) GTEST_SKIP() << "namespace tests need root";
  }
  // The rule, then one backend line each for backends 1..n-1 (`options[k]` after backend k's).
  std::string WriteConfig(const std::string& rule_options,
                          const std::vector<std::string>& backend_options) {
    const std::string config = dir_.File("xdpfwd.conf");
    const std::string server = ToString(topo_.server_addr());
    std::ofstream f(config);
    f << ToString(topo_.client_gw()) << " " << kPort << " " << server << " " << kFirstBackendPort
      << " " << rule_options << "\n";
    for (size_t k = 0; k < backend_options.size(); ++k) {
      f << "backend " << server << " " << kFirstBackendPort + 1 + k << " " << backend_options[k]
        << "\n";
    }
    return config;
  }
  // One client connection: the name of the backend that answered, or "" if it failed. With
  // `send_bytes`, the client sends that many bytes and its FIN first.
  std::string Ask(size_t send_bytes = 0) {
    try {
      UniqueFd c = TcpConnect(topo_.client_ns(), topo_.client_gw(), kPort);
      const timeval limit{5, 0};  // a backend that never answers fails the ask, not the run
      setsockopt(c.get(), SOL_SOCKET, SO_RCVTIMEO, &limit, sizeof limit);
      if (send_bytes > 0) {
        const std::string payload(send_bytes, 'x');
        if (send(c.get(), payload.data(), payload.size(), MSG_NOSIGNAL) !=
            static_cast<ssize_t>(payload.size())) {
          return "";
        }
        shutdown(c.get(), SHUT_WR);
      }
      std::string got;
      char buf[64];
      for (ssize_t n; (n = recv(c.get(), buf, sizeof buf, 0)) > 0;) got.append(buf, n);
      return got;
    } catch (const std::exception&) {
      return "";
    }
  }
  // `show backends`' row for `backend` (ADDR:PORT) by column name; empty if it is not listed.
  static std::map<std::string, std::string> Row(const std::string& listing,
                                                const std::string& backend) {
    std::vector<std::string> names, fields;
    auto split = [](const std::string& line) {
      std::vector<std::string> out;
      std::string field;
      std::istringstream in(line);
      while (std::getline(in, field, ',')) out.push_back(field);
      return out;
    };
    std::istringstream lines(listing);
    std::map<std::string, std::string> row;
    for (std::string line; std::getline(lines, line);) {
      if (line.rfind("# ", 0) == 0) {
        names = split(line.substr(2));
      } else if (line.find("," + backend + ",") != std::string::npos) {
        fields = split(line);
        for (size_t i = 0; i < names.size() && i < fields.size(); ++i) row[names[i]] = fields[i];
      }
    }
    return row;
  }
  static uint64_t Number(const std::map<std::string, std::string>& row, const std::string& name) {
    auto it = row.find(name);
    return it == row.end() ? ~uint64_t{0} : std::stoull(it->second);
  }
  std::string Backend(uint16_t port) const {
    return ToString(topo_.server_addr()) + ":" + std::to_string(port);
  }
  Topology topo_;
  TempDir dir_;
};

// Weights 3:1 with the third backend dead (nothing listens): every client is answered, the
// live two share them 3:1 within 5%, and the dead one costs a few failovers before it is
// marked down.
TEST_P(BackendsTest, WeightsSpreadAndADeadBackendIsFailedOver) {
  NamedBackend a(topo_, kFirstBackendPort, "a"), b(topo_, kFirstBackendPort + 1, "b");
  const std::string config = WriteConfig("[weight=3]", {"[weight=1]", ""});
  auto fwd = ForwarderProcess::WithConfig(GetParam(), config);
  std::map<std::string, int> answers;
  constexpr int kClients = 800;
  for (int i = 0; i < kClients; ++i) ++answers[Ask()];
  EXPECT_EQ(answers[""], 0) << "failed connections";
  EXPECT_NEAR(answers["a"], kClients * 3 / 4, kClients * 3 / 4 * 0.05);
  EXPECT_NEAR(answers["b"], kClients / 4, kClients / 4 * 0.05 + 1);
  const auto stats = fwd->Stats();
  EXPECT_GE(fwd->Relay(stats, "backend_failovers"), 3u) << fwd->output();
  EXPECT_GE(fwd->Relay(stats, "backends_marked_down"), 1u);
  EXPECT_EQ(fwd->Relay(stats, "backend_refused"), 0u);
  EXPECT_EQ(fwd->Stop(), 0);
}

// One of three backends killed and restarted every 100 ms while clients connect one after
// another: no client connection fails. A kill refuses new handshakes (failed over) and resets
// the one the backend had completed but not yet accepted; only `retry-on=empty-response` saves
// that client (without it, 1 client in 10,577 failed once in CI, xdp path), as HAProxy's
// option of that name would.
TEST_P(BackendsTest, ABackendKilledAndRestartedCostsNoClient) {
  NamedBackend a(topo_, kFirstBackendPort, "a"), b(topo_, kFirstBackendPort + 1, "b"),
      c(topo_, kFirstBackendPort + 2, "c");
  const std::string config = WriteConfig("[retry-on=empty-response]", {"", ""});
  auto fwd = ForwarderProcess::WithConfig(GetParam(), config);
  std::atomic<bool> done{false};
  int restarts = 0;
  std::thread flapper([&] {
    while (!done) {
      std::this_thread::sleep_for(100ms);
      c.Stop();
      std::this_thread::sleep_for(100ms);
      c.Start();
      ++restarts;
    }
  });
  std::map<std::string, int> answers;
  const auto until = std::chrono::steady_clock::now() + 4s;
  int clients = 0;
  while (std::chrono::steady_clock::now() < until) {
    ++answers[Ask()];
    ++clients;
  }
  done = true;
  flapper.join();
  EXPECT_EQ(answers[""], 0) << "failed connections of " << clients << "\n" << fwd->output();
  EXPECT_GT(answers["c"], 0) << "the flapping backend never served";
  EXPECT_GE(restarts, 10);
  const auto stats = fwd->Stats();
  EXPECT_GT(fwd->Relay(stats, "backend_failovers"), 0u);
  EXPECT_EQ(fwd->Stop(), 0);
}

// Active checks every 100 ms: the dead backend is marked down by them before any client meets
// it (no failover at all), `show backends` says so, and once it listens it is up again and
// serves.
TEST_P(BackendsTest, ActiveChecksLeaveADeadBackendOutBeforeAnyClient) {
  NamedBackend a(topo_, kFirstBackendPort, "a");
  const std::string config = WriteConfig("[check=100ms, fall=2, rise=2]", {""});
  auto fwd = ForwarderProcess::WithConfig(GetParam(), config);
  // (The checks start before the paths: the line may come before "ready".)
  auto said = [&](const std::string& text) {
    const auto until = std::chrono::steady_clock::now() + 5s;
    while (fwd->output().find(text) == std::string::npos) {
      if (std::chrono::steady_clock::now() > until) return false;
      fwd->WaitForOutput(text, 50ms);  // reads what the process wrote meanwhile
    }
    return true;
  };
  ASSERT_TRUE(said(":" + std::to_string(kFirstBackendPort + 1) + " is down")) << fwd->output();
  const std::string down = fwd->Control("show backends");
  EXPECT_NE(down.find(":" + std::to_string(kFirstBackendPort + 1) + ",ready,down,"),
            std::string::npos)
      << down;
  std::map<std::string, int> answers;
  for (int i = 0; i < 100; ++i) ++answers[Ask()];
  EXPECT_EQ(answers["a"], 100);
  auto stats = fwd->Stats();
  EXPECT_EQ(fwd->Relay(stats, "backend_failovers"), 0u) << "a client met the dead backend\n"
                                                        << fwd->Control("show backends");

  NamedBackend b(topo_, kFirstBackendPort + 1, "b");
  ASSERT_TRUE(said(":" + std::to_string(kFirstBackendPort + 1) + " is up")) << fwd->output();
  answers.clear();
  for (int i = 0; i < 100; ++i) ++answers[Ask()];
  EXPECT_EQ(answers[""], 0);
  EXPECT_NEAR(answers["b"], 50, 5);
  EXPECT_EQ(fwd->Stop(), 0);
}

// A check goes where the backend legs go: from each --backend-source address in turn (both
// paths), so that a backend which lets only those addresses in is checked on the path its
// clients' connections take, not from the interface's own address.
TEST_P(BackendsTest, ActiveChecksComeFromTheBackendSources) {
  const uint32_t base = ntohl(topo_.server_gw().s_addr) & 0xffffff00u;
  in_addr a{}, b{};
  a.s_addr = htonl(base | 200);
  b.s_addr = htonl(base | 201);
  for (const in_addr& x : {a, b}) {
    const CommandResult r =
        topo_.Run("", "ip addr add " + ToString(x) + "/32 dev " + topo_.server_side_if());
    ASSERT_EQ(r.status, 0) << r.output;
  }
  UniqueFd listener = TcpListen(topo_.server_ns(), topo_.server_addr(), kFirstBackendPort);
  const std::string config = WriteConfig("[check=50ms, fall=2, rise=1]", {});
  auto fwd = ForwarderProcess::WithConfig(GetParam(), config,
                                          {"--backend-source", ToString(a) + "," + ToString(b)});
  std::map<std::string, int> sources;
  const auto until = std::chrono::steady_clock::now() + 10s;
  for (int seen = 0; seen < 10 && std::chrono::steady_clock::now() < until;) {
    pollfd p{listener.get(), POLLIN, 0};
    if (poll(&p, 1, 100) != 1) continue;
    sockaddr_in peer{};
    socklen_t len = sizeof peer;
    UniqueFd c(accept4(listener.get(), reinterpret_cast<sockaddr*>(&peer), &len, SOCK_CLOEXEC));
    if (!c) continue;
    ++sources[ToString(peer.sin_addr)];
    ++seen;
  }
  std::string seen;
  for (const auto& [address, n] : sources) seen += address + " x" + std::to_string(n) + " ";
  EXPECT_EQ(sources.size(), 2u) << "checks came from: " << seen << "\n" << fwd->output();
  EXPECT_GE(sources[ToString(a)], 4) << seen;
  EXPECT_GE(sources[ToString(b)], 4) << seen;
  EXPECT_NE(fwd->Control("show backends").find(",ready,up,"), std::string::npos)
      << fwd->Control("show backends");
  EXPECT_EQ(fwd->Stop(), 0) << fwd->output();
}

// `set backend RULE ADDR:PORT drain` on the control socket: new clients go to the other
// backend while a connection already open on the drained one carries on; `ready` brings it
// back into the picks. A rule without checks is listed as unchecked.
TEST_P(BackendsTest, DrainTakesABackendOutOfNewConnectionsOnly) {
  const std::string server = ToString(topo_.server_addr());
  UniqueFd listener = TcpListen(topo_.server_ns(), topo_.server_addr(), kFirstBackendPort + 1);
  NamedBackend a(topo_, kFirstBackendPort, "a");
  const std::string config = WriteConfig("", {""});
  // One kernel-path thread (one picker), as the fast path has one worker here: round robin
  // sends the first client to a, the second to b (held open there).
  auto fwd = StartWithOnePicker(config);
  const std::string b = server + ":" + std::to_string(kFirstBackendPort + 1);
  EXPECT_EQ(Ask(), "a");
  UniqueFd held = TcpConnect(topo_.client_ns(), topo_.client_gw(), kPort);
  UniqueFd held_backend(accept4(listener.get(), nullptr, nullptr, SOCK_CLOEXEC));
  ASSERT_TRUE(held_backend) << "the second client did not reach backend b";
  const std::string listed = fwd->Control("show backends");
  EXPECT_NE(listed.find("0," + b + ",ready,unchecked,"), std::string::npos) << listed;

  const std::string drained = fwd->Control("set backend 0 " + b + " drain");
  EXPECT_EQ(drained.rfind("backend " + b + " of rule 0: drain\n", 0), 0u) << drained;
  std::map<std::string, int> answers;
  for (int i = 0; i < 20; ++i) ++answers[Ask()];
  EXPECT_EQ(answers["a"], 20) << "a drained backend took new connections";
  // The open connection through b still carries bytes both ways.
  ExpectCarriesBothWays(held.get(), held_backend.get());
  EXPECT_NE(fwd->Control("show backends").find(b + ",drain,"), std::string::npos);

  EXPECT_NE(fwd->Control("set backend 0 10.9.9.9:1 drain").find("error: rule 0 has no backend"),
            std::string::npos);
  EXPECT_NE(fwd->Control("set backend 0 " + b + " sleep").find("error: expected"),
            std::string::npos);
  fwd->Control("set backend 0 " + b + " ready");
  // Round robin reaches b again within two new clients.
  std::vector<UniqueFd> clients;
  bool b_again = false;
  for (int i = 0; i < 2 && !b_again; ++i) {
    clients.push_back(TcpConnect(topo_.client_ns(), topo_.client_gw(), kPort));
    pollfd p{listener.get(), POLLIN, 0};
    b_again = poll(&p, 1, 500) == 1;
  }
  EXPECT_TRUE(b_again) << "b took no connection after ready";
  EXPECT_EQ(fwd->Stop(), 0);
}

// `show backends` counts each backend's sessions, failed handshakes and bytes on both paths:
// once every client is done, they add up to what the clients sent and the backends answered.
TEST_P(BackendsTest, SessionsAndBytesAddUpInShowBackends) {
  NamedBackend a(topo_, kFirstBackendPort, "alpha", true),
      b(topo_, kFirstBackendPort + 1, "be", true);
  const std::string config = WriteConfig("", {"", ""});  // the third: nothing listens
  auto fwd = ForwarderProcess::WithConfig(GetParam(), config);
  constexpr int kClients = 40;
  constexpr uint64_t kBytes = 3000;
  std::map<std::string, int> answers;
  for (int i = 0; i < kClients; ++i) ++answers[Ask(kBytes)];
  EXPECT_EQ(answers[""], 0);
  // A session's bytes are counted when it ends, which may come just after the client's end.
  std::string listing;
  std::map<std::string, std::string> ra, rb, dead;
  const auto until = std::chrono::steady_clock::now() + 5s;
  do {
    listing = fwd->Control("show backends");
    ra = Row(listing, Backend(kFirstBackendPort));
    rb = Row(listing, Backend(kFirstBackendPort + 1));
    dead = Row(listing, Backend(kFirstBackendPort + 2));
    if (Number(ra, "current") == 0 && Number(rb, "current") == 0) break;
    std::this_thread::sleep_for(20ms);
  } while (std::chrono::steady_clock::now() < until);
  const uint64_t to_a = answers["alpha"], to_b = answers["be"];
  EXPECT_GT(to_a, 0u);
  EXPECT_GT(to_b, 0u);
  EXPECT_EQ(Number(ra, "current"), 0u) << listing;
  EXPECT_EQ(Number(ra, "sessions"), to_a) << listing;
  EXPECT_EQ(Number(rb, "sessions"), to_b) << listing;
  EXPECT_EQ(Number(ra, "bytes_to_backend"), to_a * kBytes) << listing;
  EXPECT_EQ(Number(rb, "bytes_to_backend"), to_b * kBytes) << listing;
  EXPECT_EQ(Number(ra, "bytes_from_backend"), to_a * 5) << listing;
  EXPECT_EQ(Number(rb, "bytes_from_backend"), to_b * 2) << listing;
  EXPECT_EQ(Number(dead, "sessions"), 0u) << listing;
  EXPECT_GE(Number(dead, "connect_failures"), 1u) << listing;
  EXPECT_EQ(Number(ra, "connect_failures"), 0u) << listing;
  EXPECT_EQ(ra["weight"], "1");
  const std::string metrics = fwd->Control("show metrics");
  EXPECT_NE(metrics.find("xdpfwd_backend_sessions_total{rule=\"0\",backend=\"" +
                         Backend(kFirstBackendPort) + "\"} " + std::to_string(to_a) + "\n"),
            std::string::npos)
      << metrics;
  EXPECT_NE(metrics.find("xdpfwd_backend_relayed_bytes_total{rule=\"0\",backend=\"" +
                         Backend(kFirstBackendPort + 1) + "\",direction=\"to_backend\"} " +
                         std::to_string(to_b * kBytes) + "\n"),
            std::string::npos)
      << metrics;
  EXPECT_EQ(fwd->Stop(), 0);
}

// `set weight RULE ADDR:PORT N` moves the split at once on both paths: 1:1, then 3:1.
TEST_P(BackendsTest, SetWeightChangesTheSplit) {
  NamedBackend a(topo_, kFirstBackendPort, "a"), b(topo_, kFirstBackendPort + 1, "b");
  const std::string config = WriteConfig("", {""});
  auto fwd = ForwarderProcess::WithConfig(GetParam(), config);
  std::map<std::string, int> answers;
  for (int i = 0; i < 200; ++i) ++answers[Ask()];
  EXPECT_EQ(answers[""], 0);
  EXPECT_NEAR(answers["a"], 100, 10);
  const std::string set = fwd->Control("set weight 0 " + Backend(kFirstBackendPort) + " 3");
  EXPECT_EQ(set.rfind("backend " + Backend(kFirstBackendPort) + " of rule 0: weight 3\n", 0), 0u)
      << set;
  EXPECT_EQ(Row(fwd->Control("show backends"), Backend(kFirstBackendPort))["weight"], "3");
  answers.clear();
  for (int i = 0; i < 400; ++i) ++answers[Ask()];
  EXPECT_EQ(answers[""], 0);
  EXPECT_NEAR(answers["a"], 300, 15);
  EXPECT_NEAR(answers["b"], 100, 15);
  EXPECT_NE(
      fwd->Control("set weight 0 " + Backend(kFirstBackendPort) + " 0").find("error: a weight"),
      std::string::npos);
  EXPECT_NE(fwd->Control("set weight 0 " + Backend(kFirstBackendPort)).find("error: expected"),
            std::string::npos);
  EXPECT_EQ(fwd->Stop(), 0);
}

// A reload whose file says [state=drain] on a backend: new clients go elsewhere, the drained
// backend's open connection carries on, and the rule keeps its id (weights and states are not
// a rule change). The file wins over a state set at run time: a backend drained by `set backend`
// is ready again after the reload when the file says nothing of it.
TEST_P(BackendsTest, AReloadAppliesTheFilesStatesAndWeights) {
  UniqueFd listener = TcpListen(topo_.server_ns(), topo_.server_addr(), kFirstBackendPort + 1);
  NamedBackend a(topo_, kFirstBackendPort, "a");
  const std::string config = WriteConfig("", {""});
  auto fwd = StartWithOnePicker(config);
  const std::string b = Backend(kFirstBackendPort + 1);
  EXPECT_EQ(Ask(), "a");
  UniqueFd held = TcpConnect(topo_.client_ns(), topo_.client_gw(), kPort);
  UniqueFd held_backend(accept4(listener.get(), nullptr, nullptr, SOCK_CLOEXEC));
  ASSERT_TRUE(held_backend) << "the second client did not reach backend b";
  fwd->Control("set backend 0 " + Backend(kFirstBackendPort) + " drain");

  WriteConfig("", {"[state=drain, weight=3]"});
  EXPECT_EQ(fwd->Control("reload"), config + ": kept 1, changed 0, added 0, removed 0\n\n");
  const std::string listing = fwd->Control("show backends");
  EXPECT_EQ(Row(listing, Backend(kFirstBackendPort))["admin"], "ready") << listing;
  EXPECT_EQ(Row(listing, b)["admin"], "drain") << listing;
  EXPECT_EQ(Row(listing, b)["weight"], "3") << listing;
  EXPECT_EQ(Row(listing, b)["current"], "1") << listing;
  std::map<std::string, int> answers;
  for (int i = 0; i < 20; ++i) ++answers[Ask()];
  EXPECT_EQ(answers["a"], 20) << "a backend drained by the reload took new connections";
  ExpectCarriesBothWays(held.get(), held_backend.get());
  EXPECT_EQ(fwd->Stop(), 0);
}

// A rule whose only backend is in maint refuses its clients (reset, counted as no_backend);
// `set backend ... ready` serves them again.
TEST_P(BackendsTest, NoReadyBackendRefusesClients) {
  NamedBackend a(topo_, kFirstBackendPort, "a");
  const std::string config = WriteConfig("[state=maint]", {});
  auto fwd = ForwarderProcess::WithConfig(GetParam(), config);
  EXPECT_EQ(Ask(), "");
  EXPECT_EQ(fwd->Relay(fwd->Stats(), "no_backend"), 1u);
  EXPECT_EQ(Row(fwd->Control("show backends"), Backend(kFirstBackendPort))["admin"], "maint");
  fwd->Control("set backend 0 " + Backend(kFirstBackendPort) + " ready");
  EXPECT_EQ(Ask(), "a");
  EXPECT_EQ(fwd->Stop(), 0);
}

INSTANTIATE_TEST_SUITE_P(Paths, BackendsTest, ::testing::Values("xdp", "kernel"),
                         [](const auto& p) { return std::string(p.param); });

}  // namespace
}  // namespace xdpfwd::test
