// BBR in our lwIP (stack/lwip/cc/bbr.c) over two netifs wired in memory: round trips timed on
// the wire's microsecond clock, Startup that ends when the delivery rate stops growing (here at the
// receive window), a window that a random loss does not shrink (CUBIC's leaves 0.7 of it), so
// a lossy transfer finishes in a fraction of CUBIC's time, and an RTO that restarts Startup
// from four segments. Each test fails with the controller off (xdpfwd_tcp_cc left loss-based).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <iostream>
#include <string>
#include <vector>

#include "tests/unit/lwip_wire_fixture.h"

namespace xdpfwd::test {
namespace {

using namespace wire;  // NOLINT(google-build-using-namespace): the fixture's vocabulary

constexpr uint32_t kOneWayTicks = 1;  // a 20 ms round trip
constexpr uint64_t kRttUs = 2 * kOneWayTicks * kTickMs * 1000;

class LwipBbrTest : public LwipWireTest {
 protected:
  // Before the fixture's listener: every pcb copies the choice when lwIP allocates it.
  void SetUp() override {
    xdpfwd_tcp_cc = TCP_CC_BBR;
    LwipWireTest::SetUp();
  }
  void TearDown() override {
    LwipWireTest::TearDown();
    xdpfwd_tcp_cc = TCP_CC_LOSS_BASED;
  }

  // The model's bandwidth-delay product in bytes.
  static double Bdp(const tcp_pcb* pcb) {
    return static_cast<double>(pcb->bbr->bw[0]) * pcb->bbr->min_rtt_us / 1000.0;
  }

  struct LossRun {
    uint64_t ticks = 0;
    std::vector<double> cwnd_ratios;  // cwnd after each fast recovery / cwnd before it
  };

  // `bytes` from client to server at `loss` in both directions, then close; lwIP time until
  // the server has all of it and the FIN. Records cwnd before each fast recovery (the last
  // value a segment sent outside recovery, with no duplicate ACK pending, saw) and after it.
  LossRun LossTransfer(size_t bytes, double loss) {
    LossRun run;
    wire_.SetLatencyTicks(kOneWayTicks);
    Connect();
    if (HasFatalFailure()) return run;
    double before = 0;
    bool in_recovery = false;
    wire_.SetTap([&](const WirePacket& p) {
      const tcp_pcb* pcb = client_.pcb;
      if (pcb == nullptr || !FromClient(p) || !IsData(p)) return;
      if (pcb->flags & TF_INFR) {
        in_recovery = true;
      } else if (pcb->dupacks == 0) {
        if (in_recovery && before > 0) run.cwnd_ratios.push_back(pcb->cwnd / before);
        in_recovery = false;
        before = pcb->cwnd;
      }
    });
    const uint64_t start = wire_.ticks();
    wire_.SetFilter(PseudoRandomLoss(loss));
    client_.outgoing = Payload(bytes);
    client_.close_when_written = true;
    Feed(client_);
    EXPECT_TRUE(
        RunUntil([&] { return server_.got_fin || server_.errored || client_.errored; }, 60000));
    run.ticks = wire_.ticks() - start;
    wire_.SetFilter(nullptr);
    wire_.SetTap(nullptr);
    EXPECT_FALSE(client_.errored || server_.errored);
    EXPECT_TRUE(server_.received == client_.outgoing)
        << "received " << server_.received.size() << " of " << bytes << " bytes, or different";
    if (server_.pcb != nullptr) {
      tcp_pcb* pcb = server_.pcb;
      server_.pcb = nullptr;
      EXPECT_EQ(tcp_close(pcb), ERR_OK);
    }
    return run;
  }
};

double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Without loss the only limit is the receiver's window (TCP_WND): Startup doubles what is in
// flight each round trip until the delivery rate stops growing, then leaves within three more.
// The model then holds the round trip the wire takes (20 ms, timed in microseconds, not lwIP's
// 10 ms ticks) and a bandwidth of about one window per round trip, and ProbeBW keeps cwnd at
// 1.5-2.5 of their product plus the ACK aggregation it measured (the wire delivers a whole
// flight's ACKs at once).
TEST_F(LwipBbrTest, StartupEndsWhenTheDeliveryRateStopsGrowing) {
  wire_.SetLatencyTicks(kOneWayTicks);
  ASSERT_NO_FATAL_FAILURE(Connect());
  client_.outgoing = Payload(64u << 20);
  Feed(client_);
  ASSERT_TRUE(RunUntil([&] { return client_.pcb->bbr->filled_pipe != 0; }, 60 * 2 * kOneWayTicks))
      << "still in Startup after 60 round trips, cwnd " << client_.pcb->cwnd;
  const tcp_pcb* pcb = client_.pcb;
  // IW 10 to a 1 MiB window (718 segments) is about seven doublings, then three flat rounds.
  EXPECT_LE(pcb->bbr->round, 16u);
  EXPECT_GE(pcb->bbr->min_rtt_us, kRttUs);
  EXPECT_LE(pcb->bbr->min_rtt_us, kRttUs + 100);  // plus the wire's delivery rounds
  EXPECT_GT(Bdp(pcb), 0.5 * TCP_WND);
  EXPECT_LT(Bdp(pcb), 1.2 * TCP_WND);
  double lowest = 1e18, highest = 0;
  for (int rtt = 0; rtt < 20; ++rtt) {
    RunUntil([] { return false; }, 2 * kOneWayTicks);
    const tcp_bbr& b = *client_.pcb->bbr;
    const double aggregation = std::max(b.extra_acked[0], b.extra_acked[1]);
    EXPECT_LE(aggregation, 1.01 * b.cwnd);
    lowest = std::min(lowest, client_.pcb->cwnd / Bdp(client_.pcb));
    highest = std::max(highest, (client_.pcb->cwnd - aggregation) / Bdp(client_.pcb));
  }
  EXPECT_GE(lowest, 1.49);
  EXPECT_LE(highest, 2.51);
}

// At latency 0 a round trip is two of the wire's delivery rounds (10 us each): timed on lwIP's
// microsecond clock it is tens of microseconds, where the 10 ms tick that times its RTO says 0.
TEST_F(LwipBbrTest, LanRoundTripsAreTimedInMicroseconds) {
  ASSERT_NO_FATAL_FAILURE(Connect());
  ASSERT_NO_FATAL_FAILURE(Transfer(client_, server_, 1u << 20));
  EXPECT_GE(client_.pcb->bbr->min_rtt_us, 2 * LwipWire::kRoundUs);
  EXPECT_LE(client_.pcb->bbr->min_rtt_us, 5 * LwipWire::kRoundUs);
  EXPECT_GT(client_.pcb->bbr->bw[0], 0u);
}

// 1% random loss, 20 ms round trips, 16 MiB: CUBIC leaves 0.7 of its window at every fast
// recovery and sits at the Mathis window (~sqrt(1.5 / p) = 12 segments); BBR's window after a
// recovery is what it was before it, so the transfer takes a fraction of CUBIC's time. Both
// run here, one after the other, on the same seed.
TEST_F(LwipBbrTest, RandomLossDoesNotShrinkTheWindow) {
  constexpr size_t kBytes = 16u << 20;
  const LossRun bbr = LossTransfer(kBytes, 0.01);
  ASSERT_FALSE(HasFailure());
  // The first connection's pcbs leave TIME_WAIT; the second reuses the same ports.
  wire_.AdvanceMs(2 * TCP_MSL + 1000);
  client_ = Peer{};
  server_ = Peer{};
  xdpfwd_tcp_cc = TCP_CC_LOSS_BASED;
  const LossRun cubic = LossTransfer(kBytes, 0.01);
  std::cout << "16 MiB, 1% loss, 20 ms: BBR " << bbr.ticks << " ticks, cwnd after/before "
            << Median(bbr.cwnd_ratios) << " (median of " << bbr.cwnd_ratios.size()
            << " recoveries); CUBIC " << cubic.ticks << " ticks, " << Median(cubic.cwnd_ratios)
            << " (" << cubic.cwnd_ratios.size() << ")\n";
  ASSERT_GE(bbr.cwnd_ratios.size(), 5u);
  EXPECT_GE(Median(bbr.cwnd_ratios), 0.9);
  EXPECT_LE(Median(cubic.cwnd_ratios), 0.8);  // the measurement tells the two apart
  EXPECT_LT(2 * bbr.ticks, cubic.ticks);
}

// An RTO (here every packet dropped until one fires) means the path may have changed: the
// model forgets its bandwidth, cwnd falls to four segments and Startup measures again, which
// ends again once the path is back. Every byte still arrives.
TEST_F(LwipBbrTest, RtoRestartsStartupFromFourSegments) {
  constexpr size_t kBytes = 64u << 20;
  wire_.SetLatencyTicks(kOneWayTicks);
  ASSERT_NO_FATAL_FAILURE(Connect());
  client_.outgoing = Payload(kBytes);
  client_.close_when_written = true;
  Feed(client_);
  // close_when_written hands the pcb to lwIP once all is queued (not before the end here).
  ASSERT_TRUE(
      RunUntil([&] { return client_.pcb == nullptr || client_.pcb->bbr->filled_pipe; }, 200));
  ASSERT_NE(client_.pcb, nullptr);
  tcp_pcb* pcb = client_.pcb;  // ours until the transfer ends
  // Until the RTO itself: the timer's first retransmission is now a tail-loss probe (0039).
  wire_.SetFilter([](const WirePacket&) { return WireVerdict::kDrop; });
  ASSERT_TRUE(RunUntil([&] { return pcb->nrtx > 0; }, 2000));
  ASSERT_FALSE(client_.errored);
  EXPECT_EQ(pcb->bbr->filled_pipe, 0);
  EXPECT_EQ(pcb->bbr->bw[0], 0u);
  EXPECT_EQ(pcb->bbr->cwnd, 4u * pcb->mss);
  wire_.SetFilter(nullptr);
  ASSERT_TRUE(RunUntil([&] { return client_.errored || pcb->bbr->filled_pipe != 0; }, 2000));
  ASSERT_FALSE(client_.errored);
  EXPECT_GT(Bdp(pcb), 0.5 * TCP_WND);
  ASSERT_TRUE(
      RunUntil([&] { return server_.got_fin || server_.errored || client_.errored; }, 60000));
  EXPECT_TRUE(server_.received == client_.outgoing)
      << "received " << server_.received.size() << " of " << kBytes << " bytes, or different";
}

// A flow that keeps its window full has only queued round trips to see once the path's queue
// holds its extra; after 10 s without a lower sample, ProbeRTT holds four segments for 200 ms
// (plus the round trip it takes to drain to that), then the window comes back.
TEST_F(LwipBbrTest, BusyFlowProbesTheRoundTripEveryTenSeconds) {
  constexpr uint32_t kSlowOneWay = 10;  // 200 ms round trips: 11 s are ~55 MB, not 550
  wire_.SetLatencyTicks(kSlowOneWay);
  ASSERT_NO_FATAL_FAILURE(Connect());
  const uint64_t start = wire_.ticks();
  client_.outgoing = Payload(128u << 20);
  Feed(client_);
  const uint32_t floor = 4 * client_.pcb->mss;
  ASSERT_TRUE(RunUntil([&] { return client_.pcb->bbr->filled_pipe != 0; }, 1000));
  ASSERT_TRUE(RunUntil([&] { return client_.pcb->bbr->cwnd == floor; }, 1200));
  const uint64_t probe_at = wire_.ticks() - start;
  EXPECT_GE(probe_at * kTickMs, 10000u);
  EXPECT_LE(probe_at * kTickMs, 10000u + 4 * 2 * kSlowOneWay * kTickMs);
  ASSERT_TRUE(RunUntil([&] { return client_.pcb->bbr->cwnd > floor; }, 100));
  const uint64_t held_ms = (wire_.ticks() - start - probe_at) * kTickMs;
  EXPECT_GE(held_ms, 200u);
  EXPECT_LE(held_ms, 200u + 2 * 2 * kSlowOneWay * kTickMs);
  EXPECT_GT(Bdp(client_.pcb), 0.5 * TCP_WND);
}

// After 10 s idle the min RTT is as old, but an application-limited flow keeps little in
// flight and needs no ProbeRTT: its next burst goes out with the window it had.
TEST_F(LwipBbrTest, FlowBackFromIdleSkipsProbeRtt) {
  wire_.SetLatencyTicks(kOneWayTicks);
  ASSERT_NO_FATAL_FAILURE(Connect());
  ASSERT_NO_FATAL_FAILURE(Transfer(client_, server_, 8u << 20));
  ASSERT_NE(client_.pcb->bbr->filled_pipe, 0);
  const uint32_t floor = 4 * client_.pcb->mss;
  ASSERT_GT(client_.pcb->bbr->cwnd, 10 * floor);
  wire_.AdvanceMs(11000);
  client_.outgoing += Payload(1u << 20);
  Feed(client_);
  for (int rtt = 0; rtt < 5; ++rtt) {
    RunUntil([] { return false; }, 2 * kOneWayTicks);
    EXPECT_GT(client_.pcb->bbr->cwnd, 10 * floor) << "round trip " << rtt;
  }
}

// A BBR pcb takes its state from the TCP_BBR pool when it is allocated (the pcb holds only a
// pointer: issue #32's memory per idle connection) and gives it back when it is freed (patch
// 0042's release step; without it the pool's use stays up by two).
TEST_F(LwipBbrTest, StateGoesBackToItsPoolWithThePcb) {
  const mem_size_t before = BbrStatesInUse();
  ASSERT_NO_FATAL_FAILURE(Connect());
  EXPECT_EQ(BbrStatesInUse(), before + 2);
  ASSERT_NE(client_.pcb->bbr, nullptr);
  ASSERT_NE(server_.pcb->bbr, nullptr);
  ASSERT_NO_FATAL_FAILURE(Transfer(client_, server_, 1u << 20));
  EXPECT_GT(client_.pcb->bbr->delivered, 1u << 19);
  for (Peer* peer : {&client_, &server_}) {
    tcp_pcb* pcb = peer->pcb;
    peer->pcb = nullptr;
    tcp_arg(pcb, nullptr);
    tcp_err(pcb, nullptr);
    tcp_abort(pcb);
  }
  EXPECT_EQ(BbrStatesInUse(), before);
}

// The pool has an element per pcb, so it cannot run out before the pcbs do; if it is empty all
// the same, a new connection runs CUBIC, which keeps its state in the pcb, and works.
TEST_F(LwipBbrTest, ConnectionRunsCubicWhenThePoolIsEmpty) {
  std::vector<void*> taken;
  for (void* e = memp_malloc(MEMP_TCP_BBR); e != nullptr; e = memp_malloc(MEMP_TCP_BBR)) {
    taken.push_back(e);
  }
  const mem_size_t errors = lwip_stats.memp[MEMP_TCP_BBR]->err;
  ASSERT_GE(taken.size(), size_t{MEMP_NUM_TCP_PCB} - 2);
  ASSERT_NO_FATAL_FAILURE(Connect());
  EXPECT_EQ(client_.pcb->cc_ops, &tcp_cc_cubic);
  EXPECT_EQ(server_.pcb->cc_ops, &tcp_cc_cubic);
  EXPECT_EQ(client_.pcb->bbr, nullptr);
  EXPECT_EQ(lwip_stats.memp[MEMP_TCP_BBR]->err, errors + 2);
  ASSERT_NO_FATAL_FAILURE(Transfer(client_, server_, 1u << 20));
  ASSERT_NO_FATAL_FAILURE(Transfer(server_, client_, 1u << 20));
  for (void* e : taken) memp_free(MEMP_TCP_BBR, e);
}

}  // namespace
}  // namespace xdpfwd::test
