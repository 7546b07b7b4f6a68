// Two lwIP netifs wired back to back in memory (see lwip_wire.h).
#include "tests/support/lwip_wire.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <ostream>
#include <tuple>

#include "stack/lwip/ack_hold/ooseq_ack_hold.h"
#include "stack/lwip_pcb.h"
#include "stack/worker.h"
#include "xdpfwd_lwip_hooks.h"

extern "C" {
#include "lwip/ip.h"
#include "lwip/ip4.h"
#include "lwip/ip6_addr.h"
#include "lwip/pbuf.h"
#include "lwip/priv/tcp_priv.h"
#include "lwip/prot/tcp.h"
}

namespace xdpfwd::test {
namespace {

LwipWire* g_wire = nullptr;  // lwIP is global: at most one wire at a time

uint16_t Be16(const uint8_t* p) { return static_cast<uint16_t>(p[0] << 8 | p[1]); }
uint32_t Be32(const uint8_t* p) {
  return uint32_t{p[0]} << 24 | uint32_t{p[1]} << 16 | uint32_t{p[2]} << 8 | p[3];
}

PcbTuple TupleOf(const tcp_pcb* pcb) {
  const lwip_pcb::Endpoints e = lwip_pcb::EndpointsOf(pcb);
  return {e.local.v4(), e.remote.v4(), e.local_port, e.remote_port};
}

std::vector<PcbTuple> TuplesOf(const tcp_pcb* head) {
  std::vector<PcbTuple> out;
  for (const tcp_pcb* pcb = head; pcb != nullptr; pcb = pcb->next) out.push_back(TupleOf(pcb));
  return out;
}

}  // namespace

bool PcbTuple::operator<(const PcbTuple& o) const {
  return std::tie(local.s_addr, local_port, remote.s_addr, remote_port) <
         std::tie(o.local.s_addr, o.local_port, o.remote.s_addr, o.remote_port);
}

std::ostream& operator<<(std::ostream& os, const PcbTuple& t) {
  char local[INET_ADDRSTRLEN], remote[INET_ADDRSTRLEN];
  inet_ntop(AF_INET, &t.local, local, sizeof(local));
  inet_ntop(AF_INET, &t.remote, remote, sizeof(remote));
  return os << local << ':' << t.local_port << "->" << remote << ':' << t.remote_port;
}

namespace {

std::optional<TcpSegment> ParseTcp6(const std::vector<uint8_t>& ip) {
  constexpr size_t kHeader = 40;
  if (ip.size() < kHeader + 20 || ip[6] != IP_PROTO_TCP) return std::nullopt;
  const size_t total = kHeader + Be16(&ip[4]);
  if (total > ip.size() || total < kHeader + 20) return std::nullopt;
  const uint8_t* tcp = ip.data() + kHeader;
  const size_t doff = (tcp[12] >> 4) * 4u;
  if (doff < 20 || kHeader + doff > total) return std::nullopt;
  TcpSegment s;
  s.ipv6 = true;
  std::memcpy(&s.src6, &ip[8], 16);
  std::memcpy(&s.dst6, &ip[24], 16);
  s.src_port = Be16(tcp);
  s.dst_port = Be16(tcp + 2);
  s.seq = Be32(tcp + 4);
  s.ack = Be32(tcp + 8);
  s.flags = tcp[13];
  s.window = Be16(tcp + 14);
  s.payload_len = total - kHeader - doff;
  return s;
}

// An address as one word, for keys: IPv4's own, IPv6's four words folded.
uint32_t AddressKey(const in_addr& v4, const in6_addr& v6, bool ipv6) {
  if (!ipv6) return v4.s_addr;
  uint32_t w[4];
  std::memcpy(w, &v6, sizeof(w));
  return w[0] ^ (w[1] * 3) ^ (w[2] * 5) ^ (w[3] * 7);
}

}  // namespace

std::optional<TcpSegment> ParseTcp(const std::vector<uint8_t>& ip) {
  if (!ip.empty() && (ip[0] >> 4) == 6) return ParseTcp6(ip);
  if (ip.size() < 20 || (ip[0] >> 4) != 4 || ip[9] != IP_PROTO_TCP) return std::nullopt;
  const size_t ihl = (ip[0] & 0x0fu) * 4u;
  const size_t total = Be16(&ip[2]);
  if (ihl < 20 || total > ip.size() || total < ihl + 20) return std::nullopt;
  const uint8_t* tcp = ip.data() + ihl;
  const size_t doff = (tcp[12] >> 4) * 4u;
  if (doff < 20 || ihl + doff > total) return std::nullopt;
  TcpSegment s;
  std::memcpy(&s.src.s_addr, &ip[12], 4);
  std::memcpy(&s.dst.s_addr, &ip[16], 4);
  s.src_port = Be16(tcp);
  s.dst_port = Be16(tcp + 2);
  s.seq = Be32(tcp + 4);
  s.ack = Be32(tcp + 8);
  s.flags = tcp[13];
  s.window = Be16(tcp + 14);
  s.payload_len = total - ihl - doff;
  return s;
}

ip_addr_t LwipWire::AddrA() {
  ip_addr_t a;
  IP_ADDR4(&a, 10, 0, 0, 1);
  return a;
}
ip_addr_t LwipWire::AddrB() {
  ip_addr_t b;
  IP_ADDR4(&b, 10, 0, 0, 2);
  return b;
}
ip_addr_t LwipWire::Addr6A() {
  ip_addr_t a;
  IP_ADDR6_HOST(&a, 0xfd000000, 0, 0, 1);
  return a;
}
ip_addr_t LwipWire::Addr6B() {
  ip_addr_t b;
  IP_ADDR6_HOST(&b, 0xfd000000, 0, 0, 2);
  return b;
}
in_addr LwipWire::InAddrA() { return lwip_pcb::ToInAddr(AddrA()); }
in_addr LwipWire::InAddrB() { return lwip_pcb::ToInAddr(AddrB()); }

tcp_pcb* LwipWire::ListenOnB(uint16_t port, void* arg, tcp_accept_fn accept) {
  return Listen(AddrB(), port, arg, accept);
}

tcp_pcb* LwipWire::Listen(const ip_addr_t& addr, uint16_t port, void* arg, tcp_accept_fn accept) {
  tcp_pcb* pcb = tcp_new_ip_type(IP_GET_TYPE(&addr));
  if (pcb == nullptr) return nullptr;
  if (tcp_bind(pcb, &addr, port) != ERR_OK) {
    tcp_close(pcb);
    return nullptr;
  }
  tcp_pcb* listener = tcp_listen(pcb);  // frees pcb, success or not
  if (listener == nullptr) return nullptr;
  tcp_arg(listener, arg);
  tcp_accept(listener, accept);
  return listener;
}

err_t LwipWire::InitNetif(struct netif* netif) {
  netif->name[0] = 'w';
  netif->name[1] = netif == &g_wire->a_ ? 'a' : 'b';
  netif->mtu = 1500;
  netif->output = Output;
  netif->output_ip6 = Output6;
  netif->flags = NETIF_FLAG_LINK_UP;
  return ERR_OK;
}

LwipWire::LwipWire() {
  InitLwipOnce();
  if (g_wire != nullptr) {
    ADD_FAILURE() << "a second LwipWire while one exists: lwIP's state is global";
    return;
  }
  g_wire = this;
  SetClock();
  ip4_addr_t mask, gw;
  IP4_ADDR(&mask, 255, 255, 255, 0);
  ip4_addr_set_zero(&gw);
  const ip_addr_t a = AddrA(), b = AddrB();
  // The netifs route by source address (LWIP_HOOK_IP4_ROUTE_SRC): a pcb bound to 10.0.0.1
  // leaves through `a` even though both netifs share the subnet.
  if (netif_add(&a_, ip_2_ip4(&a), &mask, &gw, this, InitNetif, ip_input) == nullptr ||
      netif_add(&b_, ip_2_ip4(&b), &mask, &gw, this, InitNetif, ip_input) == nullptr) {
    ADD_FAILURE() << "netif_add refused a wired netif";
    return;
  }
  // IPv6 beside IPv4, usable at once (lwIP's duplicate address detection is off), as the
  // fast path's netif sets it (stack/lwip_netif.cpp).
  const ip_addr_t a6 = Addr6A(), b6 = Addr6B();
  netif_ip6_addr_set(&a_, 0, ip_2_ip6(&a6));
  netif_ip6_addr_set(&b_, 0, ip_2_ip6(&b6));
  netif_ip6_addr_set_state(&a_, 0, IP6_ADDR_PREFERRED);
  netif_ip6_addr_set_state(&b_, 0, IP6_ADDR_PREFERRED);
  netif_set_up(&a_);
  netif_set_up(&b_);
}

LwipWire::~LwipWire() {
  if (g_wire != this) return;
  netif_remove(&a_);
  netif_remove(&b_);
  g_wire = nullptr;
  xdpfwd_lwip_set_now_us(0);
}

void LwipWire::SetClock() {
  const uint64_t us = ticks_ * TCP_TMR_INTERVAL * 1000u + std::min<uint64_t>(round_us_, 9999);
  xdpfwd_lwip_set_now_us(static_cast<u32_t>(us + 1));  // never 0: "not driven"
}

err_t LwipWire::Output(struct netif* netif, struct pbuf* p, const ip4_addr_t*) {
  return Queue(netif, p);
}

err_t LwipWire::Output6(struct netif* netif, struct pbuf* p, const ip6_addr_t*) {
  return Queue(netif, p);
}

err_t LwipWire::Queue(struct netif* netif, struct pbuf* p) {
  LwipWire* wire = static_cast<LwipWire*>(netif->state);
  WirePacket packet;
  packet.from = netif;
  packet.bytes.resize(p->tot_len);
  if (pbuf_copy_partial(p, packet.bytes.data(), p->tot_len, 0) != p->tot_len) {
    ADD_FAILURE() << "pbuf_copy_partial copied less than tot_len";
    return ERR_BUF;
  }
  const std::optional<TcpSegment> tcp = ParseTcp(packet.bytes);
  if (!tcp) {
    ADD_FAILURE() << "lwIP sent a packet that is not TCP over IP (" << p->tot_len << " bytes)";
    return ERR_OK;
  }
  packet.tcp = *tcp;
  WireCounters& c = wire->counters_;
  ++c.sent;
  if (tcp->flags & TCP_SYN) ++c.syn;
  if (tcp->flags & TCP_FIN) ++c.fin;
  if (tcp->flags & TCP_RST) ++c.rst;
  if (tcp->flags == TCP_ACK && tcp->payload_len == 0) ++c.pure_ack;
  wire->CountRetransmission(*tcp);
  packet.due_tick = wire->ticks_ + wire->latency_ticks_;
  if (wire->tap_) wire->tap_(packet);
  wire->queue_.push_back(std::move(packet));
  return ERR_OK;
}

void LwipWire::CountRetransmission(const TcpSegment& tcp) {
  const uint32_t space = static_cast<uint32_t>(tcp.payload_len) + ((tcp.flags & TCP_SYN) != 0) +
                         ((tcp.flags & TCP_FIN) != 0);
  const auto key = std::make_tuple(AddressKey(tcp.src, tcp.src6, tcp.ipv6), tcp.src_port,
                                   AddressKey(tcp.dst, tcp.dst6, tcp.ipv6), tcp.dst_port);
  auto it = sent_spans_.find(key);
  if (space == 0) {
    if (it != sent_spans_.end() && static_cast<int32_t>(tcp.seq - it->second.end) < 0) {
      ++counters_.probes;
    }
    return;
  }
  const uint32_t end = tcp.seq + space;
  if (tcp.flags & TCP_SYN) {
    // A SYN with another ISN opens a new connection on the tuple, not a retransmission.
    if (it == sent_spans_.end() || it->second.isn != tcp.seq) {
      sent_spans_[key] = {tcp.seq, end};
      return;
    }
  } else if (it == sent_spans_.end()) {
    sent_spans_[key] = {tcp.seq, end};
    return;
  }
  SentSpan& span = it->second;
  if (static_cast<int32_t>(tcp.seq - span.end) < 0) {
    ++counters_.retransmitted;
    if (in_timer_) ++counters_.timer_retransmitted;
  }
  if (static_cast<int32_t>(end - span.end) > 0) span.end = end;
}

void LwipWire::Replay(const WirePacket& packet) {
  queue_.push_back(packet);
  queue_.back().due_tick = ticks_;
}

void LwipWire::Deliver(const WirePacket& packet) {
  struct netif* to = packet.from == &a_ ? &b_ : &a_;
  if (packet.tcp.ipv6 ? std::memcmp(&packet.tcp.dst6, netif_ip6_addr(to, 0)->addr, 16) != 0
                      : packet.tcp.dst.s_addr != ip4_addr_get_u32(netif_ip4_addr(to))) {
    char dst[INET6_ADDRSTRLEN] = {};
    if (packet.tcp.ipv6) {
      inet_ntop(AF_INET6, &packet.tcp.dst6, dst, sizeof(dst));
    } else {
      inet_ntop(AF_INET, &packet.tcp.dst, dst, sizeof(dst));
    }
    ADD_FAILURE() << "packet to " << dst << " left through " << packet.from->name[0]
                  << packet.from->name[1]
                  << ", whose peer does not own that address (routing by source failed?)";
    return;
  }
  if (piece_bytes_ > 0) {
    ++counters_.delivered;
    to->input(ExternalChain(packet.bytes), to);
    return;
  }
  // A fresh pbuf, as a driver would hand over: lwIP owns and frees it from here.
  struct pbuf* p = pbuf_alloc(PBUF_RAW, static_cast<u16_t>(packet.bytes.size()), PBUF_RAM);
  if (p == nullptr) {
    ADD_FAILURE() << "pbuf_alloc failed: lwIP's heap is exhausted";
    return;
  }
  if (pbuf_take(p, packet.bytes.data(), static_cast<u16_t>(packet.bytes.size())) != ERR_OK) {
    ADD_FAILURE() << "pbuf_take failed";
    pbuf_free(p);
    return;
  }
  ++counters_.delivered;
  to->input(p, to);
}

namespace {

// A piece of a packet in memory lwIP does not own, as a UMEM frame is.
struct ExternalFrame {
  struct pbuf_custom custom {};
  size_t* held = nullptr;
  std::vector<uint8_t> bytes;

  static void Free(struct pbuf* p) {
    auto* frame = reinterpret_cast<ExternalFrame*>(p);  // custom is the first member
    --*frame->held;
    delete frame;
  }
};
static_assert(offsetof(ExternalFrame, custom) == 0);

}  // namespace

struct pbuf* LwipWire::ExternalChain(const std::vector<uint8_t>& bytes) {
  struct pbuf* head = nullptr;
  for (size_t at = 0; at < bytes.size();) {
    const size_t n = std::min(bytes.size() - at, std::max<size_t>(piece_bytes_, at == 0 ? 64 : 1));
    auto* frame = new ExternalFrame;
    frame->held = &frames_held_;
    frame->bytes.assign(bytes.begin() + static_cast<std::ptrdiff_t>(at),
                        bytes.begin() + static_cast<std::ptrdiff_t>(at + n));
    frame->custom.custom_free_function = ExternalFrame::Free;
    struct pbuf* p = pbuf_alloced_custom(PBUF_RAW, static_cast<u16_t>(n), PBUF_REF, &frame->custom,
                                         frame->bytes.data(), static_cast<u16_t>(n));
    ++frames_held_;
    if (head == nullptr) {
      head = p;
    } else {
      pbuf_cat(head, p);
    }
    at += n;
  }
  return head;
}

size_t LwipWire::Pump(int max_rounds) {
  size_t delivered = 0;
  for (int round = 0; round < max_rounds; ++round) {
    // Each round takes what is due; what delivery provokes queues up for the next round.
    std::deque<WirePacket> batch, later;
    for (WirePacket& packet : queue_) {
      (packet.due_tick <= ticks_ ? batch : later).push_back(std::move(packet));
    }
    queue_.swap(later);
    if (batch.empty()) {
      // ACKs lwIP holds for a round (patch 0033) are part of what the wire still has to say.
      if (!tcp_ooseq_ack_pending()) return delivered;
      tcp_ooseq_ack_release();
      continue;
    }
    round_us_ += kRoundUs;
    SetClock();
    std::vector<WirePacket> held;
    for (const WirePacket& packet : batch) {
      switch (filter_ ? filter_(packet) : WireVerdict::kDeliver) {
        case WireVerdict::kDeliver:
          Deliver(packet);
          ++delivered;
          break;
        case WireVerdict::kDrop:
          ++counters_.dropped;
          break;
        case WireVerdict::kHold:
          held.push_back(packet);
          break;
      }
    }
    for (const WirePacket& packet : held) {
      Deliver(packet);
      ++delivered;
    }
    // A round is the worker's iteration: its input, then what it sends (stack/worker.cpp).
    tcp_ooseq_ack_release();
  }
  ADD_FAILURE() << "the wire is still busy after " << max_rounds << " rounds (" << queue_.size()
                << " packets queued)";
  return delivered;
}

void LwipWire::Tick(int ticks) {
  for (int i = 0; i < ticks; ++i) {
    ++ticks_;
    round_us_ = 0;
    SetClock();
    in_timer_ = true;
    tcp_tmr();
    in_timer_ = false;
    Pump();
  }
}

std::vector<const tcp_pcb*> LwipWire::ActivePcbs() {
  std::vector<const tcp_pcb*> out;
  for (const tcp_pcb* pcb = tcp_active_pcbs; pcb != nullptr; pcb = pcb->next) out.push_back(pcb);
  return out;
}

std::vector<PcbTuple> LwipWire::ActiveTuples() { return TuplesOf(tcp_active_pcbs); }
std::vector<PcbTuple> LwipWire::TimeWaitTuples() { return TuplesOf(tcp_tw_pcbs); }

std::vector<const tcp_pcb*> LwipWire::BoundPcbs() {
  std::vector<const tcp_pcb*> out;
  for (const tcp_pcb* pcb = tcp_bound_pcbs; pcb != nullptr; pcb = pcb->next) out.push_back(pcb);
  return out;
}

}  // namespace xdpfwd::test
