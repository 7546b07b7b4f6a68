// A rinetd configuration file through the real binary, on each path: allow/deny lists (global
// and per rule) refuse clients before a backend leg opens, the access log has rinetd's lines
// for what happened, a UDP rule forwards beside the TCP ones, and the pid file lives exactly as
// long as the process.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <signal.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "os/endpoint.h"
#include "tests/support/echo_server.h"
#include "tests/support/forwarder_process.h"
#include "tests/support/netns_topology.h"
#include "tests/support/tcp.h"
#include "tests/support/temp_dir.h"

namespace xdpfwd::test {
namespace {

using namespace std::chrono_literals;

// Ports inside this test's own topology only.
constexpr uint16_t kOpenPort = 9000, kAllowListPort = 9001, kDenyPort = 9002, kUdpPort = 9003;
// A listen address on the root namespace's loopback: an interface the fast path never attaches.
constexpr uint16_t kLoopbackPort = 29001;
constexpr uint16_t kBackendPort = 9100, kUdpBackendPort = 9103;

std::string ReadFile(const std::string& path) {
  std::ifstream f(path);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

std::vector<std::vector<std::string>> TabLines(const std::string& text) {
  std::vector<std::vector<std::string>> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    std::vector<std::string> fields;
    size_t start = 0;
    for (;;) {
      const size_t tab = line.find('\t', start);
      fields.push_back(line.substr(start, tab == std::string::npos ? tab : tab - start));
      if (tab == std::string::npos) break;
      start = tab + 1;
    }
    lines.push_back(fields);
  }
  return lines;
}

// What a client of a refused rule sees: the connection closed with no byte (a FIN; a reset is
// accepted too, as from a kernel that had unread data), within `limit`.
bool ClosedWithoutData(int fd, std::chrono::milliseconds limit) {
  pollfd p{fd, POLLIN, 0};
  if (poll(&p, 1, static_cast<int>(limit.count())) != 1) return false;
  char byte;
  const ssize_t n = recv(fd, &byte, 1, 0);
  return n == 0 || (n < 0 && errno == ECONNRESET);
}

// A receive that waits at most `limit` (then fails with EAGAIN) instead of for ever.
void ReceiveWithin(int fd, std::chrono::milliseconds limit) {
  timeval tv{static_cast<time_t>(limit.count() / 1000),
             static_cast<suseconds_t>(limit.count() % 1000 * 1000)};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
}

// A UDP echo in the server's namespace until destroyed.
class UdpEcho {
 public:
  UdpEcho(const std::string& ns, in_addr addr, uint16_t port) {
    RunInNamespace(ns, [&] {
      fd_.reset(socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0));
      sockaddr_in sa{};
      sa.sin_family = AF_INET;
      sa.sin_addr = addr;
      sa.sin_port = htons(port);
      if (bind(fd_.get(), reinterpret_cast<sockaddr*>(&sa), sizeof(sa)) != 0) {
        throw std::runtime_error("udp echo bind");
      }
    });
    thread_ = std::thread([this] {
      char buf[2048];
      while (!stop_) {
        pollfd p{fd_.get(), POLLIN, 0};
        if (poll(&p, 1, 50) != 1) continue;
        sockaddr_storage from{};
        socklen_t len = sizeof(from);
        const ssize_t n =
            recvfrom(fd_.get(), buf, sizeof(buf), 0, reinterpret_cast<sockaddr*>(&from), &len);
        if (n >= 0)
          sendto(fd_.get(), buf, static_cast<size_t>(n), 0, reinterpret_cast<sockaddr*>(&from),
                 len);
      }
    });
  }
  ~UdpEcho() {
    stop_ = true;
    thread_.join();
  }

 private:
  UniqueFd fd_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

// Root, and a directory of its own for the files a test writes.
class ServiceFilesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (geteuid() != 0) GTEST_SKIP() << "namespace tests need root";
    char tmpl[] = "/tmp/xdpfwd-service-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override {
    if (!dir_.empty()) std::filesystem::remove_all(dir_);
  }
  std::string dir_;
};

class ServiceConfigTest : public ServiceFilesTest,
                          public ::testing::WithParamInterface<const char*> {};

TEST_P(ServiceConfigTest, AccessListsAccessLogAndPidFileAsRinetd) {
  Topology topo;
  EchoServer echo(TcpListen(topo.server_ns(), topo.server_addr(), kBackendPort));
  UdpEcho udp_echo(topo.server_ns(), topo.server_addr(), kUdpBackendPort);
  const std::string gw = ToString(topo.client_gw());
  const std::string server = ToString(topo.server_addr());
  const std::string client = ToString(topo.client_addr());
  const std::string client_net = client.substr(0, client.rfind('.') + 1);
  const std::string log_path = dir_ + "/access.log";
  const std::string pid_path = dir_ + "/xdpfwd.pid";
  const std::string config_path = dir_ + "/rinetd.conf";
  {
    std::ofstream f(config_path);
    f << "# global: this topology's clients only\n"
      << "allow " << client_net << "*\n"
      << gw << " " << kOpenPort << " " << server << " " << kBackendPort << "\n"
      << gw << "\t" << kAllowListPort << "\t" << server << "\t" << kBackendPort << "\n"
      << "allow 192.0.2.*   # this rule's own list: the client is not in it\n"
      << gw << " " << kDenyPort << " " << server << " " << kBackendPort << "\n"
      << "deny " << client_net << "?*\n"
      << gw << " " << kUdpPort << "/udp " << server << " " << kUdpBackendPort
      << "/udp [timeout=30]\n"
      << "logfile " << log_path << "\n"
      << "pidlogfile " << pid_path << "\n";
  }
  auto fwd = ForwarderProcess::WithConfig(GetParam(), config_path);
  EXPECT_EQ(std::atoi(ReadFile(pid_path).c_str()), fwd->pid());

  // The open rule relays.
  {
    UniqueFd c = TcpConnect(topo.client_ns(), topo.client_gw(), kOpenPort);
    ASSERT_EQ(send(c.get(), "hello", 5, 0), 5);
    shutdown(c.get(), SHUT_WR);
    const StreamStats got = ReceiveAll(c.get());
    EXPECT_EQ(got.bytes, 5u);
  }
  // The refused rules close the client's connection without a byte.
  for (uint16_t port : {kAllowListPort, kDenyPort}) {
    UniqueFd c = TcpConnect(topo.client_ns(), topo.client_gw(), port);
    EXPECT_TRUE(ClosedWithoutData(c.get(), 5s)) << "port " << port;
  }
  // The UDP rule: a datagram and its echo.
  RunInNamespace(topo.client_ns(), [&] {
    UniqueFd u(socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0));
    sockaddr_in to{};
    to.sin_family = AF_INET;
    to.sin_addr = topo.client_gw();
    to.sin_port = htons(kUdpPort);
    ASSERT_EQ(sendto(u.get(), "ping", 4, 0, reinterpret_cast<sockaddr*>(&to), sizeof(to)), 4);
    pollfd p{u.get(), POLLIN, 0};
    ASSERT_EQ(poll(&p, 1, 5000), 1) << "no UDP echo through the datagram relay";
    char buf[16];
    EXPECT_EQ(recv(u.get(), buf, sizeof(buf), 0), 4);
  });

  const auto stats = fwd->WaitForStats([&](const auto& s) {
    return fwd->Relay(s, "not_allowed") == 1 && fwd->Relay(s, "denied") == 1 &&
           fwd->Relay(s, "completed") == 1;
  });
  EXPECT_EQ(fwd->Relay(stats, "not_allowed"), 1u);
  EXPECT_EQ(fwd->Relay(stats, "denied"), 1u);
  EXPECT_EQ(fwd->Relay(stats, "accepted"), 1u);  // refused clients are not accepted ones
  EXPECT_EQ(fwd->Stop(), 0);
  EXPECT_FALSE(std::filesystem::exists(pid_path)) << "the pid file outlived the process";

  // rinetd's tab-separated lines: time, client, bind host, port, connect host, port, bytes
  // from the client, bytes to it, result.
  const std::string log = ReadFile(log_path);
  const auto lines = TabLines(log);
  auto find = [&](uint16_t port, const std::string& result) -> const std::vector<std::string>* {
    for (const auto& f : lines) {
      if (f.size() == 9 && f[3] == std::to_string(port) && f[8] == result) return &f;
    }
    return nullptr;
  };
  ASSERT_EQ(lines.size(), 6u) << log;
  for (const auto& f : lines) {
    ASSERT_EQ(f.size(), 9u) << log;
    EXPECT_EQ(f[1], client) << log;
    EXPECT_EQ(f[2], gw) << log;
    EXPECT_EQ(f[4], server) << log;
    EXPECT_EQ(f[0].back(), ' ') << "rinetd's time field ends in a blank";
  }
  const auto* opened = find(kOpenPort, "opened");
  ASSERT_NE(opened, nullptr) << log;
  EXPECT_EQ((*opened)[6], "0");
  const auto* done = find(kOpenPort, "done-remote-closed");
  ASSERT_NE(done, nullptr) << log;
  EXPECT_EQ((*done)[6], "5");  // from the client
  EXPECT_EQ((*done)[7], "5");  // to the client
  EXPECT_NE(find(kAllowListPort, "not-allowed"), nullptr) << log;
  EXPECT_NE(find(kDenyPort, "denied"), nullptr) << log;
  EXPECT_NE(find(kUdpPort, "opened"), nullptr) << log;
  const auto* udp_done = find(kUdpPort, "done-shutdown");
  ASSERT_NE(udp_done, nullptr) << log;
  EXPECT_EQ((*udp_done)[6], "4");
  EXPECT_EQ((*udp_done)[7], "4");
}

INSTANTIATE_TEST_SUITE_P(Paths, ServiceConfigTest, ::testing::Values("xdp", "kernel"),
                         [](const auto& p) { return std::string(p.param); });

// rinetd's "::" listener serves IPv4 clients (the kernel path, as rinetd does on Linux), and
// their address is matched against IPv4 patterns.
TEST_F(ServiceFilesTest, WildcardIpv6RuleServesIpv4ClientsOnTheKernelPath) {
  Topology topo;
  EchoServer echo(TcpListen(topo.server_ns(), topo.server_addr(), kBackendPort));
  const std::string client = ToString(topo.client_addr());
  const std::string config_path = dir_ + "/rinetd.conf";
  {
    std::ofstream f(config_path);
    f << ":: " << kOpenPort << " " << ToString(topo.server_addr()) << " " << kBackendPort << "\n"
      << "allow " << client.substr(0, client.rfind('.') + 1) << "*\n";
  }
  auto fwd = ForwarderProcess::WithConfig("kernel", config_path);
  UniqueFd c = TcpConnect(topo.client_ns(), topo.client_gw(), kOpenPort);
  ReceiveWithin(c.get(), 10s);
  const StreamStats sent = SendPattern(c.get(), 5, 1000);
  EXPECT_EQ(ReceiveAll(c.get()).bytes, sent.bytes);
  EXPECT_EQ(fwd->Stop(), 0);
}

// SIGTERM's drain, through the binary on each path: new clients are refused at once, a
// connection mid-transfer finishes with every byte, and the process then exits 0 by itself
// with its XDP program detached; at the limit, or on a second signal, the rest is reset.
class DrainTest : public ::testing::TestWithParam<const char*> {
 protected:
  void SetUp() override {
    if (geteuid() != 0) GTEST_SKIP() << "namespace tests need root";
  }
  std::unique_ptr<ForwarderProcess> Start(const std::string& drain_timeout) {
    return std::make_unique<ForwarderProcess>(
        GetParam(), ToString(topo_.client_gw()) + ":" + std::to_string(kOpenPort),
        ToString(topo_.server_addr()) + ":" + std::to_string(kBackendPort),
        std::vector<std::string>{"--drain-timeout", drain_timeout});
  }
  bool XdpAttached() const {
    const std::string links = RunCommand("", "ip -o link show").output;
    std::istringstream in(links);
    for (std::string line; std::getline(in, line);) {
      if ((line.find(topo_.client_side_if()) != std::string::npos ||
           line.find(topo_.server_side_if()) != std::string::npos) &&
          line.find(" xdp") != std::string::npos) {
        return true;
      }
    }
    return false;
  }
  Topology topo_;
};

TEST_P(DrainTest, OpenConnectionsFinishNewOnesAreRefusedThenItExits) {
  EchoServer echo(TcpListen(topo_.server_ns(), topo_.server_addr(), kBackendPort));
  auto fwd = Start("20s");
  UniqueFd c = TcpConnect(topo_.client_ns(), topo_.client_gw(), kOpenPort);
  StreamStats back;
  std::thread reader([&] { back = ReceiveAll(c.get()); });
  PatternStream pattern(7);
  Fnv1a sent;
  uint64_t sent_bytes = 0;
  auto send_some = [&](uint64_t bytes) {
    std::vector<uint8_t> buf(64 * 1024);
    for (uint64_t done = 0; done < bytes; done += buf.size()) {
      pattern.Fill(buf.data(), buf.size());
      sent.Update(buf.data(), buf.size());
      for (size_t off = 0; off < buf.size();) {
        const ssize_t n = send(c.get(), buf.data() + off, buf.size() - off, 0);
        ASSERT_GT(n, 0) << std::strerror(errno);
        off += static_cast<size_t>(n);
      }
      sent_bytes += buf.size();
    }
  };
  send_some(1 << 20);
  ASSERT_EQ(kill(fwd->pid(), SIGTERM), 0);
  ASSERT_TRUE(fwd->WaitForOutput("drain: accepting no new connections; 1 open", 5s))
      << fwd->output();
  // A new client is refused while the open connection goes on.
  EXPECT_THROW(TcpConnect(topo_.client_ns(), topo_.client_gw(), kOpenPort), std::runtime_error);
  send_some(4 << 20);
  shutdown(c.get(), SHUT_WR);
  reader.join();
  EXPECT_EQ(back.bytes, sent_bytes);
  EXPECT_EQ(back.hash, sent.value());
  // It exits by itself once the last connection ended, well before the 20 s limit.
  const auto code = fwd->WaitExit(10s);
  ASSERT_TRUE(code) << fwd->output();
  EXPECT_EQ(*code, 0);
  EXPECT_NE(fwd->output().find("drain: every connection ended"), std::string::npos)
      << fwd->output();
  EXPECT_EQ(fwd->output().find("shutdown_reset=1"), std::string::npos) << fwd->output();
  EXPECT_FALSE(XdpAttached());
}

TEST_P(DrainTest, TheLimitOrASecondSignalResetsWhatIsLeft) {
  EchoServer echo(TcpListen(topo_.server_ns(), topo_.server_addr(), kBackendPort));
  {
    auto fwd = Start("1s");
    UniqueFd idle = TcpConnect(topo_.client_ns(), topo_.client_gw(), kOpenPort);
    ASSERT_TRUE(
        fwd->WaitForStats([&](const auto& s) { return fwd->Relay(s, "active") == 1; }).size());
    const auto start = std::chrono::steady_clock::now();
    ASSERT_EQ(kill(fwd->pid(), SIGTERM), 0);
    const auto code = fwd->WaitExit(10s);
    ASSERT_TRUE(code) << fwd->output();
    EXPECT_EQ(*code, 0);
    EXPECT_GE(std::chrono::steady_clock::now() - start, 900ms);
    EXPECT_NE(fwd->output().find("1 connection(s) still open after 1.00 s: resetting them"),
              std::string::npos)
        << fwd->output();
    // (The fast path's exit summary is taken before its workers reset what is open, so only
    // the kernel path's counts the reset.)
    if (std::string(GetParam()) == "kernel") {
      EXPECT_NE(fwd->output().find("shutdown_reset=1"), std::string::npos) << fwd->output();
    }
    EXPECT_TRUE(ClosedWithoutData(idle.get(), 5s));
    EXPECT_FALSE(XdpAttached());
  }
  {
    auto fwd = Start("60s");
    UniqueFd idle = TcpConnect(topo_.client_ns(), topo_.client_gw(), kOpenPort);
    ASSERT_TRUE(
        fwd->WaitForStats([&](const auto& s) { return fwd->Relay(s, "active") == 1; }).size());
    ASSERT_EQ(kill(fwd->pid(), SIGTERM), 0);
    ASSERT_TRUE(fwd->WaitForOutput("drain: accepting no new connections", 5s)) << fwd->output();
    const auto start = std::chrono::steady_clock::now();
    ASSERT_EQ(kill(fwd->pid(), SIGINT), 0);
    const auto code = fwd->WaitExit(10s);
    ASSERT_TRUE(code) << fwd->output();
    EXPECT_EQ(*code, 0);
    EXPECT_LT(std::chrono::steady_clock::now() - start, 5s);
    EXPECT_NE(fwd->output().find("drain: second signal: resetting 1 open connection(s)"),
              std::string::npos)
        << fwd->output();
    EXPECT_FALSE(XdpAttached());
  }
}

INSTANTIATE_TEST_SUITE_P(Paths, DrainTest, ::testing::Values("xdp", "kernel"),
                         [](const auto& p) { return std::string(p.param); });

// SIGHUP reloads, through the binary: 100 reloads that change one rule and add and remove a
// third, while connections open and close on both remaining rules and 1 GiB goes through one
// of them; no connection fails, every byte arrives, and a file that does not parse leaves the
// running rules in place. With xdp and auto the fast path's running workers take every new and
// changed rule (no connection reaches the kernel path); kernel runs the kernel path alone.
class ReloadTest : public ::testing::TestWithParam<const char*> {
 protected:
  void SetUp() override {
    if (geteuid() != 0) GTEST_SKIP() << "namespace tests need root";
    char tmpl[] = "/tmp/xdpfwd-reload-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override {
    if (!dir_.empty()) std::filesystem::remove_all(dir_);
  }
  void WriteConfig(const std::string& path, int version) const {
    const std::string gw = ToString(topo_.client_gw()), server = ToString(topo_.server_addr());
    std::ofstream f(path + ".new");
    f << "# version " << version << "\n"
      << gw << " " << kOpenPort << " " << server << " " << kBackendPort << "\n"
      << gw << " " << kAllowListPort << " " << server << " "
      << (version % 2 == 0 ? kBackendPort : kBackendPort + 1) << "\n";
    if (version % 2 == 1)
      f << gw << " " << kDenyPort << " " << server << " " << kBackendPort << "\n";
    f.close();
    std::filesystem::rename(path + ".new", path);  // a reload never reads half a file
  }
  Topology topo_;
  std::string dir_;
};

TEST_P(ReloadTest, HundredReloadsUnderLoadLoseNothing) {
  EchoServer echo(TcpListen(topo_.server_ns(), topo_.server_addr(), kBackendPort));
  EchoServer echo2(TcpListen(topo_.server_ns(), topo_.server_addr(), kBackendPort + 1));
  const std::string config = dir_ + "/xdpfwd.conf";
  WriteConfig(config, 0);
  auto fwd = ForwarderProcess::WithConfig(GetParam(), config);

  std::atomic<bool> stop{false};
  std::atomic<uint64_t> made{0}, failed{0};
  std::string first_failure;
  std::mutex failure_mu;
  auto rate_loop = [&](uint16_t port) {
    uint64_t n = 0;
    while (!stop) {
      try {
        UniqueFd c = TcpConnect(topo_.client_ns(), topo_.client_gw(), port);
        ReceiveWithin(c.get(), 10s);
        const StreamStats sent = SendPattern(c.get(), ++n, 100);
        const StreamStats got = ReceiveAll(c.get());
        if (got.bytes != sent.bytes || got.hash != sent.hash) throw std::runtime_error("bytes");
        ++made;
      } catch (const std::exception& e) {
        ++failed;
        std::lock_guard lock(failure_mu);
        if (first_failure.empty()) first_failure = "port " + std::to_string(port) + ": " + e.what();
      }
    }
  };
  std::thread rate_open([&] { rate_loop(kOpenPort); });
  std::thread rate_changed([&] { rate_loop(kAllowListPort); });
  StreamStats bulk_sent, bulk_back;
  std::thread bulk([&] {
    UniqueFd c = TcpConnect(topo_.client_ns(), topo_.client_gw(), kOpenPort);
    std::thread reader([&] { bulk_back = ReceiveAll(c.get()); });
    bulk_sent = SendPattern(c.get(), 42, uint64_t{1} << 30);
    reader.join();
  });

  for (int version = 1; version <= 100; ++version) {
    WriteConfig(config, version);
    ASSERT_EQ(kill(fwd->pid(), SIGHUP), 0);
    ASSERT_TRUE(fwd->WaitForOutput("reload: " + config + ": kept", 10s))
        << "reload " << version << "\n"
        << fwd->output();
    if (version == 1) {
      // The added rule serves at once; it is removed again by the next reload.
      UniqueFd c = TcpConnect(topo_.client_ns(), topo_.client_gw(), kDenyPort);
      ReceiveWithin(c.get(), 10s);
      const StreamStats sent = SendPattern(c.get(), 9, 10);
      EXPECT_EQ(ReceiveAll(c.get()).bytes, sent.bytes);
    }
  }
  bulk.join();
  stop = true;
  rate_open.join();
  rate_changed.join();
  EXPECT_EQ(failed.load(), 0u) << first_failure;
  EXPECT_GT(made.load(), 100u);
  EXPECT_EQ(bulk_back.bytes, uint64_t{1} << 30);
  EXPECT_EQ(bulk_back.hash, bulk_sent.hash);
  if (std::string(GetParam()) != "kernel") {
    // Every connection, on the rules the reloads changed and added too, went the fast path.
    const auto stats = fwd->Stats();
    EXPECT_EQ(ForwarderProcess::Get(stats, "kernel.accepted"), 0u) << fwd->output();
    EXPECT_GE(ForwarderProcess::Get(stats, "fast.accepted"), made.load() + 2);
    EXPECT_EQ(fwd->output().find("served by the kernel path"), std::string::npos) << fwd->output();
  }

  // A file that does not parse changes nothing.
  {
    std::ofstream f(config);
    f << "this is not a rule\n";
  }
  ASSERT_EQ(kill(fwd->pid(), SIGHUP), 0);
  ASSERT_TRUE(fwd->WaitForOutput("the running configuration stays in place", 10s)) << fwd->output();
  UniqueFd c = TcpConnect(topo_.client_ns(), topo_.client_gw(), kOpenPort);
  ReceiveWithin(c.get(), 10s);
  const StreamStats sent = SendPattern(c.get(), 3, 10);
  EXPECT_EQ(ReceiveAll(c.get()).bytes, sent.bytes);
  EXPECT_EQ(fwd->Stop(), 0);
}

INSTANTIATE_TEST_SUITE_P(Paths, ReloadTest, ::testing::Values("xdp", "auto", "kernel"),
                         [](const auto& p) { return std::string(p.param); });

// What a reload gives the fast path's running workers besides rules: global allow/deny lines,
// and a worker restarted after a reload serves the reloaded rules (it reads the shared table,
// not what it inherited). A rule the running workers cannot serve (a listen address on an
// interface the fast path did not attach) refuses the reload with --path xdp, and goes to the
// kernel path with auto.
TEST(ReloadIntoWorkers, AccessListsRestartsAndWhatTheyCannotTake) {
  if (geteuid() != 0) GTEST_SKIP() << "namespace tests need root";
  Topology topo;
  TempDir dir;
  const std::string config = dir.File("xdpfwd.conf");
  const std::string gw = ToString(topo.client_gw()), server = ToString(topo.server_addr());
  auto write = [&](const std::string& text) {
    std::ofstream f(config + ".new");
    f << text;
    f.close();
    std::filesystem::rename(config + ".new", config);
  };
  auto rule = [&](uint16_t port) {
    return gw + " " + std::to_string(port) + " " + server + " " + std::to_string(kBackendPort) +
           "\n";
  };
  auto echoes = [&](uint16_t port) {
    UniqueFd c = TcpConnect(topo.client_ns(), topo.client_gw(), port);
    const StreamStats sent = SendPattern(c.get(), port, 1000);
    const StreamStats got = ReceiveAll(c.get());
    return got.bytes == sent.bytes && got.hash == sent.hash;
  };
  EchoServer echo(TcpListen(topo.server_ns(), topo.server_addr(), kBackendPort));
  write(rule(kOpenPort));
  auto fwd = ForwarderProcess::WithConfig("xdp", config);
  ASSERT_TRUE(echoes(kOpenPort));

  // Not on an attached interface: refused as a whole, the running rules stay.
  write(rule(kOpenPort) + "127.0.0.1 " + std::to_string(kLoopbackPort) + " " + server + " " +
        std::to_string(kBackendPort) + "\n");
  std::string answer = fwd->Control("reload");
  EXPECT_NE(answer.find("error: --path xdp: "), std::string::npos) << answer;
  EXPECT_NE(answer.find("lo is not an interface the fast path attached"), std::string::npos)
      << answer;
  EXPECT_TRUE(echoes(kOpenPort));

  // A global deny line reaches the running worker: the client is closed without a byte.
  write("deny " + ToString(topo.client_addr()) + "\n" + rule(kOpenPort));
  answer = fwd->Control("reload");
  EXPECT_NE(answer.find("kept 1, changed 0"), std::string::npos) << answer;  // rules alike
  {
    UniqueFd c = TcpConnect(topo.client_ns(), topo.client_gw(), kOpenPort);
    EXPECT_TRUE(ClosedWithoutData(c.get(), 5s));
  }
  EXPECT_EQ(fwd->Relay(fwd->WaitForStats([&](const auto& s) { return fwd->Relay(s, "denied"); }),
                       "denied"),
            1u);

  // The deny goes, a rule comes; the worker is killed and its successor serves both.
  write(rule(kOpenPort) + rule(kDenyPort));
  answer = fwd->Control("reload");
  EXPECT_NE(answer.find("added 1"), std::string::npos) << answer;
  EXPECT_TRUE(echoes(kDenyPort));
  const pid_t worker = static_cast<pid_t>(ForwarderProcess::Get(fwd->Stats(), "worker.0.pid"));
  ASSERT_GT(worker, 0);
  ASSERT_EQ(kill(worker, SIGKILL), 0);
  ASSERT_TRUE(fwd->WaitForOutput("worker 0 serves its queues again", 20s)) << fwd->output();
  EXPECT_TRUE(echoes(kDenyPort)) << fwd->output();
  EXPECT_TRUE(echoes(kOpenPort)) << fwd->output();
  EXPECT_EQ(fwd->Stop(), 0);
}

// The same refusal with --path auto: the kernel path serves that rule, the fast path the rest.
TEST(ReloadIntoWorkers, AutoHandsWhatTheWorkersCannotTakeToTheKernelPath) {
  if (geteuid() != 0) GTEST_SKIP() << "namespace tests need root";
  Topology topo;
  TempDir dir;
  const std::string config = dir.File("xdpfwd.conf");
  const std::string gw = ToString(topo.client_gw()), server = ToString(topo.server_addr());
  EchoServer echo(TcpListen(topo.server_ns(), topo.server_addr(), kBackendPort));
  {
    std::ofstream f(config);
    f << gw << " " << kOpenPort << " " << server << " " << kBackendPort << "\n";
  }
  auto fwd = ForwarderProcess::WithConfig("auto", config);
  {
    std::ofstream f(config);
    f << gw << " " << kOpenPort << " " << server << " " << kBackendPort << "\n"
      << "127.0.0.1 " << kLoopbackPort << " " << server << " " << kBackendPort << "\n";
  }
  const std::string answer = fwd->Control("reload");
  EXPECT_NE(answer.find("added 1"), std::string::npos) << answer;
  EXPECT_NE(answer.find("lo is not an interface the fast path attached at its start: served by "
                        "the kernel path until a restart"),
            std::string::npos)
      << answer;
  // The kernel path's listener on the loopback address (in the root namespace, as xdpfwd).
  in_addr loopback{};
  ASSERT_EQ(inet_pton(AF_INET, "127.0.0.1", &loopback), 1);
  UniqueFd c = TcpConnect("", loopback, kLoopbackPort);
  const StreamStats sent = SendPattern(c.get(), 5, 1000);
  EXPECT_EQ(ReceiveAll(c.get()).hash, sent.hash);
  const auto stats = fwd->Stats();
  EXPECT_EQ(ForwarderProcess::Get(stats, "kernel.accepted"), 1u);
  EXPECT_EQ(fwd->Stop(), 0);
}

}  // namespace
}  // namespace xdpfwd::test
