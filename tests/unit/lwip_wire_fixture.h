// A client and a server on lwIP's raw API over two netifs wired in memory (tests/support/
// lwip_wire.h): the fixture the lwIP recovery, out-of-order and congestion tests share.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <functional>
#include <string>

#include "stack/lwip/ack_hold/ooseq_ack_hold.h"
#include "stack/lwip_pcb.h"
#include "tests/support/lwip_wire.h"

extern "C" {
#include "lwip/memp.h"
#include "lwip/pbuf.h"
#include "lwip/priv/tcp_priv.h"
#include "lwip/prot/tcp.h"
#include "lwip/stats.h"
#include "lwip/tcp.h"
}

namespace xdpfwd::test::wire {

inline constexpr uint16_t kServerPort = 8080;
inline constexpr uint16_t kClientPort = 30000;
inline constexpr uint32_t kMss = 1460;  // the wire's MTU is 1500
inline constexpr uint32_t kTickMs = TCP_TMR_INTERVAL;

inline mem_size_t PcbsInUse() { return lwip_stats.memp[MEMP_TCP_PCB]->used; }
inline mem_size_t SegmentsInUse() { return lwip_stats.memp[MEMP_TCP_SEG]->used; }
// BBR's state, one per BBR pcb (stack/lwip/lwippools.h).
inline mem_size_t BbrStatesInUse() { return lwip_stats.memp[MEMP_TCP_BBR]->used; }

// One end of the connection, as an application on lwIP's raw API.
struct Peer {
  tcp_pcb* pcb = nullptr;  // null once closed by us or freed by lwIP
  std::string received;
  bool reading = true;  // false: keeps what arrives without tcp_recved (the window closes)
  size_t unread = 0;    // received while not reading, not yet given back
  bool connected = false, got_fin = false, errored = false;
  err_t error = ERR_OK;
  std::string outgoing;  // what to send, written as the send buffer allows
  size_t written = 0;
  bool close_when_written = false;
};

// Queues as much of peer.outgoing as lwIP's send buffer takes; closes once all is queued if
// asked to. Called after each tick and from the sent callback (ACKs free the buffer).
inline void Feed(Peer& peer) {
  while (peer.pcb != nullptr && peer.written < peer.outgoing.size()) {
    const size_t n =
        std::min<size_t>({peer.outgoing.size() - peer.written, tcp_sndbuf(peer.pcb), 60000});
    if (n == 0 || tcp_sndqueuelen(peer.pcb) >= TCP_SND_QUEUELEN - 64) break;
    if (tcp_write(peer.pcb, peer.outgoing.data() + peer.written, static_cast<u16_t>(n),
                  TCP_WRITE_FLAG_COPY) != ERR_OK) {
      break;
    }
    peer.written += n;
  }
  if (peer.pcb == nullptr) return;
  if (peer.close_when_written && peer.written == peer.outgoing.size()) {
    tcp_pcb* pcb = peer.pcb;
    peer.pcb = nullptr;  // lwIP's from here; our callbacks stay attached
    EXPECT_EQ(tcp_close(pcb), ERR_OK);
  } else {
    tcp_output(peer.pcb);
  }
}

inline err_t Recv(void* arg, tcp_pcb* pcb, pbuf* p, err_t) {
  auto* peer = static_cast<Peer*>(arg);
  if (p == nullptr) {
    peer->got_fin = true;
    return ERR_OK;
  }
  const size_t at = peer->received.size();
  peer->received.resize(at + p->tot_len);
  pbuf_copy_partial(p, peer->received.data() + at, p->tot_len, 0);
  if (peer->reading) {
    tcp_recved(pcb, p->tot_len);
  } else {
    peer->unread += p->tot_len;
  }
  pbuf_free(p);
  return ERR_OK;
}

inline err_t Sent(void* arg, tcp_pcb*, u16_t) {
  Feed(*static_cast<Peer*>(arg));
  return ERR_OK;
}

inline void Err(void* arg, err_t err) {
  auto* peer = static_cast<Peer*>(arg);
  peer->errored = true;
  peer->error = err;
  peer->pcb = nullptr;  // lwIP has freed it
}

inline err_t Connected(void* arg, tcp_pcb*, err_t) {
  static_cast<Peer*>(arg)->connected = true;
  return ERR_OK;
}

inline void Attach(Peer* peer, tcp_pcb* pcb) {
  peer->pcb = pcb;
  tcp_arg(pcb, peer);
  tcp_recv(pcb, Recv);
  tcp_sent(pcb, Sent);
  tcp_err(pcb, Err);
}

// Bytes that differ by position, so a misplaced segment shows.
inline std::string Payload(size_t len) {
  std::string s(len, '\0');
  for (size_t k = 0; k < len; ++k) s[k] = static_cast<char>(k * 13 + k / 1000);
  return s;
}

// Drops packets of both directions with a fixed probability, from a fixed seed (xorshift32):
// the same packets of the same run every time.
class PseudoRandomLoss {
 public:
  explicit PseudoRandomLoss(double probability)
      : threshold_(static_cast<uint32_t>(probability * 4294967296.0)) {}
  WireVerdict operator()(const WirePacket&) {
    state_ ^= state_ << 13;
    state_ ^= state_ >> 17;
    state_ ^= state_ << 5;
    return state_ < threshold_ ? WireVerdict::kDrop : WireVerdict::kDeliver;
  }

 private:
  uint32_t threshold_;
  uint32_t state_ = 2463534242u;
};

inline bool IsData(const WirePacket& p) { return p.tcp.payload_len > 0; }
inline bool FromClient(const WirePacket& p) { return p.tcp.src_port == kClientPort; }

class LwipWireTest : public ::testing::Test {
 protected:
  void SetUp() override {
    pcbs_before_ = PcbsInUse();
    segs_before_ = SegmentsInUse();
    bbr_before_ = BbrStatesInUse();
    listener_ = LwipWire::ListenOnB(kServerPort, this, Accept);
    ASSERT_NE(listener_, nullptr);
  }

  void TearDown() override {
    wire_.SetFilter(nullptr);
    for (Peer* peer : {&client_, &server_}) {
      if (peer->pcb != nullptr) {
        tcp_arg(peer->pcb, nullptr);
        tcp_err(peer->pcb, nullptr);
        tcp_abort(peer->pcb);
        peer->pcb = nullptr;
      }
    }
    // Pcbs we closed may still be finishing (LAST_ACK, TIME_WAIT); their callbacks point at
    // peers that outlive this.
    wire_.AdvanceMs(2 * TCP_MSL + 1000);
    EXPECT_EQ(tcp_close(listener_), ERR_OK);
    EXPECT_EQ(PcbsInUse(), pcbs_before_);
    EXPECT_EQ(SegmentsInUse(), segs_before_);
    EXPECT_EQ(BbrStatesInUse(), bbr_before_);
  }

  static err_t Accept(void* arg, tcp_pcb* pcb, err_t err) {
    auto* self = static_cast<LwipWireTest*>(arg);
    if (err != ERR_OK || self->server_.pcb != nullptr) {
      ADD_FAILURE() << "unexpected accept";
      tcp_abort(pcb);
      return ERR_ABRT;
    }
    Attach(&self->server_, pcb);
    return ERR_OK;
  }

  // Opens client a:kClientPort -> b:kServerPort (sends the SYN, does not wait).
  void Open() {
    tcp_pcb* pcb = tcp_new();
    ASSERT_NE(pcb, nullptr);
    lwip_pcb::SetLocalEndpoint(pcb, LwipWire::InAddrA(), kClientPort);
    Attach(&client_, pcb);
    const ip_addr_t b = LwipWire::AddrB();
    ASSERT_EQ(tcp_connect(pcb, &b, kServerPort, Connected), ERR_OK);
  }

  // Ticks (feeding both peers) until done() or max_ticks; returns done().
  bool RunUntil(const std::function<bool()>& done, int max_ticks) {
    for (int i = 0; i < max_ticks && !done(); ++i) {
      wire_.Tick();
      Feed(client_);
      Feed(server_);
    }
    return done();
  }

  void Connect() {
    ASSERT_NO_FATAL_FAILURE(Open());
    ASSERT_TRUE(RunUntil([&] { return client_.connected && server_.pcb != nullptr; }, 1000));
  }

  // Sends `len` bytes from `from` and runs until `to` has them all and `from` has no data in
  // flight (every segment acknowledged).
  void Transfer(Peer& from, Peer& to, size_t len) {
    const size_t want = to.received.size() + len;
    from.outgoing += Payload(len);
    Feed(from);
    ASSERT_TRUE(RunUntil(
        [&] {
          return to.received.size() == want && from.pcb->unacked == nullptr &&
                 from.pcb->unsent == nullptr;
        },
        5000))
        << "received " << to.received.size() << " of " << want;
  }

  static uint64_t RexmitCounted() { return lwip_stats.mib2.tcpretranssegs; }

 public:  // for MeasureLossTransfer
  void ConnectForMeasure() { Connect(); }
  bool RunUntilForMeasure(const std::function<bool()>& done, int max_ticks) {
    return RunUntil(done, max_ticks);
  }
  void TransferForMeasure(Peer& from, Peer& to, size_t len) { Transfer(from, to, len); }

 protected:
  LwipWire wire_;
  Peer client_, server_;
  tcp_pcb* listener_ = nullptr;
  mem_size_t pcbs_before_ = 0, segs_before_ = 0, bbr_before_ = 0;
};

}  // namespace xdpfwd::test::wire
