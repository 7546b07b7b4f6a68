// lwIP patch 0030: the slow timer serves one slot of the active pcbs per fast tick, so that no
// tick walks them all, while each pcb still gets the slow timer exactly once per
// TCP_SLOW_INTERVAL, at a fixed phase, however the list changes meanwhile. Patch 0035: a pcb
// with nothing for the slow timer leaves the slots until it sends or receives again. A pcb's
// poll timer (polltmr) goes up by one at each slow-timer visit, which makes the visits visible.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <iterator>
#include <map>
#include <memory>
#include <string>
#include <vector>

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

}  // namespace
}  // namespace xdpfwd::test
