// lwIP on the fast path over a real veth: an lwIP echo server answers a kernel client in the
// client namespace (1 byte, 1 MiB, 100 MiB, hashes checked both ways) while ping to the same
// address still reaches the kernel; an lwIP client connects out to a kernel server in the
// server namespace. At the end every UMEM frame, custom pbuf and lwIP pcb is back.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <net/if.h>
#include <netinet/tcp.h>
#include <sched.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <future>
#include <sstream>
#include <thread>
#include <utility>

#include "stack/neighbor.h"
#include "stack/packet_path_flows.h"
#include "stack/worker.h"
#include "tests/support/lwip_echo.h"
#include "tests/support/netns_topology.h"
#include "tests/support/tcp.h"
#include "xdp/steer.h"

extern "C" {
#include "lwip/memp.h"
#include "lwip/stats.h"
#include "lwip/tcp.h"
}

namespace xdpfwd::test {
namespace {

using namespace std::chrono_literals;

constexpr uint16_t kEchoPort = 9000;  // inside this test's own topology only

in_addr Mask24() {
  in_addr m{};
  m.s_addr = htonl(0xffffff00u);
  return m;
}

// One fast-path interface: steering program, AF_XDP port and lwIP netif on a root-side veth.
struct FastInterface {
  std::unique_ptr<SteerProgram> prog;
  std::unique_ptr<XskPort> port;
  std::unique_ptr<LwipNetif> netif;

  void Open(const std::string& ifname, in_addr addr, bool packet_tx = false,
            SmallBatchTx small_batches = SmallBatchTx::kPacket, const Ipv6Interface& ipv6 = {},
            bool generic = false) {
    SteerOptions so;
    so.force_generic = generic;  // generic mode: the peer's TSO stays on, segments arrive whole
    auto p = SteerProgram::Attach(ifname, so);
    ASSERT_TRUE(p) << p.error().message();
    prog = std::move(*p);
    XskPortConfig cfg;
    cfg.ifname = ifname;
    auto x = XskPort::Open(cfg);
    ASSERT_TRUE(x) << x.error().message();
    port = std::move(*x);
    ASSERT_TRUE(prog->BindQueue(0, port->fd()));
    const int ifindex = static_cast<int>(if_nametoindex(ifname.c_str()));
    auto mac = InterfaceMac(ifindex);
    ASSERT_TRUE(mac) << mac.error().message();
    auto mtu = InterfaceMtu(ifindex);
    ASSERT_TRUE(mtu) << mtu.error().message();
    LwipNetifConfig nc;
    nc.ifindex = ifindex;
    nc.mac = *mac;
    nc.addr = addr;
    nc.netmask = Mask24();
    nc.mtu = static_cast<uint16_t>(*mtu);
    nc.verify_tcp_checksum = ShouldVerifyTcpChecksum(ifname);
    nc.packet_tx = packet_tx;
    nc.small_batches = small_batches;  // with packet_tx; kPacket: every batch through the socket
    nc.ipv6 = ipv6;
    EXPECT_FALSE(nc.verify_tcp_checksum) << "veth: CHECKSUM_PARTIAL frames (docs/stack.md)";
    auto n = LwipNetif::Create({port.get()}, nc);
    ASSERT_TRUE(n) << n.error().message();
    netif = std::move(*n);
  }

  // Counters for failure messages.
  std::string Describe() {
    const XskStats x = port->stats();
    const NetifStats& n = netif->stats();
    const SteerCounters c = prog->ReadCounters();
    std::string out =
        "xsk rx " + std::to_string(x.rx_packets) + " tx " + std::to_string(x.tx_packets) +
        " kicks " + std::to_string(x.tx_kicks) + "; netif rx " + std::to_string(n.rx_frames) +
        " tx " + std::to_string(n.tx_frames) + " no-neighbour " + std::to_string(n.tx_no_neighbor) +
        " pool-empty " + std::to_string(n.tx_pool_empty) + "; lwip ip recv/drop/chkerr " +
        std::to_string(lwip_stats.ip.recv) + "/" + std::to_string(lwip_stats.ip.drop) + "/" +
        std::to_string(lwip_stats.ip.chkerr) + " tcp recv/drop/chkerr/proterr " +
        std::to_string(lwip_stats.tcp.recv) + "/" + std::to_string(lwip_stats.tcp.drop) + "/" +
        std::to_string(lwip_stats.tcp.chkerr) + "/" + std::to_string(lwip_stats.tcp.proterr) +
        " link recv/drop " + std::to_string(lwip_stats.link.recv) + "/" +
        std::to_string(lwip_stats.link.drop) + "; steer";
    for (size_t r = 0; r < kSteerReasonCount; ++r) {
      if (c[r].packets) {
        out += " " + std::string(ReasonName(static_cast<SteerReason>(r))) + "=" +
               std::to_string(c[r].packets);
      }
    }
    return out;
  }

  void ExpectEverythingReturned() {
    const FrameAccount f = port->frames();
    EXPECT_EQ(netif->rx_pbufs_in_use(), 0u) << "custom pbufs still held by lwIP";
    EXPECT_EQ(f.held, 0u) << "UMEM frames not given back";
    EXPECT_EQ(f.in_tx, 0u);
    EXPECT_EQ(f.in_pool + f.in_fill + f.in_tx + f.held, f.total);
  }
};

// Runs the worker on its own thread; lwIP objects are created and destroyed on it.
class WorkerThread {
 public:
  explicit WorkerThread(Worker& worker) : worker_(worker) {}
  ~WorkerThread() { Stop(); }

  // Runs `setup` on the worker thread, then the loop; `each` runs every iteration.
  void Start(std::function<void()> setup, std::function<void()> each = {}) {
    std::promise<void> ready;
    auto started = ready.get_future();
    thread_ = std::thread([this, setup, each, &ready] {
      setup();
      ready.set_value();
      EXPECT_TRUE(worker_.Run(stop_, [&each](uint64_t) {
        if (each) each();
        return false;
      }));
      worker_.Drain();
      if (teardown_) teardown_();
    });
    started.wait();
  }
  void OnStop(std::function<void()> teardown) { teardown_ = std::move(teardown); }
  void Stop() {
    stop_ = true;
    if (thread_.joinable()) thread_.join();
  }

 private:
  Worker& worker_;
  std::atomic<bool> stop_{false};
  std::function<void()> teardown_;
  std::thread thread_;
};

// Every lwIP pool's and the heap's in-use counts, to compare before and after a test.
std::vector<uint32_t> PoolUsage() {
  std::vector<uint32_t> used;
  for (int i = 0; i < MEMP_MAX; ++i) used.push_back(lwip_stats.memp[i]->used);
  used.push_back(static_cast<uint32_t>(lwip_stats.mem.used));
  return used;
}

// Connection pcbs; listeners live in their own pool (MEMP_TCP_PCB_LISTEN).
uint16_t PcbsInUse() { return lwip_stats.memp[MEMP_TCP_PCB]->used; }
uint16_t ListenersInUse() { return lwip_stats.memp[MEMP_TCP_PCB_LISTEN]->used; }

class LwipStackTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (geteuid() != 0) GTEST_SKIP() << "namespace tests need root";
    InitLwipOnce();
  }
};

class LwipEchoTest : public LwipStackTest, public ::testing::WithParamInterface<uint64_t> {};

TEST_P(LwipEchoTest, KernelClientGetsEveryByteBack) {
  const uint64_t bytes = GetParam();
  Topology topo;
  FastInterface client_side;
  client_side.Open(topo.client_side_if(), topo.client_gw());
  if (HasFatalFailure()) return;
  ASSERT_TRUE(client_side.prog->AddListener(topo.client_gw(), kEchoPort, 0));

  Worker worker(-1);
  worker.Add(client_side.netif.get());
  const uint16_t pcbs_before = PcbsInUse();
  const uint16_t listeners_before = ListenersInUse();
  const std::vector<uint32_t> pools_before = PoolUsage();
  std::unique_ptr<LwipEchoServer> echo;
  std::atomic<uint16_t> pcbs{0};
  std::atomic<uint64_t> echoed{0};
  WorkerThread thread(worker);
  thread.OnStop([&] { echo.reset(); });
  std::atomic<pid_t> worker_tid{0};
  std::vector<uint32_t> pools_serving;  // written on the worker thread before the loop
  std::atomic<bool> pools_back{false};
  thread.Start(
      [&] {
        worker_tid = gettid();  // lets `strace -f` output be split by thread
        echo = std::make_unique<LwipEchoServer>(topo.client_gw(), kEchoPort);
        pools_serving = PoolUsage();
      },
      [&] {
        pcbs = PcbsInUse();
        echoed = echo->bytes_echoed();
        // lwIP's TCP timer frees its timeout entry on the tick after the last pcb goes.
        pools_back = PoolUsage() == pools_serving;
      });

  // The kernel still answers ping for the address lwIP serves TCP on.
  const auto ping = topo.Run(topo.client_ns(), "ping -c 1 -W 2 " + ToString(topo.client_gw()));
  EXPECT_EQ(ping.status, 0) << ping.output;

  UniqueFd client = TcpConnect(topo.client_ns(), topo.client_gw(), kEchoPort);
  StreamStats sent;
  std::thread sender([&] { sent = SendPattern(client.get(), bytes, bytes); });
  const StreamStats back = ReceiveAll(client.get());
  sender.join();
  EXPECT_EQ(sent.bytes, bytes);
  EXPECT_EQ(back.bytes, bytes);
  EXPECT_EQ(back.hash, sent.hash) << "echoed bytes differ from sent bytes";
  client.reset();

  // The server's pcb goes away once the client's last ACK arrives: poll, bounded.
  const auto deadline = std::chrono::steady_clock::now() + 5s;
  while (!(pcbs.load() == pcbs_before && pools_back.load()) &&
         std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(5ms);
  }
  EXPECT_EQ(pcbs.load(), pcbs_before) << "the connection's pcb should be gone";
  EXPECT_EQ(echoed.load(), bytes);
  thread.Stop();
  EXPECT_EQ(PcbsInUse(), pcbs_before);
  EXPECT_EQ(ListenersInUse(), listeners_before);
  EXPECT_EQ(PoolUsage(), pools_before) << "an lwIP pool (segments, pbufs, heap) did not return";
  const WorkerStats ws = worker.stats();  // lwIP counters are process-wide: readable here
  EXPECT_EQ(ws.lwip_memp_errors, 0u);
  EXPECT_EQ(ws.lwip_heap_errors, 0u);
  client_side.ExpectEverythingReturned();

  const XskStats xs = client_side.port->stats();
  const double mib = static_cast<double>(bytes) / (1 << 20);
  std::printf("[ info ] worker tid %d\n", worker_tid.load());
  std::printf(
      "[ info ] %llu bytes each way: rx %llu frames, tx %llu frames, %llu TX kicks "
      "(%.1f per MiB), %llu RX wakeups, %llu kernel rx drops, %llu tx ring full, "
      "%llu no-neighbour\n",
      static_cast<unsigned long long>(bytes), static_cast<unsigned long long>(xs.rx_packets),
      static_cast<unsigned long long>(xs.tx_packets), static_cast<unsigned long long>(xs.tx_kicks),
      mib > 0 ? xs.tx_kicks / mib : 0.0, static_cast<unsigned long long>(xs.rx_wakeups),
      static_cast<unsigned long long>(xs.kernel_rx_dropped + xs.kernel_rx_ring_full),
      static_cast<unsigned long long>(xs.tx_ring_full),
      static_cast<unsigned long long>(client_side.netif->stats().tx_no_neighbor));
  std::printf("[ info ] lwIP: %llu TCP retransmits, %llu TCP drops\n",
              static_cast<unsigned long long>(ws.lwip_tcp_retransmits),
              static_cast<unsigned long long>(ws.lwip_tcp_drops));
}

INSTANTIATE_TEST_SUITE_P(Sizes, LwipEchoTest,
                         ::testing::Values(uint64_t{1}, uint64_t{1} << 20, uint64_t{100} << 20),
                         [](const auto& p) { return std::to_string(p.param) + "_bytes"; });

// The namespace's Tcp InCsumErrors (/proc/net/snmp, IPv4 and IPv6 alike).
uint64_t TcpChecksumErrors(const Topology& topo, const std::string& ns) {
  std::istringstream lines(topo.Run(ns, "cat /proc/net/snmp").output);
  std::string header, values;
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind("Tcp:", 0) != 0) continue;
    (header.empty() ? header : values) = line;
  }
  std::istringstream names(header), numbers(values);
  for (std::string name, number; names >> name && numbers >> number;) {
    if (name == "InCsumErrors") return std::stoull(number);
  }
  ADD_FAILURE() << "no Tcp InCsumErrors in /proc/net/snmp of " << ns;
  return 0;
}

// IPv6 through the fast path (issue #31 item 2): the steering program redirects an IPv6
// client's TCP to the socket (a listener entry written here: the relay writes none yet), the
// netif hands it to lwIP's IPv6, and lwIP's echo goes back out behind an IPv6 Ethernet header
// to the MAC it learned from the SYN, through AF_XDP frames with TX-metadata checksums or the
// packet socket with GSO_TCPV6. TX checksumming is off on the root-side veth, so the kernel
// completes every checksum from the pseudo-header sum we wrote and the client's kernel
// verifies it: 1 MiB each way arrives intact with no checksum error, at the MSS of the MTU.
// In generic mode the client keeps its TSO and its 64 KiB segments arrive as chains of frames
// (multi-buffer RX), as IPv4's do.
struct Ipv6EchoCase {
  const char* name;
  bool packet_tx, generic;
};
class LwipIpv6EchoTest : public LwipStackTest,
                         public ::testing::WithParamInterface<Ipv6EchoCase> {};

TEST_P(LwipIpv6EchoTest, KernelClientOverIpv6GetsEveryByteBack) {
  const bool packet_tx = GetParam().packet_tx;
  const bool generic = GetParam().generic;
  constexpr uint64_t kBytes = 1 << 20;
  Topology topo;
  for (const auto& [ns, cmd] : {
           std::pair<std::string, std::string>{
               "", "ip -6 addr add fd00:31:1::1/64 dev " + topo.client_side_if() + " nodad"},
           {topo.client_ns(),
            std::string("ip -6 addr add fd00:31:1::2/64 dev ") + Topology::kNsIf + " nodad"},
           {"", "ethtool -K " + topo.client_side_if() + " tx off"},
       }) {
    const CommandResult r = topo.Run(ns, cmd);
    ASSERT_EQ(r.status, 0) << cmd << ": " << r.output;
  }
  Ipv6Interface v6;
  ASSERT_EQ(inet_pton(AF_INET6, "fd00:31:1::1", &v6.addr), 1);
  v6.prefix_len = 64;
  in6_addr served{};
  ASSERT_EQ(inet_pton(AF_INET6, "fd00:31:1::1", &served), 1);
  FastInterface client_side;
  client_side.Open(topo.client_side_if(), topo.client_gw(), packet_tx, SmallBatchTx::kPacket, v6,
                   generic);
  if (HasFatalFailure()) return;
  ASSERT_TRUE(client_side.prog->AddListener(SteerAddress::V6(served), kEchoPort, 0));

  Worker worker(-1);
  worker.Add(client_side.netif.get());
  const uint16_t pcbs_before = PcbsInUse();
  std::unique_ptr<LwipEchoServer> echo;
  std::atomic<uint16_t> pcbs{0};
  std::atomic<uint64_t> echoed{0};
  WorkerThread thread(worker);
  thread.OnStop([&] { echo.reset(); });
  thread.Start([&] { echo = std::make_unique<LwipEchoServer>(served, kEchoPort); },
               [&] {
                 pcbs = PcbsInUse();
                 echoed = echo->bytes_echoed();
               });
  const uint64_t csum_errors_before = TcpChecksumErrors(topo, topo.client_ns());

  UniqueFd client = TcpConnect(topo.client_ns(), served, kEchoPort);
  int mss = 0;
  socklen_t mss_len = sizeof(mss);
  ASSERT_EQ(getsockopt(client.get(), IPPROTO_TCP, TCP_MAXSEG, &mss, &mss_len), 0);
  EXPECT_EQ(mss, 1500 - 40 - 20) << "lwIP announced the MTU less IPv6's and TCP's headers";
  StreamStats sent;
  std::thread sender([&] { sent = SendPattern(client.get(), 31, kBytes); });
  const StreamStats back = ReceiveAll(client.get());
  sender.join();
  EXPECT_EQ(sent.bytes, kBytes);
  EXPECT_EQ(back.bytes, kBytes) << client_side.Describe();
  EXPECT_EQ(back.hash, sent.hash) << "echoed bytes differ from sent bytes";
  client.reset();
  EXPECT_EQ(TcpChecksumErrors(topo, topo.client_ns()), csum_errors_before)
      << "the client's kernel found a wrong checksum";

  const auto deadline = std::chrono::steady_clock::now() + 5s;
  while (pcbs.load() != pcbs_before && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(5ms);
  }
  EXPECT_EQ(pcbs.load(), pcbs_before) << "the connection's pcb should be gone";
  EXPECT_EQ(echoed.load(), kBytes);
  thread.Stop();
  const NetifStats n = client_side.netif->stats();
  EXPECT_EQ(n.rx_not_ip, 0u);
  EXPECT_EQ(n.tx_no_neighbor, 0u) << "the client's MAC was learned from its SYN";
  if (packet_tx) {
    EXPECT_GT(n.packet_tx.gso_packets, 0u) << "no GSO_TCPV6 packet of several segments";
  } else {
    EXPECT_GT(client_side.port->stats().tx_checksum_offloaded, 0u);
  }
  if (generic) {
    EXPECT_EQ(client_side.prog->mode(), XdpMode::kGeneric);
    EXPECT_GT(client_side.port->stats().rx_chains, 0u) << "no TSO segment arrived as a chain";
    EXPECT_EQ(client_side.port->stats().rx_chains_dropped, 0u);
  }
  client_side.ExpectEverythingReturned();
}

INSTANTIATE_TEST_SUITE_P(Modes, LwipIpv6EchoTest,
                         ::testing::Values(Ipv6EchoCase{"af_xdp", false, false},
                                           Ipv6EchoCase{"packet_socket", true, false},
                                           Ipv6EchoCase{"generic_chains", false, true}),
                         [](const auto& p) { return std::string(p.param.name); });

// lwIP opens a connection to a kernel server: the backend leg's flow entry goes in before the
// SYN leaves, and the server's reply comes back through the steering program.
struct ClientState {
  tcp_pcb* pcb = nullptr;
  Fnv1a hash;
  uint64_t received = 0;
  bool connected = false, done = false;
};

err_t ClientRecv(void* arg, tcp_pcb* pcb, pbuf* p, err_t) {
  auto* st = static_cast<ClientState*>(arg);
  if (p == nullptr) {
    st->done = true;
    tcp_arg(pcb, nullptr);
    tcp_recv(pcb, nullptr);
    st->pcb = nullptr;
    if (tcp_close(pcb) != ERR_OK) {
      tcp_abort(pcb);
      return ERR_ABRT;
    }
    return ERR_OK;
  }
  for (pbuf* q = p; q != nullptr; q = q->next) st->hash.Update(q->payload, q->len);
  st->received += p->tot_len;
  tcp_recved(pcb, p->tot_len);
  pbuf_free(p);
  return ERR_OK;
}

err_t ClientConnected(void* arg, tcp_pcb* pcb, err_t) {
  auto* st = static_cast<ClientState*>(arg);
  st->connected = true;
  static const char kHello[] = "hello from lwIP";
  tcp_write(pcb, kHello, sizeof(kHello) - 1, 0);
  tcp_output(pcb);
  return ERR_OK;
}

TEST_F(LwipStackTest, LwipClientReachesAKernelServer) {
  Topology topo;
  FastInterface server_side;
  server_side.Open(topo.server_side_if(), topo.server_gw());
  if (HasFatalFailure()) return;

  UniqueFd listener = TcpListen(topo.server_ns(), topo.server_addr());
  const uint16_t server_port = LocalPort(listener.get());
  // accept() must not outlive a failed test.
  const timeval accept_timeout{10, 0};
  setsockopt(listener.get(), SOL_SOCKET, SO_RCVTIMEO, &accept_timeout, sizeof(accept_timeout));
  constexpr uint64_t kReply = 4u << 20;
  StreamStats replied;
  std::string greeting;
  std::thread server([&] {
    UniqueFd conn(accept(listener.get(), nullptr, nullptr));
    if (!conn) return;
    char buf[64];
    const ssize_t n = recv(conn.get(), buf, sizeof(buf), 0);
    if (n > 0) greeting.assign(buf, static_cast<size_t>(n));
    replied = SendPattern(conn.get(), 99, kReply);
  });

  Worker worker(-1);
  worker.Add(server_side.netif.get());
  const uint16_t pcbs_before = PcbsInUse();
  const std::vector<uint32_t> pools_before = PoolUsage();
  ClientState st;
  std::atomic<bool> done{false};
  std::atomic<uint64_t> received{0};
  std::atomic<bool> pools_back{false};
  WorkerThread thread(worker);
  thread.Start(
      [&] {
        st.pcb = tcp_new();
        ip_addr_t local, remote;
        ip_addr_set_ip4_u32(&local, topo.server_gw().s_addr);
        ip_addr_set_ip4_u32(&remote, topo.server_addr().s_addr);
        ASSERT_EQ(tcp_bind(st.pcb, &local, 0), ERR_OK);
        const uint16_t local_port = st.pcb->local_port;
        EXPECT_GE(local_port, 61000);
        // The backend's packets arrive source-first: server address and port, then ours.
        ASSERT_TRUE(server_side.prog->AddFlow(
            {topo.server_addr(), topo.server_gw(), server_port, local_port}, 0, 0));
        tcp_arg(st.pcb, &st);
        tcp_recv(st.pcb, ClientRecv);
        tcp_nagle_disable(st.pcb);
        ASSERT_EQ(tcp_connect(st.pcb, &remote, server_port, ClientConnected), ERR_OK);
      },
      [&] {
        done = st.done;
        received = st.received;
        pools_back = PoolUsage() == pools_before;
      });

  const auto deadline = std::chrono::steady_clock::now() + 20s;
  while (!done.load() && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(5ms);
  }
  server.join();
  // The kernel side closes first, so lwIP's pcb is in LAST_ACK until the final ACK: poll.
  const auto closed_by = std::chrono::steady_clock::now() + 5s;
  while (std::chrono::steady_clock::now() < closed_by && !pools_back.load()) {
    std::this_thread::sleep_for(5ms);
  }
  thread.Stop();
  EXPECT_TRUE(st.connected) << server_side.Describe();
  EXPECT_TRUE(done.load()) << "lwIP never saw the server's FIN";
  EXPECT_EQ(greeting, "hello from lwIP");
  EXPECT_EQ(received.load(), kReply);
  EXPECT_EQ(st.hash.value(), replied.hash);
  EXPECT_EQ(PcbsInUse(), pcbs_before);
  EXPECT_EQ(PoolUsage(), pools_before) << "an lwIP pool (segments, pbufs, heap) did not return";
  server_side.ExpectEverythingReturned();
}

// The packet socket's kernel, replaced by a script: it refuses every sendmmsg (ENOBUFS, a veth
// peer's full queue) while `refuse` is set, and takes what it is given after.
struct ScriptedKernel {
  bool refuse = true;
  uint32_t refused = 0, accepted = 0;
  void Replace(LwipNetif& netif, const std::string& ifname) {
    netif.ReplacePacketTxForTest(PacketTx::ForTest(
        [this](mmsghdr*, unsigned count) {
          if (refuse) {
            ++refused;
            errno = ENOBUFS;
            return -1;
          }
          accepted += count;
          return static_cast<int>(count);
        },
        ifname));
  }
};

// At a clean stop (Worker::Drain) the packets the kernel refused to the packet socket at the
// last flush go out, as they would at the next iteration, instead of staying in the batch. The
// kernel is replaced by a script: it refuses (ENOBUFS, a veth peer's full queue) until the
// drain starts, then takes what it is given.
TEST_F(LwipStackTest, DrainSendsWhatThePacketSocketRefused) {
  Topology topo;
  FastInterface server_side;
  server_side.Open(topo.server_side_if(), topo.server_gw(), /*packet_tx=*/true);
  if (HasFatalFailure()) return;
  // The kernel's neighbour table knows the server, so the netif's next-hop cache can.
  const auto ping = topo.Run("", "ping -c 1 -W 2 " + ToString(topo.server_addr()));
  ASSERT_EQ(ping.status, 0) << ping.output;
  ScriptedKernel kernel;
  kernel.Replace(*server_side.netif, topo.server_side_if());

  Worker worker(-1);
  worker.Add(server_side.netif.get());
  // A SYN to the server (never sent for real: the script is the kernel), run until it is
  // refused; lwIP retransmits it if the first one left before the neighbour was known.
  tcp_pcb* pcb = tcp_new();
  ASSERT_NE(pcb, nullptr);
  ip_addr_t local, remote;
  ip_addr_set_ip4_u32(&local, topo.server_gw().s_addr);
  ip_addr_set_ip4_u32(&remote, topo.server_addr().s_addr);
  ASSERT_EQ(tcp_bind(pcb, &local, 0), ERR_OK);
  ASSERT_EQ(tcp_connect(pcb, &remote, 9, nullptr), ERR_OK);
  const auto deadline = std::chrono::steady_clock::now() + 5s;
  while (!server_side.netif->tx_deferred() && std::chrono::steady_clock::now() < deadline) {
    worker.RunOnce();
  }
  ASSERT_TRUE(server_side.netif->tx_deferred()) << server_side.Describe();
  EXPECT_GE(kernel.refused, 1u);
  EXPECT_EQ(kernel.accepted, 0u);

  kernel.refuse = false;
  worker.Drain();
  EXPECT_FALSE(server_side.netif->tx_deferred()) << "the refused SYN is still in the batch";
  EXPECT_GE(kernel.accepted, 1u);
  tcp_abort(pcb);
  server_side.netif->FlushTx();  // the RST, so that the batch lets go of every pbuf
  EXPECT_FALSE(server_side.netif->tx_deferred());
}

// Segments lwIP hands over while the packet socket's batch is full of packets the kernel
// refused are refused in turn (Output's ERR_MEM: lwIP keeps them, the pcb marked
// TF_NAGLEMEMERR) and must leave once the batch has room: nothing else would send a segment
// with nothing in flight behind it. The netif has exactly those flows send again, each found by
// its 4-tuple, instead of walking every active pcb (with 200,000 pcbs a walk took 1-2 ms of the
// worker); with more refused flows than it keeps count of, it walks, once. The kernel is a
// script that refuses until told otherwise; the segments are SYNs, never sent for real.
class RefusedFlowsTest : public LwipStackTest, public ::testing::WithParamInterface<size_t> {};

TEST_P(RefusedFlowsTest, AreSentAgainOnceTheBatchHasRoom) {
  const size_t refused_flows = GetParam();
  Topology topo;
  FastInterface server_side;
  server_side.Open(topo.server_side_if(), topo.server_gw(), /*packet_tx=*/true);
  if (HasFatalFailure()) return;
  const auto ping = topo.Run("", "ping -c 1 -W 2 " + ToString(topo.server_addr()));
  ASSERT_EQ(ping.status, 0) << ping.output;
  ScriptedKernel kernel;
  kernel.Replace(*server_side.netif, topo.server_side_if());
  Worker worker(-1);
  worker.Add(server_side.netif.get());
  ip_addr_t local, remote;
  ip_addr_set_ip4_u32(&local, topo.server_gw().s_addr);
  ip_addr_set_ip4_u32(&remote, topo.server_addr().s_addr);
  std::vector<tcp_pcb*> pcbs;
  auto connect = [&] {
    tcp_pcb* pcb = tcp_new();
    ASSERT_NE(pcb, nullptr);
    pcbs.push_back(pcb);
    ASSERT_EQ(tcp_bind(pcb, &local, 0), ERR_OK);
    ASSERT_EQ(tcp_connect(pcb, &remote, 9, nullptr), ERR_OK);
  };
  // The first SYN, until it waits in the batch (the next hop known by then), then more until
  // `refused_flows` of them found the batch full.
  connect();
  const auto deadline = std::chrono::steady_clock::now() + 5s;
  while (!server_side.netif->tx_deferred() && std::chrono::steady_clock::now() < deadline) {
    worker.RunOnce();
  }
  ASSERT_TRUE(server_side.netif->tx_deferred()) << server_side.Describe();
  const uint64_t full_before = server_side.netif->stats().packet_tx.full;
  while (server_side.netif->stats().packet_tx.full - full_before < refused_flows) {
    connect();
    if (HasFatalFailure()) return;
    ASSERT_LT(pcbs.size(), refused_flows + 2 * TxBatch::kMaxPackets) << "the batch never filled";
  }
  size_t waiting = 0;
  for (tcp_pcb* pcb : pcbs) waiting += pcb->unsent != nullptr;
  EXPECT_EQ(waiting, refused_flows) << "SYNs lwIP still holds";

  kernel.refuse = false;
  for (int i = 0; i < 4; ++i) worker.RunOnce();  // the batch goes, then the refused flows send
  waiting = 0;
  for (tcp_pcb* pcb : pcbs) waiting += pcb->unsent != nullptr;
  EXPECT_EQ(waiting, 0u) << "refused SYNs never sent";
  EXPECT_EQ(kernel.accepted, pcbs.size());
  const NetifStats n = server_side.netif->stats();
  if (refused_flows <= LwipNetif::max_refused_flows()) {
    EXPECT_EQ(n.tx_refused_flows_retried, refused_flows);
    EXPECT_EQ(n.tx_refused_walks, 0u);
  } else {
    EXPECT_EQ(n.tx_refused_flows_retried, 0u);
    EXPECT_EQ(n.tx_refused_walks, 1u);
  }
  for (tcp_pcb* pcb : pcbs) tcp_abort(pcb);
  for (int i = 0; i < 4 && server_side.netif->tx_deferred(); ++i) worker.RunOnce();
  server_side.netif->FlushTx();  // the RSTs, so that the batch lets go of every pbuf
  EXPECT_FALSE(server_side.netif->tx_deferred());
}

INSTANTIATE_TEST_SUITE_P(Flows, RefusedFlowsTest,
                         ::testing::Values(size_t{40}, LwipNetif::max_refused_flows() + 10));

// With --tune tx-small=acks a receiver's run of bare ACKs goes through the packet socket, and that
// flow's next segments follow it there for PacketPathFlows::kHoldNs, though a batch of single
// segments would take the AF_XDP port: a veth peer with threaded NAPI receives the socket's
// skbs later than the port's, and the segment would overtake the ACKs (packet_path_flows.h).
// Once the hold is over, the flow's segments take the port again.
TEST_F(LwipStackTest, AFlowWhoseAcksWentThroughThePacketSocketKeepsToIt) {
  Topology topo;
  FastInterface server_side;
  server_side.Open(topo.server_side_if(), topo.server_gw(), /*packet_tx=*/true,
                   SmallBatchTx::kAcksThroughPacket);
  if (HasFatalFailure()) return;
  const auto ping = topo.Run("", "ping -c 1 -W 2 " + ToString(topo.server_addr()));
  ASSERT_EQ(ping.status, 0) << ping.output;

  UniqueFd listener = TcpListen(topo.server_ns(), topo.server_addr());
  const uint16_t server_port = LocalPort(listener.get());
  const timeval timeout{10, 0};
  setsockopt(listener.get(), SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
  constexpr int kChunks = 8;
  constexpr size_t kChunk = 100;
  std::atomic<size_t> server_got{0};
  std::thread server([&] {
    UniqueFd conn(accept(listener.get(), nullptr, nullptr));
    if (!conn) return;
    setsockopt(conn.get(), SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
    const std::string chunk(kChunk, 'c');
    // Apart by more than lwIP's delayed ACK (two 10 ms ticks): each is answered by a bare ACK.
    for (int i = 0; i < kChunks; ++i) {
      if (send(conn.get(), chunk.data(), chunk.size(), MSG_NOSIGNAL) != ssize_t(kChunk)) return;
      std::this_thread::sleep_for(40ms);
    }
    char buf[512];
    while (server_got.load() < 2 * kChunk) {
      const ssize_t n = recv(conn.get(), buf, sizeof(buf), 0);
      if (n <= 0) return;
      server_got += static_cast<size_t>(n);
    }
  });

  Worker worker(-1);
  worker.Add(server_side.netif.get());
  ClientState st;
  st.pcb = tcp_new();
  ASSERT_NE(st.pcb, nullptr);
  ip_addr_t local, remote;
  ip_addr_set_ip4_u32(&local, topo.server_gw().s_addr);
  ip_addr_set_ip4_u32(&remote, topo.server_addr().s_addr);
  ASSERT_EQ(tcp_bind(st.pcb, &local, 0), ERR_OK);
  ASSERT_TRUE(server_side.prog->AddFlow(
      {topo.server_addr(), topo.server_gw(), server_port, st.pcb->local_port}, 0, 0));
  tcp_arg(st.pcb, &st);
  tcp_recv(st.pcb, ClientRecv);
  tcp_nagle_disable(st.pcb);
  ASSERT_EQ(tcp_connect(st.pcb, &remote, server_port, nullptr), ERR_OK);
  auto run_until = [&](auto done) {
    const auto deadline = std::chrono::steady_clock::now() + 10s;
    for (;;) {
      if (done()) return true;  // asked once per iteration: `done` may count what it sees
      if (std::chrono::steady_clock::now() >= deadline) return false;
      worker.RunOnce();
    }
  };
  const std::string data(kChunk, 'd');
  auto write = [&] {
    ASSERT_EQ(tcp_write(st.pcb, data.data(), kChunk, TCP_WRITE_FLAG_COPY), ERR_OK);
    ASSERT_EQ(tcp_output(st.pcb), ERR_OK);
  };

  const uint16_t pcbs_before = PcbsInUse() - 1;  // less the one above
  // Every chunk in, and the ACK of the last one out through the packet socket (the run): the
  // flow is held there from now on for kHoldNs.
  uint64_t sent_by_socket = 0;
  EXPECT_TRUE(run_until([&] {
    const uint64_t now_sent = server_side.netif->stats().packet_tx.segments;
    const bool acked_last = st.received == kChunks * kChunk && now_sent > sent_by_socket;
    sent_by_socket = now_sent;
    return acked_last;
  })) << "received "
      << st.received << "; " << server_side.Describe();
  const NetifStats acked = server_side.netif->stats();
  EXPECT_GT(acked.packet_tx.segments, 0u) << "no ACK went through the packet socket";

  write();
  worker.RunOnce();  // FlushTx
  const NetifStats kept = server_side.netif->stats();
  EXPECT_EQ(kept.tx_singles_af_xdp, acked.tx_singles_af_xdp) << "the segment took the port";
  EXPECT_EQ(kept.tx_singles_kept_to_packet, acked.tx_singles_kept_to_packet + 1);
  EXPECT_TRUE(run_until([&] { return server_got.load() == kChunk; })) << server_got.load();

  // Past the hold, with nothing sent meanwhile, the flow's next segment takes the port again.
  const auto hold_over =
      std::chrono::steady_clock::now() + std::chrono::nanoseconds(PacketPathFlows::kHoldNs) + 10ms;
  run_until([&] { return std::chrono::steady_clock::now() >= hold_over; });
  const NetifStats later = server_side.netif->stats();
  write();
  worker.RunOnce();
  EXPECT_EQ(server_side.netif->stats().tx_singles_af_xdp, later.tx_singles_af_xdp + 1);
  EXPECT_TRUE(run_until([&] { return server_got.load() == 2 * kChunk; })) << server_got.load();
  server.join();  // the server closes: lwIP closes in turn (ClientRecv)
  EXPECT_TRUE(run_until([&] { return st.done && PcbsInUse() == pcbs_before; }))
      << "done " << st.done << ", pcbs " << PcbsInUse() << " against " << pcbs_before;
  if (!st.done && st.pcb != nullptr) tcp_abort(st.pcb);
  server_side.netif->FlushTx();
}

size_t OpenFds() {
  return static_cast<size_t>(std::distance(std::filesystem::directory_iterator("/proc/self/fd"),
                                           std::filesystem::directory_iterator()));
}

// Opening and closing the whole fast path leaves no fd behind, and the worker runs on the CPU
// it was given.
TEST_F(LwipStackTest, NoFdLeaksAndTheWorkerIsPinned) {
  Topology topo;
  const size_t fds_before = OpenFds();
  for (int round = 0; round < 3; ++round) {
    FastInterface fast;
    fast.Open(topo.client_side_if(), topo.client_gw());
    if (HasFatalFailure()) return;
    Worker worker(round % 2);  // CPU 0, then 1, then 0
    worker.Add(fast.netif.get());
    std::atomic<int> cpu{-1};
    std::atomic<uint64_t> iterations{0};
    WorkerThread thread(worker);
    thread.Start([] {},
                 [&] {
                   cpu = sched_getcpu();
                   ++iterations;
                 });
    const auto deadline = std::chrono::steady_clock::now() + 10s;
    while (iterations.load() < 1000 && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::yield();
    }
    thread.Stop();
    EXPECT_EQ(cpu.load(), round % 2);
    fast.ExpectEverythingReturned();
  }
  EXPECT_EQ(OpenFds(), fds_before) << "an fd leaked across open/close of the fast path";
}

}  // namespace
}  // namespace xdpfwd::test
