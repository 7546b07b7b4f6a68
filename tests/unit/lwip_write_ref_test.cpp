// Sending without a copy (lwIP patch 0032, tcp_write_ref, through stack/write_ref.h): lwIP's
// send queue points into the pbuf the data lives in and holds a reference on it. The owner
// must live exactly as long as lwIP needs the bytes: through a retransmission, until the peer
// acknowledges them, or until the pcb is aborted; a pool that runs out queues nothing.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "stack/write_ref.h"
#include "tests/unit/lwip_wire_fixture.h"

namespace xdpfwd::test {
namespace {

using namespace wire;  // NOLINT(google-build-using-namespace): the fixture's vocabulary

// A received packet's pbuf, as the AF_XDP netif hands one over: a custom pbuf over memory lwIP
// does not own, whose free callback says when the memory may be reused.
struct Owner {
  pbuf_custom custom;  // first member
  bool freed;
};

void FreeOwner(pbuf* p) { reinterpret_cast<Owner*>(p)->freed = true; }

class LwipWriteRefTest : public LwipWireTest {
 protected:
  void SetUp() override {
    LwipWireTest::SetUp();
    bytes_ = Payload(5000);
    owner_.freed = false;
    owner_.custom.custom_free_function = FreeOwner;
    ASSERT_NE(pbuf_alloced_custom(PBUF_RAW, static_cast<u16_t>(bytes_.size()), PBUF_REF,
                                  &owner_.custom, bytes_.data(), static_cast<u16_t>(bytes_.size())),
              nullptr);
    ASSERT_NO_FATAL_FAILURE(Connect());
  }
  pbuf* owner() { return &owner_.custom.pbuf; }

  std::string bytes_;
  Owner owner_{};
};

// The bytes leave from the owner's memory, are sent again from it when the first copy is lost,
// and the owner is released only once the peer has acknowledged them all.
TEST_F(LwipWriteRefTest, TheOwnerLivesUntilThePeerAcknowledges) {
  WriteRefPool pool(64);
  bool dropped = false;
  wire_.SetFilter([&](const WirePacket& p) {
    if (!FromClient(p) || !IsData(p) || dropped) return WireVerdict::kDeliver;
    dropped = true;  // the first data segment: sent again from the same memory
    return WireVerdict::kDrop;
  });
  ASSERT_EQ(pool.Write(client_.pcb, owner(), bytes_.data(), static_cast<u16_t>(bytes_.size())),
            ERR_OK);
  pbuf_free(owner());  // the caller's own reference: lwIP's keep the owner alive
  EXPECT_FALSE(owner_.freed);
  EXPECT_EQ(pool.in_use(), 4u) << "5000 bytes at MSS 1460: a reference per segment";
  ASSERT_EQ(tcp_output(client_.pcb), ERR_OK);
  wire_.Pump();
  EXPECT_TRUE(dropped);
  EXPECT_FALSE(owner_.freed) << "the first segment is not acknowledged yet";
  ASSERT_TRUE(RunUntil([&] { return server_.received.size() == bytes_.size(); }, 5000));
  EXPECT_EQ(server_.received, bytes_);
  ASSERT_TRUE(RunUntil([&] { return client_.pcb->unacked == nullptr; }, 1000));
  EXPECT_TRUE(owner_.freed);
  EXPECT_EQ(pool.in_use(), 0u);
}

// Two writes from adjacent memory of one owner stay two references (lwIP appends data to a ROM
// pbuf whose memory ends where the new data starts: never to a referenced one).
TEST_F(LwipWriteRefTest, AdjacentWritesEachHoldTheOwner) {
  WriteRefPool pool(64);
  ASSERT_EQ(pool.Write(client_.pcb, owner(), bytes_.data(), 100), ERR_OK);
  ASSERT_EQ(pool.Write(client_.pcb, owner(), bytes_.data() + 100, 100), ERR_OK);
  EXPECT_EQ(pool.in_use(), 2u);
  EXPECT_EQ(owner()->ref, 3);
  pbuf_free(owner());
  ASSERT_EQ(tcp_output(client_.pcb), ERR_OK);
  ASSERT_TRUE(RunUntil([&] { return client_.pcb->unacked == nullptr; }, 1000));
  EXPECT_EQ(server_.received, bytes_.substr(0, 200));
  EXPECT_TRUE(owner_.freed);
}

// An aborted pcb's queue goes with it, and so do its references.
TEST_F(LwipWriteRefTest, AnAbortReleasesTheOwner) {
  WriteRefPool pool(64);
  wire_.SetFilter([](const WirePacket&) { return WireVerdict::kDrop; });
  ASSERT_EQ(pool.Write(client_.pcb, owner(), bytes_.data(), static_cast<u16_t>(bytes_.size())),
            ERR_OK);
  pbuf_free(owner());
  ASSERT_EQ(tcp_output(client_.pcb), ERR_OK);
  wire_.Pump();
  EXPECT_FALSE(owner_.freed);
  tcp_pcb* pcb = client_.pcb;
  client_.pcb = nullptr;
  tcp_arg(pcb, nullptr);
  tcp_err(pcb, nullptr);
  tcp_abort(pcb);
  EXPECT_TRUE(owner_.freed);
  EXPECT_EQ(pool.in_use(), 0u);
}

// A pool too small for the write: tcp_write fails whole, nothing is queued or held, and the
// caller can copy instead.
TEST_F(LwipWriteRefTest, AnEmptyPoolQueuesNothing) {
  WriteRefPool pool(2);
  const u32_t lbb = client_.pcb->snd_lbb;
  EXPECT_EQ(pool.Write(client_.pcb, owner(), bytes_.data(), static_cast<u16_t>(bytes_.size())),
            ERR_MEM);
  EXPECT_EQ(pool.in_use(), 0u);
  EXPECT_EQ(owner()->ref, 1) << "only the caller's reference";
  EXPECT_EQ(client_.pcb->unsent, nullptr);
  EXPECT_EQ(client_.pcb->snd_lbb, lbb);
  pbuf_free(owner());
  EXPECT_TRUE(owner_.freed);
}

}  // namespace
}  // namespace xdpfwd::test
