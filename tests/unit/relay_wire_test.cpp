// The fast path's relay in-process, no root: bytes, half-close, resets, refusal, backpressure,
// timeouts, linger, port reuse (the fixture, support/relay_wire_fixture.h, says how).
#include <set>
#include <string>
#include <vector>

#include "forwarder/backend_health.h"
#include "tests/support/relay_wire_fixture.h"

namespace xdpfwd::test {
namespace {

TEST_F(RelayWireTest, BytesCrossBothWaysIntact) {
  ASSERT_NO_FATAL_FAILURE(StartRelay(Config()));
  const Pair p = Open(40000);
  ASSERT_NE(p.backend, nullptr);
  const auto entry = client_table_.Find(ClientFlow(40000));
  ASSERT_TRUE(entry);
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

// IPv6 and the mixed families rinetd allows (#31 item 3), three rules of one relay: 6 -> 6,
// 6 -> 4 and 4 -> 6. Each leg is a pcb of its own ends' family, its flow entry is entered in
// that family, and bytes cross both ways intact across a half close.
TEST_F(RelayWireTest, Ipv6AndMixedFamiliesCrossBothWaysAcrossAHalfClose) {
  tcp_pcb* backend6 = LwipWire::Listen(LwipWire::Addr6B(), kBackendPort, this, AcceptBackend);
  ASSERT_NE(backend6, nullptr);
  const IpAddress a4 = LwipWire::InAddrA(), b4 = LwipWire::InAddrB();
  const IpAddress a6 = lwip_pcb::ToIpAddress(LwipWire::Addr6A());
  const IpAddress b6 = lwip_pcb::ToIpAddress(LwipWire::Addr6B());
  struct Case {
    bool client_v6, backend_v6;
  };
  const Case cases[] = {{true, true}, {true, false}, {false, true}};
  RelayConfig config = Config();
  const RelayRule like = config.rules[0];
  config.rules.clear();
  for (uint16_t i = 0; i < 3; ++i) {
    RelayRule r = like;
    r.id = 1 + i;
    r.listen = IpEndpoint{cases[i].client_v6 ? a6 : a4, static_cast<uint16_t>(kRelayPort + i)};
    r.backend = IpEndpoint{cases[i].backend_v6 ? b6 : b4, kBackendPort};
    r.backend_sources = {cases[i].backend_v6 ? a6 : a4};
    config.rules.push_back(r);
  }
  ASSERT_NO_FATAL_FAILURE(StartRelay(config));

  for (uint16_t i = 0; i < 3; ++i) {
    const Case& c = cases[i];
    SCOPED_TRACE(std::string(c.client_v6 ? "6" : "4") + " -> " + (c.backend_v6 ? "6" : "4"));
    const IpEndpoint from{c.client_v6 ? b6 : b4, static_cast<uint16_t>(40000 + i)};
    const IpEndpoint to = config.rules[i].listen;
    auto peer = std::make_unique<Peer>();
    tcp_pcb* pcb = tcp_new_ip_type(c.client_v6 ? IPADDR_TYPE_V6 : IPADDR_TYPE_V4);
    ASSERT_NE(pcb, nullptr);
    lwip_pcb::SetLocalEndpoint(pcb, from.addr, from.port);
    peer->Attach(pcb);
    const ip_addr_t relay = lwip_pcb::ToLwipAddress(to.addr);
    ASSERT_EQ(tcp_connect(pcb, &relay, to.port, Peer::OnConnected), ERR_OK);
    clients_.push_back(std::move(peer));
    Peer& client = *clients_.back();
    Settle();
    ASSERT_TRUE(client.connected);
    ASSERT_EQ(backends_.size(), i + 1u) << "not relayed";
    Peer& backend = *backends_.back();
    // The backend sees the leg from the relay's own address of the backend's family.
    EXPECT_EQ(lwip_pcb::EndpointsOf(backend.pcb).remote, c.backend_v6 ? a6 : a4);
    // The client entry of the connection's own family, marked accepted once it has lasted
    // (ClientEntryIsMarkedOnceTheConnectionHasLasted).
    Advance(300);
    const auto entry = client_table_.Find(FlowTuple{from.addr, to.addr, from.port, to.port});
    ASSERT_TRUE(entry);
    EXPECT_TRUE(entry->accepted);
    EXPECT_TRUE(backend_table_.Find(FlowTuple{c.backend_v6 ? b6 : b4, c.backend_v6 ? a6 : a4,
                                              kBackendPort, leg_ports_.back()}));

    const std::string request = Pattern('q', 150'000), reply = Pattern('r', 250'000);
    client.Send(request, /*then_shutdown=*/true);
    Settle();
    EXPECT_TRUE(backend.received == request) << backend.received.size() << "/" << request.size();
    EXPECT_TRUE(backend.got_fin) << "the client's FIN did not cross";
    backend.Send(reply, /*then_shutdown=*/true);
    Settle();
    EXPECT_TRUE(client.received == reply) << client.received.size() << "/" << reply.size();
    EXPECT_TRUE(client.got_fin);
  }
  EXPECT_EQ(Count(&RelayCounters::completed), 3u);
  EXPECT_EQ(Count(&RelayCounters::bytes_to_backend), 3u * 150'000);
  EXPECT_EQ(Count(&RelayCounters::bytes_to_client), 3u * 250'000);
  EXPECT_EQ(relay_->state().connections, 0u);
  EXPECT_EQ(tcp_close(backend6), ERR_OK);
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

// The client entry is marked accepted (for the stray reaper) once the connection has lasted
// Relay::kMarkAfterMs (250 ms), not at the accept: a connection that ends sooner, as most do at a
// high rate, costs no map call for it.
TEST_F(RelayWireTest, ClientEntryIsMarkedOnceTheConnectionHasLasted) {
  ASSERT_NO_FATAL_FAILURE(StartRelay(Config()));
  const Pair brief = Open(40001);
  ASSERT_NE(brief.backend, nullptr);
  const Pair lasting = Open(40000);
  ASSERT_NE(lasting.backend, nullptr);
  auto entry = client_table_.Find(ClientFlow(40000));
  ASSERT_TRUE(entry);
  EXPECT_FALSE(entry->accepted) << "marked at the accept";
  CloseBoth(*brief.client, *brief.backend);
  Advance(300);
  entry = client_table_.Find(ClientFlow(40000));
  ASSERT_TRUE(entry);
  EXPECT_TRUE(entry->accepted) << "still unmarked after 300 ms: the reaper would take it at 6 s";
  const auto closed = client_table_.Find(ClientFlow(40001));
  ASSERT_TRUE(closed) << "lingers 1 s";
  EXPECT_FALSE(closed->accepted) << "a connection closed before its mark was marked";
  CloseBoth(*lasting.client, *lasting.backend);
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

// The same port books for IPv6 backend legs (a 4 -> 6 rule: the client leg stays the fixture's
// IPv4 one): FIFO reuse toward the IPv6 backend, no two live legs on one 4-tuple, each leg's
// backend flow entry an IPv6 tuple on its port, and every port back at the end.
TEST_F(RelayWireTest, BackendPortsCycleAndNeverCollideOnIpv6Legs) {
  tcp_pcb* backend6 = LwipWire::Listen(LwipWire::Addr6B(), kBackendPort, this, AcceptBackend);
  ASSERT_NE(backend6, nullptr);
  const IpAddress a6 = lwip_pcb::ToIpAddress(LwipWire::Addr6A());
  const IpAddress b6 = lwip_pcb::ToIpAddress(LwipWire::Addr6B());
  RelayConfig config = Config();
  config.rules[0].backend = IpEndpoint{b6, kBackendPort};
  config.rules[0].backend_sources = {a6};
  config.backend_ports = {{kFirstLegPort, kFirstLegPort + 2}};
  ASSERT_NO_FATAL_FAILURE(StartRelay(config));
  std::vector<Pair> live;
  for (uint16_t i = 0; i < 9; ++i) {
    const Pair p = Open(static_cast<uint16_t>(41000 + i));
    ASSERT_NE(p.backend, nullptr);
    EXPECT_EQ(lwip_pcb::EndpointsOf(p.backend->pcb).remote, a6);
    EXPECT_TRUE(backend_table_.Find(FlowTuple{b6, a6, kBackendPort, leg_ports_.back()}))
        << "leg port " << leg_ports_.back();
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
  EXPECT_EQ(relay_->state().backend_ports_in_use, 0u);
  EXPECT_EQ(tcp_close(backend6), ERR_OK);
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

// A reload (Relay::SetRules). The listen address kept keeps its listener (no rebind) and takes
// its next clients under the rule's new version, while the open connection keeps its own; an
// address no rule has stops accepting while its connections finish; an address given again is
// listened on anew; a version no listener serves and no connection uses goes, with its counters.
TEST_F(RelayWireTest, ReloadedRulesTakeNewClientsWhileOpenConnectionsKeepTheirs) {
  const RelayConfig config = Config();
  ASSERT_NO_FATAL_FAILURE(StartRelay(config));
  const mem_size_t listening = ListenersInUse();
  const Pair first = Open(40000);
  ASSERT_NE(first.backend, nullptr);
  auto counters_of = [&](uint32_t id) -> const RelayCounters* {
    for (const auto& [rule, counters] : relay_->rule_counters()) {
      if (rule == id) return counters.get();
    }
    return nullptr;
  };

  RelayRule second_version = config.rules[0];
  second_version.id = 2;
  ASSERT_TRUE(relay_->SetRules({second_version}, {}));
  EXPECT_EQ(ListenersInUse(), listening);  // the same listener
  const Pair second = Open(40001);
  ASSERT_NE(second.backend, nullptr);
  ASSERT_NE(counters_of(1), nullptr);
  ASSERT_NE(counters_of(2), nullptr);
  EXPECT_EQ(counters_of(1)->accepted.load(), 1u);
  EXPECT_EQ(counters_of(1)->active.load(), 1u);
  EXPECT_EQ(counters_of(2)->accepted.load(), 1u);

  // The third version denies everyone: the next client is refused under it.
  RelayRule third_version = config.rules[0];
  third_version.id = 3;
  third_version.access = {{false, "*", 1}};
  ASSERT_TRUE(relay_->SetRules({third_version}, {}));
  Peer* denied = Connect(40002);
  ASSERT_NE(denied, nullptr);
  Settle();
  EXPECT_TRUE(denied->got_fin) << "a denied client is closed, as rinetd closes it";
  denied->Close();
  ASSERT_NE(counters_of(3), nullptr);
  EXPECT_EQ(counters_of(3)->denied.load(), 1u);
  EXPECT_NE(counters_of(2), nullptr) << "version 2 went while a connection uses it";

  // No rule listens there any more: new clients are refused, open connections carry on.
  ASSERT_TRUE(relay_->SetRules({}, {}));
  EXPECT_EQ(ListenersInUse(), listening - 1);
  Peer* late = Connect(40003);
  ASSERT_NE(late, nullptr);
  Settle();
  EXPECT_TRUE(late->errored);
  EXPECT_EQ(late->error, ERR_RST);
  ASSERT_TRUE(client_table_.RemoveFlow(ClientFlow(40003)));  // the steering program's, not ours
  const std::string up = Pattern('u', 100'000), down = Pattern('d', 100'000);
  first.client->Send(up);
  second.backend->Send(down);
  Settle();
  EXPECT_TRUE(first.backend->received == up);
  EXPECT_TRUE(second.client->received == down);
  CloseBoth(*first.client, *first.backend);
  CloseBoth(*second.client, *second.backend);
  Advance(200);  // the relay's service interval: versions without a user go
  EXPECT_TRUE(relay_->rule_counters().empty()) << relay_->rule_counters().size() << " left";

  // Given again: listened on anew.
  RelayRule fourth_version = config.rules[0];
  fourth_version.id = 4;
  ASSERT_TRUE(relay_->SetRules({fourth_version}, {}));
  EXPECT_EQ(ListenersInUse(), listening);
  const Pair again = Open(40004);
  ASSERT_NE(again.backend, nullptr);
  CloseBoth(*again.client, *again.backend);
  ASSERT_NE(counters_of(4), nullptr);
  EXPECT_EQ(counters_of(4)->completed.load(), 1u);
  Advance(1100);  // the refused and closed clients' flow entries linger, then go
}

// A rule with several backends: a refused handshake fails over at once to another backend, and
// the client never learns; after PassiveHealth::kFall refusals in a row that backend is left
// out of the picks, so later clients go straight to the live one.
TEST_F(RelayWireTest, RefusedBackendFailsOverAndIsMarkedDown) {
  RelayConfig config = Config(kClosedPort);  // the first backend: nothing listens there
  config.rules[0].more_backends = {RelayBackend{{LwipWire::InAddrB(), kBackendPort}, 1, false}};
  ASSERT_NO_FATAL_FAILURE(StartRelay(config));
  std::vector<Pair> pairs;
  for (uint16_t port = 40000; port < 40008; ++port) {
    pairs.push_back(Open(port));
    ASSERT_NE(pairs.back().backend, nullptr) << "client " << port << " not relayed";
    EXPECT_FALSE(pairs.back().client->errored);
  }
  EXPECT_EQ(Count(&RelayCounters::backend_refused), 0u);
  // Round robin sends every other connection to the dead backend until it is marked down.
  EXPECT_EQ(Count(&RelayCounters::backend_failovers), PassiveHealth::kFall);
  EXPECT_EQ(Count(&RelayCounters::backends_marked_down), 1u);
  for (Pair& p : pairs) {
    p.client->Send("ping");
    Settle();
    EXPECT_EQ(p.backend->received, "ping");
    CloseBoth(*p.client, *p.backend);
  }
}

// After its down period a dead backend gets one trial connection, not every pick: of clients
// arriving together only that one meets the refusal (and fails over), which marks the backend
// down again at once.
TEST_F(RelayWireTest, ADownBackendIsTriedByOneConnectionAtATime) {
  RelayConfig config = Config(kClosedPort);
  config.rules[0].more_backends = {RelayBackend{{LwipWire::InAddrB(), kBackendPort}, 1, false}};
  ASSERT_NO_FATAL_FAILURE(StartRelay(config));
  for (uint16_t port = 40000; port < 40006; ++port) {
    const Pair p = Open(port);
    ASSERT_NE(p.backend, nullptr);
    CloseBoth(*p.client, *p.backend);
  }
  ASSERT_EQ(Count(&RelayCounters::backends_marked_down), 1u);
  const uint64_t failovers = Count(&RelayCounters::backend_failovers);
  const size_t before = backends_.size();
  Advance(PassiveHealth::kDownMs);  // also past the closed legs' lingering ports
  // Six clients' handshakes at once: the relay picks for all of them before any refusal.
  std::vector<Peer*> together;
  for (uint16_t port = 40010; port < 40016; ++port) together.push_back(Connect(port));
  Settle();
  EXPECT_EQ(Count(&RelayCounters::backend_failovers), failovers + 1) << "more than one trial";
  EXPECT_EQ(Count(&RelayCounters::backends_marked_down), 2u) << "the failed trial marks it down";
  EXPECT_EQ(Count(&RelayCounters::backend_refused), 0u);
  ASSERT_EQ(backends_.size(), before + together.size());
  // Each client relayed (the one that failed over is accepted last): a byte finds its backend.
  for (size_t i = 0; i < together.size(); ++i) {
    ASSERT_NE(together[i], nullptr);
    EXPECT_TRUE(together[i]->connected);
    EXPECT_FALSE(together[i]->errored);
    const std::string mark(1, static_cast<char>('a' + i));
    together[i]->Send(mark);
    Settle();
    Peer* backend = nullptr;
    for (size_t j = before; j < backends_.size(); ++j) {
      if (backends_[j]->received == mark) backend = backends_[j].get();
    }
    ASSERT_NE(backend, nullptr) << "client " << i << " not relayed";
    CloseBoth(*together[i], *backend);
  }
}

// A silent backend (its SYNs dropped) of a rule with several: each attempt gets a third of the
// connect timeout, then the connection fails over, well inside the timeout.
TEST_F(RelayWireTest, SilentBackendFailsOverWithinTheConnectTimeout) {
  constexpr uint16_t kSilentPort = 9002;
  tcp_pcb* silent = LwipWire::ListenOnB(kSilentPort, this, AcceptBackend);
  ASSERT_NE(silent, nullptr);
  RelayConfig config = Config(kSilentPort);
  config.rules[0].more_backends = {RelayBackend{{LwipWire::InAddrB(), kBackendPort}, 1, false}};
  config.limits.connect_timeout = std::chrono::milliseconds(900);
  ASSERT_NO_FATAL_FAILURE(StartRelay(config));
  wire_.SetFilter([](const WirePacket& p) {
    return p.tcp.dst_port == kSilentPort ? WireVerdict::kDrop : WireVerdict::kDeliver;
  });
  Peer* client = Connect(40000);
  ASSERT_NE(client, nullptr);
  Settle();
  ASSERT_TRUE(client->connected);
  EXPECT_TRUE(backends_.empty());
  Advance(200);
  EXPECT_EQ(Count(&RelayCounters::backend_failovers), 0u) << "failed over before its share";
  Advance(200);  // past 300 ms: the next backend
  EXPECT_EQ(Count(&RelayCounters::backend_failovers), 1u);
  ASSERT_EQ(backends_.size(), 1u);
  EXPECT_FALSE(client->errored);
  EXPECT_EQ(Count(&RelayCounters::backend_timeout), 0u);
  client->Send("hello");
  Settle();
  EXPECT_EQ(backends_.front()->received, "hello");
  wire_.SetFilter({});
  CloseBoth(*client, *backends_.front());
  EXPECT_EQ(tcp_close(silent), ERR_OK);
}

}  // namespace
}  // namespace xdpfwd::test
