// Out-of-order data and the memory it holds (patch 0022). Received segments are pbufs over
// memory lwIP does not own (the wire hands them over as chains of custom pbufs, as the AF_XDP
// netif does with UMEM frames): what waits above a hole must be copied out of them, so a hole a
// peer never fills pins no frame, and one connection's queue is bounded.
#include <gtest/gtest.h>

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

}  // namespace
}  // namespace xdpfwd::test
