// Does XDP metadata reach an AF_XDP socket in copy mode? The N-worker design stamps each
// redirected frame with its flow's owner (bpf_xdp_adjust_meta) so that the worker receiving
// it can hand it over. net/xdp/xsk.c's copy path (__xsk_rcv) copies from data_meta and puts
// the packet after it, so the owner should sit just in front of the packet in the UMEM frame.
// Measured here on veth in native and generic XDP, with live SYNs from a client namespace.
#include <arpa/inet.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

#include <array>
#include <chrono>
#include <cstring>
#include <memory>
#include <optional>
#include <thread>

#include "os/unique_fd.h"
#include "stack/xsk_port.h"
#include "tests/support/netns_topology.h"
#include "xdp/steer.h"

namespace xdpfwd::test {
namespace {

using namespace std::chrono_literals;

constexpr uint16_t kListenPort = 9400;

// Starts a connect from `ns` that nobody will answer: its SYN, then the kernel's
// retransmissions of it, are what the steering program sees.
UniqueFd StartConnect(const std::string& ns, in_addr addr, uint16_t port) {
  UniqueFd fd;
  RunInNamespace(ns, [&] {
    fd.reset(socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
    sockaddr_in to{};
    to.sin_family = AF_INET;
    to.sin_addr = addr;
    to.sin_port = htons(port);
    (void)connect(fd.get(), reinterpret_cast<sockaddr*>(&to), sizeof(to));
  });
  return fd;
}

struct SeenSyn {
  steer_rx_meta meta;
  uint16_t sport;
};

class RxMetadataTest : public ::testing::TestWithParam<XdpMode> {
 protected:
  void SetUp() override {
    if (geteuid() != 0) GTEST_SKIP() << "namespace tests need root";
    SteerOptions options;
    options.force_generic = GetParam() == XdpMode::kGeneric;
    options.allow_generic = options.force_generic;
    auto prog = SteerProgram::Attach(topo_.client_side_if(), options);
    ASSERT_TRUE(prog) << prog.error().message();
    prog_ = std::move(*prog);
    ASSERT_EQ(prog_->mode(), GetParam());
    XskPortConfig cfg;
    cfg.ifname = topo_.client_side_if();
    cfg.frame_count = 512;
    cfg.ring_size = 256;
    auto port = XskPort::Open(cfg);
    ASSERT_TRUE(port) << port.error().message();
    port_ = std::move(*port);
    ASSERT_FALSE(port_->zero_copy()) << "veth has no zero-copy mode: this measures copy mode";
    ASSERT_TRUE(prog_->BindQueue(0, port_->fd()));
    ASSERT_TRUE(prog_->AddListener(topo_.client_gw(), kListenPort, 1));
  }

  // The next SYN to the listener the socket receives, with the 8 bytes in front of it.
  std::optional<SeenSyn> NextSyn(std::chrono::milliseconds limit) {
    std::array<RxFrame, 64> rx{};
    std::optional<SeenSyn> seen;
    const auto deadline = std::chrono::steady_clock::now() + limit;
    while (!seen && std::chrono::steady_clock::now() < deadline) {
      const uint32_t n = port_->Receive(rx);
      for (uint32_t i = 0; i < n; ++i) {
        const uint8_t* f = rx[i].data;
        if (!seen && rx[i].len >= 54 && f[12] == 0x08 && f[13] == 0x00 && f[23] == 6) {
          const uint8_t* tcp = f + 14 + (f[14] & 0x0f) * 4;
          if ((tcp[2] << 8 | tcp[3]) == kListenPort && (tcp[13] & 0x02) != 0) {
            SeenSyn s{};
            // The frame's headroom: the kernel put the packet XDP_PACKET_HEADROOM (256)
            // bytes into it, so these 8 bytes are inside the frame whatever was copied.
            std::memcpy(&s.meta, f - sizeof(steer_rx_meta), sizeof(s.meta));
            s.sport = static_cast<uint16_t>(tcp[0] << 8 | tcp[1]);
            seen = s;
          }
        }
        port_->Release(rx[i].addr);
      }
      port_->Flush();
      if (n == 0) std::this_thread::sleep_for(1ms);
    }
    return seen;
  }

  Topology topo_;
  std::unique_ptr<SteerProgram> prog_;
  std::unique_ptr<XskPort> port_;
};

TEST_P(RxMetadataTest, TheOwnerWrittenInXdpArrivesInFrontOfThePacket) {
  // Worker 5 serves queue 0 when the SYN arrives: the new flow is 5's, and its frame says so.
  // (The UMEM starts zeroed, so the magic cannot be left over from anything.)
  ASSERT_TRUE(prog_->SetQueueWorker(0, 5));
  UniqueFd client = StartConnect(topo_.client_ns(), topo_.client_gw(), kListenPort);
  const auto syn = NextSyn(3s);
  ASSERT_TRUE(syn.has_value()) << "the SYN never reached the socket";
  EXPECT_EQ(syn->meta.magic, STEER_RX_META_MAGIC) << "no metadata in the UMEM frame";
  EXPECT_EQ(syn->meta.owner, 5u);
  EXPECT_EQ(prog_->ReadCounters()[STEER_REDIRECT_NEW_FLOW].packets, 1u);

  // Queue 0 now belongs to worker 0: the client's retransmitted SYN (about 1 s later) is a
  // packet of worker 5's flow on worker 0's queue, a handoff, and still carries owner 5.
  ASSERT_TRUE(prog_->SetQueueWorker(0, 0));
  const auto again = NextSyn(4s);
  ASSERT_TRUE(again.has_value()) << "no retransmitted SYN";
  EXPECT_EQ(again->sport, syn->sport);
  EXPECT_EQ(again->meta.magic, STEER_RX_META_MAGIC);
  EXPECT_EQ(again->meta.owner, 5u);
  EXPECT_GE(prog_->ReadCounters()[STEER_REDIRECT_HANDOFF].packets, 1u);
}

INSTANTIATE_TEST_SUITE_P(CopyMode, RxMetadataTest,
                         ::testing::Values(XdpMode::kNative, XdpMode::kGeneric),
                         [](const auto& param) { return std::string(ModeName(param.param)); });

}  // namespace
}  // namespace xdpfwd::test
