// The steering program on a real veth: a client's SYN to a listener arrives in an AF_XDP
// socket, while ARP, ping, forwarded connections and other ports keep working through the
// kernel. And the program's lifecycle through the real xdpfwd-xdp binary: SIGTERM/SIGINT
// detach, a start after SIGKILL replaces the stale program, live and foreign programs are
// refused, bpffs is not needed, and native-mode failure falls back to generic with a reason.
#include <arpa/inet.h>
#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <linux/if_link.h>
#include <net/if.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <array>
#include <chrono>
#include <thread>

#include "lossy.skel.h"
#include "stack/xsk_port.h"
#include "tests/support/child_process.h"
#include "tests/support/netns_topology.h"
#include "tests/support/packet_builder.h"
#include "tests/support/tcp.h"
#include "xdp/steer.h"

namespace xdpfwd::test {
namespace {

using namespace std::chrono_literals;

constexpr uint16_t kListenPort = 9000;  // inside this test's own topology only

// The program id attached to ifname in any mode, 0 if none.
uint32_t AttachedProgId(const std::string& ifname) {
  bpf_xdp_query_opts q{};
  q.sz = sizeof(q);
  const int ifindex = static_cast<int>(if_nametoindex(ifname.c_str()));
  if (ifindex == 0 || bpf_xdp_query(ifindex, 0, &q) != 0) return 0;
  return q.drv_prog_id ? q.drv_prog_id : q.skb_prog_id;
}

uint64_t Packets(const SteerCounters& c, SteerReason r) {
  return c[static_cast<size_t>(r)].packets;
}

class SteerNetnsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (geteuid() != 0) GTEST_SKIP() << "namespace tests need root";
  }
};

TEST_F(SteerNetnsTest, SynReachesAfXdpSocketWhileOtherTrafficUsesTheKernel) {
  Topology topo;
  {
    auto prog = SteerProgram::Attach(topo.client_side_if());
    ASSERT_TRUE(prog) << prog.error().message();
    EXPECT_EQ((*prog)->mode(), XdpMode::kNative);
    XskPortConfig cfg;
    cfg.ifname = topo.client_side_if();
    cfg.frame_count = 256;
    cfg.ring_size = 64;
    auto port = XskPort::Open(cfg);
    ASSERT_TRUE(port) << port.error().message();
    auto& xsk = *port;
    ASSERT_TRUE((*prog)->BindQueue(0, xsk->fd()));
    ASSERT_TRUE((*prog)->AddListener(topo.client_gw(), kListenPort, 1));

    // Ping first: ARP and ICMP through the kernel, to the root namespace and across it.
    auto ping = topo.Run(topo.client_ns(), "ping -c 2 -i 0.2 -W 2 " + ToString(topo.server_addr()));
    EXPECT_EQ(ping.status, 0) << ping.output;
    ping = topo.Run(topo.client_ns(), "ping -c 1 -W 2 " + ToString(topo.client_gw()));
    EXPECT_EQ(ping.status, 0) << ping.output;

    // A connection to a port that is not a listener: served by the kernel, bytes intact.
    UniqueFd server = TcpListen(topo.server_ns(), topo.server_addr());
    const uint16_t server_port = LocalPort(server.get());
    StreamStats echoed_by_server;
    std::thread echo([&] {
      UniqueFd conn(accept(server.get(), nullptr, nullptr));
      if (conn) echoed_by_server = EchoUntilEof(conn.get());
    });
    UniqueFd client = TcpConnect(topo.client_ns(), topo.server_addr(), server_port);
    StreamStats sent;
    std::thread sender([&] { sent = SendPattern(client.get(), 5, 4u << 20); });
    const StreamStats back = ReceiveAll(client.get());
    sender.join();
    echo.join();
    EXPECT_EQ(echoed_by_server.hash, sent.hash);
    EXPECT_EQ(back.hash, sent.hash);
    EXPECT_EQ(back.bytes, 4u << 20);

    // A real client's SYN to the listener: it must land in the AF_XDP socket.
    UniqueFd syn_client;
    RunInNamespace(topo.client_ns(), [&] {
      syn_client.reset(socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
      sockaddr_in sa{};
      sa.sin_family = AF_INET;
      sa.sin_addr = topo.client_gw();
      sa.sin_port = htons(kListenPort);
      connect(syn_client.get(), reinterpret_cast<sockaddr*>(&sa), sizeof(sa));
    });
    const uint16_t client_port = LocalPort(syn_client.get());
    bool saw_syn = false;
    std::array<RxFrame, 64> rx{};
    const auto deadline = std::chrono::steady_clock::now() + 2s;
    while (!saw_syn && std::chrono::steady_clock::now() < deadline) {
      const uint32_t n = xsk->Receive(rx);
      for (uint32_t i = 0; i < n; ++i) {
        const uint8_t* f = rx[i].data;
        EXPECT_GE(rx[i].len, 54u);
        const uint8_t* ip = f + 14;
        const uint8_t* tcp = ip + (ip[0] & 0x0f) * 4;
        const uint16_t sport = static_cast<uint16_t>(tcp[0] << 8 | tcp[1]);
        const uint16_t dport = static_cast<uint16_t>(tcp[2] << 8 | tcp[3]);
        EXPECT_EQ(f[12] << 8 | f[13], 0x0800);
        EXPECT_EQ(ip[9], 6);
        if (sport == client_port && dport == kListenPort && (tcp[13] & kSyn)) saw_syn = true;
        xsk->Release(rx[i].addr);
      }
      xsk->Flush();
      if (n == 0) std::this_thread::sleep_for(1ms);
    }
    EXPECT_TRUE(saw_syn) << "the client's SYN never reached the AF_XDP socket";
    auto flow =
        (*prog)->LookupFlow({topo.client_addr(), topo.client_gw(), client_port, kListenPort});
    EXPECT_TRUE(flow.has_value());

    const SteerCounters c = (*prog)->ReadCounters();
    EXPECT_GE(Packets(c, SteerReason::kRedirectNewFlow), 1u);
    EXPECT_GE(Packets(c, SteerReason::kPassNotIp), 1u) << "ARP should have passed";
    EXPECT_GE(Packets(c, SteerReason::kPassNotTcp), 3u) << "pings should have passed";
    EXPECT_GE(Packets(c, SteerReason::kPassNotListener), 1u) << "the kernel connection's SYN";
    EXPECT_GE(Packets(c, SteerReason::kPassUnknownFlow), 10u) << "the kernel connection's data";
    EXPECT_EQ(Packets(c, SteerReason::kPassNoSocket), 0u);
  }
  EXPECT_EQ(AttachedProgId(topo.client_side_if()), 0u) << "destructor must detach";
}

class SteerProcessTest : public SteerNetnsTest {
 protected:
  std::vector<std::string> AttachArgs(const Topology& topo) {
    return {XDPFWD_XDP_TOOL, "attach", topo.client_side_if(), "--listen",
            ToString(topo.client_gw()) + ":9000"};
  }
};

TEST_F(SteerProcessTest, SigtermAndSigintDetach) {
  Topology topo;
  for (int sig : {SIGTERM, SIGINT}) {
    ChildProcess tool(AttachArgs(topo));
    ASSERT_TRUE(tool.WaitForLine("ready:", 10s)) << tool.output();
    EXPECT_NE(AttachedProgId(topo.client_side_if()), 0u);
    tool.Signal(sig);
    EXPECT_EQ(tool.Wait(10s), 0) << tool.output();
    EXPECT_NE(tool.output().find("detached from"), std::string::npos) << tool.output();
    EXPECT_NE(tool.output().find("redirect_new_flow"), std::string::npos) << "counters on stop";
    EXPECT_EQ(AttachedProgId(topo.client_side_if()), 0u) << "still attached after signal " << sig;
  }
}

TEST_F(SteerProcessTest, StartAfterSigkillReplacesTheStaleProgram) {
  Topology topo;
  uint32_t stale_id = 0;
  {
    ChildProcess first(AttachArgs(topo));
    ASSERT_TRUE(first.WaitForLine("ready:", 10s)) << first.output();
    stale_id = AttachedProgId(topo.client_side_if());
    ASSERT_NE(stale_id, 0u);
    first.Signal(SIGKILL);
    EXPECT_EQ(first.Wait(10s), 128 + SIGKILL);
  }
  ASSERT_EQ(AttachedProgId(topo.client_side_if()), stale_id) << "SIGKILL leaves it attached";
  const RunResult status = RunProgram({XDPFWD_XDP_TOOL, "status", topo.client_side_if()});
  EXPECT_EQ(status.status, 0) << status.output;
  EXPECT_NE(status.output.find("stale"), std::string::npos) << status.output;

  ChildProcess second(AttachArgs(topo));
  ASSERT_TRUE(second.WaitForLine("ready:", 10s)) << second.output();
  EXPECT_NE(second.output().find("removed a stale xdpfwd program"), std::string::npos)
      << second.output();
  const uint32_t new_id = AttachedProgId(topo.client_side_if());
  EXPECT_NE(new_id, 0u);
  EXPECT_NE(new_id, stale_id) << "exactly one program, the new one";
  second.Signal(SIGTERM);
  EXPECT_EQ(second.Wait(10s), 0) << second.output();
  EXPECT_EQ(AttachedProgId(topo.client_side_if()), 0u);
}

TEST_F(SteerProcessTest, DetachCommandRemovesOnlyAStaleProgram) {
  Topology topo;
  ChildProcess live(AttachArgs(topo));
  ASSERT_TRUE(live.WaitForLine("ready:", 10s)) << live.output();
  const RunResult refused = RunProgram({XDPFWD_XDP_TOOL, "detach", topo.client_side_if()});
  EXPECT_EQ(refused.status, 1);
  EXPECT_NE(refused.output.find("is already attached; stop it first"), std::string::npos)
      << refused.output;
  EXPECT_NE(AttachedProgId(topo.client_side_if()), 0u);
  live.Signal(SIGKILL);
  live.Wait(10s);
  const RunResult removed = RunProgram({XDPFWD_XDP_TOOL, "detach", topo.client_side_if()});
  EXPECT_EQ(removed.status, 0) << removed.output;
  EXPECT_EQ(AttachedProgId(topo.client_side_if()), 0u);
}

TEST_F(SteerProcessTest, RefusesASecondLiveInstance) {
  Topology topo;
  ChildProcess first(AttachArgs(topo));
  ASSERT_TRUE(first.WaitForLine("ready:", 10s)) << first.output();
  const uint32_t id = AttachedProgId(topo.client_side_if());
  const RunResult second = RunProgram(AttachArgs(topo));
  EXPECT_EQ(second.status, 1);
  EXPECT_NE(
      second.output.find("xdpfwd (pid " + std::to_string(first.pid()) + ") is already attached"),
      std::string::npos)
      << second.output;
  EXPECT_EQ(AttachedProgId(topo.client_side_if()), id) << "the live instance keeps its program";
  first.Signal(SIGTERM);
  EXPECT_EQ(first.Wait(10s), 0);
}

TEST_F(SteerProcessTest, RefusesToReplaceAForeignProgram) {
  Topology topo;
  lossy* foreign = lossy__open_and_load();
  ASSERT_NE(foreign, nullptr);
  const int ifindex = static_cast<int>(if_nametoindex(topo.client_side_if().c_str()));
  ASSERT_EQ(
      bpf_xdp_attach(ifindex, bpf_program__fd(foreign->progs.lossy), XDP_FLAGS_DRV_MODE, nullptr),
      0);
  const uint32_t foreign_id = AttachedProgId(topo.client_side_if());

  const RunResult attach = RunProgram(AttachArgs(topo));
  EXPECT_EQ(attach.status, 1);
  EXPECT_NE(attach.output.find("'lossy'"), std::string::npos) << attach.output;
  EXPECT_NE(attach.output.find("is not xdpfwd's"), std::string::npos) << attach.output;
  const RunResult detach = RunProgram({XDPFWD_XDP_TOOL, "detach", topo.client_side_if()});
  EXPECT_EQ(detach.status, 1) << detach.output;
  EXPECT_EQ(AttachedProgId(topo.client_side_if()), foreign_id) << "foreign program untouched";

  bpf_xdp_detach(ifindex, XDP_FLAGS_DRV_MODE, nullptr);
  lossy__destroy(foreign);
}

TEST_F(SteerProcessTest, AttachesWithoutBpffs) {
  Topology topo;
  // A private mount namespace with bpffs unmounted: the loader must not need it.
  std::string cmd =
      "umount /sys/fs/bpf 2>/dev/null; ! grep -q ' /sys/fs/bpf ' /proc/mounts && "
      "exec";
  for (const std::string& a : AttachArgs(topo)) cmd += " '" + a + "'";
  ChildProcess tool(
      {"/usr/bin/unshare", "--mount", "--propagation", "private", "/bin/sh", "-c", cmd});
  ASSERT_TRUE(tool.WaitForLine("ready:", 10s)) << tool.output();
  tool.Signal(SIGTERM);
  EXPECT_EQ(tool.Wait(10s), 0) << tool.output();
  EXPECT_EQ(AttachedProgId(topo.client_side_if()), 0u);
}

TEST_F(SteerProcessTest, NativeFailureFallsBackToGenericAndSaysWhy) {
  // Native XDP on veth refuses a device with fewer RX queues than its peer has TX queues (the
  // program is xdp.frags, so a large MTU no longer makes it fail).
  Topology topo({.queues = 2});
  const auto lowered = RunCommand("", "ethtool -L " + topo.client_side_if() + " rx 1");
  ASSERT_EQ(lowered.status, 0) << lowered.output;
  ChildProcess tool(AttachArgs(topo));
  ASSERT_TRUE(tool.WaitForLine("ready:", 10s)) << tool.output();
  EXPECT_NE(tool.output().find("generic (SKB) mode because native mode failed"), std::string::npos)
      << tool.output();
  EXPECT_NE(tool.output().find("generic mode"), std::string::npos) << tool.output();
  tool.Signal(SIGTERM);
  EXPECT_EQ(tool.Wait(10s), 0) << tool.output();
  EXPECT_EQ(AttachedProgId(topo.client_side_if()), 0u);
}

}  // namespace
}  // namespace xdpfwd::test
