// What our lwIP patches promise for TCP, shown over two netifs wired in memory. 0001: every
// segment reaches its pcb through the 4-tuple hash, however thousands of connections close,
// TIME_WAIT pcbs included, and unlinking is O(1) without reordering anything. 0003: delayed ACKs
// still go out. 0004: a new SYN reopens a tuple in TIME_WAIT. 0010: a passive close's FIN
// is acknowledged by our own FIN. (0002: lwip_pool_test.cpp.)
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "os/clock.h"
#include "stack/lwip_pcb.h"
#include "tests/support/lwip_wire.h"

extern "C" {
#include "lwip/memp.h"
#include "lwip/pbuf.h"
#include "lwip/priv/memp_priv.h"
#include "lwip/priv/tcp_priv.h"
#include "lwip/prot/tcp.h"
#include "lwip/stats.h"
#include "lwip/tcp.h"
}

namespace xdpfwd::test {
namespace {

constexpr uint16_t kServerPort = 8080;

mem_size_t PcbsInUse() { return lwip_stats.memp[MEMP_TCP_PCB]->used; }
mem_size_t ListenersInUse() { return lwip_stats.memp[MEMP_TCP_PCB_LISTEN]->used; }
mem_size_t SegmentsInUse() { return lwip_stats.memp[MEMP_TCP_SEG]->used; }

// One side of a connection as an application on lwIP's raw API sees it.
struct TcpEnd {
  tcp_pcb* pcb = nullptr;  // null once handed back (tcp_close/tcp_abort) or freed by lwIP
  std::string received;
  bool connected = false;  // client: tcp_connect's callback ran
  bool got_fin = false;    // recv was called with a null pbuf
  bool errored = false;
  err_t error = ERR_OK;
  // Closes from inside recv without taking the data (tcp_recved): lwIP then resets the
  // connection and unlinks the pcb twice (tcp_close, then tcp_input's delayed close).
  bool close_in_recv = false;
  // On the peer's FIN in TIME_WAIT, hands the pcb back with lwip_pcb::Release from inside the
  // recv callback, as the relay does with a finished leg.
  bool release_on_fin = false;
};

enum class CloseOrder { kClientFirst, kServerFirst, kSimultaneous, kAbort };

struct Conn {
  uint16_t client_port = 0;
  TcpEnd client, server;
  std::string c2s, s2c;  // what each direction must carry, byte for byte
};

// Bytes that differ by connection, direction and position, so a misdelivered segment shows.
std::string Payload(char direction, size_t conn, size_t len) {
  std::string s(len, '\0');
  for (size_t k = 0; k < len; ++k) s[k] = static_cast<char>(direction + conn * 7 + k * 13);
  return s;
}

err_t Recv(void* arg, tcp_pcb* pcb, pbuf* p, err_t) {
  auto* end = static_cast<TcpEnd*>(arg);
  if (end == nullptr) {  // handed back by the test: nobody reads
    if (p != nullptr) pbuf_free(p);
    return ERR_OK;
  }
  if (p == nullptr) {
    end->got_fin = true;
    if (end->release_on_fin && pcb->state == TIME_WAIT) {
      tcp_arg(pcb, nullptr);
      tcp_recv(pcb, nullptr);
      tcp_err(pcb, nullptr);
      end->pcb = nullptr;
      EXPECT_FALSE(lwip_pcb::Release(pcb)) << "a TIME_WAIT pcb must outlive its callback";
    }
    return ERR_OK;
  }
  if (end->close_in_recv) {
    pbuf_free(p);
    end->pcb = nullptr;
    EXPECT_EQ(tcp_close(pcb), ERR_OK);
    return ERR_OK;  // not aborted: tcp_input frees the pcb after we return
  }
  const size_t at = end->received.size();
  end->received.resize(at + p->tot_len);
  pbuf_copy_partial(p, end->received.data() + at, p->tot_len, 0);
  tcp_recved(pcb, p->tot_len);
  pbuf_free(p);
  return ERR_OK;
}

void Err(void* arg, err_t err) {
  auto* end = static_cast<TcpEnd*>(arg);
  if (end == nullptr) return;
  end->errored = true;
  end->error = err;
  end->pcb = nullptr;  // lwIP has freed it
}

err_t Connected(void* arg, tcp_pcb*, err_t) {
  static_cast<TcpEnd*>(arg)->connected = true;
  return ERR_OK;
}

void Attach(TcpEnd* end, tcp_pcb* pcb) {
  end->pcb = pcb;
  tcp_arg(pcb, end);
  tcp_recv(pcb, Recv);
  tcp_err(pcb, Err);
}

// A listener on b and clients on a. Connections are opened from client ports the test picks
// (SetLocalEndpoint, as the relay opens its backend legs).
class LwipPcbTest : public ::testing::Test {
 protected:
  void SetUp() override {
    pcbs_before_ = PcbsInUse();
    segs_before_ = SegmentsInUse();
    listeners_before_ = ListenersInUse();
    listener_ = LwipWire::ListenOnB(kServerPort, this, Accept);
    ASSERT_NE(listener_, nullptr);
  }

  void TearDown() override {
    for (auto& [port, conn] : conns_) {
      for (TcpEnd* end : {&conn->client, &conn->server}) {
        if (end->pcb != nullptr) {
          tcp_arg(end->pcb, nullptr);
          tcp_err(end->pcb, nullptr);
          tcp_abort(end->pcb);
          end->pcb = nullptr;
        }
      }
    }
    wire_.Pump();
    if (listener_ != nullptr) {
      EXPECT_EQ(tcp_close(listener_), ERR_OK);
    }
    ExpireTimeWait();
    // Leak check: every pcb and segment this test used is back in its pool.
    EXPECT_EQ(PcbsInUse(), pcbs_before_);
    EXPECT_EQ(SegmentsInUse(), segs_before_);
    EXPECT_EQ(ListenersInUse(), listeners_before_);
    EXPECT_TRUE(LwipWire::ActiveTuples().empty());
  }

  // 2 * MSL of lwIP time (and a margin): TIME_WAIT pcbs are freed.
  void ExpireTimeWait() { wire_.AdvanceMs(2 * TCP_MSL + 100); }

  static err_t Accept(void* arg, tcp_pcb* pcb, err_t err) {
    auto* self = static_cast<LwipPcbTest*>(arg);
    if (err != ERR_OK || pcb == nullptr) {
      ADD_FAILURE() << "accept failed: " << static_cast<int>(err);
      return ERR_VAL;
    }
    const uint16_t port = lwip_pcb::EndpointsOf(pcb).remote_port;
    auto it = self->conns_.find(port);
    if (it == self->conns_.end() || it->second->server.pcb != nullptr) {
      ADD_FAILURE() << "accepted a connection from unexpected port " << port;
      tcp_abort(pcb);
      return ERR_ABRT;
    }
    Attach(&it->second->server, pcb);
    return ERR_OK;
  }

  // Starts a connection from a:port to b:kServerPort (not pumped).
  Conn* Open(uint16_t port) {
    auto conn = std::make_unique<Conn>();
    conn->client_port = port;
    tcp_pcb* pcb = tcp_new();
    if (pcb == nullptr) {
      ADD_FAILURE() << "tcp_new failed for port " << port;
      return nullptr;
    }
    lwip_pcb::SetLocalEndpoint(pcb, LwipWire::InAddrA(), port);
    Attach(&conn->client, pcb);
    const ip_addr_t b = LwipWire::AddrB();
    const err_t err = tcp_connect(pcb, &b, kServerPort, Connected);
    if (err != ERR_OK) {
      ADD_FAILURE() << "tcp_connect from port " << port << ": " << static_cast<int>(err);
      conn->client.pcb = nullptr;
      tcp_abort(pcb);
      return nullptr;
    }
    Conn* raw = conn.get();
    conns_[port] = std::move(conn);
    return raw;
  }

  // Opens `n` connections from ports first_port.. and checks every one completed.
  std::vector<Conn*> OpenMany(size_t n, uint16_t first_port) {
    std::vector<Conn*> out;
    for (size_t i = 0; i < n; ++i) {
      Conn* c = Open(static_cast<uint16_t>(first_port + i));
      if (c == nullptr) return {};
      out.push_back(c);
    }
    wire_.Pump();
    size_t incomplete = 0;
    for (Conn* c : out) incomplete += !(c->client.connected && c->server.pcb != nullptr);
    EXPECT_EQ(incomplete, 0u) << "connections that did not complete the handshake";
    return out;
  }

  static void Send(TcpEnd& end, const std::string& bytes) {
    ASSERT_NE(end.pcb, nullptr);
    ASSERT_EQ(
        tcp_write(end.pcb, bytes.data(), static_cast<u16_t>(bytes.size()), TCP_WRITE_FLAG_COPY),
        ERR_OK);
    ASSERT_EQ(tcp_output(end.pcb), ERR_OK);
  }

  // Sends each connection's c2s and s2c (sizes vary with the index, some span segments) and
  // checks every byte arrived at the right end.
  void Exchange(const std::vector<Conn*>& conns, size_t salt) {
    for (size_t i = 0; i < conns.size(); ++i) {
      Conn& c = *conns[i];
      c.c2s = Payload('c', i + salt, 1 + (i * 131 + salt) % 3000);
      c.s2c = Payload('s', i + salt, 1 + (i * 71 + salt) % 3000);
      c.client.received.clear();
      c.server.received.clear();
      ASSERT_NO_FATAL_FAILURE(Send(c.client, c.c2s));
    }
    wire_.Pump();
    for (Conn* c : conns) ASSERT_NO_FATAL_FAILURE(Send(c->server, c->s2c));
    wire_.Pump();
    wire_.Tick(2);  // delayed ACKs
    size_t wrong = 0;
    for (Conn* c : conns) {
      if (c->server.received == c->c2s && c->client.received == c->s2c) continue;
      if (++wrong <= 5) {
        ADD_FAILURE() << "port " << c->client_port << ": server got " << c->server.received.size()
                      << "/" << c->c2s.size() << " bytes, client " << c->client.received.size()
                      << "/" << c->s2c.size()
                      << (c->server.received.size() == c->c2s.size() &&
                                  c->client.received.size() == c->s2c.size()
                              ? " (content differs)"
                              : "");
      }
    }
    EXPECT_EQ(wrong, 0u) << "connections whose bytes did not arrive intact";
  }

  static void Close(TcpEnd& end) {
    ASSERT_NE(end.pcb, nullptr);
    tcp_pcb* pcb = end.pcb;
    end.pcb = nullptr;
    EXPECT_EQ(tcp_close(pcb), ERR_OK);
  }

  static void Abort(TcpEnd& end) {
    ASSERT_NE(end.pcb, nullptr);
    tcp_pcb* pcb = end.pcb;
    tcp_abort(pcb);  // our err callback runs (ERR_ABRT) and clears end.pcb
  }

  // Closes each end that saw its peer's FIN and has not closed yet, as an application would.
  void CloseWhereFinArrived(const std::vector<Conn*>& conns) {
    for (Conn* c : conns) {
      for (TcpEnd* end : {&c->client, &c->server}) {
        if (end->got_fin && end->pcb != nullptr) Close(*end);
      }
    }
    wire_.Pump();
  }

  static PcbTuple ClientTuple(const Conn& c) {
    return {LwipWire::InAddrA(), LwipWire::InAddrB(), c.client_port, kServerPort};
  }
  static PcbTuple ServerTuple(const Conn& c) {
    return {LwipWire::InAddrB(), LwipWire::InAddrA(), kServerPort, c.client_port};
  }

  std::map<uint16_t, std::unique_ptr<Conn>> conns_;  // by client port; outlives wire_
  LwipWire wire_;
  tcp_pcb* listener_ = nullptr;
  mem_size_t pcbs_before_ = 0, segs_before_ = 0, listeners_before_ = 0;
};

std::vector<PcbTuple> Sorted(std::vector<PcbTuple> v) {
  std::sort(v.begin(), v.end());
  return v;
}

// Patch 0001's main promise: with thousands of connections in the hash, every segment finds
// its own pcb (no RST to a live connection, every byte where it belongs), closing in each order
// leaves exactly the TIME_WAIT pcbs TCP calls for, those are still found (a retransmitted FIN
// is ACKed, not reset) and every pcb goes back to the pool.
TEST_F(LwipPcbTest, ThousandsOfConnectionsFindTheirPcbsInEveryCloseOrder) {
  constexpr size_t kConns = 5000;
  // The last FIN each side sent, by (sender port, receiver port): replayed at TIME_WAIT pcbs.
  std::map<std::pair<uint16_t, uint16_t>, WirePacket> last_fin;
  wire_.SetTap([&](const WirePacket& p) {
    if (p.tcp.flags & TCP_FIN) last_fin[{p.tcp.src_port, p.tcp.dst_port}] = p;
  });

  const std::vector<Conn*> conns = OpenMany(kConns, 20000);
  ASSERT_EQ(conns.size(), kConns);
  EXPECT_EQ(PcbsInUse(), pcbs_before_ + 2 * kConns);
  ASSERT_NO_FATAL_FAILURE(Exchange(conns, 0));
  EXPECT_EQ(wire_.counters().rst, 0u) << "RST sent while every connection was live";

  auto order = [](size_t i) { return static_cast<CloseOrder>(i % 4); };
  size_t aborts = 0;
  std::vector<PcbTuple> want_time_wait;
  for (size_t i = 0; i < kConns; ++i) {
    Conn& c = *conns[i];
    switch (order(i)) {
      case CloseOrder::kClientFirst:
        Close(c.client);
        want_time_wait.push_back(ClientTuple(c));
        break;
      case CloseOrder::kServerFirst:
        Close(c.server);
        want_time_wait.push_back(ServerTuple(c));
        break;
      case CloseOrder::kSimultaneous:  // both FINs cross on the wire
        Close(c.client);
        Close(c.server);
        want_time_wait.push_back(ClientTuple(c));
        want_time_wait.push_back(ServerTuple(c));
        break;
      case CloseOrder::kAbort:
        Abort(c.client);
        ++aborts;
        break;
    }
  }
  wire_.Pump();
  CloseWhereFinArrived(conns);
  wire_.Tick(2);

  EXPECT_EQ(wire_.counters().rst, aborts) << "one RST per tcp_abort and none anywhere else";
  EXPECT_TRUE(LwipWire::ActiveTuples().empty()) << "every connection should have finished";
  EXPECT_EQ(Sorted(LwipWire::TimeWaitTuples()), Sorted(want_time_wait));
  EXPECT_EQ(PcbsInUse(), pcbs_before_ + want_time_wait.size());
  size_t unexpected_end = 0;
  for (size_t i = 0; i < kConns; ++i) {
    const Conn& c = *conns[i];
    const bool ok =
        order(i) == CloseOrder::kAbort
            ? c.client.error == ERR_ABRT && c.server.error == ERR_RST
            : c.client.got_fin && c.server.got_fin && !c.client.errored && !c.server.errored;
    if (!ok && ++unexpected_end <= 5) {
      ADD_FAILURE() << "port " << c.client_port << " (order " << i % 4
                    << ") ended unexpectedly: client fin " << c.client.got_fin << " err "
                    << static_cast<int>(c.client.error) << ", server fin " << c.server.got_fin
                    << " err " << static_cast<int>(c.server.error);
    }
  }
  EXPECT_EQ(unexpected_end, 0u);

  // A retransmission of the peer's FIN reaches each TIME_WAIT pcb: it must be ACKed (lwIP's
  // tcp_timewait_input), which only happens if the lookup finds that pcb.
  std::vector<WirePacket> answers;
  wire_.SetTap([&](const WirePacket& p) { answers.push_back(p); });
  const uint64_t rst_before = wire_.counters().rst;
  for (const PcbTuple& t : want_time_wait) {
    auto fin = last_fin.find({t.remote_port, t.local_port});
    ASSERT_NE(fin, last_fin.end()) << "no FIN seen towards port " << t.local_port;
    wire_.Replay(fin->second);
  }
  // The answers are captured as sent, then dropped: a peer that has finished would reset them.
  wire_.SetFilter([](const WirePacket& p) {
    return p.tcp.flags & TCP_FIN ? WireVerdict::kDeliver : WireVerdict::kDrop;
  });
  wire_.Pump();
  wire_.SetFilter({});
  EXPECT_EQ(wire_.counters().rst, rst_before) << "a TIME_WAIT pcb was not found: RST";
  ASSERT_EQ(answers.size(), want_time_wait.size());
  for (const WirePacket& p : answers) {
    const WirePacket& fin = last_fin.at({p.tcp.dst_port, p.tcp.src_port});
    EXPECT_EQ(p.tcp.flags, TCP_ACK);
    EXPECT_EQ(p.tcp.ack, fin.tcp.seq + fin.tcp.payload_len + 1) << "ACK must cover the FIN";
  }
  EXPECT_EQ(LwipWire::TimeWaitTuples().size(), want_time_wait.size());
  wire_.SetTap({});

  ExpireTimeWait();
  EXPECT_TRUE(LwipWire::TimeWaitTuples().empty());
  EXPECT_EQ(PcbsInUse(), pcbs_before_) << "pcbs leaked";
}

// The old tcp_input moved the pcb that got a segment to the front of tcp_active_pcbs; with the
// hash, finding a pcb must not depend on (or change) its place in the list.
TEST_F(LwipPcbTest, TrafficDoesNotReorderTheActiveList) {
  const std::vector<Conn*> conns = OpenMany(1000, 20000);
  ASSERT_EQ(conns.size(), 1000u);
  const std::vector<const tcp_pcb*> before = LwipWire::ActivePcbs();
  ASSERT_EQ(before.size(), 2000u);
  // Traffic to pcbs deep in the list: the reverse of their order in it.
  const std::vector<Conn*> reversed(conns.rbegin(), conns.rend());
  ASSERT_NO_FATAL_FAILURE(Exchange(reversed, 1));
  const std::vector<const tcp_pcb*> after = LwipWire::ActivePcbs();
  ASSERT_EQ(after.size(), before.size());
  size_t moved = 0;
  for (size_t i = 0; i < before.size(); ++i) moved += before[i] != after[i];
  EXPECT_EQ(moved, 0u) << "segments reordered the active list (lwIP's move-to-front)";
}

// The relay reuses a backend port while the old leg may still sit in TIME_WAIT: the old pcb and
// a new active one share the 4-tuple (and so the hash bucket). Segments go to the active one,
// and freeing the TIME_WAIT one later leaves the active one reachable.
TEST_F(LwipPcbTest, TimeWaitAndActivePcbOnTheSameTupleCoexist) {
  constexpr uint16_t kPort = 30000;
  std::vector<Conn*> first = OpenMany(1, kPort);
  ASSERT_EQ(first.size(), 1u);
  ASSERT_NO_FATAL_FAILURE(Exchange(first, 2));
  Close(first[0]->client);
  wire_.Pump();
  CloseWhereFinArrived(first);
  const PcbTuple tuple = ClientTuple(*first[0]);
  ASSERT_EQ(LwipWire::TimeWaitTuples(), std::vector<PcbTuple>{tuple});
  ASSERT_TRUE(LwipWire::ActiveTuples().empty());
  auto old = conns_.extract(kPort);  // keep its ends alive; the port is reused below

  std::vector<Conn*> second = OpenMany(1, kPort);
  ASSERT_EQ(second.size(), 1u);
  ASSERT_NO_FATAL_FAILURE(Exchange(second, 3));
  EXPECT_EQ(wire_.counters().rst, 0u);
  EXPECT_EQ(LwipWire::TimeWaitTuples(), std::vector<PcbTuple>{tuple});
  EXPECT_EQ(Sorted(LwipWire::ActiveTuples()), Sorted({tuple, ServerTuple(*second[0])}));

  // The TIME_WAIT pcb expires (unlinked from the bucket the active pcb shares) ...
  wire_.AdvanceMs(2 * TCP_MSL + 100);
  EXPECT_TRUE(LwipWire::TimeWaitTuples().empty());
  // ... and the active one still gets its segments.
  ASSERT_NO_FATAL_FAILURE(Exchange(second, 4));
  EXPECT_EQ(wire_.counters().rst, 0u);
  EXPECT_FALSE(second[0]->client.errored || second[0]->server.errored);
  Close(second[0]->server);
  wire_.Pump();
  CloseWhereFinArrived(second);
  EXPECT_EQ(LwipWire::TimeWaitTuples(), std::vector<PcbTuple>{ServerTuple(*second[0])});
  EXPECT_TRUE(LwipWire::ActiveTuples().empty());
}

// Patch 0004. The server closes first, so its pcb for the tuple sits in TIME_WAIT, and the
// client reuses its port at once (what a client does when its side of the close was passive).
// The new SYN's sequence number is above the old connection's (lwIP's ISNs, like Linux's,
// advance with time), so the TIME_WAIT pcb gives way and the listener accepts: no reset. A SYN
// at or below the old connection's sequence numbers is answered as before: an ACK, no reset.
TEST_F(LwipPcbTest, NewSynReopensATimeWaitTuple) {
  uint64_t rsts_from_b = 0;
  wire_.SetTap([&](const WirePacket& p) {
    rsts_from_b += (p.tcp.flags & TCP_RST) != 0 && p.from == wire_.b();
  });
  // Opens from kPort, moves `bytes` client to server, then closes server first. Returns the
  // TIME_WAIT pcb's rcv_nxt.
  constexpr uint16_t kPort = 42000;
  auto open_and_close_server_first = [&](size_t bytes) -> uint32_t {
    std::vector<Conn*> conns = OpenMany(1, kPort);
    if (conns.size() != 1) return 0;
    Conn& c = *conns[0];
    for (size_t sent = 0; sent < bytes;) {
      const size_t n = std::min<size_t>(bytes - sent, 32768);
      Send(c.client, Payload('c', sent, n));
      wire_.Pump();
      sent += n;
    }
    EXPECT_EQ(c.server.received.size(), bytes);
    Close(c.server);
    wire_.Pump();
    EXPECT_TRUE(c.client.got_fin);
    Close(c.client);
    wire_.Pump();
    const PcbTuple tuple = ServerTuple(c);
    EXPECT_EQ(LwipWire::TimeWaitTuples(), std::vector<PcbTuple>{tuple});
    uint32_t rcv_nxt = 0;
    for (const tcp_pcb* pcb = tcp_tw_pcbs; pcb != nullptr; pcb = pcb->next) rcv_nxt = pcb->rcv_nxt;
    conns_.erase(kPort);  // both ends handed back; the port is reused below
    return rcv_nxt;
  };

  // 1. A SYN above rcv_nxt: lwIP's ISN ticks every 4 us, the old connection used 2 sequence
  // numbers (SYN, FIN), so 100 us later the new one is above them.
  ASSERT_NE(open_and_close_server_first(0), 0u);
  const uint64_t closed_ns = MonotonicNs();
  while (MonotonicNs() - closed_ns < 100'000) {
  }
  std::vector<Conn*> again = OpenMany(1, kPort);
  ASSERT_EQ(again.size(), 1u);
  EXPECT_TRUE(again[0]->client.connected);
  EXPECT_FALSE(again[0]->client.errored) << "the new SYN met a reset";
  EXPECT_EQ(rsts_from_b, 0u);
  EXPECT_TRUE(LwipWire::TimeWaitTuples().empty());
  ASSERT_NO_FATAL_FAILURE(Exchange(again, 5));
  Abort(again[0]->client);
  wire_.Pump();
  conns_.erase(kPort);

  // 2. A SYN below rcv_nxt: 200,000 bytes moved is 200,000 sequence numbers, 0.8 s of ISN
  // ticks, so the client's next ISN stays below them (unless this test stalls for that long).
  const uint32_t rcv_nxt = open_and_close_server_first(200'000);
  Conn* late = Open(kPort);
  ASSERT_NE(late, nullptr);
  uint32_t syn_seq = 0;
  wire_.SetTap([&](const WirePacket& p) {
    rsts_from_b += (p.tcp.flags & TCP_RST) != 0 && p.from == wire_.b();
    if ((p.tcp.flags & TCP_SYN) != 0 && p.from == wire_.a()) syn_seq = p.tcp.seq;
  });
  wire_.Pump();
  ASSERT_TRUE(TCP_SEQ_LEQ(syn_seq, rcv_nxt)) << "the test took too long to stay below rcv_nxt";
  EXPECT_FALSE(late->client.connected);
  EXPECT_EQ(rsts_from_b, 0u) << "an old SYN in TIME_WAIT gets an ACK, not a reset";
  EXPECT_EQ(LwipWire::TimeWaitTuples().size(), 1u);
  // (An lwIP client answers that ACK with a reset and an immediate SYN, and gives up after
  // TCP_SYNMAXRTX of them; a Linux client resets and waits for its retransmission timer.)
  if (late->client.pcb != nullptr) Abort(late->client);
  wire_.Pump();
}

// Patch 0010. A peer's FIN that starts our passive close is not acknowledged in a bare segment
// at once: our own FIN, sent when the application closes, carries the ACK (one packet less, and
// the peer goes from FIN_WAIT1 straight to TIME_WAIT: a peer whose TIME_WAIT table is full no
// longer answers our FIN with a reset). Left alone, the ACK still goes out within a fast tick.
TEST_F(LwipPcbTest, PassiveCloseAcknowledgesTheFinWithItsOwn) {
  uint64_t bare_acks_from_b = 0, fins_from_b = 0, rsts = 0;
  wire_.SetTap([&](const WirePacket& p) {
    rsts += (p.tcp.flags & TCP_RST) != 0;
    if (p.from != wire_.b()) return;
    fins_from_b += (p.tcp.flags & TCP_FIN) != 0;
    bare_acks_from_b += p.tcp.flags == TCP_ACK && p.tcp.payload_len == 0;
  });
  const std::vector<Conn*> conns = OpenMany(3, 43000);
  ASSERT_EQ(conns.size(), 3u);
  ASSERT_NO_FATAL_FAILURE(Exchange(conns, 7));

  // 1. The server closes right after the client's FIN: one FIN+ACK, no bare ACK before it.
  Conn& c = *conns[0];
  bare_acks_from_b = fins_from_b = 0;
  Close(c.client);
  wire_.Pump();
  ASSERT_TRUE(c.server.got_fin);
  EXPECT_EQ(bare_acks_from_b, 0u) << "the FIN was acknowledged in a segment of its own";
  Close(c.server);
  wire_.Pump();
  EXPECT_EQ(fins_from_b, 1u);
  EXPECT_EQ(bare_acks_from_b, 0u);
  const auto tw = LwipWire::TimeWaitTuples();
  EXPECT_EQ(std::count(tw.begin(), tw.end(), ClientTuple(c)), 1)
      << "the client is not in TIME_WAIT";
  const auto active = LwipWire::ActiveTuples();
  EXPECT_EQ(std::count(active.begin(), active.end(), ServerTuple(c)), 0)
      << "the server's leg is still waiting for the ACK of its FIN";

  // 2. The server does not close: the delayed ACK goes out at the next fast tick.
  Conn& d = *conns[1];
  bare_acks_from_b = 0;
  Close(d.client);
  wire_.Pump();
  ASSERT_TRUE(d.server.got_fin);
  EXPECT_EQ(bare_acks_from_b, 0u);
  wire_.Tick(1);
  EXPECT_EQ(bare_acks_from_b, 1u) << "the FIN was never acknowledged";
  Close(d.server);
  wire_.Pump();

  // 3. The client's last data, then its FIN in a segment of its own: the data's delayed ACK
  // would have become an immediate one with the FIN; it still waits for the server's FIN.
  Conn& e = *conns[2];
  bare_acks_from_b = fins_from_b = 0;
  Send(e.client, "last words");
  wire_.Pump();
  EXPECT_EQ(bare_acks_from_b, 0u);  // delayed
  Close(e.client);
  wire_.Pump();
  ASSERT_TRUE(e.server.got_fin);
  EXPECT_EQ(e.server.received.substr(e.server.received.size() - 10), "last words");
  EXPECT_EQ(bare_acks_from_b, 0u) << "data then FIN: the FIN was acknowledged on its own";
  Close(e.server);
  wire_.Pump();
  EXPECT_EQ(fins_from_b, 1u);
  EXPECT_EQ(bare_acks_from_b, 0u);
  EXPECT_EQ(rsts, 0u);
}
// Removing a pcb from a list it is not on leaves every list as it was: (1) tcp_close and
// tcp_abort of a never-connected pcb whose local port was set directly (SetLocalEndpoint), and
// (2) lwIP's own double unlink of the active list, when an application closes a connection
// with unread data from inside its recv callback (tcp_close unlinks and sends RST, then
// tcp_input's delayed close unlinks the same pcb again).
// The relay hands a leg back (lwip_pcb::Release) from the recv callback that delivered the
// peer's FIN, once the leg is in TIME_WAIT. lwIP must still send the ACK of that FIN, or the
// peer sits in LAST_ACK and retransmits into a reset (what 45,000 relayed connections showed
// when Release freed the pcb there). The pcb then goes at lwIP's next slow-timer tick, not
// after 2 * MSL.
TEST_F(LwipPcbTest, ReleasedTimeWaitLegStillAcknowledgesThePeersFin) {
  uint64_t rsts = 0;
  wire_.SetTap([&](const WirePacket& p) { rsts += (p.tcp.flags & TCP_RST) != 0; });
  const std::vector<Conn*> conns = OpenMany(1, 41000);
  ASSERT_EQ(conns.size(), 1u);
  Conn& c = *conns[0];
  c.server.release_on_fin = true;
  // The server closes first (FIN_WAIT), the client follows: the server's leg reaches TIME_WAIT
  // inside the callback that brings the client's FIN.
  ASSERT_EQ(tcp_shutdown(c.server.pcb, 0, 1), ERR_OK);
  wire_.Pump();
  ASSERT_TRUE(c.client.got_fin);
  Close(c.client);
  wire_.Pump();
  EXPECT_TRUE(c.server.got_fin);
  EXPECT_EQ(c.server.pcb, nullptr) << "the server's leg did not reach TIME_WAIT";
  const auto active = LwipWire::ActiveTuples();
  EXPECT_EQ(std::count(active.begin(), active.end(), ClientTuple(c)), 0)
      << "the client is still in LAST_ACK: its FIN was never acknowledged";
  EXPECT_EQ(rsts, 0u);
  const auto tw = LwipWire::TimeWaitTuples();
  EXPECT_EQ(std::count(tw.begin(), tw.end(), ServerTuple(c)), 1);
  wire_.AdvanceMs(TCP_SLOW_INTERVAL);  // one slow-timer tick
  EXPECT_TRUE(LwipWire::TimeWaitTuples().empty()) << "the released leg waited out 2 * MSL";
  EXPECT_EQ(PcbsInUse(), pcbs_before_);
}

// Every held connection has two pcbs (issue #32: at most 1 KiB of memory per idle connection),
// so a pcb that grows is noticed here: 552 bytes before BBR's state left the pcb (patch 0042,
// stack/lwip/lwippools.h), 456 after, 432 with the padding gone (0043). Raise the figure only
// with the growth written down (docs/stack.md, "What a pcb carries").
TEST_F(LwipPcbTest, PcbSizeIsPinned) {
  constexpr size_t kPcbBytes = 432;
  EXPECT_LE(sizeof(tcp_pcb), kPcbBytes);
  // What the pool hands out per pcb: no overhead beside the struct.
  EXPECT_LE(static_cast<size_t>(MEMP_SIZE) + memp_pools[MEMP_TCP_PCB]->size, kPcbBytes);
}

TEST_F(LwipPcbTest, RemovingAPcbFromAListItIsNotOnChangesNothing) {
  const std::vector<Conn*> conns = OpenMany(64, 20000);
  ASSERT_EQ(conns.size(), 64u);
  // Some TIME_WAIT pcbs too.
  for (size_t i = 0; i < 8; ++i) Close(conns[i]->client);
  wire_.Pump();
  CloseWhereFinArrived(conns);
  tcp_pcb* bound = tcp_new();  // something on the bound list
  ASSERT_NE(bound, nullptr);
  const ip_addr_t a = LwipWire::AddrA();
  ASSERT_EQ(tcp_bind(bound, &a, 40001), ERR_OK);

  const auto active = LwipWire::ActivePcbs();
  const auto time_wait = LwipWire::TimeWaitTuples();
  const auto bound_list = LwipWire::BoundPcbs();
  ASSERT_EQ(time_wait.size(), 8u);
  ASSERT_EQ(bound_list, std::vector<const tcp_pcb*>{bound});
  const mem_size_t in_use = PcbsInUse();

  for (int use_abort = 0; use_abort < 2; ++use_abort) {
    tcp_pcb* pcb = tcp_new();
    ASSERT_NE(pcb, nullptr);
    lwip_pcb::SetLocalEndpoint(pcb, LwipWire::InAddrA(), 40000);
    if (use_abort) {
      tcp_abort(pcb);
    } else {
      EXPECT_EQ(tcp_close(pcb), ERR_OK);
    }
    EXPECT_EQ(LwipWire::ActivePcbs(), active);
    EXPECT_EQ(LwipWire::TimeWaitTuples(), time_wait);
    EXPECT_EQ(LwipWire::BoundPcbs(), bound_list);
    EXPECT_EQ(PcbsInUse(), in_use);
  }
  EXPECT_EQ(wire_.counters().rst, 0u) << "a never-connected pcb has nothing to reset";
  EXPECT_EQ(tcp_close(bound), ERR_OK);
  const mem_size_t in_use_unbound = PcbsInUse();
  EXPECT_EQ(in_use_unbound, in_use - 1);

  // (2): the last connection's server closes with unread data from inside recv.
  Conn& victim = *conns.back();
  victim.server.close_in_recv = true;
  std::vector<const tcp_pcb*> want = active;  // what stays: all but the victim's two pcbs
  std::erase_if(want, [&](const tcp_pcb* p) {
    const auto e = lwip_pcb::EndpointsOf(p);
    return e.local_port == victim.client_port || e.remote_port == victim.client_port;
  });
  ASSERT_EQ(want.size(), active.size() - 2);
  std::vector<WirePacket> rsts;
  wire_.SetTap([&](const WirePacket& p) {
    if (p.tcp.flags & TCP_RST) rsts.push_back(p);
  });
  ASSERT_NO_FATAL_FAILURE(Send(victim.client, "unread"));
  wire_.Pump();
  wire_.SetTap({});
  EXPECT_EQ(victim.client.error, ERR_RST);
  ASSERT_FALSE(rsts.empty()) << "closing with unread data must reset the connection";
  for (const WirePacket& p : rsts) {
    const uint16_t client_port = p.tcp.src_port == kServerPort ? p.tcp.dst_port : p.tcp.src_port;
    EXPECT_EQ(client_port, victim.client_port) << "RST on a connection that was not closed";
  }
  EXPECT_EQ(LwipWire::ActivePcbs(), want) << "the double unlink disturbed the active list";
  EXPECT_EQ(LwipWire::TimeWaitTuples(), time_wait);
  EXPECT_EQ(PcbsInUse(), in_use_unbound - 2);

  // Every other connection is still reachable.
  std::vector<Conn*> live(conns.begin() + 8, conns.end() - 1);
  ASSERT_NO_FATAL_FAILURE(Exchange(live, 5));
}

}  // namespace
}  // namespace xdpfwd::test
