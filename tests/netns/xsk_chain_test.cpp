// Multi-buffer RX on a real veth: the steering program in generic mode, the peer's TSO left on,
// so its 64 KiB segments reach an XDP_USE_SG socket as descriptor chains. XskPort::Receive
// must hand out whole packets only, keep a chain that does not fit the caller's batch for the
// next call, and drop (and count) one longer than any batch, every frame accounted for.
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <thread>
#include <vector>

#include "stack/xsk_port.h"
#include "tests/support/netns_topology.h"
#include "tests/support/tcp.h"
#include "xdp/steer.h"

namespace xdpfwd::test {
namespace {

using namespace std::chrono_literals;

constexpr uint32_t kEthernetHeader = 14;

uint32_t IpTotalLength(const RxFrame& first) {
  return static_cast<uint32_t>(first.data[kEthernetHeader + 2] << 8 |
                               first.data[kEthernetHeader + 3]);
}

class XskChainTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (geteuid() != 0) GTEST_SKIP() << "namespace tests need root";
    SteerOptions so;
    so.force_generic = true;  // generic mode: the client's TSO stays on
    auto prog = SteerProgram::Attach(topo_.client_side_if(), so);
    ASSERT_TRUE(prog) << prog.error().message();
    prog_ = std::move(*prog);
    ASSERT_EQ(prog_->mode(), XdpMode::kGeneric);
    XskPortConfig cfg;
    cfg.ifname = topo_.client_side_if();
    cfg.frame_count = 4096;
    cfg.ring_size = 1024;
    auto port = XskPort::Open(cfg);
    ASSERT_TRUE(port) << port.error().message();
    port_ = std::move(*port);
    ASSERT_TRUE(port_->multi_buffer());
    ASSERT_TRUE(prog_->BindQueue(0, port_->fd()));
  }

  void TearDown() override {
    if (!port_) return;
    const FrameAccount f = port_->frames();
    EXPECT_EQ(f.held, 0u) << "frames still held by the test";
    EXPECT_EQ(f.in_pool + f.in_fill + f.in_tx + f.held, f.total) << "a frame went missing";
    EXPECT_EQ(port_->stats().kernel_rx_dropped, 0u);
  }

  // A kernel connection from the client namespace to the root namespace, warmed up through the
  // kernel (so the client's window is large), then steered to the socket: the client's next
  // send arrives at the RX ring in TSO segments, and nobody acknowledges them.
  void SteerABulkSendToTheSocket() {
    listener_ = TcpListen("", topo_.client_gw());
    const uint16_t port = LocalPort(listener_.get());
    client_ = TcpConnect(topo_.client_ns(), topo_.client_gw(), port);
    server_ = UniqueFd(accept(listener_.get(), nullptr, nullptr));
    ASSERT_TRUE(server_);
    constexpr size_t kWarmUp = 4u << 20;
    auto drained = std::thread([&] { ReceiveUpTo(server_.get(), kWarmUp); });
    std::vector<uint8_t> data(1u << 20, 0x5a);
    for (size_t sent = 0; sent < kWarmUp;) {
      const ssize_t n = send(client_.get(), data.data(), data.size(), MSG_NOSIGNAL);
      ASSERT_GT(n, 0) << std::strerror(errno);
      sent += static_cast<size_t>(n);
    }
    drained.join();
    const uint16_t client_port = LocalPort(client_.get());
    ASSERT_TRUE(prog_->AddFlow({topo_.client_addr(), topo_.client_gw(), client_port, port}, 0, 0));
    // Non-blocking: the client sends what its window allows and no ACK ever comes.
    ASSERT_GT(send(client_.get(), data.data(), data.size(), MSG_DONTWAIT | MSG_NOSIGNAL), 0)
        << std::strerror(errno);
    std::this_thread::sleep_for(100ms);  // the flight lands in the RX ring; nothing consumes it
  }

  // Receives with batches of `batch` frames until `calls` calls in a row return nothing. Every
  // packet must be whole: its frames add up to its IP total length.
  struct Seen {
    uint32_t packets = 0, chains = 0, frames = 0;
    bool kept_for_next_call = false;  // a call returned less than the batch, the next more
  };
  Seen ReceiveAllWith(uint32_t batch, uint32_t until_dropped = 0) {
    Seen seen;
    std::vector<RxFrame> rx(batch);
    uint32_t idle = 0, last = batch;
    while (idle < 20 && (until_dropped == 0 || port_->stats().rx_chains_dropped < until_dropped)) {
      const uint32_t n = port_->Receive(rx);
      if (n == 0) {
        ++idle;
        std::this_thread::sleep_for(1ms);
        continue;
      }
      if (last < batch) seen.kept_for_next_call = true;
      last = n;
      idle = 0;
      EXPECT_FALSE(rx[n - 1].more) << "a call handed out half a chain";
      for (uint32_t i = 0; i < n;) {
        uint32_t end = i, bytes = 0;
        while (rx[end].more) bytes += rx[end++].len;
        bytes += rx[end].len;
        EXPECT_EQ(bytes - kEthernetHeader, IpTotalLength(rx[i]));
        ++seen.packets;
        seen.frames += end - i + 1;
        if (end > i) ++seen.chains;
        for (uint32_t k = i; k <= end; ++k) port_->Release(rx[k].addr);
        i = end + 1;
      }
      port_->Flush();
    }
    return seen;
  }

  static void ReceiveUpTo(int fd, uint64_t total) {
    std::vector<uint8_t> buf(1 << 16);
    for (uint64_t got = 0; got < total;) {
      const ssize_t n = recv(fd, buf.data(), buf.size(), 0);
      if (n <= 0) return;
      got += static_cast<uint64_t>(n);
    }
  }

  Topology topo_;
  std::unique_ptr<SteerProgram> prog_;
  std::unique_ptr<XskPort> port_;
  UniqueFd listener_, client_, server_;
};

TEST_F(XskChainTest, TsoSegmentsArriveWholeAndAChainWaitsForTheNextCall) {
  SteerABulkSendToTheSocket();
  // 24 frames hold one 64 KiB chain (18 frames) but not two: the second waits for the next
  // call instead of being handed out in part.
  const Seen seen = ReceiveAllWith(24);
  std::printf("[ info ] %u packets in %u frames, %u of them chains\n", seen.packets, seen.frames,
              seen.chains);
  EXPECT_GT(seen.chains, 0u) << "no TSO segment arrived as a chain";
  EXPECT_GT(seen.frames, seen.packets);
  EXPECT_TRUE(seen.kept_for_next_call);
  const XskStats s = port_->stats();
  EXPECT_EQ(s.rx_packets, seen.packets);
  EXPECT_EQ(s.rx_descriptors, seen.frames);
  EXPECT_EQ(s.rx_chains, seen.chains);
  EXPECT_EQ(s.rx_chains_dropped, 0u);
}

TEST_F(XskChainTest, AChainLongerThanTheBatchIsDroppedWholeAndCounted) {
  SteerABulkSendToTheSocket();
  // Batches of 2 frames cannot take a chain of 3 or more: the first such one is dropped, its
  // frames (those still in the ring too) go back to the pool, and what follows arrives whole.
  ReceiveAllWith(2, 1);
  EXPECT_EQ(port_->stats().rx_chains_dropped, 1u);
  const Seen rest = ReceiveAllWith(24);
  EXPECT_GT(rest.packets, 0u) << "nothing came after the dropped chain";
}

}  // namespace
}  // namespace xdpfwd::test
