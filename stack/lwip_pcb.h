// The lwIP pcb internals xdpfwd relies on, in one place: fields and states that lwIP's raw API
// does not expose through functions. Written against lwIP 2.1.3 as patched by
// stack/lwip/patches/; when lwIP changes, this is the header to check.
#pragma once

#include <netinet/in.h>

#include <cstdint>

extern "C" {
#include "lwip/tcp.h"
}

namespace xdpfwd::lwip_pcb {

inline in_addr ToInAddr(const ip_addr_t& a) {
  in_addr out;
  out.s_addr = ip4_addr_get_u32(ip_2_ip4(&a));
  return out;
}

struct Endpoints {
  in_addr local{}, remote{};
  uint16_t local_port = 0, remote_port = 0;  // host order
};

inline Endpoints EndpointsOf(const tcp_pcb* pcb) {
  return {ToInAddr(pcb->local_ip), ToInAddr(pcb->remote_ip), pcb->local_port, pcb->remote_port};
}

// Gives a new, unconnected pcb its local address and port without tcp_bind, which walks every
// pcb to look for a conflict: the caller's port allocator guarantees the 4-tuple is unique.
// The pcb is on no lwIP list until tcp_connect puts it on the active one (patch 0001 makes
// removing it from the bound list, as tcp_close does for a never-connected pcb, a no-op).
inline void SetLocalEndpoint(tcp_pcb* pcb, in_addr addr, uint16_t port) {
  ip_addr_set_ip4_u32(&pcb->local_ip, addr.s_addr);
  pcb->local_port = port;
}

// Nothing left to send or to be acknowledged, our FIN included, and no FIN waiting for memory.
inline bool AllAcknowledged(const tcp_pcb* pcb) {
  return pcb->unsent == nullptr && pcb->unacked == nullptr && (pcb->flags & TF_CLOSEPEND) == 0;
}

// Hands a finished pcb back to lwIP. In TIME_WAIT (this side closed first, and the peer's FIN
// and ACK of ours have both arrived) it is freed at once: tcp_abort frees a TIME_WAIT pcb
// without sending anything. Nothing is lost, every byte both ways is acknowledged; what is given
// up is answering a retransmitted FIN with an ACK (lwIP answers with RST, which ends the peer's
// LAST_ACK just the same) and the 2 * MSL quarantine of the 4-tuple, which the relay's port
// allocator and clock-based ISNs replace (docs/relay.md). Otherwise tcp_close, and tcp_abort if
// that fails for lack of memory. Returns true if the pcb no longer exists: a callback running
// for it must then return ERR_ABRT.
inline bool Release(tcp_pcb* pcb) {
  if (pcb->state == TIME_WAIT) {
    tcp_abort(pcb);
    return true;
  }
  if (tcp_close(pcb) == ERR_OK) return false;
  tcp_abort(pcb);
  return true;
}

}  // namespace xdpfwd::lwip_pcb
