// Out-of-order data and the memory it holds (patch 0022). Received segments are pbufs over
// memory lwIP does not own (the wire hands them over as chains of custom pbufs, as the AF_XDP
// netif does with UMEM frames): what waits above a hole must be copied out of them, so a hole a
// peer never fills pins no frame, and one connection's queue is bounded.
#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include "tests/unit/lwip_wire_fixture.h"

namespace xdpfwd::test {
namespace {

using namespace wire;  // NOLINT(google-build-using-namespace): the fixture's vocabulary

// Pieces of 700 bytes: a full-sized segment arrives as a chain of three custom pbufs.
constexpr size_t kPieceBytes = 700;

struct QueueShape {
  size_t segments = 0, pbufs = 0;
  uint32_t end = 0;  // sequence number after the highest queued byte
};

QueueShape OutOfOrderQueue(const tcp_pcb* pcb) {
  QueueShape q;
  for (const tcp_seg* s = pcb->ooseq; s != nullptr; s = s->next) {
    ++q.segments;
    q.pbufs += pbuf_clen(s->p);
    q.end = s->tcphdr->seqno + TCP_TCPLEN(s);
  }
  return q;
}

mem_size_t PoolPbufsInUse() { return lwip_stats.memp[MEMP_PBUF_POOL]->used; }

class LwipOoseqTest : public LwipWireTest {
 protected:
  void SetUp() override {
    LwipWireTest::SetUp();
    wire_.SetExternalFrames(kPieceBytes);
  }
  void TearDown() override {
    LwipWireTest::TearDown();
    EXPECT_EQ(wire_.frames_held(), 0u);
    EXPECT_EQ(PoolPbufsInUse(), 0u);
  }

  // From now on the client's next data segment is lost, and so is every retransmission of it
  // until Fill(): everything the client sends behind it arrives out of order.
  void LeaveHole() {
    hole_ = true;
    hole_seq_.reset();
    wire_.SetFilter([this](const WirePacket& p) {
      if (!hole_ || !FromClient(p) || !IsData(p)) return WireVerdict::kDeliver;
      if (!hole_seq_) hole_seq_ = p.tcp.seq;
      return p.tcp.seq == *hole_seq_ ? WireVerdict::kDrop : WireVerdict::kDeliver;
    });
  }
  void Fill() { hole_ = false; }

  // Sends `len` more bytes from the client and runs until done() (or `max_ticks` passed; not
  // long: lwIP gives up a queue that has not grown for 6 RTOs, TCP_OOSEQ_TIMEOUT).
  QueueShape SendAboveHole(size_t len, const std::function<bool()>& done, int max_ticks) {
    client_.outgoing += Payload(len);
    Feed(client_);
    RunUntil(done, max_ticks);
    return OutOfOrderQueue(server_.pcb);
  }

  bool hole_ = false;
  std::optional<uint32_t> hole_seq_;
};

// What waits above a hole is held in lwIP's pool, not in the frames it arrived in: with the
// hole open, no frame is held; once it is filled every byte arrives in order and the pool
// empties. Without the patch lwIP keeps each queued segment's chain (3 frames a segment).
TEST_F(LwipOoseqTest, OutOfOrderDataLeavesNoFrameHeld) {
  ASSERT_NO_FATAL_FAILURE(Connect());
  // Slow start first: the window then lets dozens of segments go out behind the hole.
  ASSERT_NO_FATAL_FAILURE(Transfer(client_, server_, 256 * 1024));
  const size_t received = server_.received.size();
  LeaveHole();
  const QueueShape q = SendAboveHole(
      64 * kMss, [&] { return OutOfOrderQueue(server_.pcb).segments >= 20; }, 100);
  ASSERT_GE(q.segments, 20u);
  EXPECT_EQ(server_.received.size(), received);  // nothing passed the hole
  EXPECT_EQ(wire_.frames_held(), 0u) << q.segments << " segments queued out of order";
  EXPECT_GE(PoolPbufsInUse(), q.segments);

  Fill();
  const size_t want = client_.outgoing.size();
  ASSERT_TRUE(RunUntil([&] { return server_.received.size() == want; }, 5000))
      << "received " << server_.received.size() << " of " << want;
  EXPECT_EQ(server_.received, client_.outgoing);
  EXPECT_EQ(server_.pcb->ooseq, nullptr);
  EXPECT_EQ(PoolPbufsInUse(), 0u);
  EXPECT_EQ(wire_.frames_held(), 0u);
}

// One pcb queues at most TCP_OOSEQ_MAX_PBUFS pool buffers above a hole (a window of full-sized
// segments fits; a window cut into small ones does not): what arrives beyond that is dropped
// (counted), not SACKed (the peer must send it again, and does), and what was queued first is
// kept.
TEST_F(LwipOoseqTest, OnePcbsOutOfOrderQueueIsBounded) {
  ASSERT_NO_FATAL_FAILURE(Connect());
  // A window's worth of slow start, so that more than the limit can be in flight.
  ASSERT_NO_FATAL_FAILURE(Transfer(client_, server_, 1024 * 1024));
  constexpr u16_t kSmallSegment = 512;
  client_.pcb->mss = kSmallSegment;  // what tcp_write cuts new data into
  const uint32_t dropped = tcp_ooseq_dropped;
  LeaveHole();
  const size_t above = TCP_OOSEQ_MAX_PBUFS + 200;
  const QueueShape q = SendAboveHole(
      above * kSmallSegment, [&] { return tcp_ooseq_dropped - dropped >= 100; }, 100);
  ASSERT_GE(tcp_ooseq_dropped - dropped, 100u)
      << "never reached the limit: " << q.segments << " segments queued";
  EXPECT_LE(q.pbufs, TCP_OOSEQ_MAX_PBUFS);
  EXPECT_GE(q.pbufs, TCP_OOSEQ_MAX_PBUFS - 1);  // a buffer per segment
  EXPECT_EQ(q.pbufs, q.segments);
  EXPECT_EQ(wire_.frames_held(), 0u);
  // The SACK blocks reach no further than what is queued.
  for (const tcp_sack_range& sack : server_.pcb->rcv_sacks) {
    if (sack.left == sack.right) continue;
    EXPECT_TRUE(TCP_SEQ_LEQ(sack.right, q.end)) << sack.right - q.end << " bytes beyond";
  }

  Fill();
  const size_t want = client_.outgoing.size();
  ASSERT_TRUE(RunUntil([&] { return server_.received.size() == want; }, 10000))
      << "received " << server_.received.size() << " of " << want;
  EXPECT_EQ(server_.received, client_.outgoing);
  EXPECT_EQ(PoolPbufsInUse(), 0u);
}

// The ACK of out-of-order data waits one round (patch 0033, tcp_ooseq_ack_hold): a round is
// the worker's iteration, so a segment that arrives late in the same round or the next fills
// the hole before anything is said about it, and the peer resends nothing.
class LwipOoseqAckHoldTest : public LwipWireTest {
 protected:
  void SetUp() override {
    LwipWireTest::SetUp();
    tcp_ooseq_ack_hold = 1;
    wire_.SetTap([this](const WirePacket& p) {
      if (FromClient(p) || IsData(p) || (p.tcp.flags & TCP_ACK) == 0) return;
      if (last_ack_ && p.tcp.ack == *last_ack_) ++duplicate_acks_;
      last_ack_ = p.tcp.ack;
    });
  }
  void TearDown() override {
    wire_.SetTap(nullptr);
    LwipWireTest::TearDown();
    EXPECT_FALSE(tcp_ooseq_ack_pending());
    tcp_ooseq_ack_hold = 0;
  }

  // Every fourth data segment of the client's arrives after the others of its round (what two
  // CPUs' backlogs do to a veth peer's segments); nothing is lost.
  void ReorderEachRound() {
    wire_.SetFilter([this](const WirePacket& p) {
      if (!FromClient(p) || !IsData(p)) return WireVerdict::kDeliver;
      return ++data_segments_ % 4 == 0 ? WireVerdict::kHold : WireVerdict::kDeliver;
    });
  }

  // Sends `len` bytes from the client and waits until the server has them all, intact.
  void SendAndCheck(size_t len) {
    client_.outgoing += Payload(len);
    Feed(client_);
    const size_t want = client_.outgoing.size();
    ASSERT_TRUE(RunUntil([&] { return server_.received.size() == want; }, 5000))
        << "received " << server_.received.size() << " of " << want;
    EXPECT_EQ(server_.received, client_.outgoing);
  }

  std::optional<uint32_t> last_ack_;
  uint64_t duplicate_acks_ = 0;
  uint64_t data_segments_ = 0;
};

TEST_F(LwipOoseqAckHoldTest, ASegmentThatIsOnlyLateIsNeverReported) {
  ASSERT_NO_FATAL_FAILURE(Connect());
  ASSERT_NO_FATAL_FAILURE(Transfer(client_, server_, 256 * 1024));
  const uint64_t retransmitted = wire_.counters().retransmitted;
  const uint64_t held = tcp_ooseq_acks_held;
  ReorderEachRound();
  duplicate_acks_ = 0;
  ASSERT_NO_FATAL_FAILURE(SendAndCheck(2 * 1024 * 1024));
  EXPECT_GT(tcp_ooseq_acks_held - held, 10u) << "the filter reordered nothing";
  EXPECT_EQ(duplicate_acks_, 0u);
  EXPECT_EQ(wire_.counters().retransmitted - retransmitted, 0u);
}

// The same reordering with the hold off: each early segment is reported at once, which is
// what made a Linux peer resend the late one (the test above would fail without the patch).
TEST_F(LwipOoseqAckHoldTest, WithoutTheHoldTheSameReorderingSendsDuplicateAcks) {
  tcp_ooseq_ack_hold = 0;
  ASSERT_NO_FATAL_FAILURE(Connect());
  ASSERT_NO_FATAL_FAILURE(Transfer(client_, server_, 256 * 1024));
  ReorderEachRound();
  duplicate_acks_ = 0;
  ASSERT_NO_FATAL_FAILURE(SendAndCheck(2 * 1024 * 1024));
  EXPECT_GT(duplicate_acks_, 10u);
}

// A segment that is really lost is reported one round later, in one ACK whose SACK blocks
// cover what arrived above it, and the sender repairs it without waiting for its RTO.
TEST_F(LwipOoseqAckHoldTest, ALostSegmentIsReportedOneRoundLaterAndRepairedWithoutTimeout) {
  ASSERT_NO_FATAL_FAILURE(Connect());
  ASSERT_NO_FATAL_FAILURE(Transfer(client_, server_, 256 * 1024));
  bool dropped = false;
  wire_.SetFilter([&](const WirePacket& p) {
    if (dropped || !FromClient(p) || !IsData(p)) return WireVerdict::kDeliver;
    dropped = true;  // the first data segment, once
    return WireVerdict::kDrop;
  });
  const uint64_t retransmitted = wire_.counters().retransmitted;
  const uint64_t timer_before = wire_.counters().timer_retransmitted;
  const uint64_t released = tcp_ooseq_acks_released;
  duplicate_acks_ = 0;
  ASSERT_NO_FATAL_FAILURE(SendAndCheck(256 * 1024));
  EXPECT_GE(duplicate_acks_, 1u);
  EXPECT_GE(tcp_ooseq_acks_released - released, 1u);
  EXPECT_TRUE(dropped);
  EXPECT_GE(wire_.counters().retransmitted - retransmitted, 1u);
  EXPECT_EQ(wire_.counters().timer_retransmitted, timer_before);
}

// A pcb that goes away while its ACK waits leaves the list (ASan would catch a pcb freed and
// then visited by the release).
TEST_F(LwipOoseqAckHoldTest, APcbFreedWhileItsAckWaitsLeavesTheList) {
  ASSERT_NO_FATAL_FAILURE(Connect());
  ASSERT_NO_FATAL_FAILURE(Transfer(client_, server_, 64 * 1024));
  bool dropped = false, aborted = false;
  wire_.SetFilter([&](const WirePacket& p) {
    if (!aborted && tcp_ooseq_ack_pending() && server_.pcb != nullptr) {
      tcp_pcb* pcb = server_.pcb;
      server_.pcb = nullptr;
      tcp_arg(pcb, nullptr);
      tcp_err(pcb, nullptr);
      tcp_abort(pcb);
      aborted = true;
      EXPECT_FALSE(tcp_ooseq_ack_pending());
    }
    if (!dropped && FromClient(p) && IsData(p)) {
      dropped = true;
      return WireVerdict::kDrop;
    }
    return WireVerdict::kDeliver;
  });
  client_.outgoing += Payload(16 * kMss);
  Feed(client_);
  RunUntil([&] { return client_.errored; }, 200);
  EXPECT_TRUE(aborted);
  EXPECT_TRUE(client_.errored);  // the server's RST
}

}  // namespace
}  // namespace xdpfwd::test
