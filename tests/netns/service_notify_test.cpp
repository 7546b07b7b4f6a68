// xdpfwd as a service, through the real binary: systemd's notify protocol (READY=1 once serving,
// RELOADING=1 with its MONOTONIC_USEC, STOPPING=1, STATUS=) read from a socket the test owns, on
// both paths.
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <functional>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "os/unique_fd.h"
#include "tests/netns/service_support.h"
#include "tests/support/child_process.h"
#include "tests/support/echo_server.h"
#include "tests/support/forwarder_process.h"
#include "tests/support/netns_topology.h"
#include "tests/support/tcp.h"

namespace xdpfwd::test {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

// The port a reload adds a rule for.
constexpr uint16_t kReloadedPort = 9001;

uint64_t MonotonicUsec() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1'000'000u + static_cast<uint64_t>(ts.tv_nsec) / 1000u;
}

// ---- systemd's notify socket, owned by the test ----

struct NotifyMessage {
  pid_t pid = 0;  // the sender, from the kernel's SCM_CREDENTIALS
  std::string text;

  bool Has(const std::string& assignment) const {
    std::istringstream in(text);
    for (std::string line; std::getline(in, line);)
      if (line == assignment) return true;
    return false;
  }
  std::optional<std::string> Get(const std::string& key) const {
    std::istringstream in(text);
    for (std::string line; std::getline(in, line);)
      if (line.rfind(key + "=", 0) == 0) return line.substr(key.size() + 1);
    return std::nullopt;
  }
};

class NotifySocket {
 public:
  explicit NotifySocket(std::string path) : path_(std::move(path)) {
    fd_.reset(socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0));
    sockaddr_un sa{};
    sa.sun_family = AF_UNIX;
    if (path_.size() >= sizeof(sa.sun_path)) throw std::runtime_error("notify path too long");
    std::memcpy(sa.sun_path, path_.c_str(), path_.size() + 1);
    const int one = 1;
    if (!fd_ || bind(fd_.get(), reinterpret_cast<sockaddr*>(&sa), sizeof(sa)) != 0 ||
        setsockopt(fd_.get(), SOL_SOCKET, SO_PASSCRED, &one, sizeof(one)) != 0) {
      throw std::runtime_error("notify socket " + path_ + ": " + std::strerror(errno));
    }
  }
  const std::string& path() const { return path_; }

  // Messages until one satisfies `match`; that one, or nullopt after `limit`. Every message
  // read is kept in seen().
  std::optional<NotifyMessage> WaitFor(const std::function<bool(const NotifyMessage&)>& match,
                                       std::chrono::milliseconds limit) {
    const auto deadline = std::chrono::steady_clock::now() + limit;
    while (std::chrono::steady_clock::now() < deadline) {
      auto m = Next(std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - std::chrono::steady_clock::now()));
      if (m && match(*m)) return m;
    }
    return std::nullopt;
  }
  // ... until one holds `assignment`, e.g. "READY=1".
  std::optional<NotifyMessage> WaitFor(const std::string& assignment,
                                       std::chrono::milliseconds limit) {
    return WaitFor([&](const NotifyMessage& m) { return m.Has(assignment); }, limit);
  }
  const std::vector<NotifyMessage>& seen() const { return seen_; }
  std::string Transcript() const {
    std::string t;
    for (const auto& m : seen_) t += "[pid " + std::to_string(m.pid) + "] " + m.text + "\n---\n";
    return t.empty() ? "(no message)\n" : t;
  }

 private:
  std::optional<NotifyMessage> Next(std::chrono::milliseconds limit) {
    pollfd p{fd_.get(), POLLIN, 0};
    if (poll(&p, 1, static_cast<int>(std::max<int64_t>(limit.count(), 0))) != 1)
      return std::nullopt;
    char buf[4096];
    alignas(cmsghdr) char control[CMSG_SPACE(sizeof(ucred))];
    iovec iov{buf, sizeof(buf)};
    msghdr msg{};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control;
    msg.msg_controllen = sizeof(control);
    const ssize_t n = recvmsg(fd_.get(), &msg, MSG_DONTWAIT);
    if (n < 0) return std::nullopt;
    NotifyMessage m;
    m.text.assign(buf, static_cast<size_t>(n));
    for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr; c = CMSG_NXTHDR(&msg, c)) {
      if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_CREDENTIALS) {
        ucred cred;
        std::memcpy(&cred, CMSG_DATA(c), sizeof(cred));
        m.pid = cred.pid;
      }
    }
    seen_.push_back(m);
    return m;
  }

  std::string path_;
  UniqueFd fd_;
  std::vector<NotifyMessage> seen_;
};

class ServiceNotifyTest : public ::testing::TestWithParam<const char*> {
 protected:
  void SetUp() override {
    if (geteuid() != 0) GTEST_SKIP() << "namespace tests need root";
    topo_.emplace();
    echo_.emplace(TcpListen(topo_->server_ns(), topo_->server_addr(), kBackendPort));
    dir_.emplace();
    config_ = dir_->path() + "/xdpfwd.conf";
    WriteFile(config_, Rule(*topo_, kPort), fs::perms(0644));
    notify_.emplace(dir_->path() + "/notify");
  }
  // xdpfwd -c <config> on this test's path, with NOTIFY_SOCKET as systemd sets it.
  ChildProcess& Start() {
    fwd_.emplace(std::vector<std::string>{"/usr/bin/env", "NOTIFY_SOCKET=" + notify_->path(),
                                          ForwarderProcess::BinaryPath(), "--path", GetParam(),
                                          "-c", config_});
    return *fwd_;
  }
  // The reload tests run for real once the control loop reloads; until then xdpfwd has no
  // "xdpfwd: reload:" line and SIGHUP only reopens the access log.
  bool ReloadMissing() {
    fwd_->WaitForLine("xdpfwd: reload:", 2s);
    return fwd_->output().find("xdpfwd: reload:") == std::string::npos;
  }

  // Destroyed in reverse: the forwarder before the topology it uses.
  std::optional<Topology> topo_;
  std::optional<EchoServer> echo_;
  std::optional<TempDir> dir_;
  std::string config_;
  std::optional<NotifySocket> notify_;
  std::optional<ChildProcess> fwd_;
};

TEST_P(ServiceNotifyTest, ReadyWithStatusOnceServingAndStoppingOnSigterm) {
  ChildProcess& fwd = Start();
  const auto ready = notify_->WaitFor("READY=1", 15s);
  ASSERT_TRUE(ready) << notify_->Transcript() << OutputSoFar(fwd);
  // NotifyAccess=main: systemd takes messages from the main process only, not from a worker.
  EXPECT_EQ(ready->pid, fwd.pid());
  const auto status = ready->Get("STATUS");
  ASSERT_TRUE(status) << ready->text;
  EXPECT_NE(status->find("path=" + std::string(GetParam())), std::string::npos) << *status;
  // READY=1 means serving: the first connection after it is relayed, no wait in between.
  EXPECT_TRUE(Echoes(*topo_, kPort));

  fwd.Signal(SIGTERM);
  const auto stopping = notify_->WaitFor("STOPPING=1", 10s);
  ASSERT_TRUE(stopping) << notify_->Transcript() << OutputSoFar(fwd);
  EXPECT_EQ(stopping->pid, fwd.pid());
  EXPECT_EQ(fwd.Wait(60s), 0) << fwd.output();
}

TEST_P(ServiceNotifyTest, ReloadSendsReloadingWithMonotonicUsecThenReady) {
  ChildProcess& fwd = Start();
  ASSERT_TRUE(notify_->WaitFor("READY=1", 15s)) << notify_->Transcript() << OutputSoFar(fwd);
  // Both paths take the added rule (the fast path into its running workers).
  WriteFile(config_, Rule(*topo_, kPort) + Rule(*topo_, kReloadedPort), fs::perms(0644));

  const uint64_t before = MonotonicUsec();
  fwd.Signal(SIGHUP);
  const auto reloading = notify_->WaitFor("RELOADING=1", 10s);
  if (!reloading && ReloadMissing()) GTEST_SKIP() << "no reload in xdpfwd yet:\n" << fwd.output();
  ASSERT_TRUE(reloading) << notify_->Transcript() << OutputSoFar(fwd);
  EXPECT_EQ(reloading->pid, fwd.pid());
  // systemd matches the message with the reload it asked for by this CLOCK_MONOTONIC time.
  const auto usec = reloading->Get("MONOTONIC_USEC");
  ASSERT_TRUE(usec) << reloading->text;
  EXPECT_GE(std::stoull(*usec), before);
  EXPECT_LE(std::stoull(*usec), MonotonicUsec());

  const auto ready = notify_->WaitFor("READY=1", 15s);
  ASSERT_TRUE(ready) << notify_->Transcript() << OutputSoFar(fwd);
  EXPECT_EQ(ready->pid, fwd.pid());
  // READY=1 after a reload means the new rules serve.
  EXPECT_EQ(ready->Get("STATUS").value_or("").find("refused"), std::string::npos) << ready->text;
  EXPECT_TRUE(Echoes(*topo_, kReloadedPort)) << ready->text << OutputSoFar(fwd);
  EXPECT_TRUE(Echoes(*topo_, kPort)) << OutputSoFar(fwd);
  fwd.Signal(SIGTERM);
  EXPECT_EQ(fwd.Wait(60s), 0) << fwd.output();
}

TEST_P(ServiceNotifyTest, FailedReloadSendsStatusAndKeepsServing) {
  ChildProcess& fwd = Start();
  ASSERT_TRUE(notify_->WaitFor("READY=1", 15s)) << notify_->Transcript() << OutputSoFar(fwd);
  const size_t before = notify_->seen().size();
  WriteFile(config_, "this is not a rule\n", fs::perms(0644));
  fwd.Signal(SIGHUP);

  // The reason names the file (configuration errors are FILE:LINE:COLUMN: ...).
  const auto status = notify_->WaitFor(
      [&](const NotifyMessage& m) {
        const auto text = m.Get("STATUS");
        return text && text->find(config_) != std::string::npos;
      },
      10s);
  if (!status && ReloadMissing()) GTEST_SKIP() << "no reload in xdpfwd yet:\n" << fwd.output();
  ASSERT_TRUE(status) << notify_->Transcript() << OutputSoFar(fwd);
  EXPECT_EQ(status->pid, fwd.pid());
  // A manager in its reloading state leaves it only on READY=1, failed reload or not.
  bool reloading = false, ready_after = false;
  for (size_t i = before; i < notify_->seen().size(); ++i) {
    reloading = reloading || notify_->seen()[i].Has("RELOADING=1");
    ready_after = ready_after || (reloading && notify_->seen()[i].Has("READY=1"));
  }
  if (reloading && !ready_after) ready_after = notify_->WaitFor("READY=1", 5s).has_value();
  EXPECT_TRUE(!reloading || ready_after) << notify_->Transcript();
  EXPECT_TRUE(Echoes(*topo_, kPort)) << "the running rules stay\n" << OutputSoFar(fwd);
  fwd.Signal(SIGTERM);
  EXPECT_EQ(fwd.Wait(60s), 0) << fwd.output();
}

INSTANTIATE_TEST_SUITE_P(Paths, ServiceNotifyTest, ::testing::Values("xdp", "kernel"),
                         [](const auto& p) { return std::string(p.param); });

// A NOTIFY_SOCKET nobody listens on (a manager gone) is no reason not to serve.
TEST(ServiceNotifyDeadSocketTest, ServesWhenTheNotifySocketIsGone) {
  if (geteuid() != 0) GTEST_SKIP() << "namespace tests need root";
  Topology topo;
  EchoServer echo(TcpListen(topo.server_ns(), topo.server_addr(), kBackendPort));
  TempDir dir;
  const std::string config = dir.path() + "/xdpfwd.conf";
  WriteFile(config, Rule(topo, kPort), fs::perms(0644));
  ChildProcess fwd({"/usr/bin/env", "NOTIFY_SOCKET=" + dir.path() + "/gone",
                    ForwarderProcess::BinaryPath(), "--path", "kernel", "-c", config});
  ASSERT_TRUE(fwd.WaitForLine("xdpfwd: ready:", 15s)) << fwd.output();
  EXPECT_TRUE(Echoes(topo, kPort));
  fwd.Signal(SIGTERM);
  EXPECT_EQ(fwd.Wait(60s), 0) << fwd.output();
}

}  // namespace
}  // namespace xdpfwd::test
