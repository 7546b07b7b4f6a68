/* A rate-based congestion controller after BBR's model (draft-ietf-ccwg-bbr, the BBRv1 paper)
 * for lwIP, plugged in through our patch 0018's struct tcp_cc_ops; a connection takes it at its
 * creation when xdpfwd_tcp_cc is TCP_CC_BBR (xdpfwd --tune congestion-control).
 *
 * Why: Reno and CUBIC read every loss as congestion. Under random loss (1-3% on a lossy link,
 * not a full queue) their average window is Mathis' ~sqrt(1.5 / p) segments, 7-12, while the
 * Linux ends of the relay run BBR, which does not shrink its window on loss.
 *
 * Model: the bottleneck bandwidth is the windowed maximum of delivery-rate samples over the last
 * ten round trips, the round-trip propagation time the windowed minimum of round trips over 10 s,
 * and cwnd is a gain times their product (the BDP), at least four segments. Startup grows cwnd by
 * what each ACK delivers up to 2.89 BDP until the bandwidth has not grown 25% in three rounds;
 * Drain then holds cwnd at one BDP until what is in flight fits it; ProbeBW cycles cwnd over
 * 2 BDP x (1.25, 0.75, 1, 1, 1, 1, 1, 1), one phase per minimum round trip, plus the ACK
 * aggregation estimate (tcp_bbr_ack_aggregation); ProbeRTT (min RTT not refreshed in 10 s)
 * holds four segments for 200 ms. lwIP has no pacing: BBR's pacing gains are applied to cwnd
 * here, and Drain is a cwnd of one BDP instead of a pacing rate below the bandwidth. A loss
 * changes nothing: fast recovery keeps cwnd at the model (lwIP's NewReno, SACK and RACK
 * retransmission still choose what goes out, and CUBIC's ssthresh and growth still run, to be
 * overridden after each ACK); an RTO collapses cwnd to the floor and restarts Startup with a
 * fresh bandwidth estimate.
 *
 * lwIP's window check counts every byte from the cumulative ACK to snd_nxt, SACKed ones too, so
 * pcb->cwnd is the model's cwnd plus the bytes SACKed above the cumulative ACK.
 *
 * Delivery rates (draft-cheng-iccrg-delivery-rate-estimation) are estimated here as well, from
 * what lwIP reports through the table: each transmission records in seg->cc the connection's
 * delivered bytes, their time, first_sent_time and whether the sender was app-limited; a segment
 * counts as delivered when acknowledged or first SACKed; each ACK's sample comes from its newest
 * delivered segment (by patch 0014's transmission number). Time is xdpfwd_lwip_now_us(), the
 * worker's once-per-iteration microsecond clock, not the 10 ms tcp_rtt_ticks. Not done: pacing,
 * BBRv2/v3's loss and ECN response, the rest of idle restart, the ProbeBW 1.25 phase's "until in
 * flight reaches 1.25 BDP" condition (a phase is one min RTT). */
#include <string.h>

#include "lwip/opt.h"
#include "lwip/memp.h"
#include "lwip/priv/tcp_priv.h"
#include "xdpfwd_lwip_hooks.h"

#define TCP_BBR_STARTUP   0
#define TCP_BBR_DRAIN     1
#define TCP_BBR_PROBE_BW  2
#define TCP_BBR_PROBE_RTT 3

#define TCP_BBR_GAIN_UNIT        256U   /* gains in 1/256 */
#define TCP_BBR_STARTUP_GAIN     739U   /* 2 / ln 2 = 2.89: doubles what is delivered per round */
#define TCP_BBR_CWND_GAIN        512U   /* 2: room for delayed and aggregated ACKs */
#define TCP_BBR_BW_ROUNDS        10U
#define TCP_BBR_MIN_RTT_WINDOW_US 10000000U
#define TCP_BBR_PROBE_RTT_US     200000U
#define TCP_BBR_MIN_CWND_SEGS    4U
#define TCP_BBR_NO_RTT           0xffffffffU
#define TCP_BBR_EXTRA_ACKED_ROUNDS 5U   /* each of the two halves of the 10-round window */
#define TCP_BBR_EXTRA_ACKED_MAX_US 100000U /* at most 100 ms of bandwidth (Linux's cap) */

/* ProbeBW's phases: 1.25 (probe for more bandwidth), 0.75 (drain what that queued), 1 x 6 */
static const u16_t tcp_bbr_cycle_gain[8] = {320, 192, 256, 256, 256, 256, 256, 256};

/* The rate sample of the ACK being processed (draft-cheng's rs): lwIP handles one ACK at a
   time, so it is kept here rather than in every pcb. valid: the ACK delivered something, and
   the rest describe its newest delivered segment (by transmission number). */
static struct {
  u8_t valid;
  u8_t flags;           /* TCP_BBR_SEG_* of that segment */
  u32_t xmit, prior_delivered, prior_us, send_elapsed_us, sent_us;
  u32_t acked;          /* bytes this ACK delivered */
} tcp_bbr_rs;

static void
tcp_bbr_ack_begin(struct tcp_pcb *pcb)
{
  LWIP_UNUSED_ARG(pcb);
  tcp_bbr_rs.valid = 0;
  tcp_bbr_rs.acked = 0;
}

static u32_t
tcp_bbr_now(void)
{
  u32_t now = xdpfwd_lwip_now_us();
  return now != 0 ? now : 1; /* 0 marks a segment never sent */
}

_Static_assert(sizeof(struct tcp_bbr) == XDPFWD_TCP_BBR_BYTES,
               "XDPFWD_TCP_BBR_BYTES (lwipopts.h) is not sizeof(struct tcp_bbr)");

/* The pcb's state comes from the TCP_BBR pool (stack/lwip/lwippools.h), not the pcb: a pcb
   carries only the pointer, so connections of the default CUBIC pay 8 bytes instead of 104.
   The pool has one element per pcb; should it be empty all the same, the connection runs CUBIC,
   which needs nothing more (memp stats count the failure as the pool's err). */

static void
tcp_bbr_init(struct tcp_pcb *pcb)
{
  struct tcp_bbr *b = (struct tcp_bbr *)memp_malloc(MEMP_TCP_BBR);
  if (b == NULL) {
    pcb->cc_ops = &tcp_cc_cubic;
    return;
  }
  memset(b, 0, sizeof(*b));
  b->min_rtt_us = TCP_BBR_NO_RTT;
  b->min_rtt_stamp_us = tcp_bbr_now();
  pcb->bbr = b;
}

/* The pcb is being freed (our patch 0042): its state goes back to the pool. */
static void
tcp_bbr_release(struct tcp_pcb *pcb)
{
  memp_free(MEMP_TCP_BBR, pcb->bbr);
  pcb->bbr = NULL;
}

/* A running maximum over the last TCP_BBR_BW_ROUNDS rounds kept in three samples: the best,
   the best since it, and the best since that (each newer and no larger than the one before).
   When the best ages out the next takes over, so a newer, smaller maximum is found without
   keeping every round's sample. */
static void
tcp_bbr_bw_update(struct tcp_bbr *b, u32_t bw)
{
  const u32_t round = b->round;
  int i;
  if (bw >= b->bw[0] || round - b->bw_round[2] >= TCP_BBR_BW_ROUNDS) {
    for (i = 0; i < 3; ++i) {
      b->bw[i] = bw;
      b->bw_round[i] = round;
    }
    return;
  }
  if (bw >= b->bw[1]) {
    b->bw[1] = b->bw[2] = bw;
    b->bw_round[1] = b->bw_round[2] = round;
  } else if (bw >= b->bw[2]) {
    b->bw[2] = bw;
    b->bw_round[2] = round;
  }
  while (round - b->bw_round[0] >= TCP_BBR_BW_ROUNDS) {
    b->bw[0] = b->bw[1];
    b->bw_round[0] = b->bw_round[1];
    b->bw[1] = b->bw[2];
    b->bw_round[1] = b->bw_round[2];
    b->bw[2] = bw;
    b->bw_round[2] = round;
  }
}

/* ACKs that come in bursts (a receiver's delayed or coalesced ACKs, and here the batches both
   ends process per iteration or softirq) deliver more in a short interval than the bandwidth
   explains; cwnd needs that much more than the BDP or the sender idles between bursts. Measured
   on the relay's legs: a minimum round trip of 10-40 us against 100-300 us between an ACK's
   segment and the previous delivery, and a BDP below the four-segment floor. */
static void
tcp_bbr_ack_aggregation(struct tcp_bbr *b, u32_t now)
{
  u64_t expected, extra;
  if (b->round_start && ++b->extra_rounds >= TCP_BBR_EXTRA_ACKED_ROUNDS) {
    b->extra_rounds = 0;
    b->extra_idx ^= 1;
    b->extra_acked[b->extra_idx] = 0;
  }
  expected = (u64_t)b->bw[0] * (u32_t)(now - b->extra_start_us) / 1000U;
  if (b->extra_delivered <= expected) {
    /* the ACK rate fell to the bandwidth: a new aggregation epoch */
    b->extra_delivered = 0;
    b->extra_start_us = now;
    expected = 0;
  }
  b->extra_delivered += tcp_bbr_rs.acked;
  extra = LWIP_MIN(b->extra_delivered - expected, (u64_t)b->cwnd);
  extra = LWIP_MIN(extra, (u64_t)b->bw[0] * TCP_BBR_EXTRA_ACKED_MAX_US / 1000U);
  if (extra > b->extra_acked[b->extra_idx]) {
    b->extra_acked[b->extra_idx] = (u32_t)extra;
  }
}

/* Records the connection's delivery state in a segment as it goes out (draft-cheng 3.2). */
static void
tcp_bbr_sent(struct tcp_pcb *pcb, struct tcp_seg *seg)
{
  struct tcp_bbr *b = pcb->bbr;
  const u32_t now = tcp_bbr_now();
  if (pcb->unacked == NULL) {
    /* nothing in flight: intervals start now, not at the last delivery before an idle period */
    b->first_sent_us = now;
    b->delivered_us = now;
  }
  seg->cc.flags = (u8_t)((seg->cc.sent_us != 0 ? TCP_BBR_SEG_REXMIT : 0) |
                         (b->app_limited != 0 ? TCP_BBR_SEG_APP_LIMITED : 0));
  seg->cc.delivered = b->delivered;
  seg->cc.delivered_us = b->delivered_us;
  seg->cc.first_sent_us = b->first_sent_us;
  seg->cc.sent_us = now;
}

/* A segment is acknowledged, or SACKed for the first time (`sacked`): it counts as delivered,
   and the newest such segment of this ACK (by sending order) makes its rate sample
   (draft-cheng 3.3). */
static void
tcp_bbr_delivered(struct tcp_pcb *pcb, const struct tcp_seg *seg, u8_t sacked)
{
  struct tcp_bbr *b = pcb->bbr;
  if (sacked) {
    b->sacked += seg->len;
  }
  if (seg->cc.sent_us == 0) {
    return;
  }
  b->delivered += seg->len;
  tcp_bbr_rs.acked += seg->len;
  b->delivered_us = tcp_bbr_now();
  if (!tcp_bbr_rs.valid || (s32_t)(seg->xmit - tcp_bbr_rs.xmit) > 0) {
    tcp_bbr_rs.valid = 1;
    tcp_bbr_rs.xmit = seg->xmit;
    tcp_bbr_rs.flags = seg->cc.flags;
    tcp_bbr_rs.prior_delivered = seg->cc.delivered;
    tcp_bbr_rs.prior_us = seg->cc.delivered_us;
    tcp_bbr_rs.send_elapsed_us = seg->cc.sent_us - seg->cc.first_sent_us;
    tcp_bbr_rs.sent_us = seg->cc.sent_us;
    b->first_sent_us = seg->cc.sent_us;
  }
}

static void
tcp_bbr_seg_acked(struct tcp_pcb *pcb, const struct tcp_seg *seg)
{
  /* delivered now unless already counted when SACKed */
  if (!(seg->flags & TF_SEG_SACKED)) {
    tcp_bbr_delivered(pcb, seg, 0);
  } else {
    pcb->bbr->sacked = pcb->bbr->sacked > seg->len ? pcb->bbr->sacked - seg->len : 0;
  }
}

static void
tcp_bbr_seg_sacked(struct tcp_pcb *pcb, const struct tcp_seg *seg)
{
  tcp_bbr_delivered(pcb, seg, 1);
}

/* The RTO found the peer reneged and forgot every SACK: nothing above the ACK is SACKed. */
static void
tcp_bbr_sacks_cleared(struct tcp_pcb *pcb)
{
  pcb->bbr->sacked = 0;
}

/* The application has nothing more to send while cwnd has room: rate samples until what is in
   flight now is delivered say how fast the application was, not the path (draft-cheng 3.4).
   A full send buffer is not that: the buffer limits the rate as the receive window does, and
   Startup has to see that plateau to end (lwIP's buffer does not grow with cwnd as Linux's). */
static void
tcp_bbr_app_check(struct tcp_pcb *pcb)
{
  const u32_t in_flight = pcb->snd_nxt - pcb->lastack;
  if (pcb->unsent == NULL && in_flight < pcb->cwnd && pcb->snd_buf >= pcb->mss) {
    const u32_t mark = pcb->bbr->delivered + in_flight;
    pcb->bbr->app_limited = mark != 0 ? mark : 1;
  }
}

/* Takes this ACK's rate and round-trip samples into the model, moves between its states and
   sets cwnd. Called once per ACK after lwIP's own processing (which may have changed cwnd:
   CUBIC's code still runs and is overridden here). */
static void
tcp_bbr_ack(struct tcp_pcb *pcb)
{
  struct tcp_bbr *b = pcb->bbr;
  const u32_t now = tcp_bbr_now();
  const u32_t floor = TCP_BBR_MIN_CWND_SEGS * pcb->mss;
  const u8_t min_rtt_expired = (u32_t)(now - b->min_rtt_stamp_us) > TCP_BBR_MIN_RTT_WINDOW_US;
  u32_t in_flight, target, gain;
  u64_t bdp;

  if (b->cwnd == 0) {
    b->cwnd = pcb->cwnd; /* the initial window (patch 0017) */
  }
  if (tcp_bbr_rs.valid) {
    u32_t interval;
    if (b->app_limited != 0 && (s32_t)(b->delivered - b->app_limited) > 0) {
      b->app_limited = 0;
    }
    /* A round trip ends when a segment sent after it began is delivered. */
    b->round_start = 0;
    if ((s32_t)(tcp_bbr_rs.prior_delivered - b->round_end) >= 0) {
      b->round_end = b->delivered;
      ++b->round;
      b->round_start = 1;
    }
    /* Minimum round trip, from segments sent once only (Karn). */
    if (!(tcp_bbr_rs.flags & TCP_BBR_SEG_REXMIT)) {
      u32_t rtt = now - tcp_bbr_rs.sent_us;
      if (rtt == 0) {
        rtt = 1;
      }
      if (rtt < b->min_rtt_us || min_rtt_expired) {
        b->min_rtt_us = rtt;
        b->min_rtt_stamp_us = now;
      }
    }
    /* Delivery rate over the longer of the send and ACK intervals; one shorter than the
       minimum round trip is ACK compression, not the path (draft-cheng 3.3). */
    interval = LWIP_MAX(tcp_bbr_rs.send_elapsed_us, (u32_t)(b->delivered_us - tcp_bbr_rs.prior_us));
    if (interval != 0 && b->min_rtt_us != TCP_BBR_NO_RTT && interval >= b->min_rtt_us) {
      const u64_t rate = (u64_t)(u32_t)(b->delivered - tcp_bbr_rs.prior_delivered) * 1000U / interval;
      const u32_t bw = rate > 0xffffffffU ? 0xffffffffU : (u32_t)rate;
      if (!(tcp_bbr_rs.flags & TCP_BBR_SEG_APP_LIMITED) || bw >= b->bw[0]) {
        tcp_bbr_bw_update(b, bw);
      }
    }
    tcp_bbr_ack_aggregation(b, now);
    /* Startup ends when three rounds in a row did not bring 25% more bandwidth. */
    if (!b->filled_pipe && b->round_start && !(tcp_bbr_rs.flags & TCP_BBR_SEG_APP_LIMITED)) {
      if ((u64_t)b->bw[0] * 4U >= (u64_t)b->full_bw * 5U) {
        b->full_bw = b->bw[0];
        b->full_bw_count = 0;
      } else if (++b->full_bw_count >= 3) {
        b->filled_pipe = 1;
      }
    }
  }

  bdp = b->min_rtt_us == TCP_BBR_NO_RTT ? 0 : (u64_t)b->bw[0] * b->min_rtt_us / 1000U;
  in_flight = (u32_t)(pcb->snd_nxt - pcb->lastack);
  in_flight = in_flight > b->sacked ? in_flight - b->sacked : 0;
  if (b->mode == TCP_BBR_STARTUP && b->filled_pipe) {
    b->mode = TCP_BBR_DRAIN;
  }
  if (b->mode == TCP_BBR_DRAIN && in_flight <= bdp) {
    b->mode = TCP_BBR_PROBE_BW;
    b->cycle = 2; /* a phase of gain 1: not straight into a probe */
    b->cycle_stamp_us = now;
  }
  if (b->mode == TCP_BBR_PROBE_BW && (u32_t)(now - b->cycle_stamp_us) > b->min_rtt_us) {
    b->cycle = (u8_t)((b->cycle + 1) % 8);
    b->cycle_stamp_us = now;
  }
  /* ProbeRTT drains the queue to see the path's round trip. An application-limited flow (one
     back from idle, request/response) keeps little in flight: its samples are that already,
     and four segments for 200 ms would only delay its next burst (Linux skips it on an idle
     restart). */
  if (min_rtt_expired && tcp_bbr_rs.valid && b->mode != TCP_BBR_PROBE_RTT &&
      b->app_limited == 0 && !(tcp_bbr_rs.flags & TCP_BBR_SEG_APP_LIMITED)) {
    b->mode = TCP_BBR_PROBE_RTT;
    b->prior_cwnd = b->cwnd;
    b->probe_rtt_done_us = 0;
  }
  if (b->mode == TCP_BBR_PROBE_RTT) {
    if (b->probe_rtt_done_us == 0 && in_flight <= floor) {
      b->probe_rtt_done_us = (now + TCP_BBR_PROBE_RTT_US) | 1U;
    } else if (b->probe_rtt_done_us != 0 && (s32_t)(now - b->probe_rtt_done_us) >= 0) {
      b->min_rtt_stamp_us = now;
      b->mode = b->filled_pipe ? TCP_BBR_PROBE_BW : TCP_BBR_STARTUP;
      b->cycle = 2;
      b->cycle_stamp_us = now;
      b->cwnd = LWIP_MAX(b->cwnd, b->prior_cwnd);
    }
  }

  switch (b->mode) {
    case TCP_BBR_STARTUP:
      gain = TCP_BBR_STARTUP_GAIN;
      break;
    case TCP_BBR_DRAIN:
      gain = TCP_BBR_GAIN_UNIT;
      break;
    default:
      gain = TCP_BBR_CWND_GAIN * tcp_bbr_cycle_gain[b->cycle] / TCP_BBR_GAIN_UNIT;
      break;
  }
  if (bdp == 0) {
    target = LWIP_TCP_CALC_INITIAL_CWND(pcb->mss); /* no model yet */
  } else {
    u64_t t = bdp * gain / TCP_BBR_GAIN_UNIT;
    if (b->mode == TCP_BBR_PROBE_BW) {
      /* not in Drain, which has to let what is in flight fall to one BDP */
      t += LWIP_MAX(b->extra_acked[0], b->extra_acked[1]);
    }
    target = t > 0x3fffffffU ? 0x3fffffffU : (u32_t)t;
  }
  if (tcp_bbr_rs.valid) {
    if (b->filled_pipe) {
      b->cwnd = LWIP_MIN(b->cwnd + tcp_bbr_rs.acked, target);
    } else if (b->cwnd < target) {
      b->cwnd += tcp_bbr_rs.acked; /* Startup: what each ACK delivers, as slow start */
    }
  }
  b->cwnd = LWIP_MAX(b->cwnd, floor);
  if (b->mode == TCP_BBR_PROBE_RTT) {
    b->cwnd = LWIP_MIN(b->cwnd, floor);
  }
  pcb->cwnd = (tcpwnd_size_t)LWIP_MIN((u64_t)b->cwnd + b->sacked, 0x7fffffffU);
}

/* An RTO: the path may have changed. cwnd falls to the floor and Startup measures again. */
static void
tcp_bbr_rto(struct tcp_pcb *pcb)
{
  struct tcp_bbr *b = pcb->bbr;
  int i;
  b->mode = TCP_BBR_STARTUP;
  b->filled_pipe = 0;
  b->full_bw = 0;
  b->full_bw_count = 0;
  for (i = 0; i < 3; ++i) {
    b->bw[i] = 0;
    b->bw_round[i] = b->round;
  }
  b->round_end = b->delivered;
  b->cwnd = TCP_BBR_MIN_CWND_SEGS * pcb->mss;
  pcb->cwnd = (tcpwnd_size_t)(b->cwnd + b->sacked);
}

/* lwIP's fast recovery still reads ssthresh (its cwnd when recovery ends, before the ACK's
   cong_control overrides it) and slow start compares cwnd with it: those steps stay CUBIC's, as
   they were when BBR ran beside CUBIC inside lwIP, so that what BBR overrides is the same. */
static tcpwnd_size_t
tcp_bbr_ssthresh(struct tcp_pcb *pcb, u8_t timeout)
{
  return tcp_cc_cubic.ssthresh(pcb, timeout);
}

static void
tcp_bbr_cong_avoid(struct tcp_pcb *pcb, tcpwnd_size_t acked)
{
  tcp_cc_cubic.cong_avoid(pcb, acked);
}

const struct tcp_cc_ops tcp_cc_bbr = {
  .init = tcp_bbr_init,
  .ssthresh = tcp_bbr_ssthresh,
  .cong_avoid = tcp_bbr_cong_avoid,
  .ack_begin = tcp_bbr_ack_begin,
  .seg_acked = tcp_bbr_seg_acked,
  .seg_sacked = tcp_bbr_seg_sacked,
  .cong_control = tcp_bbr_ack,
  .rto = tcp_bbr_rto,
  .sacks_cleared = tcp_bbr_sacks_cleared,
  .output = tcp_bbr_app_check,
  .seg_sent = tcp_bbr_sent,
  .release = tcp_bbr_release,
};
