// The unit's capabilities held by an unprivileged user (nobody, through setpriv), on both paths:
// xdpfwd forwards with exactly that set, each capability of it is shown to be needed, and the
// unit holds none without such a measurement.
#include <gtest/gtest.h>
#include <linux/capability.h>
#include <pwd.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

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

// Below 1024, so that a kernel path listener on it needs CAP_NET_BIND_SERVICE.
constexpr uint16_t kPrivilegedPort = 990;

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

}  // namespace
}  // namespace xdpfwd::test
