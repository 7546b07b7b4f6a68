/* The out-of-order ACK hold: the ACK of a queued out-of-order segment from a SACK peer waits for
 * the worker's next round of input (ooseq_ack_hold.c, behind the hooks our lwIP patch 0033 adds;
 * docs/stack.md, "Out-of-order ACKs wait one iteration"). What the worker and the tests use. */
#ifndef XDPFWD_LWIP_ACK_HOLD_OOSEQ_ACK_HOLD_H
#define XDPFWD_LWIP_ACK_HOLD_OOSEQ_ACK_HOLD_H

#include "lwip/arch.h"

#ifdef __cplusplus
extern "C" {
#endif

/* While set, the ACK of an out-of-order segment from a peer that takes SACK waits for the
   next-but-one tcp_ooseq_ack_release() call, and is not sent at all if an ACK goes out meanwhile.
   The worker sets it from --tune ooseq-ack before it starts. */
extern u8_t tcp_ooseq_ack_hold;
/* Out-of-order segments whose ACK was held; held ACKs the release sent (the rest were said by an
   ACK sent meanwhile, or owed nothing). */
extern u32_t tcp_ooseq_acks_held, tcp_ooseq_acks_released;

/* Call once per round of input (after the input, before sending what it queued): an ACK held
   in one round goes out at the second call after, with the SACK blocks of that moment. */
void tcp_ooseq_ack_release(void);
/* Whether an ACK waits. */
u8_t tcp_ooseq_ack_pending(void);

#ifdef __cplusplus
}
#endif

#endif /* XDPFWD_LWIP_ACK_HOLD_OOSEQ_ACK_HOLD_H */
