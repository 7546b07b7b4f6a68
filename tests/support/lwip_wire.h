// Two lwIP netifs wired back to back in memory: what one sends, Pump() hands to the other's
// ip_input (IPv4 or IPv6: lwIP is dual-stack). Tests lwIP's TCP (and our patches to it) in-process,
// without root or AF_XDP.
#pragma once

#include <netinet/in.h>

#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <iosfwd>
#include <map>
#include <optional>
#include <tuple>
#include <vector>

extern "C" {
#include "lwip/ip_addr.h"
#include "lwip/netif.h"
#include "lwip/tcp.h"
}

namespace xdpfwd::test {

// The TCP header fields of an IPv4 or IPv6 packet on the wire (ports and numbers in host
// order).
struct TcpSegment {
  in_addr src{}, dst{};  // IPv4
  bool ipv6 = false;
  in6_addr src6{}, dst6{};  // IPv6
  uint16_t src_port = 0, dst_port = 0;
  uint32_t seq = 0, ack = 0;
  uint8_t flags = 0;  // TCP_FIN, TCP_SYN, TCP_RST, TCP_PSH, TCP_ACK from lwip/prot/tcp.h
  size_t payload_len = 0;
  uint16_t window = 0;  // as on the wire (not scaled): 0 is a closed window
};

// Parses an IPv4/TCP or IPv6/TCP packet (TCP right after IPv6's fixed header, as lwIP sends
// it); nullopt for anything else or a truncated header.
std::optional<TcpSegment> ParseTcp(const std::vector<uint8_t>& ip_packet);

struct WirePacket {
  struct netif* from = nullptr;  // the netif lwIP sent it through
  std::vector<uint8_t> bytes;    // the IP packet
  TcpSegment tcp;                // parsed (every packet in these tests is TCP)
  uint64_t due_tick = 0;         // the Tick() count at which Pump() may deliver it (latency)
};

// What a filter decides for a packet about to be delivered (for loss and reordering tests).
enum class WireVerdict {
  kDeliver,
  kDrop,
  kHold,  // delivered after the other packets of the same round: reorders it behind them
};

struct WireCounters {
  uint64_t sent = 0;                                 // packets lwIP handed to either netif's output
  uint64_t delivered = 0;                            // packets given to the other side's ip_input
  uint64_t dropped = 0;                              // by the filter
  uint64_t syn = 0, fin = 0, rst = 0, pure_ack = 0;  // among `sent`
  // Among `sent`: segments carrying sequence space (data, SYN, FIN) that start below what
  // their connection had already sent, i.e. retransmissions. `timer_retransmitted` are those
  // lwIP sent from its timer (tcp_tmr): RTO retransmissions, as opposed to ones an arriving
  // ACK provoked.
  uint64_t retransmitted = 0, timer_retransmitted = 0;
  // Among `sent`: segments without sequence space that start below what their connection had
  // already sent: zero-window probes (lwIP patch 0034: sequence number snd_una - 1, no data).
  uint64_t probes = 0;
};

// A 4-tuple as seen from one pcb (host-order ports), for list snapshots.
struct PcbTuple {
  in_addr local{}, remote{};
  uint16_t local_port = 0, remote_port = 0;
  bool operator==(const PcbTuple& o) const {
    return local.s_addr == o.local.s_addr && remote.s_addr == o.remote.s_addr &&
           local_port == o.local_port && remote_port == o.remote_port;
  }
  bool operator<(const PcbTuple& o) const;
};
std::ostream& operator<<(std::ostream& os, const PcbTuple& t);  // for gtest messages

// Netif `a` is 10.0.0.1/24 and fd00::1, `b` 10.0.0.2/24 and fd00::2, MTU 1500, checksums
// generated and checked.
// lwIP's state is global: one LwipWire at a time per process (the constructor fails the test
// otherwise). Every call happens on the test's thread. Helpers report problems as gtest
// failures; none aborts the process (lwIP's own LWIP_ASSERTs still do).
class LwipWire {
 public:
  LwipWire();   // InitLwipOnce(), then adds and brings up both netifs
  ~LwipWire();  // removes them (pcbs still using them are aborted by lwIP)
  LwipWire(const LwipWire&) = delete;
  LwipWire& operator=(const LwipWire&) = delete;

  struct netif* a() {
    return &a_;
  }
  struct netif* b() {
    return &b_;
  }
  static ip_addr_t AddrA();
  static ip_addr_t AddrB();
  static ip_addr_t Addr6A();  // fd00::1
  static ip_addr_t Addr6B();  // fd00::2
  static in_addr InAddrA();
  static in_addr InAddrB();
  // A pcb listening on B:port that calls accept(arg, ...) for each connection; nullptr if lwIP
  // could not make one (no pcb, port taken).
  static tcp_pcb* ListenOnB(uint16_t port, void* arg, tcp_accept_fn accept);
  // The same on any local address (B's IPv6 one, say).
  static tcp_pcb* Listen(const ip_addr_t& addr, uint16_t port, void* arg, tcp_accept_fn accept);

  // Delivers queued packets, and what they provoke, until the wire is quiet. Each round takes
  // everything queued so far, then releases the out-of-order ACKs lwIP held (patch 0033), as
  // the worker does once per iteration. More than `max_rounds` rounds is a test failure (a packet
  // storm). Returns the number delivered.
  size_t Pump(int max_rounds = 1000);

  // Queues a copy of a packet seen earlier (a retransmission) for the next Pump().
  void Replay(const WirePacket& packet);

  // Called for every packet lwIP sends, before it is queued.
  void SetTap(std::function<void(const WirePacket&)> tap) { tap_ = std::move(tap); }
  // Decides the fate of each packet as Pump() delivers it; none: deliver everything.
  void SetFilter(std::function<WireVerdict(const WirePacket&)> filter) {
    filter_ = std::move(filter);
  }

  // lwIP's TCP time, decoupled from the wall clock: tcp_tmr() `ticks` times (one tick is
  // TCP_TMR_INTERVAL ms; every TCP_SLOW_INTERVAL runs the slow timer too), pumping after each.
  void Tick(int ticks = 1);
  void AdvanceMs(uint32_t ms) { Tick(static_cast<int>(ms / TCP_TMR_INTERVAL) + 1); }
  // Ticks run so far: the wire's clock for latency and for timing tests.
  uint64_t ticks() const { return ticks_; }
  // lwIP's microsecond clock (xdpfwd_lwip_now_us, BBR's clock) follows the wire: the tick's
  // start, plus kRoundUs for each round of delivery in it (at most a tick's worth), so that a
  // round trip at latency 0 takes tens of microseconds, as on a LAN, and not zero.
  static constexpr uint64_t kRoundUs = 10;

  // One-way delay in ticks (default 0: Pump() delivers at once). A packet sent during tick t
  // is delivered by the Pump() of tick t + ticks, so a round trip takes 2 * ticks.
  void SetLatencyTicks(uint32_t ticks) { latency_ticks_ = ticks; }

  const WireCounters& counters() const { return counters_; }
  size_t queued() const { return queue_.size(); }

  // Delivers each packet as a chain of custom pbufs over memory the wire owns, as the AF_XDP
  // netif hands over UMEM frames (multi-buffer packets as chains): pieces of `piece_bytes`
  // (the first at least 64 bytes, so that the IP and TCP headers are in it, as lwIP needs).
  // 0: one PBUF_RAM per packet (the default). frames_held() counts pieces lwIP has not freed.
  void SetExternalFrames(size_t piece_bytes) { piece_bytes_ = piece_bytes; }
  size_t frames_held() const { return frames_held_; }

  // Snapshots of lwIP's pcb lists, head first (lwIP internals, read only).
  static std::vector<const tcp_pcb*> ActivePcbs();
  static std::vector<PcbTuple> ActiveTuples();
  static std::vector<PcbTuple> TimeWaitTuples();
  static std::vector<const tcp_pcb*> BoundPcbs();

 private:
  static err_t Output(struct netif* netif, struct pbuf* p, const ip4_addr_t* next_hop);
  static err_t Output6(struct netif* netif, struct pbuf* p, const ip6_addr_t* next_hop);
  static err_t Queue(struct netif* netif, struct pbuf* p);
  static err_t InitNetif(struct netif* netif);
  void Deliver(const WirePacket& packet);
  struct pbuf* ExternalChain(const std::vector<uint8_t>& bytes);
  void CountRetransmission(const TcpSegment& tcp);
  void SetClock();

  struct netif a_ {
  }, b_{};
  std::deque<WirePacket> queue_;
  std::function<void(const WirePacket&)> tap_;
  std::function<WireVerdict(const WirePacket&)> filter_;
  WireCounters counters_;
  uint64_t ticks_ = 0;
  uint64_t round_us_ = 0;  // microseconds of delivery rounds since the tick began
  uint32_t latency_ticks_ = 0;
  size_t piece_bytes_ = 0;
  size_t frames_held_ = 0;
  bool in_timer_ = false;  // inside tcp_tmr(): what lwIP sends now, its timer sent
  // Per direction (src, src port, dst, dst port): the ISN and the sequence number after the
  // highest byte sent so far, for counting retransmissions.
  struct SentSpan {
    uint32_t isn = 0, end = 0;
  };
  std::map<std::tuple<uint32_t, uint16_t, uint32_t, uint16_t>, SentSpan> sent_spans_;
};

}  // namespace xdpfwd::test
