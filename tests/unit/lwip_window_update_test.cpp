// When our lwIP tells the peer that its receive window reopened (lwIP patch 0041), over two
// netifs wired in memory: not for each chunk the application gives back while the window is
// wide open (the relay gives back a GSO packet's worth at a time, and each drew an ACK of its
// own: docs/benchmarks.md, "Many flows"), and at once when a closed window reopens, however
// little.
#include <gtest/gtest.h>

#include <cstdint>

#include "tests/unit/lwip_wire_fixture.h"

extern "C" {
#include "lwip/priv/tcp_priv.h"
#include "lwip/tcp.h"
}

namespace xdpfwd::test {
namespace {

using namespace wire;  // NOLINT(google-build-using-namespace): the fixture's vocabulary

class LwipWindowUpdateTest : public LwipWireTest {};

// 60,000 bytes given back in one go (what the relay gives back after passing on one 64 KiB
// receive) while the peer may still send 1 MiB less those 60,000: no packet. lwIP 2.1.3 sent a
// window update for anything from 4 * TCP_MSS (35,840 bytes) up. The next ACK carries the
// window.
TEST_F(LwipWindowUpdateTest, GivingBackLittleOfAnOpenWindowSendsNoUpdate) {
  ASSERT_NO_FATAL_FAILURE(Connect());
  server_.reading = false;
  ASSERT_NO_FATAL_FAILURE(Transfer(client_, server_, 60000));
  ASSERT_EQ(server_.unread, 60000u);
  wire_.Pump();
  const uint64_t sent = wire_.counters().sent;
  tcp_recved(server_.pcb, 60000);
  server_.unread = 0;
  wire_.Pump();
  EXPECT_EQ(wire_.counters().sent, sent) << "a window update for 60,000 bytes of 1 MiB";

  server_.reading = true;
  ASSERT_NO_FATAL_FAILURE(Transfer(client_, server_, 3000));
  EXPECT_GE(client_.pcb->snd_wnd, TCP_WND - TCP_WND / 16) << "the next ACK carries the window";
}

// The window closed (the application stopped reading; less than a segment left); 16 KiB given back
// reopen it: the update goes out at once and the peer sends into it. lwIP 2.1.3 waited until 35,840
// bytes were given back, leaving the peer to its zero-window probes.
TEST_F(LwipWindowUpdateTest, ReopeningAClosedWindowSendsAnUpdateAtOnce) {
  ASSERT_NO_FATAL_FAILURE(Connect());
  server_.reading = false;
  client_.outgoing += Payload(TCP_WND + 100000);
  Feed(client_);
  ASSERT_TRUE(RunUntil([&] { return server_.pcb->rcv_wnd < kMss; }, 5000))
      << "window still " << server_.pcb->rcv_wnd;
  wire_.Pump();
  const uint64_t sent = wire_.counters().sent;
  const size_t received = server_.received.size();
  tcp_recved(server_.pcb, 16384);
  server_.unread -= 16384;
  wire_.Pump();
  EXPECT_GT(wire_.counters().sent, sent) << "no window update";
  // Full segments only: what is left of the window is less than one.
  EXPECT_GE(server_.received.size(), received + 16384 - kMss) << "the client did not send into it";
}

}  // namespace
}  // namespace xdpfwd::test
