// xdpfwd as a service, through the real binary: systemd's notify protocol read from a socket the
// test owns, the unit's capabilities held by an unprivileged user on both paths (and each one of
// them shown to be needed), the unit accepted by systemd-analyze, the man pages rendered without
// a warning, the example configuration, and what `cmake --install` and `cpack -G DEB` produce.
#include <gtest/gtest.h>
#include <linux/capability.h>
#include <poll.h>
#include <pwd.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "os/endpoint.h"
#include "os/unique_fd.h"
#include "tests/support/child_process.h"
#include "tests/support/echo_server.h"
#include "tests/support/forwarder_process.h"
#include "tests/support/netns_topology.h"
#include "tests/support/tcp.h"

namespace xdpfwd::test {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

// Ports inside this test's own topology only. kPrivilegedPort is below 1024, so that a kernel
// path listener on it needs CAP_NET_BIND_SERVICE.
constexpr uint16_t kPort = 9000, kReloadedPort = 9001, kPrivilegedPort = 990;
constexpr uint16_t kBackendPort = 9100;

const std::string kUnitFile = XDPFWD_UNIT_FILE;
const std::string kExampleConfig = XDPFWD_EXAMPLE_CONFIG;
const std::string kManDir = XDPFWD_MAN_DIR;
const std::string kBuildDir = XDPFWD_BUILD_DIR;

std::string ReadFile(const std::string& path) {
  std::ifstream f(path);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

void WriteFile(const std::string& path, const std::string& text, fs::perms mode) {
  std::ofstream(path) << text;
  fs::permissions(path, mode);
}

// A program on PATH (or in the sbin directories a root PATH has), as a full path; empty if none.
std::string FindProgram(const std::string& name) {
  std::string path = std::getenv("PATH") ? std::getenv("PATH") : "";
  path += ":/usr/sbin:/sbin:/usr/bin:/bin";
  std::istringstream dirs(path);
  for (std::string dir; std::getline(dirs, dir, ':');) {
    const std::string candidate = dir + "/" + name;
    if (!dir.empty() && access(candidate.c_str(), X_OK) == 0) return candidate;
  }
  return "";
}

// `sh -c script` with the arguments as $1...; what it wrote and its exit code.
RunResult Shell(const std::string& script, const std::vector<std::string>& args = {},
                std::chrono::milliseconds timeout = 60s) {
  std::vector<std::string> argv{"/bin/sh", "-c", script, "sh"};
  argv.insert(argv.end(), args.begin(), args.end());
  return RunProgram(argv, timeout);
}

// `text` with every `from` replaced by `to`. (No std::regex: GCC 12's, under the sanitizer
// build's flags, trips -Wmaybe-uninitialized inside libstdc++.)
std::string ReplaceAll(std::string text, const std::string& from, const std::string& to) {
  for (size_t at = text.find(from); at != std::string::npos; at = text.find(from, at + to.size()))
    text.replace(at, from.size(), to);
  return text;
}

uint64_t MonotonicUsec() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1'000'000u + static_cast<uint64_t>(ts.tv_nsec) / 1000u;
}

// ---- The unit file, as systemd reads the lines this test cares about ----

struct Unit {
  // [Section] -> its Key=Value lines in order (a key may repeat: ExecReload).
  std::map<std::string, std::vector<std::pair<std::string, std::string>>> sections;

  static Unit Read(const std::string& path) {
    Unit unit;
    std::istringstream in(ReadFile(path));
    std::string section;
    for (std::string line; std::getline(in, line);) {
      if (line.empty() || line[0] == '#' || line[0] == ';') continue;
      if (line[0] == '[') {
        section = line.substr(1, line.find(']') - 1);
        continue;
      }
      const size_t eq = line.find('=');
      if (eq != std::string::npos)
        unit.sections[section].emplace_back(line.substr(0, eq), line.substr(eq + 1));
    }
    return unit;
  }
  std::vector<std::string> All(const std::string& key) const {
    std::vector<std::string> values;
    auto it = sections.find("Service");
    if (it == sections.end()) return values;
    for (const auto& [k, v] : it->second)
      if (k == key) values.push_back(v);
    return values;
  }
  std::string Get(const std::string& key) const {
    const auto values = All(key);
    return values.empty() ? "" : values.back();
  }
  std::vector<std::string> Words(const std::string& key) const {
    std::vector<std::string> words;
    std::istringstream in(Get(key));
    for (std::string w; in >> w;) words.push_back(w);
    return words;
  }
};

// Capability names as the unit writes them, and their bits (linux/capability.h).
const std::map<std::string, int>& CapabilityBits() {
  static const std::map<std::string, int> bits{
      {"CAP_NET_BIND_SERVICE", CAP_NET_BIND_SERVICE},
      {"CAP_NET_ADMIN", CAP_NET_ADMIN},
      {"CAP_NET_RAW", CAP_NET_RAW},
      {"CAP_IPC_LOCK", CAP_IPC_LOCK},
      {"CAP_SYS_ADMIN", CAP_SYS_ADMIN},
      {"CAP_PERFMON", CAP_PERFMON},
      {"CAP_BPF", CAP_BPF},
  };
  return bits;
}

// setpriv's list for a set of capabilities: "-all,+net_admin,+bpf".
std::string SetprivCaps(const std::vector<std::string>& caps) {
  std::string list = "-all";
  for (const std::string& c : caps) {
    std::string name = c.substr(4);  // without CAP_
    for (char& ch : name) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
    list += ",+" + name;
  }
  return list;
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

// What the child has written so far, read for a moment longer: for failure messages.
std::string OutputSoFar(ChildProcess& child) {
  child.WaitForLine("\x01(no such line)", 300ms);
  return child.output();
}

// A client in the topology's client namespace gets its bytes back through listen port `port`.
::testing::AssertionResult Echoes(const Topology& topo, uint16_t port) {
  try {
    UniqueFd c = TcpConnect(topo.client_ns(), topo.client_gw(), port);
    if (send(c.get(), "hello", 5, MSG_NOSIGNAL) != 5)
      return ::testing::AssertionFailure() << "send";
    shutdown(c.get(), SHUT_WR);
    const StreamStats got = ReceiveAll(c.get());
    Fnv1a want;
    want.Update("hello", 5);
    if (got.bytes != 5 || got.hash != want.value())
      return ::testing::AssertionFailure() << "port " << port << ": " << got.bytes << " bytes back";
    return ::testing::AssertionSuccess();
  } catch (const std::exception& e) {
    return ::testing::AssertionFailure() << "port " << port << ": " << e.what();
  }
}

// A private directory that an unprivileged user can read (the binary, the configuration).
class TempDir {
 public:
  TempDir() {
    char tmpl[] = "/tmp/xdpfwd-unit-XXXXXX";
    if (mkdtemp(tmpl) == nullptr) throw std::runtime_error("mkdtemp");
    path_ = tmpl;
    fs::permissions(path_, fs::perms(0755));
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

std::string Rule(const Topology& topo, uint16_t port) {
  return ToString(topo.client_gw()) + " " + std::to_string(port) + " " +
         ToString(topo.server_addr()) + " " + std::to_string(kBackendPort) + "\n";
}

// ---- Notify protocol ----

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

// ---- Capabilities: the unit's set, held by nobody ----

class UnitCapabilitiesTest : public ::testing::TestWithParam<const char*> {
 protected:
  void SetUp() override {
    if (geteuid() != 0) GTEST_SKIP() << "namespace tests and setpriv need root";
    for (const char* tool : {"setpriv", "prlimit"})
      if (FindProgram(tool).empty()) GTEST_SKIP() << tool << " (util-linux) is not installed";
    unit_ = Unit::Read(kUnitFile);
    caps_ = unit_.Words("AmbientCapabilities");
    ASSERT_FALSE(caps_.empty()) << kUnitFile << ": no AmbientCapabilities=";
    ASSERT_EQ(caps_, unit_.Words("CapabilityBoundingSet"))
        << "the bounding set should hold exactly the ambient capabilities";
    for (const std::string& c : caps_)
      ASSERT_TRUE(CapabilityBits().count(c)) << c << " is not one this test knows";
    const passwd* nobody = getpwnam("nobody");
    ASSERT_NE(nobody, nullptr);
    nobody_uid_ = nobody->pw_uid;
    topo_.emplace();
    echo_.emplace(TcpListen(topo_->server_ns(), topo_->server_addr(), kBackendPort));
    dir_.emplace();
    // A copy nobody can execute wherever the build tree lives.
    binary_ = dir_->path() + "/xdpfwd";
    fs::copy_file(ForwarderProcess::BinaryPath(), binary_);
    fs::permissions(binary_, fs::perms(0755));
  }

  // The unit's LimitMEMLOCK= and LimitNOFILE= as prlimit options, those this process may set:
  // raising a hard limit needs CAP_SYS_RESOURCE, which a container's root may lack. The rest
  // are reported; the capability set does not depend on them (CAP_IPC_LOCK ignores
  // RLIMIT_MEMLOCK, and the kernel path only lowers its ambition to the open-file limit).
  std::vector<std::string> UnitLimits() {
    std::vector<std::string> args{FindProgram("prlimit")};  // alone, it runs the command as is
    for (const auto& [key, option] :
         {std::pair<std::string, std::string>{"LimitMEMLOCK", "memlock"},
          {"LimitNOFILE", "nofile"}}) {
      std::string value = unit_.Get(key);
      if (value.empty()) continue;
      if (value == "infinity") value = "unlimited";
      const std::string arg = "--" + option + "=" + value + ":" + value;
      if (RunProgram({args[0], arg, "/bin/true"}).status == 0) {
        args.push_back(arg);
      } else {
        std::printf("note: %s=%s not applied: this process may not raise that hard limit\n",
                    key.c_str(), unit_.Get(key).c_str());
      }
    }
    return args;
  }

  // [prlimit...] setpriv (nobody, exactly `caps`) -- xdpfwd --path <path> -c <file>.
  std::vector<std::string> Command(const std::vector<std::string>& limits,
                                   const std::vector<std::string>& caps, const std::string& path,
                                   const std::string& config) {
    std::vector<std::string> argv = limits;
    const std::string list = SetprivCaps(caps);
    argv.insert(argv.end(),
                {FindProgram("setpriv"), "--reuid=nobody", "--regid=nogroup", "--clear-groups",
                 "--inh-caps=" + list, "--ambient-caps=" + list, "--bounding-set=" + list});
    if (unit_.Get("NoNewPrivileges") == "yes") argv.push_back("--no-new-privs");
    argv.insert(argv.end(), {"--", binary_, "--path", path, "-c", config});
    return argv;
  }

  std::string WriteConfig(const std::string& name, uint16_t port) {
    const std::string config = dir_->path() + "/" + name;
    WriteFile(config, Rule(*topo_, port), fs::perms(0644));
    return config;
  }

  Unit unit_;
  std::vector<std::string> caps_;
  uid_t nobody_uid_ = 0;
  std::optional<Topology> topo_;
  std::optional<EchoServer> echo_;
  std::optional<TempDir> dir_;
  std::string binary_;
};

// The process's Uid: and CapEff: lines.
std::pair<uid_t, uint64_t> Credentials(pid_t pid) {
  std::istringstream in(ReadFile("/proc/" + std::to_string(pid) + "/status"));
  uid_t uid = 0;
  uint64_t eff = 0;
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("Uid:", 0) == 0) uid = static_cast<uid_t>(std::stoul(line.substr(4)));
    if (line.rfind("CapEff:", 0) == 0) eff = std::stoull(line.substr(7), nullptr, 16);
  }
  return {uid, eff};
}

TEST_P(UnitCapabilitiesTest, ForwardsAsNobodyWithExactlyTheUnitsCapabilities) {
  // A port below 1024: the kernel path's listener needs CAP_NET_BIND_SERVICE for it.
  const std::string config = WriteConfig("xdpfwd.conf", kPrivilegedPort);
  ChildProcess fwd(Command(UnitLimits(), caps_, GetParam(), config));
  ASSERT_TRUE(fwd.WaitForLine("xdpfwd: ready:", 15s)) << fwd.output();
  uint64_t want = 0;
  for (const std::string& c : caps_) want |= uint64_t{1} << CapabilityBits().at(c);
  const auto [uid, eff] = Credentials(fwd.pid());
  EXPECT_EQ(uid, nobody_uid_);
  EXPECT_EQ(eff, want) << std::hex << "CapEff " << eff << ", the unit's " << want;
  EXPECT_TRUE(Echoes(*topo_, kPrivilegedPort)) << OutputSoFar(fwd);
  fwd.Signal(SIGTERM);
  EXPECT_EQ(fwd.Wait(60s), 0) << fwd.output();
}

INSTANTIATE_TEST_SUITE_P(Paths, UnitCapabilitiesTest, ::testing::Values("xdp", "kernel"),
                         [](const auto& p) { return std::string(p.param); });

// The set is the smallest: without any one of its capabilities, a start that needs it fails
// (exit 1) and says why. docs/operations.md has the measurement this repeats.
class UnitCapabilitiesMinimalTest : public UnitCapabilitiesTest {};

TEST_P(UnitCapabilitiesMinimalTest, EachCapabilityOfTheUnitIsNeeded) {
  // Which start shows a capability to be needed, and what xdpfwd says without it (one of).
  struct Need {
    const char* path;
    uint16_t port;
    std::vector<std::string> says;
  };
  const std::map<std::string, Need> needs{
      {"CAP_NET_ADMIN", {"xdp", kPort, {"Operation not permitted"}}},     // XSKMAP, XDP attach
      {"CAP_NET_RAW", {"xdp", kPort, {"creating the AF_XDP socket"}}},    // AF_XDP socket
      {"CAP_BPF", {"xdp", kPort, {"loading the steering program"}}},      // bpf(2)
      {"CAP_PERFMON", {"xdp", kPort, {"loading the steering program"}}},  // the verifier
      // mlock(2) first; under ASan, whose mlock does nothing, the UMEM registration, which
      // the kernel charges to the same limit (ENOBUFS).
      {"CAP_IPC_LOCK", {"xdp", kPort, {"locking UMEM", "registering the UMEM"}}},
      {"CAP_NET_BIND_SERVICE", {"kernel", kPrivilegedPort, {"Permission denied"}}},
  };
  const std::string cap = GetParam();
  if (std::find(caps_.begin(), caps_.end(), cap) == caps_.end())
    GTEST_SKIP() << cap << " is not in the unit";
  const Need& need = needs.at(cap);
  std::vector<std::string> without;
  for (const std::string& c : caps_)
    if (c != cap) without.push_back(c);
  // CAP_IPC_LOCK: its alternative is a locked-memory limit above what the frame areas take
  // (LimitMEMLOCK=infinity). Shown here at 8 MiB, Debian's default, well below the 32 MiB of
  // one AF_XDP socket's frames.
  std::vector<std::string> limits{FindProgram("prlimit"), "--memlock=8388608:8388608"};
  const std::string config = WriteConfig("xdpfwd.conf", need.port);
  ChildProcess fwd(Command(limits, without, need.path, config));
  const auto code = fwd.Wait(30s);
  ASSERT_TRUE(code) << "started without " << cap << ":\n" << fwd.output();
  EXPECT_EQ(*code, 1) << fwd.output();
  EXPECT_EQ(fwd.output().find("xdpfwd: ready:"), std::string::npos) << fwd.output();
  EXPECT_TRUE(std::any_of(need.says.begin(), need.says.end(), [&](const std::string& s) {
    return fwd.output().find(s) != std::string::npos;
  })) << fwd.output();
  RecordProperty("without_" + cap, fwd.output());
}

INSTANTIATE_TEST_SUITE_P(Capabilities, UnitCapabilitiesMinimalTest,
                         ::testing::Values("CAP_NET_ADMIN", "CAP_NET_RAW", "CAP_BPF", "CAP_PERFMON",
                                           "CAP_IPC_LOCK", "CAP_NET_BIND_SERVICE"),
                         [](const auto& p) { return std::string(p.param); });

// Every capability the unit holds is one the test above shows to be needed.
TEST(UnitFileTest, HoldsNoCapabilityWithoutAMeasuredNeed) {
  const std::set<std::string> measured{"CAP_NET_ADMIN", "CAP_NET_RAW",  "CAP_BPF",
                                       "CAP_PERFMON",   "CAP_IPC_LOCK", "CAP_NET_BIND_SERVICE"};
  for (const std::string& c : Unit::Read(kUnitFile).Words("AmbientCapabilities"))
    EXPECT_TRUE(measured.count(c)) << c << ": measure its need (docs/operations.md) or drop it";
}

// ---- The unit file itself ----

TEST(UnitFileTest, NotifyReloadThatChecksFirstAndLimits) {
  const Unit unit = Unit::Read(kUnitFile);
  EXPECT_EQ(unit.Get("Type"), "notify");
  const std::string start = unit.Get("ExecStart");
  EXPECT_EQ(start, "/usr/sbin/xdpfwd -c /etc/xdpfwd.conf");
  // The file is checked first; systemd runs the next ExecReload= only if that exits 0.
  const auto reload = unit.All("ExecReload");
  ASSERT_EQ(reload.size(), 2u);
  EXPECT_EQ(reload[0], "/usr/sbin/xdpfwd -t -c /etc/xdpfwd.conf");
  EXPECT_EQ(reload[1], "/bin/kill -HUP $MAINPID");
  EXPECT_EQ(unit.Get("NoNewPrivileges"), "yes");
  EXPECT_EQ(unit.Get("LimitMEMLOCK"), "infinity");
  EXPECT_FALSE(unit.Get("LimitNOFILE").empty());
  // SIGTERM to the control process alone: it drains and stops its workers itself.
  EXPECT_EQ(unit.Get("KillMode"), "mixed");
}

TEST(UnitFileTest, SystemdAnalyzeVerifyAcceptsIt) {
  const std::string analyze = FindProgram("systemd-analyze");
  if (analyze.empty()) GTEST_SKIP() << "systemd-analyze is not installed";
  // The unit as the package installs it, with its two paths pointing at this build and a
  // configuration file; Documentation= found through MANPATH in a man tree of the pages.
  TempDir dir;
  std::string text = ReadFile(kUnitFile);
  text = ReplaceAll(text, "/usr/sbin/xdpfwd", ForwarderProcess::BinaryPath());
  text = ReplaceAll(text, "/etc/xdpfwd.conf", dir.path() + "/xdpfwd.conf");
  WriteFile(dir.path() + "/xdpfwd.service", text, fs::perms(0644));
  WriteFile(dir.path() + "/xdpfwd.conf", "127.0.0.1 9000 127.0.0.1 9001\n", fs::perms(0644));
  for (const auto& [section, page] :
       {std::pair<std::string, std::string>{"8", "xdpfwd.8"}, {"5", "xdpfwd.conf.5"}}) {
    fs::create_directories(dir.path() + "/man/man" + section);
    fs::copy_file(kManDir + "/" + page, dir.path() + "/man/man" + section + "/" + page);
  }
  // Without man-db there is nothing to look the pages up with: that check is left out.
  const std::string man = FindProgram("man").empty() ? "--man=no" : "--man=yes";
  const RunResult r = Shell("MANPATH=\"$1\" \"$2\" verify \"$3\" \"$4\" 2>&1",
                            {dir.path() + "/man", analyze, man, dir.path() + "/xdpfwd.service"});
  EXPECT_EQ(r.status, 0) << r.output;
  EXPECT_EQ(r.output, "") << "systemd-analyze has remarks";
}

// ---- Man pages ----

class ManPageTest : public ::testing::TestWithParam<const char*> {};

TEST_P(ManPageTest, RendersWithoutWarnings) {
  if (FindProgram("man").empty()) GTEST_SKIP() << "man (man-db) is not installed";
  const std::string page = kManDir + "/" + GetParam();
  // Only what man and groff write to stderr comes back.
  const RunResult r = Shell("MANWIDTH=80 man --warnings -l \"$1\" 2>&1 >/dev/null", {page});
  EXPECT_EQ(r.status, 0) << r.output;
  EXPECT_EQ(r.output, "") << page << " has warnings";
  const RunResult text = Shell("MANWIDTH=80 man -l \"$1\" 2>/dev/null", {page});
  for (const char* section : {"NAME", "SYNOPSIS", "DESCRIPTION", "FILES", "EXAMPLES", "SEE ALSO"})
    EXPECT_NE(text.output.find(std::string("\n") + section + "\n"), std::string::npos) << section;
}

INSTANTIATE_TEST_SUITE_P(Pages, ManPageTest, ::testing::Values("xdpfwd.8", "xdpfwd.conf.5"),
                         [](const auto& p) {
                           std::string name = p.param;
                           std::replace(name.begin(), name.end(), '.', '_');
                           return name;
                         });

TEST(ManPageContentTest, Xdpfwd8HasEveryOptionOfHelpAndTheSections) {
  const RunResult help = RunProgram({ForwarderProcess::BinaryPath(), "--help"});
  ASSERT_EQ(help.status, 0);
  // The roff source with its escaped hyphens plain: "\-\-path" reads "--path".
  const std::string page = ReplaceAll(ReadFile(kManDir + "/xdpfwd.8"), "\\-", "-");
  // Options: words of the help text that start with "-" and a letter ("--path", "-t,"), up to
  // the first character that cannot be part of an option name.
  std::set<std::string> options;
  std::istringstream words(help.output);
  for (std::string w; words >> w;) {
    if (w.size() < 2 || w[0] != '-' ||
        !std::isalpha(static_cast<unsigned char>(w[w[1] == '-' ? 2 : 1])))
      continue;
    const size_t end = w.find_first_not_of("-abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ");
    options.insert(w.substr(0, end));
  }
  ASSERT_GT(options.size(), 20u) << help.output;
  for (const std::string& o : options)
    EXPECT_NE(page.find(o), std::string::npos) << o << " from --help is not in xdpfwd(8)";
  for (const char* section : {"OPTIONS", "PATHS", "SIGNALS", "EXIT STATUS", "SEE ALSO"})
    EXPECT_NE(page.find(std::string(".SH ") + section), std::string::npos) << section;
  for (const char* signal : {"SIGHUP", "SIGUSR1", "SIGTERM", "SIGINT"})
    EXPECT_NE(page.find(signal), std::string::npos) << signal;
}

// ---- The example configuration ----

TEST(ExampleConfigTest, ChecksOnceItsExamplesAreUncommented) {
  // As shipped every rule is an example: xdpfwd refuses to start until one is written.
  const RunResult shipped =
      RunProgram({ForwarderProcess::BinaryPath(), "-t", "-c", kExampleConfig});
  EXPECT_EQ(shipped.status, 2) << shipped.output;
  EXPECT_NE(shipped.output.find("expected at least one rule"), std::string::npos) << shipped.output;
  // Its examples ("#word", not "# prose") form a valid file.
  TempDir dir;
  std::string text;
  std::istringstream lines(ReadFile(kExampleConfig));
  for (std::string line; std::getline(lines, line);)
    text += (line.size() > 1 && line[0] == '#' && line[1] != ' ' ? line.substr(1) : line) + "\n";
  WriteFile(dir.path() + "/xdpfwd.conf", text, fs::perms(0644));
  const RunResult r =
      RunProgram({ForwarderProcess::BinaryPath(), "-t", "-c", dir.path() + "/xdpfwd.conf"});
  EXPECT_EQ(r.status, 0) << text << r.output;
}

// ---- Installing ----

// What `cmake --install` and the .deb put in place, as absolute paths under the prefix this
// build was configured with (the top-level CMakeLists.txt passes them).
std::vector<std::string> InstalledFiles() {
  const std::string sbin = XDPFWD_INSTALL_SBINDIR, man = XDPFWD_INSTALL_MANDIR;
  return {sbin + "/xdpfwd",    sbin + "/xdpfwd-xdp",      XDPFWD_INSTALL_UNIT,
          XDPFWD_INSTALL_CONF, man + "/man8/xdpfwd.8.gz", man + "/man5/xdpfwd.conf.5.gz"};
}

TEST(InstallTest, CmakeInstallPutsEveryFileInPlace) {
  TempDir root;
  const RunResult r =
      Shell("DESTDIR=\"$1\" \"$2\" --install \"$3\" 2>&1", {root.path(), XDPFWD_CMAKE, kBuildDir});
  ASSERT_EQ(r.status, 0) << r.output;
  const std::string sbin = root.path() + XDPFWD_INSTALL_SBINDIR;
  for (const std::string& file : InstalledFiles()) {
    EXPECT_TRUE(fs::exists(root.path() + file)) << file << "\n" << r.output;
  }
  // The installed unit names the installed binary and configuration file.
  const Unit unit = Unit::Read(root.path() + XDPFWD_INSTALL_UNIT);
  EXPECT_EQ(unit.Get("ExecStart"),
            std::string(XDPFWD_INSTALL_SBINDIR) + "/xdpfwd -c " + XDPFWD_INSTALL_CONF);
  const RunResult version = RunProgram({sbin + "/xdpfwd", "--version"});
  EXPECT_EQ(version.status, 0) << version.output;
}

TEST(InstallTest, DebDeclaresItsDependenciesAndHoldsTheFiles) {
  const std::string dpkg_deb = FindProgram("dpkg-deb");
  if (dpkg_deb.empty() || FindProgram("dpkg-shlibdeps").empty())
    GTEST_SKIP() << "dpkg-deb or dpkg-shlibdeps (dpkg-dev) is not installed";
  TempDir out;
  const RunResult r = Shell("\"$1\" -G DEB --config \"$2/CPackConfig.cmake\" -B \"$3\" 2>&1",
                            {XDPFWD_CPACK, kBuildDir, out.path()}, 180s);
  ASSERT_EQ(r.status, 0) << r.output;
  std::string deb;
  for (const auto& e : fs::directory_iterator(out.path()))
    if (e.path().extension() == ".deb") deb = e.path();
  ASSERT_FALSE(deb.empty()) << r.output;

  const RunResult depends = RunProgram({dpkg_deb, "-f", deb, "Depends"});
  for (const char* lib : {"libbpf1", "libsystemd0", "libc6", "libstdc++6"})
    EXPECT_NE(depends.output.find(lib), std::string::npos) << lib << " in " << depends.output;
  const RunResult info = RunProgram({dpkg_deb, "-I", deb});
  for (const char* field :
       {"Package: xdpfwd", "Section: net", "Maintainer:", "conffiles", "postinst", "postrm"})
    EXPECT_NE(info.output.find(field), std::string::npos) << field << "\n" << info.output;
  const RunResult files = RunProgram({dpkg_deb, "-c", deb});
  for (const std::string& path : InstalledFiles()) {
    EXPECT_NE(files.output.find(" ." + path + "\n"), std::string::npos) << path << "\n"
                                                                        << files.output;
  }
}

}  // namespace
}  // namespace xdpfwd::test
