// Namespace topology fixture and helpers for netns tests. Uses iproute2 for set-up (what a
// user would type, and what error messages will mention) and setns(2) for in-process traffic.
#include "tests/support/netns_topology.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <exception>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include "os/unique_fd.h"
#include "tests/support/child_process.h"

namespace xdpfwd::test {
namespace {

constexpr const char* kPrefix = "xf-";  // every namespace we create: xf-<pid>-<n>-{c,s}

std::atomic<int> g_topology_counter{0};

std::string Quote(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += (c == '\'') ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

void Must(const std::string& what, const CommandResult& r) {
  if (r.status != 0) {
    throw std::runtime_error("topology: `" + what + "` failed (status " + std::to_string(r.status) +
                             "): " + r.output);
  }
}

in_addr Addr(const std::string& dotted) {
  in_addr a{};
  if (inet_pton(AF_INET, dotted.c_str(), &a) != 1)
    throw std::runtime_error("bad address " + dotted);
  return a;
}

bool RouteExists(const std::string& prefix) {
  return !RunCommand("", "ip -4 route show " + prefix).output.empty();
}

// Held while a topology picks its subnets and routes them (Topology::Build), across every test
// process on the machine: flock(2) on a file in /run/lock, released when the fd closes, also
// when the process dies.
class SubnetLock {
 public:
  SubnetLock() : fd_(open(kPath, O_RDWR | O_CREAT | O_CLOEXEC, 0600)) {
    if (!fd_) throw std::runtime_error(std::string("open ") + kPath + ": " + strerror(errno));
    while (flock(fd_.get(), LOCK_EX) != 0) {
      if (errno != EINTR)
        throw std::runtime_error(std::string("flock ") + kPath + ": " + strerror(errno));
    }
  }

 private:
  static constexpr const char* kPath = "/run/lock/xdpfwd-test-subnets";
  UniqueFd fd_;
};

// TCP sockets of this namespace (the root one, where topologies are built), any state, TIME_WAIT
// included, counted per k of 198.18.k.0/24 and 198.19.k.0/24 by either end, from /proc/net/tcp
// and tcp6 (IPv4-mapped ends). A topology that reuses a k the kernel still holds sockets on can
// meet them: a client's SYN with a 4-tuple the root namespace keeps in TIME_WAIT goes to the
// kernel, whatever the test expected (auto mode gives such a SYN to the kernel on purpose), and
// a test that made 10,000 connections from its client address can have cycled through the
// whole ephemeral range of that address pair in the last minute.
std::vector<int> RootSocketsPerSubnet() {
  std::vector<int> per_k(256, 0);
  auto count = [&](const in_addr& a) {
    const auto* b = reinterpret_cast<const unsigned char*>(&a.s_addr);
    if (b[0] == 198 && (b[1] == 18 || b[1] == 19)) ++per_k[b[2]];
  };
  // "%08X" of the address as it lies in memory, read back as a host-order integer.
  auto parse_v4 = [](const std::string& hex) {
    in_addr a{};
    a.s_addr = static_cast<in_addr_t>(std::stoul(hex, nullptr, 16));
    return a;
  };
  for (const char* path : {"/proc/net/tcp", "/proc/net/tcp6"}) {
    std::ifstream in(path);
    std::string line;
    std::getline(in, line);  // header
    while (std::getline(in, line)) {
      std::istringstream fields(line);
      std::string slot, local, remote;
      if (!(fields >> slot >> local >> remote)) continue;
      for (const std::string& end : {local, remote}) {
        const std::string addr = end.substr(0, end.find(':'));
        if (addr.size() == 8) {
          count(parse_v4(addr));
        } else if (addr.size() == 32 && addr.compare(0, 24, "0000000000000000FFFF0000") == 0) {
          count(parse_v4(addr.substr(24)));
        }
      }
    }
  }
  return per_k;
}

}  // namespace

CommandResult RunCommand(const std::string& ns, const std::string& command) {
  const std::string full = ns.empty() ? command : "ip netns exec " + Quote(ns) + " " + command;
  const RunResult r = RunProgram({"/bin/sh", "-c", full}, std::chrono::seconds(60));
  return CommandResult{r.status, r.output};
}

void RunInNamespace(const std::string& ns, const std::function<void()>& fn) {
  std::exception_ptr failure;
  std::thread worker([&] {
    try {
      if (!ns.empty()) {
        UniqueFd nsfd(open(("/run/netns/" + ns).c_str(), O_RDONLY | O_CLOEXEC));
        if (!nsfd) throw std::runtime_error("open netns " + ns + ": " + strerror(errno));
        // Network namespaces are per thread: only this worker moves.
        if (setns(nsfd.get(), CLONE_NEWNET) != 0) {
          throw std::runtime_error("setns " + ns + ": " + strerror(errno));
        }
      }
      fn();
    } catch (...) {
      failure = std::current_exception();
    }
  });
  worker.join();
  if (failure) std::rethrow_exception(failure);
}

bool WaitForTcpPort(const std::string& ns, const in_addr& addr, uint16_t port,
                    std::chrono::milliseconds timeout) {
  bool connected = false;
  RunInNamespace(ns, [&] {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    sockaddr_in sa{};
    sa.sin_family = AF_INET;
    sa.sin_addr = addr;
    sa.sin_port = htons(port);
    while (std::chrono::steady_clock::now() < deadline) {
      UniqueFd fd(socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
      if (!fd) throw std::runtime_error("socket: " + std::string(strerror(errno)));
      int rc = connect(fd.get(), reinterpret_cast<sockaddr*>(&sa), sizeof(sa));
      if (rc != 0 && errno == EINPROGRESS) {
        pollfd p{fd.get(), POLLOUT, 0};
        if (poll(&p, 1, 100) == 1) {
          int soerr = 0;
          socklen_t len = sizeof(soerr);
          getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &soerr, &len);
          rc = soerr == 0 ? 0 : -1;
        }
      }
      if (rc == 0) {
        connected = true;
        return;
      }
      // Refused or not yet routable: poll again shortly.
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  });
  return connected;
}

void ReapStaleTopologies() {
  std::istringstream list(RunCommand("", "ip netns list").output);
  std::string line;
  while (std::getline(list, line)) {
    const std::string name = line.substr(0, line.find(' '));
    if (name.rfind(kPrefix, 0) != 0) continue;
    const pid_t owner = static_cast<pid_t>(std::atol(name.c_str() + strlen(kPrefix)));
    if (owner <= 0 || owner == getpid()) continue;
    if (kill(owner, 0) == 0 || errno != ESRCH) continue;  // owner still alive: not ours to touch
    RunCommand("", "ip netns delete " + Quote(name));
  }
}

Topology::Topology(TopologyOptions options) {
  ReapStaleTopologies();
  try {
    Build(options);
  } catch (...) {
    Teardown();
    throw;
  }
}

Topology::~Topology() { Teardown(); }

void Topology::Build(const TopologyOptions& options) {
  const int n = g_topology_counter.fetch_add(1);
  const std::string id = std::to_string(getpid()) + "-" + std::to_string(n);
  client_ns_ = kPrefix + id + "-c";
  server_ns_ = kPrefix + id + "-s";
  // Interface names are limited to 15 characters.
  const std::string short_id = std::to_string(getpid() % 100000) + "x" + std::to_string(n % 100);
  client_side_if_ = "xc" + short_id;
  server_side_if_ = "xs" + short_id;

  const std::string mtu = std::to_string(options.mtu);
  // Set at creation, the state `ethtool -L DEV rx N tx N` leaves (veth has no combined
  // channels), without ethtool and without its limit of the CPU count (checked: 4 queues on
  // this 2-CPU machine).
  const std::string queues = options.queues > 1
                                 ? " numrxqueues " + std::to_string(options.queues) +
                                       " numtxqueues " + std::to_string(options.queues)
                                 : "";

  auto run = [](const std::string& ns, const std::string& cmd) { Must(cmd, RunCommand(ns, cmd)); };
  run("", "ip netns add " + client_ns_);
  client_ns_created_ = true;
  run("", "ip netns add " + server_ns_);
  server_ns_created_ = true;
  for (const std::string* ns : {&client_ns_, &server_ns_}) run(*ns, "ip link set lo up");
  const std::pair<const std::string*, const std::string*> sides[] = {
      {&client_ns_, &client_side_if_}, {&server_ns_, &server_side_if_}};
  for (const auto& [ns, root_if] : sides) {
    run("", "ip link add " + *root_if + " mtu " + mtu + queues + " type veth peer name " + kNsIf +
                " mtu " + mtu + queues + " netns " + *ns);
    // Forwarding is decided by the ingress device's setting; no global sysctl is touched.
    run("", "sysctl -q -w net.ipv4.conf." + *root_if + ".forwarding=1");
  }

  // Subnets from the benchmarking range (RFC 2544): 198.18.k.0/24 for the client side,
  // 198.19.k.0/24 for the server side, k chosen so no existing route overlaps. k is never
  // 100-199, the benchmark smoke test's (its subnets are fixed, and bench/run refuses one that
  // is already routed). Choosing k and routing it is one step under a lock every test process
  // takes: CTest runs tests in parallel, and two processes that both saw k free would otherwise
  // both route it, and one topology's packets would go to the other's veth.
  {
    const SubnetLock lock;
    // Among the unrouted k, the first the root namespace holds no socket on, else the one it
    // holds fewest on.
    const std::vector<int> sockets = RootSocketsPerSubnet();
    int k = -1;
    for (int i = 0; i < 150; ++i) {
      const int r = (getpid() * 7 + n * 13 + i) % 150;
      const int cand = r < 99 ? 1 + r : 200 + (r - 99);  // 1-99, 200-250
      const std::string c = "198.18." + std::to_string(cand) + ".0/24";
      const std::string s = "198.19." + std::to_string(cand) + ".0/24";
      if (k >= 0 && sockets[cand] >= sockets[k]) continue;
      if (!RouteExists(c) && !RouteExists(s)) {
        k = cand;
        if (sockets[k] == 0) break;
      }
    }
    if (k < 0) throw std::runtime_error("topology: no free 198.18.k.0/24 subnet");
    const std::string ks = std::to_string(k);
    client_addr_ = Addr("198.18." + ks + ".2");
    client_gw_ = Addr("198.18." + ks + ".1");
    server_addr_ = Addr("198.19." + ks + ".2");
    server_gw_ = Addr("198.19." + ks + ".1");
    // The route exists once the address is on a link that is up.
    run("", "ip addr add " + ToString(client_gw_) + "/24 dev " + client_side_if_);
    run("", "ip link set " + client_side_if_ + " up");
    run("", "ip addr add " + ToString(server_gw_) + "/24 dev " + server_side_if_);
    run("", "ip link set " + server_side_if_ + " up");
  }

  for (const auto& [ns, addr, gw] : {std::tuple{&client_ns_, client_addr_, client_gw_},
                                     std::tuple{&server_ns_, server_addr_, server_gw_}}) {
    run(*ns, "ip addr add " + ToString(addr) + "/24 dev " + kNsIf);
    run(*ns, std::string("ip link set ") + kNsIf + " up");
    run(*ns, "ip route add default via " + ToString(gw));
  }
}

void Topology::Teardown() noexcept {
  // Namespace cleanup runs later in a kernel workqueue, so deleting only the namespaces leaves
  // the root-side veths around for a while. Delete the links first: that removes both ends now.
  try {
    for (const std::string* link : {&client_side_if_, &server_side_if_}) {
      if (!link->empty() && RunCommand("", "ip link show dev " + *link).status == 0) {
        RunCommand("", "ip link delete " + *link);
      }
    }
    if (client_ns_created_) RunCommand("", "ip netns delete " + client_ns_);
    if (server_ns_created_) RunCommand("", "ip netns delete " + server_ns_);
  } catch (...) {
    // A destructor must not throw; a leftover namespace is reaped by the next Topology.
  }
  client_ns_created_ = server_ns_created_ = false;
}

}  // namespace xdpfwd::test
