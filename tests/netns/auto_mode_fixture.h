// The --path auto namespace tests' shared part: the real xdpfwd binary in auto mode on a
// test's own topology (AutoForwarder), an echo backend, IPv6 addresses on the veths, foreign
// XDP programs, kernel connections made before xdpfwd starts, and the fixture.
#pragma once

#include <fcntl.h>
#include <gtest/gtest.h>
#include <net/if.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <future>
#include <map>
#include <optional>
#include <sstream>
#include <thread>
#include <tuple>
#include <vector>

#include "tests/support/child_process.h"
#include "tests/support/echo_server.h"
#include "tests/support/forwarder_process.h"
#include "tests/support/lossy_counters.h"
#include "tests/support/netns_topology.h"
#include "tests/support/tcp.h"

extern "C" {
#include <arpa/inet.h>
#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <linux/if_link.h>
}
#include "lossy.skel.h"
#include "lossy_shared.h"

namespace xdpfwd::test {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
using Counters = std::map<std::string, uint64_t>;

constexpr uint16_t kPort = 9000;       // the rule's port, inside this test's topology only
constexpr uint16_t kOtherPort = 9100;  // a plain kernel service next to the rule
constexpr uint64_t kMiB = 1ull << 20;
// A 1 MiB stream crosses the veth in at least this many frames, even as 64 KiB GSO packets.
constexpr uint64_t kMinFramesPerMiB = kMiB / 65536;

inline std::string Addr(in_addr a, uint16_t port) {
  return ToString(a) + ":" + std::to_string(port);
}

inline uint64_t Get(const Counters& c, const std::string& key) {
  return ForwarderProcess::Get(c, key);
}

inline size_t Occurrences(const std::string& text, const std::string& needle) {
  size_t n = 0;
  for (size_t at = text.find(needle); at != std::string::npos; at = text.find(needle, at + 1)) ++n;
  return n;
}

// A client or test socket that fails the test instead of hanging it when a path stalls.
inline void SetTimeouts(int fd) {
  const timeval limit{20, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &limit, sizeof(limit));
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &limit, sizeof(limit));
}

// Sends 1 MiB of a pattern on `fd` while reading the echo back at the same time; every byte
// must come back in order.
inline void ExpectEchoedMiB(int fd, uint64_t seed) {
  SetTimeouts(fd);
  std::future<StreamStats> echoed = std::async(std::launch::async, [fd] { return ReceiveAll(fd); });
  const StreamStats sent = SendPattern(fd, seed, kMiB);
  const StreamStats got = echoed.get();
  EXPECT_EQ(got.bytes, kMiB);
  EXPECT_EQ(got.hash, sent.hash) << "echoed stream corrupted";
}

// One byte each way over an established connection (`a` writes, `b` echoes it back).
inline void ExpectPingPong(int a, int b) {
  SetTimeouts(a);
  SetTimeouts(b);
  char c = 'p';
  ASSERT_EQ(send(a, &c, 1, MSG_NOSIGNAL), 1);
  ASSERT_EQ(recv(b, &c, 1, MSG_WAITALL), 1);
  ASSERT_EQ(send(b, &c, 1, MSG_NOSIGNAL), 1);
  ASSERT_EQ(recv(a, &c, 1, MSG_WAITALL), 1);
}

// The shared echo server (support/echo_server.h) in the server namespace on `port`.
class EchoBackend {
 public:
  EchoBackend(const Topology& topo, uint16_t port)
      : server_(TcpListen(topo.server_ns(), topo.server_addr(), port)) {}

 private:
  EchoServer server_;
};

// xdpfwd --path auto with any arguments: ForwarderProcess takes LISTEN BACKEND only, and the
// IPv6 test needs a rules file (-c). Stopped with SIGTERM in the destructor, so XDP is detached
// also when a test fails.
class AutoForwarder {
 public:
  explicit AutoForwarder(const std::vector<std::string>& args) {
    std::vector<std::string> argv{ForwarderProcess::BinaryPath(), "--path", "auto"};
    argv.insert(argv.end(), args.begin(), args.end());
    child_ = std::make_unique<ChildProcess>(argv);
    if (!child_->WaitForLine("xdpfwd: ready:", 10s) || !child_->WaitForLine("\n", 2s)) {
      child_->Signal(SIGTERM);
      child_->Wait(5s);
      throw std::runtime_error("xdpfwd did not get ready:\n" + child_->output());
    }
    const std::string& out = child_->output();
    const size_t at = out.find("xdpfwd: ready:");
    ready_line_ = out.substr(at, out.find('\n', at) - at);
  }
  ~AutoForwarder() {
    if (!stopped_) Stop();
  }
  AutoForwarder(const AutoForwarder&) = delete;
  AutoForwarder& operator=(const AutoForwarder&) = delete;

  const std::string& ready_line() const { return ready_line_; }
  const std::string& output() const { return child_->output(); }

  // Counters keyed like ForwarderProcess::Stats: "fast.*", "steer.*", "kernel.*". In auto mode
  // the kernel path always runs and prints last.
  Counters Stats() {
    const size_t from = child_->output().size();
    child_->Signal(SIGUSR1);
    // The kernel path's line ends the answer (the fast path's and the steering's come first).
    // Only a line after the signal counts: an earlier "kernel path: " line (its port choice
    // says so when it starts choosing) was taken for the answer, and the counters read before
    // the answer came were none at all (seen once at load average ~25).
    const auto answered = [&] {
      const size_t at = child_->output().find("xdpfwd: kernel path: ", from);
      return at != std::string::npos && child_->output().find('\n', at) != std::string::npos;
    };
    const auto deadline = Clock::now() + 12s;
    while (!answered()) {
      if (Clock::now() > deadline) {
        throw std::runtime_error("no counters from xdpfwd after SIGUSR1:\n" + child_->output());
      }
      child_->ReadPending();
      std::this_thread::sleep_for(10ms);
    }
    Counters counters;
    std::istringstream lines(child_->output().substr(from));
    for (std::string line; std::getline(lines, line);) {
      std::string prefix;
      if (line.rfind("xdpfwd: fast path: ", 0) == 0) prefix = "fast.";
      if (line.rfind("xdpfwd: steering: ", 0) == 0) prefix = "steer.";
      if (line.rfind("xdpfwd: kernel path: ", 0) == 0) prefix = "kernel.";
      if (prefix.empty()) continue;
      std::istringstream words(line);
      for (std::string w; words >> w;) {
        const size_t eq = w.find('=');
        if (eq != std::string::npos)
          counters[prefix + w.substr(0, eq)] = std::stoull(w.substr(eq + 1));
      }
    }
    return counters;
  }

  // Polls the counters until `done` holds (bounded); the last counters.
  Counters WaitForStats(const std::function<bool(const Counters&)>& done,
                        std::chrono::milliseconds timeout = 15s) {
    const auto deadline = Clock::now() + timeout;
    Counters c = Stats();
    while (!done(c) && Clock::now() < deadline) {
      std::this_thread::sleep_for(50ms);
      c = Stats();
    }
    return c;
  }

  // SIGTERM and wait; the exit code (-1: killed after 20 s).
  int Stop() {
    stopped_ = true;
    child_->Signal(SIGTERM);
    if (const auto code = child_->Wait(20s)) return *code;
    child_->Signal(SIGKILL);
    child_->Wait(5s);
    return -1;
  }

 private:
  std::unique_ptr<ChildProcess> child_;
  std::string ready_line_;
  bool stopped_ = false;
};

// A rules file in rinetd format, removed in the destructor.
class RulesFile {
 public:
  explicit RulesFile(const std::string& text) {
    char name[] = "/tmp/xdpfwd-auto-rules-XXXXXX";
    UniqueFd fd(mkstemp(name));
    if (!fd) throw std::runtime_error("mkstemp: " + std::string(strerror(errno)));
    path_ = name;
    if (write(fd.get(), text.data(), text.size()) != static_cast<ssize_t>(text.size())) {
      unlink(path_.c_str());
      throw std::runtime_error("write " + path_);
    }
  }
  ~RulesFile() { unlink(path_.c_str()); }
  RulesFile(const RulesFile&) = delete;
  RulesFile& operator=(const RulesFile&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// IPv6 on both veth pairs: fd00:<pid>:<k>::/48, k being the topology's own 198.18.k.0/24, so
// unique among live tests; `nodad` makes the addresses usable at once. Gone with the veths.
struct Ipv6Side {
  std::string root;  // root-namespace end, e.g. "fd00:1a2b:7:1::1"
  std::string ns;    // namespace end
};
struct Ipv6Addresses {
  Ipv6Side client, server;
};

inline Ipv6Addresses AddIpv6(const Topology& topo) {
  char prefix[64];
  std::snprintf(prefix, sizeof(prefix), "fd00:%x:%x", static_cast<unsigned>(getpid()) & 0xffff,
                (ntohl(topo.client_gw().s_addr) >> 8) & 0xff);
  const std::string p = prefix;
  const Ipv6Addresses a{{p + ":1::1", p + ":1::2"}, {p + ":2::1", p + ":2::2"}};
  for (const auto& [side, root_if, ns] :
       {std::tuple{a.client, topo.client_side_if(), topo.client_ns()},
        std::tuple{a.server, topo.server_side_if(), topo.server_ns()}}) {
    for (const auto& [where, cmd] :
         {std::pair{std::string(), "ip -6 addr add " + side.root + "/64 dev " + root_if + " nodad"},
          std::pair{ns, "ip -6 addr add " + side.ns + "/64 dev " + Topology::kNsIf + " nodad"}}) {
      const CommandResult r = topo.Run(where, cmd);
      if (r.status != 0) throw std::runtime_error(cmd + ": " + r.output);
    }
  }
  return a;
}

inline UniqueFd TcpConnect6(const std::string& ns, const std::string& addr, uint16_t port) {
  UniqueFd fd;
  RunInNamespace(ns, [&] {
    fd.reset(socket(AF_INET6, SOCK_STREAM | SOCK_CLOEXEC, 0));
    if (!fd) throw std::runtime_error("socket: " + std::string(strerror(errno)));
    sockaddr_in6 sa{};
    sa.sin6_family = AF_INET6;
    sa.sin6_port = htons(port);
    if (inet_pton(AF_INET6, addr.c_str(), &sa.sin6_addr) != 1) {
      throw std::runtime_error("bad IPv6 address " + addr);
    }
    if (connect(fd.get(), reinterpret_cast<sockaddr*>(&sa), sizeof(sa)) != 0) {
      throw std::runtime_error("connect [" + addr + "]:" + std::to_string(port) + ": " +
                               strerror(errno));
    }
  });
  return fd;
}

inline UniqueFd TcpListen6(const std::string& ns, const std::string& addr, uint16_t port) {
  UniqueFd fd;
  RunInNamespace(ns, [&] {
    fd.reset(socket(AF_INET6, SOCK_STREAM | SOCK_CLOEXEC, 0));
    if (!fd) throw std::runtime_error("socket: " + std::string(strerror(errno)));
    const int one = 1;
    setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    setsockopt(fd.get(), IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof(one));
    sockaddr_in6 sa{};
    sa.sin6_family = AF_INET6;
    sa.sin6_port = htons(port);
    if (inet_pton(AF_INET6, addr.c_str(), &sa.sin6_addr) != 1 ||
        bind(fd.get(), reinterpret_cast<sockaddr*>(&sa), sizeof(sa)) != 0 ||
        listen(fd.get(), 16) != 0) {
      throw std::runtime_error("listen [" + addr + "]:" + std::to_string(port) + ": " +
                               strerror(errno));
    }
  });
  return fd;
}

// A client connection to `addr` (either family) from namespace `ns`, whose connect gives up
// after 5 s and whose reads after 20 s: a path that drops the SYN or stalls fails the test
// instead of hanging it.
inline UniqueFd TcpConnectTo(const std::string& ns, const std::string& addr, uint16_t port) {
  UniqueFd fd;
  RunInNamespace(ns, [&] {
    sockaddr_storage sa{};
    socklen_t length = 0;
    auto* sin = reinterpret_cast<sockaddr_in*>(&sa);
    auto* sin6 = reinterpret_cast<sockaddr_in6*>(&sa);
    if (inet_pton(AF_INET, addr.c_str(), &sin->sin_addr) == 1) {
      sin->sin_family = AF_INET;
      sin->sin_port = htons(port);
      length = sizeof(*sin);
    } else if (inet_pton(AF_INET6, addr.c_str(), &sin6->sin6_addr) == 1) {
      sin6->sin6_family = AF_INET6;
      sin6->sin6_port = htons(port);
      length = sizeof(*sin6);
    } else {
      throw std::runtime_error("bad address " + addr);
    }
    fd.reset(socket(sa.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0));
    if (!fd) throw std::runtime_error("socket: " + std::string(strerror(errno)));
    const timeval connect_limit{5, 0}, read_limit{20, 0};
    setsockopt(fd.get(), SOL_SOCKET, SO_SNDTIMEO, &connect_limit, sizeof(connect_limit));
    setsockopt(fd.get(), SOL_SOCKET, SO_RCVTIMEO, &read_limit, sizeof(read_limit));
    if (connect(fd.get(), reinterpret_cast<sockaddr*>(&sa), length) != 0) {
      throw std::runtime_error("connect " + addr + " port " + std::to_string(port) + ": " +
                               strerror(errno));
    }
  });
  return fd;
}

// The XDP program ids attached to a root-namespace interface (0: none in that mode).
struct AttachedXdp {
  uint32_t native = 0, generic = 0;
};
inline AttachedXdp QueryXdp(const std::string& ifname) {
  const int ifindex = static_cast<int>(if_nametoindex(ifname.c_str()));
  if (ifindex == 0) throw std::runtime_error("no interface " + ifname);
  bpf_xdp_query_opts q{};
  q.sz = sizeof(q);
  if (const int err = bpf_xdp_query(ifindex, 0, &q); err != 0) {
    throw std::runtime_error("bpf_xdp_query " + ifname + ": " + strerror(-err));
  }
  return AttachedXdp{q.drv_prog_id, q.skb_prog_id};
}

// A foreign XDP program on a root-namespace interface: the loss injector dropping nothing, in
// native mode. Detached in the destructor (only if it is still the attached program).
class ForeignXdp {
 public:
  explicit ForeignXdp(const std::string& ifname) : ifname_(ifname) {
    ifindex_ = static_cast<int>(if_nametoindex(ifname.c_str()));
    if (ifindex_ == 0) throw std::runtime_error("no interface " + ifname);
    skel_ = lossy__open();
    if (skel_ == nullptr) throw std::runtime_error("lossy__open");
    skel_->rodata->drop_per_million = 0;
    bpf_prog_info info{};
    uint32_t len = sizeof(info);
    if (lossy__load(skel_) != 0 ||
        bpf_obj_get_info_by_fd(bpf_program__fd(skel_->progs.lossy), &info, &len) != 0 ||
        bpf_xdp_attach(ifindex_, bpf_program__fd(skel_->progs.lossy),
                       XDP_FLAGS_DRV_MODE | XDP_FLAGS_UPDATE_IF_NOEXIST, nullptr) != 0) {
      lossy__destroy(skel_);
      throw std::runtime_error("loading or attaching the foreign program on " + ifname);
    }
    prog_id_ = info.id;
  }
  ~ForeignXdp() {
    bpf_xdp_attach_opts opts{};
    opts.sz = sizeof(opts);
    opts.old_prog_fd = bpf_program__fd(skel_->progs.lossy);
    bpf_xdp_detach(ifindex_, XDP_FLAGS_DRV_MODE, &opts);
    lossy__destroy(skel_);
  }
  ForeignXdp(const ForeignXdp&) = delete;
  ForeignXdp& operator=(const ForeignXdp&) = delete;

  uint32_t prog_id() const { return prog_id_; }
  // IPv4 TCP frames the program has seen (and passed).
  uint64_t passed_tcp() const { return LossyCounter(skel_, LOSSY_PASSED_TCP).value_or(0); }

 private:
  std::string ifname_;
  int ifindex_ = 0;
  lossy* skel_ = nullptr;
  uint32_t prog_id_ = 0;
};

// A kernel connection in the root namespace made before xdpfwd starts: the client socket in
// the client namespace and the accepted one in the root namespace. The listener is closed
// unless `keep_listener` (the established connection outlives it either way).
struct KernelConnection {
  UniqueFd client, served;
};
inline KernelConnection ConnectToRootListener(const Topology& topo, uint16_t port) {
  UniqueFd listener = TcpListen("", topo.client_gw(), port);  // SO_REUSEADDR, inherited below
  KernelConnection k;
  RunInNamespace(topo.client_ns(), [&] {
    k.client.reset(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
    const int one = 1;
    // The TIME_WAIT test reconnects from the same source port.
    setsockopt(k.client.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    sockaddr_in sa{};
    sa.sin_family = AF_INET;
    sa.sin_addr = topo.client_gw();
    sa.sin_port = htons(port);
    if (connect(k.client.get(), reinterpret_cast<sockaddr*>(&sa), sizeof(sa)) != 0) {
      throw std::runtime_error("connect " + Addr(topo.client_gw(), port) + ": " + strerror(errno));
    }
  });
  k.served.reset(accept4(listener.get(), nullptr, nullptr, SOCK_CLOEXEC));
  if (!k.served) throw std::runtime_error("accept: " + std::string(strerror(errno)));
  return k;
}

// 1 MiB from the client echoed back by the root-namespace end of a kernel connection.
inline void ExpectRootEchoedMiB(KernelConnection& k, uint64_t seed) {
  std::future<void> echo = std::async(std::launch::async, [&] {
    SetTimeouts(k.served.get());
    EchoUntilEof(k.served.get());
  });
  ExpectEchoedMiB(k.client.get(), seed);
  echo.get();
}

class AutoModeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (geteuid() != 0) GTEST_SKIP() << "namespace tests need root";
    topo_.emplace();
  }
  const Topology& topo() const { return *topo_; }
  std::string listen() const { return Addr(topo().client_gw(), kPort); }
  std::string backend() const { return Addr(topo().server_addr(), kPort); }
  UniqueFd Connect(uint16_t port = kPort) const {
    return TcpConnect(topo().client_ns(), topo().client_gw(), port);
  }
  void ExpectFastPathRunning(const AutoForwarder& fwd) const {
    EXPECT_NE(fwd.ready_line().find("; fast path on " + topo().client_side_if()), std::string::npos)
        << fwd.output();
    EXPECT_NE(fwd.ready_line().find("kernel path on"), std::string::npos) << fwd.output();
    EXPECT_EQ(fwd.output().find("fast path unavailable"), std::string::npos) << fwd.output();
  }
  // Auto mode falls back because of a foreign program on `foreign_if`.
  void ExpectFallbackBecauseOf(const std::string& foreign_if);

  std::optional<Topology> topo_;
};

inline void AutoModeTest::ExpectFallbackBecauseOf(const std::string& foreign_if) {
  EchoBackend echo(topo(), kPort);
  ForeignXdp foreign(foreign_if);
  {
    AutoForwarder fwd({listen(), backend()});
    const std::string& out = fwd.output();
    EXPECT_EQ(Occurrences(out, "fast path unavailable, serving everything on the kernel path: "),
              1u)
        << out;
    // The reason names the interface and the program that is in the way.
    const size_t at = out.find("fast path unavailable");
    const std::string reason = out.substr(at, out.find('\n', at) - at);
    EXPECT_NE(
        reason.find(foreign_if + ": XDP program 'lossy' (id " + std::to_string(foreign.prog_id())),
        std::string::npos)
        << reason;
    EXPECT_NE(reason.find("is not xdpfwd's"), std::string::npos) << reason;
    EXPECT_NE(fwd.ready_line().find("ready: path=auto"), std::string::npos) << fwd.ready_line();
    EXPECT_EQ(fwd.ready_line().find("fast path on"), std::string::npos) << fwd.ready_line();
    EXPECT_NE(fwd.ready_line().find("kernel path on"), std::string::npos) << fwd.ready_line();
    // Nothing of xdpfwd's stays attached (a half-started fast path is undone), and the
    // foreign program is untouched.
    for (const std::string& ifname : {topo().client_side_if(), topo().server_side_if()}) {
      const AttachedXdp x = QueryXdp(ifname);
      EXPECT_EQ(x.native, ifname == foreign_if ? foreign.prog_id() : 0u) << ifname;
      EXPECT_EQ(x.generic, 0u) << ifname;
    }

    const uint64_t seen_before = foreign.passed_tcp();
    {
      UniqueFd client = Connect();
      ExpectEchoedMiB(client.get(), 8);
    }
    const Counters c =
        fwd.WaitForStats([](const Counters& s) { return Get(s, "kernel.completed") == 1; });
    EXPECT_EQ(Get(c, "kernel.accepted"), 1u);
    EXPECT_EQ(Get(c, "kernel.completed"), 1u);
    EXPECT_EQ(c.count("fast.accepted") + c.count("steer.pass_unknown_flow"), 0u)
        << "no fast path counters without a fast path";
    EXPECT_GT(foreign.passed_tcp(), seen_before) << "the foreign program saw the traffic";
    EXPECT_EQ(fwd.Stop(), 0) << fwd.output();
    EXPECT_EQ(Occurrences(fwd.output(), "fast path unavailable"), 1u) << fwd.output();
  }
  // xdpfwd has exited: the foreign program is still the one attached.
  EXPECT_EQ(QueryXdp(foreign_if).native, foreign.prog_id());
  EXPECT_EQ(QueryXdp(foreign_if).generic, 0u);
}

}  // namespace xdpfwd::test
