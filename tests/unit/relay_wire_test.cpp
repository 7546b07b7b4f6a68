// The fast path's relay in-process, no root: the real Relay over two lwIP netifs wired in memory
// (support/lwip_wire), with in-memory flow tables. lwIP is one per process, so client, relay and
// backend share it: the relay listens on 10.0.0.1, clients connect from 10.0.0.2, and the
// backend listens on 10.0.0.2, reached from 10.0.0.1. Time is the test's: lwIP's timers and
// the relay's clock move together, in steps of TCP_TMR_INTERVAL.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <set>
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
namespace {

constexpr uint16_t kRelayPort = 7000;
constexpr uint16_t kBackendPort = 9000;
constexpr uint16_t kClosedPort = 9001;  // nothing listens: lwIP answers SYNs with a reset
constexpr uint16_t kFirstLegPort = 20000;

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
std::string Pattern(char seed, size_t len) {
  std::string s(len, '\0');
  for (size_t k = 0; k < len; ++k) s[k] = static_cast<char>(seed + k * 7 + k / 251);
  return s;
}

mem_size_t PcbsInUse() { return lwip_stats.memp[MEMP_TCP_PCB]->used; }
mem_size_t ListenersInUse() { return lwip_stats.memp[MEMP_TCP_PCB_LISTEN]->used; }
mem_size_t SegmentsInUse() { return lwip_stats.memp[MEMP_TCP_SEG]->used; }
mem_size_t PbufRefsInUse() { return lwip_stats.memp[MEMP_PBUF]->used; }
mem_size_t HeapInUse() { return lwip_stats.mem.used; }  // PBUF_RAM among others

class RelayWireTest : public ::testing::Test {
 protected:
  void SetUp() override {
    pcbs_ = PcbsInUse();
    listeners_ = ListenersInUse();
    segments_ = SegmentsInUse();
    refs_ = PbufRefsInUse();
    heap_ = HeapInUse();
    tcp_pcb* pcb = tcp_new();
    ASSERT_NE(pcb, nullptr);
    const ip_addr_t b = LwipWire::AddrB();
    ASSERT_EQ(tcp_bind(pcb, &b, kBackendPort), ERR_OK);
    backend_listener_ = tcp_listen(pcb);
    ASSERT_NE(backend_listener_, nullptr);
    tcp_arg(backend_listener_, this);
    tcp_accept(backend_listener_, AcceptBackend);
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
    r.listen = Endpoint{LwipWire::InAddrA(), kRelayPort};
    r.backend = Endpoint{LwipWire::InAddrB(), backend_port};
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

  // What the steering program would do on the wire, and the relay's ordering promise.
  void Watch(const WirePacket& p) {
    const TcpSegment& s = p.tcp;
    const bool syn = (s.flags & TCP_SYN) != 0 && (s.flags & TCP_ACK) == 0;
    if (syn && s.dst_port == kRelayPort) {
      client_table_.InsertFromSyn(ClientFlow(s.src_port), 1);
    } else if (syn && s.src.s_addr == LwipWire::InAddrA().s_addr) {
      // A backend leg's SYN: its flow entry must already be there, or on a real interface the
      // SYN-ACK would reach the kernel.
      ++backend_syns_;
      EXPECT_TRUE(backend_table_.Find(BackendFlow(s.src_port, s.dst_port)))
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

TEST_F(RelayWireTest, BytesCrossBothWaysIntact) {
  ASSERT_NO_FATAL_FAILURE(StartRelay(Config()));
  const Pair p = Open(40000);
  ASSERT_NE(p.backend, nullptr);
  const auto entry = client_table_.Find(ClientFlow(40000));
  ASSERT_TRUE(entry);
  EXPECT_TRUE(entry->accepted);
  EXPECT_EQ(backend_syns_, 1u);
  EXPECT_TRUE(backend_table_.Find(BackendFlow(leg_ports_[0])));

  const std::string up = Pattern('u', 300'000), down = Pattern('d', 200'000);
  p.client->Send(up);
  p.backend->Send(down);
  Settle();
  EXPECT_TRUE(p.backend->received == up) << p.backend->received.size() << "/" << up.size();
  EXPECT_TRUE(p.client->received == down) << p.client->received.size() << "/" << down.size();
  EXPECT_EQ(Count(&RelayCounters::bytes_to_backend), up.size());
  EXPECT_EQ(Count(&RelayCounters::bytes_to_client), down.size());

  CloseBoth(*p.client, *p.backend);
  EXPECT_EQ(relay_->state().connections, 0u);
  EXPECT_EQ(relay_->state().backend_ports_in_use, 0u);
}

TEST_F(RelayWireTest, HalfCloseFromTheClientKeepsTheReplyFlowing) {
  ASSERT_NO_FATAL_FAILURE(StartRelay(Config()));
  const Pair p = Open(40000);
  ASSERT_NE(p.backend, nullptr);
  const std::string request = Pattern('q', 50'000), reply = Pattern('r', 400'000);
  p.client->Send(request, /*then_shutdown=*/true);
  Settle();
  EXPECT_TRUE(p.backend->received == request);
  EXPECT_TRUE(p.backend->got_fin) << "the client's FIN did not cross";
  EXPECT_FALSE(p.client->got_fin);
  p.backend->Send(reply, /*then_shutdown=*/true);
  Settle();
  EXPECT_TRUE(p.client->received == reply) << p.client->received.size() << "/" << reply.size();
  EXPECT_TRUE(p.client->got_fin);
  EXPECT_EQ(Count(&RelayCounters::completed), 1u);
  EXPECT_EQ(relay_->state().connections, 0u);
}

TEST_F(RelayWireTest, HalfCloseFromTheBackendKeepsTheRequestFlowing) {
  ASSERT_NO_FATAL_FAILURE(StartRelay(Config()));
  const Pair p = Open(40000);
  ASSERT_NE(p.backend, nullptr);
  const std::string banner = Pattern('b', 1000), upload = Pattern('U', 500'000);
  p.backend->Send(banner, /*then_shutdown=*/true);
  Settle();
  EXPECT_TRUE(p.client->received == banner);
  EXPECT_TRUE(p.client->got_fin);
  p.client->Send(upload, /*then_shutdown=*/true);
  Settle();
  EXPECT_TRUE(p.backend->received == upload) << p.backend->received.size() << "/" << upload.size();
  EXPECT_TRUE(p.backend->got_fin);
  EXPECT_EQ(Count(&RelayCounters::completed), 1u);
}

TEST_F(RelayWireTest, ClientResetReachesTheBackend) {
  ASSERT_NO_FATAL_FAILURE(StartRelay(Config()));
  const Pair p = Open(40000);
  ASSERT_NE(p.backend, nullptr);
  p.client->Send(Pattern('x', 10'000));
  Settle();
  p.client->Abort();
  Settle();
  EXPECT_TRUE(p.backend->errored);
  EXPECT_EQ(p.backend->error, ERR_RST);
  EXPECT_EQ(Count(&RelayCounters::client_reset), 1u);
  EXPECT_EQ(Count(&RelayCounters::backend_reset), 0u);
  EXPECT_EQ(relay_->state().connections, 0u);
}

TEST_F(RelayWireTest, BackendResetReachesTheClient) {
  ASSERT_NO_FATAL_FAILURE(StartRelay(Config()));
  const Pair p = Open(40000);
  ASSERT_NE(p.backend, nullptr);
  p.backend->Send(Pattern('y', 10'000));
  Settle();
  p.backend->Abort();
  Settle();
  EXPECT_TRUE(p.client->errored);
  EXPECT_EQ(p.client->error, ERR_RST);
  EXPECT_EQ(Count(&RelayCounters::backend_reset), 1u);
  EXPECT_EQ(Count(&RelayCounters::client_reset), 0u);
}

TEST_F(RelayWireTest, BackendRefusalResetsTheClient) {
  ASSERT_NO_FATAL_FAILURE(StartRelay(Config(kClosedPort)));
  Peer* client = Connect(40000);
  ASSERT_NE(client, nullptr);
  Settle();
  EXPECT_TRUE(client->errored);
  EXPECT_EQ(client->error, ERR_RST);
  EXPECT_EQ(Count(&RelayCounters::backend_refused), 1u);
  EXPECT_EQ(relay_->state().connections, 0u);
  EXPECT_EQ(relay_->state().backend_ports_in_use, 0u);
}

// A backend that stops reading: the relay must stop reading the client (its window to the
// client closes), hold what it has, lose nothing, and resume when the backend reads again.
TEST_F(RelayWireTest, BackpressureStopsTheClientAndLosesNothing) {
  ASSERT_NO_FATAL_FAILURE(StartRelay(Config()));
  const Pair p = Open(40000);
  ASSERT_NE(p.backend, nullptr);
  p.backend->hold_window = true;
  // More than every buffer on the way can hold: the client's send buffer, the relay's window
  // to the client, its send buffer toward the backend and the backend's window (1 MiB each).
  const std::string upload = Pattern('B', 8u << 20);
  p.client->Send(upload);
  Advance(2000);  // persist timers probe the closed windows meanwhile
  const uint64_t relayed = Count(&RelayCounters::bytes_to_backend);
  const size_t received = p.backend->received.size();
  EXPECT_LT(p.client->sent, upload.size()) << "the client never met a closed window";
  EXPECT_GT(closed_windows_to_client_, 0u) << "the relay kept reading from the client";
  EXPECT_LE(relayed, 3u << 20) << "the relay queued far more than its buffers";
  EXPECT_GT(HeapInUse(), heap_)
      << "the held bytes are pbufs on lwIP's heap (the leak check's view)";
  Advance(1000);
  EXPECT_EQ(Count(&RelayCounters::bytes_to_backend), relayed) << "moved while blocked";
  EXPECT_EQ(p.backend->received.size(), received);

  p.backend->OpenWindow();
  for (int i = 0; i < 100 && p.backend->received.size() < upload.size(); ++i) {
    p.backend->OpenWindow();
    Advance(50);
  }
  EXPECT_EQ(p.client->sent, upload.size());
  ASSERT_EQ(p.backend->received.size(), upload.size());
  EXPECT_TRUE(p.backend->received == upload) << "bytes changed on the way";
  EXPECT_EQ(Count(&RelayCounters::bytes_to_backend), upload.size());
  CloseBoth(*p.client, *p.backend);
}

// Connections the relay refuses inside lwIP's accept callback: it aborts the new pcb there and
// must return ERR_ABRT, so lwIP touches it no more (returning ERR_OK instead trips lwIP's
// "tcp_receive: wrong state" assertion on the freed pcb). The relay aborts a pcb inside a
// callback only here and in lwip_pcb::Release's fallback (tcp_close out of memory): timeouts
// reset in Tick, and a peer's reset arrives through the err callback, its pcb already freed.
TEST_F(RelayWireTest, RefusalsInsideAcceptAbortCleanly) {
  RelayConfig config = Config();
  config.backend_ports = {{kFirstLegPort, kFirstLegPort}};  // one port toward the backend
  ASSERT_NO_FATAL_FAILURE(StartRelay(config));
  const Pair first = Open(40000);
  ASSERT_NE(first.backend, nullptr);
  Peer* no_port = Connect(40001);  // the only port is held
  Settle();
  EXPECT_TRUE(no_port->errored);
  EXPECT_EQ(Count(&RelayCounters::backend_no_port), 1u);

  CloseBoth(*first.client, *first.backend);
  backend_table_.set_full(true);
  Peer* no_slot = Connect(40002);  // the backend flow cannot be entered
  Settle();
  EXPECT_TRUE(no_slot->errored);
  EXPECT_EQ(Count(&RelayCounters::backend_error), 1u);
  backend_table_.set_full(false);

  const Pair again = Open(40003);  // the port and the slot were both given back
  ASSERT_NE(again.backend, nullptr);
  EXPECT_EQ(Count(&RelayCounters::over_limit), 0u);
  EXPECT_EQ(relay_->state().connections, 1u);
  CloseBoth(*again.client, *again.backend);
  EXPECT_EQ(relay_->state().backend_ports_in_use, 0u);
}

TEST_F(RelayWireTest, OverLimitIsRefusedInsideAccept) {
  RelayConfig config = Config();
  config.limits.max_connections = 1;
  ASSERT_NO_FATAL_FAILURE(StartRelay(config));
  const Pair held = Open(40000);
  ASSERT_NE(held.backend, nullptr);
  Peer* refused = Connect(40001);
  Settle();
  EXPECT_TRUE(refused->errored);
  EXPECT_EQ(refused->error, ERR_RST);
  EXPECT_EQ(Count(&RelayCounters::over_limit), 1u);
  EXPECT_EQ(Count(&RelayCounters::accepted), 1u);
  EXPECT_EQ(backends_.size(), 1u) << "a refused client must not reach the backend";
  CloseBoth(*held.client, *held.backend);
}

TEST_F(RelayWireTest, FlowEntriesLingerThenGo) {
  ASSERT_NO_FATAL_FAILURE(StartRelay(Config()));
  const Pair p = Open(40000);
  ASSERT_NE(p.backend, nullptr);
  const FlowTuple backend_flow = BackendFlow(leg_ports_[0]);
  CloseBoth(*p.client, *p.backend);
  EXPECT_EQ(relay_->state().closing_flows, 2u);
  Advance(800);  // the linger is 1000 ms, counted from the close
  EXPECT_TRUE(client_table_.Find(ClientFlow(40000))) << "removed before the linger";
  EXPECT_TRUE(backend_table_.Find(backend_flow)) << "removed before the linger";
  Advance(400);
  EXPECT_FALSE(client_table_.Find(ClientFlow(40000)));
  EXPECT_FALSE(backend_table_.Find(backend_flow));
  EXPECT_EQ(relay_->state().closing_flows, 0u);
}

// Backend ports come out in FIFO order: a port released at a close is reused toward the same
// backend only after every other port, and no two live legs ever share a 4-tuple.
TEST_F(RelayWireTest, BackendPortsCycleAndNeverCollide) {
  RelayConfig config = Config();
  config.backend_ports = {{kFirstLegPort, kFirstLegPort + 2}};
  ASSERT_NO_FATAL_FAILURE(StartRelay(config));
  std::vector<Pair> live;
  for (uint16_t i = 0; i < 9; ++i) {
    const Pair p = Open(static_cast<uint16_t>(41000 + i));
    ASSERT_NE(p.backend, nullptr);
    live.push_back(p);
    const std::vector<PcbTuple> active = LwipWire::ActiveTuples();
    EXPECT_EQ(std::set<PcbTuple>(active.begin(), active.end()).size(), active.size())
        << "two live pcbs share a 4-tuple";
    if (live.size() == 2) {  // keep two open, close the oldest: one port is always held
      CloseBoth(*live.front().client, *live.front().backend);
      live.erase(live.begin());
    }
  }
  const std::vector<uint16_t> want = {20000, 20001, 20002, 20000, 20001,
                                      20002, 20000, 20001, 20002};
  EXPECT_EQ(leg_ports_, want);
  for (const Pair& p : live) CloseBoth(*p.client, *p.backend);
  EXPECT_EQ(Count(&RelayCounters::completed), 9u);
}

// A backend that never answers the SYN (the wire drops it): the client is reset at the connect
// timeout, not before, and counted once; a connection whose backend did answer is left alone.
TEST_F(RelayWireTest, SilentBackendTimesOutAtTheConnectDeadline) {
  RelayConfig config = Config();
  config.limits.connect_timeout = std::chrono::milliseconds(500);
  ASSERT_NO_FATAL_FAILURE(StartRelay(config));
  const Pair answered = Open(39999);
  ASSERT_NE(answered.backend, nullptr);
  wire_.SetFilter([](const WirePacket& p) {
    return p.tcp.dst_port == kBackendPort ? WireVerdict::kDrop : WireVerdict::kDeliver;
  });
  Peer* early = Connect(40000);
  Settle();
  Advance(200);
  Peer* late = Connect(40001);  // 230 ms behind: the FIFO's second deadline
  Settle();
  ASSERT_TRUE(early->connected && late->connected)
      << "the relay accepts before the backend answers";
  Advance(200);
  EXPECT_FALSE(early->errored) << "reset before its connect deadline";
  EXPECT_EQ(Count(&RelayCounters::backend_timeout), 0u);
  Advance(100);  // past 500 ms for the first only
  EXPECT_TRUE(early->errored);
  EXPECT_EQ(early->error, ERR_RST);
  EXPECT_FALSE(late->errored);
  EXPECT_EQ(Count(&RelayCounters::backend_timeout), 1u);
  Advance(300);
  EXPECT_TRUE(late->errored);
  EXPECT_EQ(Count(&RelayCounters::backend_timeout), 2u);
  EXPECT_FALSE(answered.client->errored) << "reset at the connect deadline although connected";
  EXPECT_EQ(relay_->state().connections, 1u);
  EXPECT_EQ(relay_->state().backend_ports_in_use, 1u);
  wire_.SetFilter({});
  CloseBoth(*answered.client, *answered.backend);
}

// Idle connections are reset least recently active first; bytes in either direction, at any
// time, move a connection's deadline.
TEST_F(RelayWireTest, IdleConnectionsAreResetInOrderOfLastActivity) {
  RelayConfig config = Config();
  config.limits.idle_timeout = std::chrono::milliseconds(1000);
  ASSERT_NO_FATAL_FAILURE(StartRelay(config));
  const Pair busy = Open(40000);  // opened first: only its activity puts it behind `quiet`
  const Pair quiet = Open(40001);
  ASSERT_NE(quiet.backend, nullptr);
  ASSERT_NE(busy.backend, nullptr);
  Advance(600);
  busy.backend->Send("still here");  // backend -> client counts as activity too
  Settle();
  EXPECT_EQ(busy.client->received, "still here");
  Advance(500);  // quiet: idle ~1100 ms; busy: ~530 ms
  EXPECT_TRUE(quiet.client->errored);
  EXPECT_TRUE(quiet.backend->errored);
  EXPECT_EQ(quiet.client->error, ERR_RST);
  EXPECT_EQ(quiet.backend->error, ERR_RST);
  EXPECT_FALSE(busy.client->errored) << "reset although it was active";
  EXPECT_EQ(Count(&RelayCounters::idle_timeout), 1u);
  busy.client->Send("me too");
  Settle();
  Advance(900);
  EXPECT_FALSE(busy.client->errored);
  Advance(200);
  EXPECT_TRUE(busy.client->errored);
  EXPECT_TRUE(busy.backend->errored);
  EXPECT_EQ(Count(&RelayCounters::idle_timeout), 2u);
  EXPECT_EQ(relay_->state().connections, 0u);
}

// Both ends close at once. The client's FIN reaches the relay first, which sends its own FIN to
// the backend; the backend's FIN crosses it, so the relay's backend leg goes through CLOSING.
// The backend's ACK of that FIN is lost once: the client leg ends (LAST_ACK, its err callback)
// while the backend leg still waits, and the ACK of the retransmitted bare FIN takes it to
// TIME_WAIT with no lwIP callback at all. The relay must still notice, close the leg and count
// the connection completed.
TEST_F(RelayWireTest, SimultaneousCloseCompletes) {
  ASSERT_NO_FATAL_FAILURE(StartRelay(Config()));
  const Pair p = Open(40000);
  ASSERT_NE(p.backend, nullptr);
  p.client->Send(Pattern('s', 5000));
  p.backend->Send(Pattern('t', 7000));
  Settle();
  bool dropped = false;
  wire_.SetFilter([&](const WirePacket& w) {
    const bool ack_of_fin =
        w.tcp.src_port == kBackendPort && w.tcp.flags == TCP_ACK && w.tcp.payload_len == 0;
    if (dropped || !ack_of_fin) return WireVerdict::kDeliver;
    dropped = true;
    return WireVerdict::kDrop;
  });
  p.client->Shutdown();
  p.backend->Shutdown();  // the two FINs cross the relay in the same round
  Settle();
  EXPECT_TRUE(dropped);
  EXPECT_EQ(Count(&RelayCounters::completed), 0u) << "the backend leg's FIN is not acknowledged";
  EXPECT_TRUE(p.client->got_fin);
  EXPECT_TRUE(p.backend->got_fin);
  p.client->Close();  // before lwIP frees their TIME_WAIT pcbs, which it does with no callback
  p.backend->Close();
  Advance(5000);  // the relay's FIN is retransmitted and acknowledged; a service interval
  wire_.SetFilter({});
  EXPECT_EQ(p.client->received, Pattern('t', 7000));
  EXPECT_EQ(p.backend->received, Pattern('s', 5000));
  EXPECT_EQ(Count(&RelayCounters::completed), 1u);
  EXPECT_EQ(relay_->state().connections, 0u);
}

}  // namespace
}  // namespace xdpfwd::test
