// The lwIP pcb internals xdpfwd relies on, in one place: fields and states that lwIP's raw API
// does not expose through functions. Written against lwIP 2.1.3 as patched by
// stack/lwip/patches/; when lwIP changes, this is the header to check.
#pragma once

#include <netinet/in.h>

#include <cstdint>
#include <cstring>

#include "os/ip_address.h"

extern "C" {
#include "lwip/priv/tcp_priv.h"  // tcp_ticks, TCP_SLOW_INTERVAL
#include "lwip/tcp.h"
}

namespace xdpfwd::lwip_pcb {

inline in_addr ToInAddr(const ip_addr_t& a) {
  in_addr out;
  out.s_addr = ip4_addr_get_u32(ip_2_ip4(&a));
  return out;
}

// Either family (lwIP is dual-stack).
inline IpAddress ToIpAddress(const ip_addr_t& a) {
  if (!IP_IS_V6_VAL(a)) return ToInAddr(a);
  in6_addr out;
  std::memcpy(&out, ip_2_ip6(&a)->addr, sizeof(out));
  return IpAddress::V6(out);
}

inline ip_addr_t ToLwipAddress(const IpAddress& a) {
  ip_addr_t out;
  if (a.is_v6()) {
    ip6_addr_t v6{};
    std::memcpy(v6.addr, &a.v6(), sizeof(v6.addr));
    ip_addr_copy_from_ip6(out, v6);
  } else {
    ip_addr_set_ip4_u32(&out, a.v4().s_addr);
  }
  return out;
}

struct Endpoints {
  IpAddress local, remote;
  uint16_t local_port = 0, remote_port = 0;  // host order
};

inline Endpoints EndpointsOf(const tcp_pcb* pcb) {
  return {ToIpAddress(pcb->local_ip), ToIpAddress(pcb->remote_ip), pcb->local_port,
          pcb->remote_port};
}

// Whether lwIP holds a pcb on this 4-tuple, active (a handshake under way included) or in
// TIME-WAIT: a hash lookup in each list (patch 0001), no walk.
inline bool TupleInUse(const IpAddress& local, uint16_t local_port, const IpAddress& remote,
                       uint16_t remote_port) {
  const ip_addr_t l = ToLwipAddress(local), r = ToLwipAddress(remote);
  return tcp_pcb_hash_lookup(0, &l, local_port, &r, remote_port) != nullptr ||
         tcp_pcb_hash_lookup(1, &l, local_port, &r, remote_port) != nullptr;
}

// Gives a new, unconnected pcb its local address and port without tcp_bind, which walks every
// pcb to look for a conflict: the caller's port allocator guarantees the 4-tuple is unique.
// The pcb is on no lwIP list until tcp_connect puts it on the active one; closing it before
// then walks the (short) bound list, finds nothing and frees it.
// The pcb must have been made for the address's family (tcp_new_ip_type).
inline void SetLocalEndpoint(tcp_pcb* pcb, const IpAddress& addr, uint16_t port) {
  pcb->local_ip = ToLwipAddress(addr);
  pcb->local_port = port;
}

// Nothing left to send or to be acknowledged, our FIN included, and no FIN waiting for memory.
inline bool AllAcknowledged(const tcp_pcb* pcb) {
  return pcb->unsent == nullptr && pcb->unacked == nullptr && (pcb->flags & TF_CLOSEPEND) == 0;
}

// Whether `n` more bytes queued now fit the window the peer offers, with what is in flight and
// what is queued before them: the peer has room for them, so they leave as soon as the
// congestion window lets them (a round trip or so) and are acknowledged. Bytes beyond it may
// wait as long as the peer keeps its window closed (a slow reader).
inline bool FitsPeerWindow(const tcp_pcb* pcb, uint32_t n) {
  const uint32_t queued = pcb->snd_lbb - pcb->lastack;  // in flight + not yet sent
  return queued + n <= pcb->snd_wnd;
}

// What `show sess` shows of a leg. lwIP times round trips in tcp_tmr ticks (TCP_TMR_INTERVAL,
// our patch 0005) and keeps its RTO in slow-timer ticks; it keeps no count of a pcb's
// retransmissions over its life (nrtx is the segment at the head's).
struct PcbInfo {
  uint8_t state = CLOSED;  // lwIP's enum tcp_state
  uint32_t srtt_us = 0;    // 0: not timed yet, or under one tick
  uint32_t rto_ms = 0;
  uint32_t cwnd_bytes = 0;
  uint32_t in_flight = 0;    // sent, not yet acknowledged
  uint32_t send_queue = 0;   // queued, not yet sent
  uint32_t peer_window = 0;  // what the peer last advertised
};

inline PcbInfo InfoOf(const tcp_pcb* pcb) {
  PcbInfo i;
  i.state = static_cast<uint8_t>(pcb->state);
  i.srtt_us = pcb->sv < 0 ? 0 : static_cast<uint32_t>(pcb->sa >> 3) * TCP_TMR_INTERVAL * 1000u;
  i.rto_ms = static_cast<uint32_t>(pcb->rto) * TCP_SLOW_INTERVAL;
  i.cwnd_bytes = pcb->cwnd;
  i.in_flight = pcb->snd_nxt - pcb->lastack;
  i.send_queue = pcb->snd_lbb - pcb->snd_nxt;
  i.peer_window = pcb->snd_wnd;
  return i;
}

// lwIP's state names, as Linux's ss spells its own.
inline const char* StateName(uint8_t state) {
  static const char* const kNames[] = {"CLOSED",      "LISTEN",    "SYN_SENT",  "SYN_RECV",
                                       "ESTABLISHED", "FIN_WAIT1", "FIN_WAIT2", "CLOSE_WAIT",
                                       "CLOSING",     "LAST_ACK",  "TIME_WAIT"};
  return state < sizeof kNames / sizeof kNames[0] ? kNames[state] : "?";
}

// Ends a TIME_WAIT at lwIP's next slow-timer tick (TCP_SLOW_INTERVAL) instead of 2 * MSL from
// now, by backdating the pcb's timer: lwIP itself frees it then, so no pointer to it is kept.
// lwIP files a TIME_WAIT pcb by the tick it expires at (our patch 0037): tcp_tw_refile moves it
// to the next tick's bucket (without, it would wait out the 2 * MSL it was filed for).
inline void ShortenTimeWait(tcp_pcb* pcb) {
  pcb->tmr = tcp_ticks - 2 * TCP_MSL / TCP_SLOW_INTERVAL - 1;
  tcp_tw_refile(pcb);
}

// Hands a finished pcb back to lwIP. In TIME_WAIT (this side closed first, and the peer's FIN
// and the ACK of ours have both arrived) it stays lwIP's only until the next slow-timer tick
// (ShortenTimeWait): nothing is lost, every byte both ways is acknowledged, and meanwhile lwIP
// still sends the ACK of the peer's FIN and answers a retransmitted one. It must not be freed
// here: this runs inside the callback that delivered that FIN, and freeing the pcb there
// (tcp_abort) makes lwIP skip the ACK, so the peer sits in LAST_ACK until it gives up with a
// reset (measured: 4,220 client sockets in LAST-ACK after 45,000 connections). What is given up
// is the 2 * MSL quarantine of the 4-tuple, which the relay's port allocator and clock-based
// ISNs replace (docs/relay.md). Other states: tcp_close, and tcp_abort if that fails for lack of
// memory. Returns true if the pcb no longer exists: a callback running for it must then return
// ERR_ABRT.
inline bool Release(tcp_pcb* pcb) {
  if (pcb->state == TIME_WAIT) {
    ShortenTimeWait(pcb);
    return false;
  }
  if (tcp_close(pcb) == ERR_OK) return false;
  tcp_abort(pcb);
  return true;
}

}  // namespace xdpfwd::lwip_pcb
