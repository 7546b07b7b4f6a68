/* Our congestion controllers for lwIP, behind the table of steps our lwIP patch 0018 adds
 * (struct tcp_cc_ops in lwip/tcp.h, after Linux's tcp_congestion_ops): CUBIC (cubic.c) and BBR
 * (bbr.c). lwip/tcp.h includes this header (LWIP_TCP_CC_HEADER in lwipopts.h) for their state,
 * which lwipopts.h places in every pcb (LWIP_TCP_CC_PCB_STATE: pcb->cubic, and pcb->bbr, a
 * pointer to BBR's from the TCP_BBR pool, NULL unless the pcb runs BBR) and every segment
 * (LWIP_TCP_CC_SEG_STATE: seg->cc). docs/stack.md, "Congestion control". */
#ifndef XDPFWD_LWIP_CC_TCP_CC_H
#define XDPFWD_LWIP_CC_TCP_CC_H

#include "lwip/arch.h"

#ifdef __cplusplus
extern "C" {
#endif

struct tcp_pcb;
struct tcp_cc_ops;

/* Which controller new pcbs take (xdpfwd_tcp_cc_default(), read at tcp_alloc):
   TCP_CC_LOSS_BASED is CUBIC. Set before the worker starts (xdpfwd_lwip_set_bbr). */
#define TCP_CC_LOSS_BASED 0
#define TCP_CC_BBR        1
extern u8_t xdpfwd_tcp_cc;

extern const struct tcp_cc_ops tcp_cc_cubic;
extern const struct tcp_cc_ops tcp_cc_bbr;

/* CUBIC (RFC 9438), in bytes and tcp_rtt_ticks. */
struct tcp_cubic {
  u32_t wmax;  /* W_max: cwnd before the last reduction; 0: cwnd at the next epoch */
  u32_t west;  /* W_est, the Reno-friendly window (4.3) */
  u32_t epoch; /* tcp_rtt_ticks when this congestion avoidance stage began; 0: not begun */
  s32_t k_ms;  /* K (4.2): when W_cubic reaches W_max, from the epoch */
};

/* Delivery-rate estimation (draft-cheng-iccrg-delivery-rate-estimation) and BBR's model
   (draft-ietf-ccwg-bbr), in bytes and xdpfwd_lwip_now_us() microseconds. */
struct tcp_bbr {
  u8_t mode;            /* TCP_BBR_STARTUP ... (bbr.c) */
  u8_t cycle;           /* ProbeBW's gain phase */
  u8_t full_bw_count;   /* rounds in Startup without 25% more bandwidth */
  u8_t filled_pipe;
  u8_t round_start;     /* this ACK began a new round trip */
  u8_t extra_idx, extra_rounds;
  u32_t delivered;      /* bytes acknowledged or SACKed so far (wraps) */
  u32_t delivered_us;   /* when delivered last grew */
  u32_t first_sent_us;  /* send time of the newest segment delivered */
  u32_t app_limited;    /* delivered + in flight when the sender ran out of data; 0: not */
  u32_t sacked;         /* bytes SACKed above the cumulative ACK (on unacked) */
  u32_t cwnd;           /* the model's window for data in flight; pcb->cwnd = cwnd + sacked */
  u32_t round;          /* round trips counted */
  u32_t round_end;      /* delivered at which the current round trip ends */
  u32_t bw[3];          /* windowed maximum of delivery rates, bytes per ms: best first */
  u32_t bw_round[3];    /* the round of each */
  u32_t full_bw;        /* Startup: the bandwidth that has to grow 25% */
  u32_t min_rtt_us;     /* windowed minimum round trip; 0xffffffff: none yet */
  u32_t min_rtt_stamp_us;
  u32_t cycle_stamp_us; /* when ProbeBW's phase began */
  u32_t probe_rtt_done_us; /* ProbeRTT ends then (0: in flight not yet down to the floor) */
  u32_t prior_cwnd;     /* cwnd before ProbeRTT */
  /* the rate sample of the ACK being processed lives in bbr.c (one ACK at a time) */
  /* ACK aggregation (draft-ietf-ccwg-bbr, BBRUpdateACKAggregation): delivered beyond what the
     bandwidth explains since extra_start_us, its maximum in each half of a 10-round window */
  u32_t extra_start_us, extra_delivered;
  u32_t extra_acked[2];
};

/* A segment's share: the connection's delivery state when it was last sent, for a
   delivery-rate sample when it is delivered. Zeroed when lwIP makes the segment. */
struct tcp_bbr_seg {
  u32_t delivered, delivered_us, first_sent_us;
  u32_t sent_us;        /* 0: never sent */
  u8_t flags;
#define TCP_BBR_SEG_APP_LIMITED (u8_t)0x01U /* sent while the sender was application-limited */
#define TCP_BBR_SEG_REXMIT      (u8_t)0x02U /* sent more than once: no round-trip sample */
};

#ifdef __cplusplus
}
#endif

#endif /* XDPFWD_LWIP_CC_TCP_CC_H */
