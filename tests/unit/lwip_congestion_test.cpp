// Congestion control in our lwIP, over two netifs wired in memory with a one-way latency in
// lwIP ticks: 0017 starts a connection with RFC 6928's ten segments, and CUBIC (RFC 9438,
// stack/lwip/cc/cubic.c behind patch 0018's table of steps): a loss leaves 0.7 of the window
// (Reno: 0.5), regained in the Reno-friendly region at 0.53 segments per round trip while the
// cubic function is below it (round trips much shorter than K, as on the relay's LAN legs), and
// along the cubic function when round trips are long.
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "tests/unit/lwip_wire_fixture.h"

namespace xdpfwd::test {
namespace {

using namespace wire;  // NOLINT(google-build-using-namespace): the fixture's vocabulary

double Segments(tcpwnd_size_t bytes) { return static_cast<double>(bytes) / kMss; }

class LwipCongestionTest : public LwipWireTest {
 protected:
  // Puts the client in congestion avoidance at `segments` (as if slow start had ended there),
  // with far more data queued than the window lets out.
  void Steady(uint32_t segments) {
    client_.pcb->cwnd = segments * kMss;
    client_.pcb->ssthresh = segments * kMss;
    client_.outgoing += Payload(TCP_SND_BUF * 64);
    Feed(client_);
  }

  // Drops the first client data segment sent `after_ticks` from now, once, and runs until the
  // recovery it starts is over. Returns the cwnd before it (the last value a sent segment saw)
  // and ssthresh after it.
  struct Reduction {
    tcpwnd_size_t cwnd_before = 0, ssthresh_after = 0;
  };
  Reduction LoseOneSegment(uint64_t after_ticks) {
    const uint64_t at = wire_.ticks() + after_ticks;
    Reduction r;
    bool dropped = false;
    wire_.SetTap([&](const WirePacket& p) {
      if (FromClient(p) && IsData(p) && client_.pcb != nullptr && !(client_.pcb->flags & TF_INFR)) {
        r.cwnd_before = client_.pcb->cwnd;
      }
    });
    wire_.SetFilter([&](const WirePacket& p) {
      if (dropped || wire_.ticks() < at || !FromClient(p) || !IsData(p)) {
        return WireVerdict::kDeliver;
      }
      dropped = true;
      return WireVerdict::kDrop;
    });
    EXPECT_TRUE(RunUntil([&] { return (client_.pcb->flags & TF_INFR) != 0; }, 1000));
    r.ssthresh_after = client_.pcb->ssthresh;
    wire_.SetTap(nullptr);
    EXPECT_TRUE(RunUntil([&] { return !(client_.pcb->flags & TF_INFR); }, 1000));
    wire_.SetFilter(nullptr);
    return r;
  }

  // cwnd after each of `round_trips` round trips of `rtt_ticks`, the first value now.
  std::vector<double> CwndPerRoundTrip(int round_trips, uint32_t rtt_ticks) {
    std::vector<double> cwnd{Segments(client_.pcb->cwnd)};
    for (int i = 0; i < round_trips; ++i) {
      RunUntil([] { return false; }, static_cast<int>(rtt_ticks));
      cwnd.push_back(Segments(client_.pcb->cwnd));
    }
    return cwnd;
  }
};

// 0017: the first flight after the handshake is ten segments (lwIP's was three).
TEST_F(LwipCongestionTest, FirstFlightIsTenSegments) {
  constexpr uint32_t kOneWayTicks = 5;
  wire_.SetLatencyTicks(kOneWayTicks);
  ASSERT_NO_FATAL_FAILURE(Connect());
  size_t first_flight = 0;
  bool acked = false;
  wire_.SetTap([&](const WirePacket& p) {
    if (!FromClient(p) && p.tcp.ack != client_.pcb->lastack) acked = true;
    if (FromClient(p) && IsData(p) && !acked) ++first_flight;
  });
  Transfer(client_, server_, 40 * kMss);
  wire_.SetTap(nullptr);
  EXPECT_EQ(first_flight, 10u);
}

// CUBIC: a fast retransmit leaves ssthresh (and, once recovery is over, cwnd) at beta_cubic =
// 0.7 of the window (RFC 9438 4.6); Reno halved it.
TEST_F(LwipCongestionTest, LossLeavesSevenTenthsOfTheWindow) {
  constexpr uint32_t kOneWayTicks = 1;
  wire_.SetLatencyTicks(kOneWayTicks);
  ASSERT_NO_FATAL_FAILURE(Connect());
  Steady(40);
  const Reduction r = LoseOneSegment(4 * kOneWayTicks);
  ASSERT_GT(r.cwnd_before, 0u);
  const double ratio = static_cast<double>(r.ssthresh_after) / r.cwnd_before;
  EXPECT_NEAR(ratio, 0.7, 0.01) << Segments(r.cwnd_before) << " -> " << Segments(r.ssthresh_after)
                                << " segments";
  // Recovery over: cwnd = ssthresh, and it has grown a little since (the same tick's ACKs).
  EXPECT_GE(client_.pcb->cwnd, r.ssthresh_after);
  EXPECT_LE(client_.pcb->cwnd, r.ssthresh_after + 2 * kMss);
}

// CUBIC: with round trips far shorter than K (here 20 ms against K = cbrt(W_max 0.3 / 0.4) =
// 3.1 s), W_cubic stays below the Reno-friendly W_est, which grows by alpha_cubic = 0.53
// segments per round trip (RFC 9438 4.3): about 5 in 10 round trips. Reno grew by 10.
TEST_F(LwipCongestionTest, RenoFriendlyRegionGrowsHalfASegmentPerRoundTrip) {
  constexpr uint32_t kOneWayTicks = 1;
  wire_.SetLatencyTicks(kOneWayTicks);
  ASSERT_NO_FATAL_FAILURE(Connect());
  Steady(40);
  LoseOneSegment(4 * kOneWayTicks);
  const std::vector<double> cwnd = CwndPerRoundTrip(10, 2 * kOneWayTicks);
  const double growth = cwnd.back() - cwnd.front();
  EXPECT_GE(growth, 4.0) << "from " << cwnd.front() << " segments";
  EXPECT_LE(growth, 6.5) << "from " << cwnd.front() << " segments";
}

// CUBIC: with a 1 s round trip K (cbrt(100 0.3 / 0.4) = 4.2 s) is a few round trips away: cwnd
// follows the concave cubic function back to W_max = 100 segments by about K, then past it
// (convex); the Reno-friendly W_est would be at ~72 and Reno at ~55.
TEST_F(LwipCongestionTest, LongRoundTripsFollowTheCubicFunction) {
  constexpr uint32_t kOneWayTicks = 50;
  constexpr uint32_t kRttTicks = 2 * kOneWayTicks;
  wire_.SetLatencyTicks(kOneWayTicks);
  ASSERT_NO_FATAL_FAILURE(Connect());
  Steady(100);
  const Reduction r = LoseOneSegment(2 * kRttTicks);
  const double w_max = Segments(r.cwnd_before);
  const std::vector<double> cwnd = CwndPerRoundTrip(6, kRttTicks);
  // Recovery took about a round trip: index 3 is ~4.2 s after the loss.
  EXPECT_GT(cwnd[3], w_max - 6) << "W_max " << w_max;
  EXPECT_LT(cwnd[3], w_max + 3) << "W_max " << w_max;
  EXPECT_GT(cwnd[6], w_max) << "W_max " << w_max << ": not convex past K";
}

}  // namespace
}  // namespace xdpfwd::test
