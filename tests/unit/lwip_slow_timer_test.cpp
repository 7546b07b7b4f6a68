// lwIP patch 0030: the slow timer serves one slot of the active pcbs per fast tick, so that no
// tick walks them all, while each pcb still gets the slow timer exactly once per
// TCP_SLOW_INTERVAL, at a fixed phase, however the list changes meanwhile. Patch 0035: a pcb
// with nothing for the slow timer leaves the slots until it sends or receives again. A pcb's
// poll timer (polltmr) goes up by one at each slow-timer visit, which makes the visits visible.
// Patch 0037: TIME-WAIT pcbs leave at 2 * MSL without the slow timer walking those not yet due.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <iterator>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "os/clock.h"
#include "stack/lwip_pcb.h"
#include "tests/support/lwip_wire.h"

extern "C" {
#include "lwip/memp.h"
#include "lwip/priv/tcp_priv.h"
#include "lwip/stats.h"
#include "lwip/tcp.h"
}

namespace xdpfwd::test {
namespace {

constexpr uint16_t kServerPort = 8081;
constexpr int kTicksPerInterval = TCP_SLOW_INTERVAL / TCP_FAST_INTERVAL;

mem_size_t PcbsInUse() { return lwip_stats.memp[MEMP_TCP_PCB]->used; }

class LwipSlowTimerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    pcbs_before_ = PcbsInUse();
    listener_ =
        LwipWire::ListenOnB(kServerPort, this, [](void* arg, tcp_pcb* accepted, err_t) -> err_t {
          static_cast<LwipSlowTimerTest*>(arg)
              ->servers_[lwip_pcb::EndpointsOf(accepted).remote_port] = accepted;
          return ERR_OK;
        });
    ASSERT_NE(listener_, nullptr);
  }

  void TearDown() override {
    for (tcp_pcb* pcb : pcbs_) tcp_abort(pcb);  // all before the RSTs are delivered
    pcbs_.clear();
    wire_.Pump();
    if (listener_ != nullptr) {
      EXPECT_EQ(tcp_close(listener_), ERR_OK);
    }
    EXPECT_EQ(PcbsInUse(), pcbs_before_);
  }

  // `n` connections from a to b; both ends' pcbs land in pcbs_ (client, then server), their
  // poll timer counting slow-timer visits (an interval no test reaches). With `poll`, a poll
  // function that does nothing keeps every pcb in the slots; without, an idle pcb leaves them.
  void Open(int n, bool poll = true) {
    std::vector<tcp_pcb*> clients;
    for (int i = 0; i < n; ++i) {
      tcp_pcb* pcb = tcp_new();
      ASSERT_NE(pcb, nullptr);
      lwip_pcb::SetLocalEndpoint(pcb, LwipWire::InAddrA(), static_cast<uint16_t>(20000 + i));
      const ip_addr_t b = LwipWire::AddrB();
      ASSERT_EQ(tcp_connect(pcb, &b, kServerPort, nullptr), ERR_OK);
      clients.push_back(pcb);
    }
    wire_.Pump();
    for (int i = 0; i < n; ++i) {
      pcbs_.push_back(clients[static_cast<size_t>(i)]);
      const auto server = servers_.find(static_cast<uint16_t>(20000 + i));
      ASSERT_NE(server, servers_.end()) << "connection " << i << " was not accepted";
      pcbs_.push_back(server->second);
    }
    for (tcp_pcb* pcb : pcbs_) {
      ASSERT_EQ(pcb->state, ESTABLISHED);
      tcp_poll(pcb, poll ? NoPoll : nullptr, 255);
      pcb->polltmr = 0;
    }
  }

  // Runs one fast tick; the pcbs the slow timer visited in it.
  std::vector<tcp_pcb*> TickAndSeeVisits() {
    std::map<tcp_pcb*, uint8_t> before;
    for (tcp_pcb* pcb : pcbs_) before[pcb] = pcb->polltmr;
    wire_.Tick(1);
    std::vector<tcp_pcb*> visited;
    for (tcp_pcb* pcb : pcbs_) {
      if (pcb->polltmr != before[pcb]) visited.push_back(pcb);
    }
    return visited;
  }

  // Aborts both ends of every `every`-th connection (changing the list mid-round).
  void AbortSome(size_t every) {
    std::vector<tcp_pcb*> kept;
    for (size_t i = 0; i < pcbs_.size(); ++i) {
      if ((i / 2) % every == 0) {
        tcp_abort(pcbs_[i]);
      } else {
        kept.push_back(pcbs_[i]);
      }
    }
    pcbs_ = kept;
    wire_.Pump();
  }

  static err_t NoPoll(void*, tcp_pcb*) { return ERR_OK; }

  LwipWire wire_;
  tcp_pcb* listener_ = nullptr;
  std::vector<tcp_pcb*> pcbs_;            // client and server ends, in pairs
  std::map<uint16_t, tcp_pcb*> servers_;  // accepted, by client port
  mem_size_t pcbs_before_ = 0;
};

TEST_F(LwipSlowTimerTest, ServesEachPcbOncePerIntervalInSlices) {
  constexpr int kConnections = 100;
  ASSERT_NO_FATAL_FAILURE(Open(kConnections));
  const size_t slot_size = 2 * kConnections / kTicksPerInterval + 1;

  std::map<tcp_pcb*, std::vector<int>> visits;  // tick numbers
  for (int tick = 0; tick < 3 * kTicksPerInterval; ++tick) {
    // Mid-way through the second interval, a third of the connections go: the pcbs after them
    // in the list must keep their phase.
    if (tick == kTicksPerInterval + kTicksPerInterval / 2) {
      AbortSome(3);
      for (auto it = visits.begin(); it != visits.end();) {
        it = std::find(pcbs_.begin(), pcbs_.end(), it->first) == pcbs_.end() ? visits.erase(it)
                                                                             : std::next(it);
      }
    }
    const std::vector<tcp_pcb*> visited = TickAndSeeVisits();
    EXPECT_LE(visited.size(), slot_size) << "tick " << tick << " served more than one slot";
    for (tcp_pcb* pcb : visited) visits[pcb].push_back(tick);
  }

  size_t wrong = 0;
  for (tcp_pcb* pcb : pcbs_) {
    const std::vector<int>& v = visits[pcb];
    const bool ok =
        v.size() == 3 && v[1] - v[0] == kTicksPerInterval && v[2] - v[1] == kTicksPerInterval;
    if (!ok && ++wrong <= 3) {
      std::string ticks;
      for (int t : v) ticks += " " + std::to_string(t);
      ADD_FAILURE() << "a pcb was visited at ticks" << ticks << ", not every " << kTicksPerInterval;
    }
  }
  EXPECT_EQ(wrong, 0u);
}

// Idle connections cost the slow timer nothing after one visit: 100,000 held made it 23% of the
// worker during a bulk transfer (patch 0035). A pcb that sends comes back for as long as it has
// something in flight, its retransmission timer still fires, and it leaves again once all is
// acknowledged.
TEST_F(LwipSlowTimerTest, QuietPcbsLeaveTheSlotsUntilTheyHaveWork) {
  constexpr int kConnections = 20;
  ASSERT_NO_FATAL_FAILURE(Open(kConnections, /*poll=*/false));
  auto visits_in = [&](int intervals) {
    std::map<tcp_pcb*, int> visits;
    for (int tick = 0; tick < intervals * kTicksPerInterval; ++tick) {
      for (tcp_pcb* pcb : TickAndSeeVisits()) ++visits[pcb];
    }
    return visits;
  };
  // Each idle pcb once more (the visit that finds it quiet), then never.
  EXPECT_EQ(visits_in(1).size(), pcbs_.size());
  EXPECT_TRUE(visits_in(3).empty()) << "idle pcbs are still visited";

  // One client sends 100 bytes, which the wire loses: the client is visited again, every
  // interval, until its retransmission timer fires and the copy gets through.
  tcp_pcb* client = pcbs_[0];
  tcp_pcb* server = pcbs_[1];
  // The filter outlives this body (TearDown pumps the aborts' RSTs): it owns what it reads.
  auto lose = std::make_shared<bool>(true);
  wire_.SetFilter([lose, port = client->local_port](const WirePacket& p) {
    if (*lose && p.tcp.src_port == port && p.tcp.payload_len > 0) {
      *lose = false;
      return WireVerdict::kDrop;
    }
    return WireVerdict::kDeliver;
  });
  const char data[100] = {};
  ASSERT_EQ(tcp_write(client, data, sizeof(data), TCP_WRITE_FLAG_COPY), ERR_OK);
  ASSERT_EQ(tcp_output(client), ERR_OK);
  const uint64_t rexmits_before = wire_.counters().timer_retransmitted;
  int intervals = 0;
  std::map<tcp_pcb*, int> visits;
  while (client->unacked != nullptr && intervals < 40) {
    for (const auto& [pcb, n] : visits_in(1)) visits[pcb] += n;
    ++intervals;
  }
  EXPECT_FALSE(*lose) << "the segment never reached the wire";
  EXPECT_EQ(client->unacked, nullptr) << "the lost segment was never resent";
  EXPECT_EQ(wire_.counters().timer_retransmitted, rexmits_before + 1);
  EXPECT_GE(visits[client], intervals) << "the sender was not visited every interval";
  EXPECT_LE(visits.size(), 2u) << "a pcb with nothing to do was visited";

  // All acknowledged: both ends leave the slots again after at most one more visit.
  visits_in(1);
  EXPECT_TRUE(visits_in(3).empty()) << "the pcbs that sent and received are still visited";
  EXPECT_EQ(server->state, ESTABLISHED);
}

// TIME-WAIT lasts 2 * MSL from its last refresh (lwIP's pcb->tmr, in slow ticks): freed at the
// first slow tick at which more than this many have passed.
constexpr uint32_t kTimeWaitTicks = 2 * TCP_MSL / TCP_SLOW_INTERVAL;

// Connections closed by their client first, so that the client ends wait in TIME-WAIT; the
// server ends close on the FIN (lwIP's default receive function) and are gone once it is
// acknowledged. Up to 60,000 client ports per listening port.
class LwipTimeWaitTest : public ::testing::Test {
 protected:
  static constexpr uint16_t kFirstServerPort = 8181;
  static constexpr int kServerPorts = 2;
  static constexpr int kPortsPerServer = 60000;

  void SetUp() override {
    pcbs_before_ = PcbsInUse();
    for (int i = 0; i < kServerPorts; ++i) {
      listeners_.push_back(
          LwipWire::ListenOnB(static_cast<uint16_t>(kFirstServerPort + i), nullptr,
                              [](void*, tcp_pcb*, err_t) -> err_t { return ERR_OK; }));
      ASSERT_NE(listeners_.back(), nullptr);
    }
  }

  void TearDown() override {
    std::vector<tcp_pcb*> left;
    for (tcp_pcb* pcb = tcp_tw_pcbs; pcb != nullptr; pcb = pcb->next) left.push_back(pcb);
    for (tcp_pcb* pcb : left) tcp_abort(pcb);  // no RST from a TIME-WAIT pcb
    wire_.Pump();
    for (tcp_pcb* listener : listeners_) {
      if (listener != nullptr) {
        EXPECT_EQ(tcp_close(listener), ERR_OK);
      }
    }
    EXPECT_TRUE(LwipWire::ActiveTuples().empty());
    EXPECT_EQ(PcbsInUse(), pcbs_before_);
  }

  // Connections number `first` to `first + n - 1`, each opened and closed client first; their
  // client pcbs, all in TIME-WAIT (in batches: each SYN and FIN holds a segment meanwhile).
  std::vector<tcp_pcb*> EnterTimeWait(int n, int first = 0) {
    std::vector<tcp_pcb*> clients;
    constexpr int kBatch = 10000;
    for (int start = first; start < first + n; start += kBatch) {
      std::vector<tcp_pcb*> batch;
      for (int i = start; i < std::min(first + n, start + kBatch); ++i) {
        tcp_pcb* pcb = tcp_new();
        if (pcb == nullptr) {
          ADD_FAILURE() << "no pcb for connection " << i;
          return clients;
        }
        lwip_pcb::SetLocalEndpoint(pcb, LwipWire::InAddrA(),
                                   static_cast<uint16_t>(1024 + i % kPortsPerServer));
        const ip_addr_t b = LwipWire::AddrB();
        const auto port = static_cast<uint16_t>(kFirstServerPort + i / kPortsPerServer);
        EXPECT_EQ(tcp_connect(pcb, &b, port, nullptr), ERR_OK) << "connection " << i;
        batch.push_back(pcb);
      }
      wire_.Pump();
      for (tcp_pcb* pcb : batch) EXPECT_EQ(tcp_close(pcb), ERR_OK);
      wire_.Pump();
      for (tcp_pcb* pcb : batch) {
        if (pcb->state != TIME_WAIT) {
          ADD_FAILURE() << "a client ended in " << lwip_pcb::StateName(pcb->state);
          return clients;
        }
      }
      clients.insert(clients.end(), batch.begin(), batch.end());
    }
    return clients;
  }

  static size_t TimeWaitPcbs() {
    size_t n = 0;
    for (const tcp_pcb* pcb = tcp_tw_pcbs; pcb != nullptr; pcb = pcb->next) ++n;
    return n;
  }

  // Runs fast ticks until the next slow tick (the one that expires TIME-WAIT pcbs) has run;
  // its cost in ns.
  uint64_t NextSlowTickNs() {
    for (;;) {
      const u32_t ticks = tcp_ticks;
      const uint64_t start = MonotonicNs();
      wire_.Tick(1);
      const uint64_t ns = MonotonicNs() - start;
      if (tcp_ticks != ticks) return ns;
    }
  }

  LwipWire wire_;
  std::vector<tcp_pcb*> listeners_;
  mem_size_t pcbs_before_ = 0;
};

// Each TIME-WAIT pcb is freed at the slow tick 2 * MSL after it entered, not one earlier, also
// when others entered at other times; a FIN the peer sends again restarts the 2 * MSL (RFC 793),
// and ShortenTimeWait (the relay's release of a finished leg) ends it at the next slow tick.
TEST_F(LwipTimeWaitTest, EachPcbLeavesTwoMslAfterItEntered) {
  std::map<const tcp_pcb*, u32_t> entered;  // tcp_ticks then
  std::map<uint16_t, WirePacket> fins;      // the servers' FINs, by client port
  wire_.SetTap([&](const WirePacket& p) {
    if (p.from == wire_.b() && (p.tcp.flags & TCP_FIN)) fins[p.tcp.dst_port] = p;
  });
  std::vector<tcp_pcb*> all;
  for (int round = 0; round < 4; ++round) {
    for (tcp_pcb* pcb : EnterTimeWait(50, round * 50)) {
      entered[pcb] = tcp_ticks;
      all.push_back(pcb);
    }
    ASSERT_FALSE(HasFailure());
    for (int i = 0; i < 7; ++i) NextSlowTickNs();  // the rounds 7 slow ticks apart
  }
  tcp_pcb* refreshed = all[10];   // entered in round 0
  tcp_pcb* shortened = all[120];  // round 2
  // The server's FIN again (as if our ACK was lost): acknowledged, and TIME-WAIT starts over.
  std::vector<WirePacket> sent;
  wire_.SetTap([&](const WirePacket& p) { sent.push_back(p); });
  wire_.SetFilter([&](const WirePacket& p) {  // B has no pcb left to answer the ACK
    return p.from == wire_.a() ? WireVerdict::kDrop : WireVerdict::kDeliver;
  });
  wire_.Tick(1);
  ASSERT_EQ(fins.count(refreshed->local_port), 1u);
  wire_.Replay(fins[refreshed->local_port]);
  wire_.Pump();
  wire_.SetFilter({});
  wire_.SetTap({});
  ASSERT_EQ(sent.size(), 1u) << "the FIN in TIME-WAIT was not acknowledged";
  entered[refreshed] = tcp_ticks;
  lwip_pcb::ShortenTimeWait(shortened);
  const u32_t shortened_at = tcp_ticks;

  std::map<const tcp_pcb*, u32_t> left;  // tcp_ticks of the slow tick that freed it
  for (int i = 0; i < static_cast<int>(kTimeWaitTicks) + 30 && left.size() < all.size(); ++i) {
    NextSlowTickNs();
    std::map<const tcp_pcb*, bool> still;
    for (const tcp_pcb* pcb = tcp_tw_pcbs; pcb != nullptr; pcb = pcb->next) still[pcb] = true;
    for (tcp_pcb* pcb : all) {
      if (!left.count(pcb) && !still.count(pcb)) left[pcb] = tcp_ticks;
    }
  }
  ASSERT_EQ(left.size(), all.size()) << "TIME-WAIT pcbs still there after 2 * MSL";
  EXPECT_EQ(left[shortened], shortened_at + 1) << "ShortenTimeWait: not freed at the next tick";
  size_t wrong = 0;
  for (tcp_pcb* pcb : all) {
    if (pcb == shortened) continue;
    const u32_t want = entered[pcb] + kTimeWaitTicks + 1;
    if (left[pcb] != want && ++wrong <= 3) {
      ADD_FAILURE() << "a pcb that entered TIME-WAIT at slow tick " << entered[pcb]
                    << (pcb == refreshed ? " (refreshed by a FIN)" : "") << " left at " << left[pcb]
                    << ", not " << want;
    }
  }
  EXPECT_EQ(wrong, 0u);
}

// The slow tick's TIME-WAIT work is what expires, not what waits: 20,000 pcbs not yet due add
// nothing measurable to a tick (lwIP's walk of them took 262 us here). Timed: the fastest of
// ten slow ticks with them against the fastest of ten without (the fastest is the one no other
// process interrupted).
TEST_F(LwipTimeWaitTest, SlowTickDoesNotWalkPcbsNotYetDue) {
  constexpr int kPcbs = 20000;
  constexpr int kSamples = 10;
  uint64_t without = UINT64_MAX, with = UINT64_MAX;
  for (int i = 0; i < kSamples; ++i) without = std::min(without, NextSlowTickNs());
  ASSERT_EQ(EnterTimeWait(kPcbs).size(), static_cast<size_t>(kPcbs));
  for (int i = 0; i < kSamples; ++i) with = std::min(with, NextSlowTickNs());
  ASSERT_EQ(TimeWaitPcbs(), static_cast<size_t>(kPcbs)) << "some expired early";
  printf("fastest slow tick: %.1f us without, %.1f us with %d TIME-WAIT pcbs not due\n",
         static_cast<double>(without) / 1000, static_cast<double>(with) / 1000, kPcbs);
  EXPECT_LT(with, without + 20 * 1000) << "the slow tick walks the TIME-WAIT pcbs";
}

// What one slow tick costs with N TIME-WAIT pcbs waiting (none due), and the tick that frees
// them all at once. Disabled: a timing, not a check. Run: lwip_pcb_tests
// --gtest_also_run_disabled_tests --gtest_filter='LwipTimeWaitTest.DISABLED_SlowTickCost'
TEST_F(LwipTimeWaitTest, DISABLED_SlowTickCost) {
  for (int n : {10000, 100000}) {
    ASSERT_EQ(EnterTimeWait(n).size(), static_cast<size_t>(n));
    std::vector<uint64_t> ns;
    for (int i = 0; i < 20; ++i) ns.push_back(NextSlowTickNs());
    std::sort(ns.begin(), ns.end());
    uint64_t expiry = 0;
    while (TimeWaitPcbs() > 0) expiry = std::max(expiry, NextSlowTickNs());
    printf(
        "%6d TIME-WAIT pcbs: slow tick min %.1f median %.1f max %.1f us; the tick that "
        "freed them %.1f us\n",
        n, static_cast<double>(ns.front()) / 1000, static_cast<double>(ns[ns.size() / 2]) / 1000,
        static_cast<double>(ns.back()) / 1000, static_cast<double>(expiry) / 1000);
  }
}

}  // namespace
}  // namespace xdpfwd::test
