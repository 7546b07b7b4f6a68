// The fixture of the relay's in-process tests: the real Relay over two lwIP netifs wired in memory
// (support/lwip_wire), with in-memory flow tables. lwIP is one per process, so client, relay and
// backend share it: the relay listens on 10.0.0.1, clients connect from 10.0.0.2, and the
// backend listens on 10.0.0.2, reached from 10.0.0.1. Time is the test's: lwIP's timers and
// the relay's clock move together, in steps of TCP_TMR_INTERVAL. Each test ends with lwIP's
// pools and the flow tables as it found them.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "forwarder/relay.h"
#include "os/clock.h"
#include "stack/lwip_pcb.h"
#include "tests/support/connection_ends.h"
#include "tests/support/lwip_wire.h"
#include "tests/support/memory_flow_table.h"

extern "C" {
#include "lwip/memp.h"
#include "lwip/prot/tcp.h"
#include "lwip/stats.h"
#include "lwip/tcp.h"
}

namespace xdpfwd::test {

inline constexpr uint16_t kRelayPort = 7000;
inline constexpr uint16_t kRelayPorts = 3;  // listen ports a test may use from kRelayPort up
inline constexpr uint16_t kBackendPort = 9000;
inline constexpr uint16_t kClosedPort = 9001;  // nothing listens: lwIP answers SYNs with a reset
inline constexpr uint16_t kFirstLegPort = 20000;

// A test's own end of a connection on lwIP's raw API (a client, or the backend's side).
struct Peer {
  // Null once handed back or freed by lwIP. lwIP frees a TIME_WAIT pcb 2 * TCP_MSL after it
  // got there with no callback: a test that waits that long hands it back (Close) first.
  tcp_pcb* pcb = nullptr;
  std::string received;
  bool connected = false;
  bool got_fin = false;
  bool errored = false;
  err_t error = ERR_OK;
  bool hold_window = false;  // takes data without tcp_recved: its window closes
  uint32_t unrecved = 0;     // bytes taken while holding the window
  std::string to_send;       // written as the send buffer allows
  size_t sent = 0;
  bool shutdown_after_send = false;  // half-close once to_send is all queued

  void Flush() {
    while (pcb != nullptr && sent < to_send.size()) {
      const size_t n = std::min<size_t>({to_send.size() - sent, tcp_sndbuf(pcb), 0xffff});
      if (n == 0 || tcp_write(pcb, to_send.data() + sent, static_cast<u16_t>(n),
                              TCP_WRITE_FLAG_COPY) != ERR_OK) {
        break;
      }
      sent += n;
    }
    if (pcb == nullptr) return;
    if (shutdown_after_send && sent == to_send.size()) {
      shutdown_after_send = false;
      EXPECT_EQ(tcp_shutdown(pcb, 0, 1), ERR_OK);
    }
    tcp_output(pcb);
  }
  void Send(std::string bytes, bool then_shutdown = false) {
    to_send += bytes;
    shutdown_after_send = then_shutdown;
    Flush();
  }
  void OpenWindow() {
    hold_window = false;
    while (pcb != nullptr && unrecved > 0) {
      const u16_t n = static_cast<u16_t>(std::min<uint32_t>(unrecved, 0xffff));
      tcp_recved(pcb, n);
      unrecved -= n;
    }
  }
  void Shutdown() {
    ASSERT_NE(pcb, nullptr);
    EXPECT_EQ(tcp_shutdown(pcb, 0, 1), ERR_OK);
  }
  // Hands the pcb back to lwIP (after a FIN each way it only waits out TIME_WAIT or LAST_ACK).
  void Close() {
    if (pcb == nullptr) return;
    tcp_pcb* p = pcb;
    pcb = nullptr;
    tcp_arg(p, nullptr);
    EXPECT_EQ(tcp_close(p), ERR_OK);
  }
  void Abort() {
    ASSERT_NE(pcb, nullptr);
    tcp_pcb* p = pcb;
    pcb = nullptr;
    tcp_arg(p, nullptr);
    tcp_abort(p);  // sends the RST
  }

  static err_t OnRecv(void* arg, tcp_pcb* pcb, pbuf* p, err_t) {
    auto* self = static_cast<Peer*>(arg);
    if (self == nullptr) {  // handed back: nobody reads any more
      if (p != nullptr) {
        tcp_recved(pcb, p->tot_len);
        pbuf_free(p);
      }
      return ERR_OK;
    }
    if (p == nullptr) {
      self->got_fin = true;
      return ERR_OK;
    }
    const size_t at = self->received.size();
    self->received.resize(at + p->tot_len);
    pbuf_copy_partial(p, self->received.data() + at, p->tot_len, 0);
    if (self->hold_window) {
      self->unrecved += p->tot_len;
    } else {
      tcp_recved(pcb, p->tot_len);
    }
    pbuf_free(p);
    return ERR_OK;
  }
  static err_t OnSent(void* arg, tcp_pcb*, u16_t) {
    if (auto* self = static_cast<Peer*>(arg)) self->Flush();
    return ERR_OK;
  }
  static void OnErr(void* arg, err_t err) {
    auto* self = static_cast<Peer*>(arg);
    if (self == nullptr) return;
    self->errored = true;
    self->error = err;
    self->pcb = nullptr;  // lwIP has freed it
  }
  static err_t OnConnected(void* arg, tcp_pcb*, err_t) {
    auto* self = static_cast<Peer*>(arg);
    self->connected = true;
    self->Flush();
    return ERR_OK;
  }
  void Attach(tcp_pcb* p) {
    pcb = p;
    tcp_arg(p, this);
    tcp_recv(p, OnRecv);
    tcp_sent(p, OnSent);
    tcp_err(p, OnErr);
    tcp_nagle_disable(p);
  }
};

// Bytes that differ by stream and position, so a misplaced or lost segment shows.
inline std::string Pattern(char seed, size_t len) {
  std::string s(len, '\0');
  for (size_t k = 0; k < len; ++k) s[k] = static_cast<char>(seed + k * 7 + k / 251);
  return s;
}

inline mem_size_t PcbsInUse() { return lwip_stats.memp[MEMP_TCP_PCB]->used; }
inline mem_size_t ListenersInUse() { return lwip_stats.memp[MEMP_TCP_PCB_LISTEN]->used; }
inline mem_size_t SegmentsInUse() { return lwip_stats.memp[MEMP_TCP_SEG]->used; }
inline mem_size_t PbufRefsInUse() { return lwip_stats.memp[MEMP_PBUF]->used; }
inline mem_size_t HeapInUse() { return lwip_stats.mem.used; }  // PBUF_RAM among others

class RelayWireTest : public ::testing::Test {
 protected:
  void SetUp() override {
    pcbs_ = PcbsInUse();
    listeners_ = ListenersInUse();
    segments_ = SegmentsInUse();
    refs_ = PbufRefsInUse();
    heap_ = HeapInUse();
    backend_listener_ = LwipWire::ListenOnB(kBackendPort, this, AcceptBackend);
    ASSERT_NE(backend_listener_, nullptr);
    wire_.SetTap([this](const WirePacket& p) { Watch(p); });
  }

  void TearDown() override {
    if (relay_) {
      ExpectEachEndedOnce(relay_->counters().Snapshot(), relay_->counters().Snapshot().Format());
      StopRelay();
    }
    for (auto* peers : {&clients_, &backends_}) {
      for (auto& p : *peers) {
        if (p->pcb != nullptr) p->Abort();
      }
    }
    wire_.Pump();
    EXPECT_EQ(tcp_close(backend_listener_), ERR_OK);
    wire_.AdvanceMs(2 * TCP_MSL + 100);  // TIME_WAIT pcbs of the test's own peers
    EXPECT_EQ(client_table_.size(), 0u) << "client flow entries left behind";
    EXPECT_EQ(backend_table_.size(), 0u) << "backend flow entries left behind";
    // Every pcb, segment and pbuf is back: the next test starts from a clean lwIP.
    EXPECT_EQ(PcbsInUse(), pcbs_);
    EXPECT_EQ(ListenersInUse(), listeners_);
    EXPECT_EQ(SegmentsInUse(), segments_);
    EXPECT_EQ(PbufRefsInUse(), refs_);
    EXPECT_EQ(HeapInUse(), heap_);
    EXPECT_TRUE(LwipWire::ActiveTuples().empty());
    EXPECT_TRUE(LwipWire::TimeWaitTuples().empty());
  }

  RelayConfig Config(uint16_t backend_port = kBackendPort) {
    RelayConfig c;
    RelayRule r;
    r.id = 1;
    r.listen = IpEndpoint{LwipWire::InAddrA(), kRelayPort};
    r.backend = IpEndpoint{LwipWire::InAddrB(), backend_port};
    r.backend_sources = {LwipWire::InAddrA()};
    r.client_side = &client_table_;
    r.backend_side = &backend_table_;
    c.rules = {r};
    c.backend_ports = {{kFirstLegPort, kFirstLegPort + 9}};
    c.flow_linger_ms = 1000;
    return c;
  }

  void StartRelay(const RelayConfig& config) {
    now_ms_ = MonotonicMs();  // the relay's clock starts where Create reads it
    auto r = Relay::Create(config);
    ASSERT_TRUE(r) << r.error().message();
    relay_ = std::move(*r);
    relay_->Tick(now_ms_);
  }

  // Resets what is still open (counted as shutdown_reset) and removes every flow entry.
  void StopRelay() {
    relay_.reset();
    wire_.Pump();
  }

  // Moves lwIP's time and the relay's clock by `ms`, one timer interval at a time.
  void Advance(uint64_t ms) {
    for (uint64_t t = 0; t < ms; t += TCP_TMR_INTERVAL) {
      wire_.Tick(1);
      now_ms_ += TCP_TMR_INTERVAL;
      relay_->Tick(now_ms_);
      wire_.Pump();
    }
  }

  // Delivers what is queued, and lets delayed ACKs and the relay's deferred work run.
  void Settle() {
    wire_.Pump();
    Advance(3 * TCP_TMR_INTERVAL);
  }

  Peer* Connect(uint16_t client_port) {
    auto peer = std::make_unique<Peer>();
    tcp_pcb* pcb = tcp_new();
    if (pcb == nullptr) {
      ADD_FAILURE() << "tcp_new";
      return nullptr;
    }
    lwip_pcb::SetLocalEndpoint(pcb, LwipWire::InAddrB(), client_port);
    peer->Attach(pcb);
    const ip_addr_t relay = LwipWire::AddrA();
    if (tcp_connect(pcb, &relay, kRelayPort, Peer::OnConnected) != ERR_OK) {
      ADD_FAILURE() << "tcp_connect";
      return nullptr;
    }
    clients_.push_back(std::move(peer));
    return clients_.back().get();
  }

  // A client connected through the relay, its backend peer accepted (or a test failure).
  struct Pair {
    Peer* client = nullptr;
    Peer* backend = nullptr;
  };
  Pair Open(uint16_t client_port) {
    const size_t before = backends_.size();
    Pair p{Connect(client_port), nullptr};
    Settle();
    if (p.client == nullptr || !p.client->connected || backends_.size() != before + 1) {
      ADD_FAILURE() << "connection from port " << client_port << " not relayed";
      return p;
    }
    p.backend = backends_.back().get();
    return p;
  }

  static err_t AcceptBackend(void* arg, tcp_pcb* pcb, err_t err) {
    auto* self = static_cast<RelayWireTest*>(arg);
    if (err != ERR_OK || pcb == nullptr) return ERR_VAL;
    self->backends_.push_back(std::make_unique<Peer>());
    self->backends_.back()->Attach(pcb);
    self->leg_ports_.push_back(lwip_pcb::EndpointsOf(pcb).remote_port);
    return ERR_OK;
  }

  static FlowTuple ClientFlow(uint16_t client_port) {
    return {LwipWire::InAddrB(), LwipWire::InAddrA(), client_port, kRelayPort};
  }
  static FlowTuple BackendFlow(uint16_t leg_port, uint16_t backend_port = kBackendPort) {
    return {LwipWire::InAddrB(), LwipWire::InAddrA(), backend_port, leg_port};
  }

  // What the steering program would do on the wire, and the relay's ordering promise; either
  // family, listeners on kRelayPort and the kRelayPorts - 1 ports above it.
  void Watch(const WirePacket& p) {
    const TcpSegment& s = p.tcp;
    const bool syn = (s.flags & TCP_SYN) != 0 && (s.flags & TCP_ACK) == 0;
    const IpAddress src = s.ipv6 ? IpAddress::V6(s.src6) : IpAddress(s.src);
    const IpAddress dst = s.ipv6 ? IpAddress::V6(s.dst6) : IpAddress(s.dst);
    const bool from_a =
        src == IpAddress(LwipWire::InAddrA()) || src == lwip_pcb::ToIpAddress(LwipWire::Addr6A());
    if (syn && s.dst_port >= kRelayPort && s.dst_port < kRelayPort + kRelayPorts) {
      client_table_.InsertFromSyn(FlowTuple{src, dst, s.src_port, s.dst_port}, 1);
    } else if (syn && from_a) {
      // A backend leg's SYN: its flow entry must already be there, or on a real interface the
      // SYN-ACK would reach the kernel.
      ++backend_syns_;
      EXPECT_TRUE(backend_table_.Find(FlowTuple{dst, src, s.dst_port, s.src_port}))
          << "backend SYN from port " << s.src_port << " left before its flow entry";
    }
    if (s.src_port == kRelayPort && s.window == 0 && (s.flags & TCP_RST) == 0) {
      ++closed_windows_to_client_;
    }
  }

  // FIN each way, the client's first, each seen by the other end; then both ends hand their
  // pcbs back. The relay counts the connection completed.
  void CloseBoth(Peer& client, Peer& backend) {
    const uint64_t completed = Count(&RelayCounters::completed);
    client.Shutdown();
    Settle();
    EXPECT_TRUE(backend.got_fin) << "the client's FIN did not reach the backend";
    backend.Shutdown();
    Settle();
    EXPECT_TRUE(client.got_fin) << "the backend's FIN did not reach the client";
    client.Close();
    backend.Close();
    Settle();
    EXPECT_EQ(Count(&RelayCounters::completed), completed + 1);
  }

  uint64_t Count(std::atomic<uint64_t> RelayCounters::*counter) const {
    return (relay_->counters().*counter).load();
  }

  // Declared first: destroyed last, after the relay and every peer.
  LwipWire wire_;
  MemoryFlowTable client_table_, backend_table_;
  std::unique_ptr<Relay> relay_;
  std::vector<std::unique_ptr<Peer>> clients_, backends_;
  std::vector<uint16_t> leg_ports_;  // the backend legs' local ports, in accept order
  tcp_pcb* backend_listener_ = nullptr;
  uint64_t now_ms_ = 0;
  uint64_t backend_syns_ = 0;
  uint64_t closed_windows_to_client_ = 0;
  mem_size_t pcbs_ = 0, listeners_ = 0, segments_ = 0, refs_ = 0, heap_ = 0;
};

}  // namespace xdpfwd::test
