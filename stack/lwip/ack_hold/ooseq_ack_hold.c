/* The out-of-order ACK hold for lwIP, behind the hooks of our patch 0033: where lwIP would ACK a
 * queued out-of-order segment at once, the pcb joins a list instead, and the worker's
 * tcp_ooseq_ack_release() sends that ACK one round of input later unless an ACK went out
 * meanwhile.
 *
 * Why: a peer on the same host (veth) sends from two CPUs, whose backlogs hand its segments over
 * out of order: one 64 KiB GSO packet overtakes the one before it and the late one arrives
 * 6-190 us after, by the worker's next round. A SACK at once made Linux's RACK (a reordering
 * window of a quarter of veth's 5 us minimum RTT) resend all 44 segments of the late packet:
 * 23,000-38,000 needless retransmissions per 6 s at iperf3 -P 1. Waiting one round, the late
 * segment fills the hole and its ACK says everything. Peers without SACK count duplicate ACKs,
 * so they get them at once as before; a real loss is reported one round later.
 *
 * lwIP calls xdpfwd_ooseq_ack_later() where it would send the immediate ACK
 * (LWIP_HOOK_TCP_OOSEQ_ACK), xdpfwd_ooseq_ack_cancel() when tcp_send_empty_ack has sent one
 * (LWIP_HOOK_TCP_EMPTY_ACK_SENT: the filled hole's ACK, or a newer SACK) and when a pcb is purged
 * or freed (LWIP_HOOK_TCP_PCB_PURGE); the list links live in the pcb (LWIP_TCP_PCB_HOOK_STATE:
 * ooseq_ack_next, ooseq_ack_pprev, ooseq_ack_round). All of it in stack/lwip/lwipopts.h. */
#include "lwip/opt.h"
#include "lwip/priv/tcp_priv.h"
#include "lwip/tcp.h"
#include "ooseq_ack_hold.h"
#include "xdpfwd_lwip_hooks.h"

#if !TCP_QUEUE_OOSEQ || !LWIP_TCP_SACK_OUT
#error "the out-of-order ACK hold needs TCP_QUEUE_OOSEQ and LWIP_TCP_SACK_OUT"
#endif

u8_t tcp_ooseq_ack_hold;
u32_t tcp_ooseq_acks_held, tcp_ooseq_acks_released;
/* pcbs whose ACK waits, each with the round it began waiting in */
static struct tcp_pcb *tcp_ooseq_ack_pcbs;
static u8_t tcp_ooseq_ack_round_now;

void
xdpfwd_ooseq_ack_cancel(struct tcp_pcb *pcb)
{
  if (pcb->ooseq_ack_pprev == NULL) {
    return;
  }
  *pcb->ooseq_ack_pprev = pcb->ooseq_ack_next;
  if (pcb->ooseq_ack_next != NULL) {
    pcb->ooseq_ack_next->ooseq_ack_pprev = pcb->ooseq_ack_pprev;
  }
  pcb->ooseq_ack_next = NULL;
  pcb->ooseq_ack_pprev = NULL;
}

u8_t
xdpfwd_ooseq_ack_later(struct tcp_pcb *pcb)
{
  /* only what was queued (there is a hole to report), only to a peer that takes SACK */
  if (!tcp_ooseq_ack_hold || pcb->ooseq == NULL || !(pcb->flags & TF_SACK)) {
    return 0;
  }
  ++tcp_ooseq_acks_held;
  if (pcb->ooseq_ack_pprev != NULL) {
    return 1; /* one ACK will carry every SACK block */
  }
  pcb->ooseq_ack_round = tcp_ooseq_ack_round_now;
  pcb->ooseq_ack_next = tcp_ooseq_ack_pcbs;
  if (tcp_ooseq_ack_pcbs != NULL) {
    tcp_ooseq_ack_pcbs->ooseq_ack_pprev = &pcb->ooseq_ack_next;
  }
  pcb->ooseq_ack_pprev = &tcp_ooseq_ack_pcbs;
  tcp_ooseq_ack_pcbs = pcb;
  return 1;
}

void
tcp_ooseq_ack_release(void)
{
  struct tcp_pcb *pcb, *next;
  for (pcb = tcp_ooseq_ack_pcbs; pcb != NULL; pcb = next) {
    next = pcb->ooseq_ack_next;
    if (pcb->ooseq_ack_round != tcp_ooseq_ack_round_now) {
      xdpfwd_ooseq_ack_cancel(pcb);
      /* still a hole to report, or an ACK owed (the hole filled, its ACK delayed) */
      if (pcb->ooseq != NULL || (pcb->flags & (TF_ACK_DELAY | TF_ACK_NOW))) {
        ++tcp_ooseq_acks_released;
        tcp_send_empty_ack(pcb);
      }
    }
  }
  ++tcp_ooseq_ack_round_now;
}

u8_t
tcp_ooseq_ack_pending(void)
{
  return tcp_ooseq_ack_pcbs != NULL;
}
