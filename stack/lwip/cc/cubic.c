/* CUBIC congestion control (RFC 9438) for lwIP, plugged in through our patch 0018's
 * struct tcp_cc_ops: it sets ssthresh after a loss and grows cwnd in congestion avoidance; lwIP's
 * own code still does slow start, fast recovery and the RTO's cwnd of one segment.
 *
 * Why: under random loss (a lossy link, not a full queue) Reno's average window is
 * ~sqrt(1.5 / p) segments, 12 at 1% loss; each fast recovery halved it. beta_cubic = 0.7 (4.6),
 * C = 0.4 (5), fast convergence (4.7), the Reno-friendly region with alpha_cubic =
 * 3 (1 - beta) / (1 + beta), 1 once W_est passes W_max (4.3), the target bounded to 1.5 cwnd
 * (4.4). Time is tcp_rtt_ticks (TCP_TMR_INTERVAL ms): W_cubic is evaluated at t + SRTT with t
 * since the epoch, the first ACK of a congestion avoidance stage (4.2). After an RTO the next
 * stage starts from its own cwnd with K = 0 (4.8). Not done: HyStart, spurious-congestion undo
 * (4.9), cwnd validation for application-limited periods. */
#include <math.h>

#include "lwip/opt.h"
#include "lwip/priv/tcp_priv.h"

#define TCP_CUBIC_C 0.4
#define TCP_CUBIC_BETA 0.7

/* Multiplicative decrease at a fast retransmit (timeout 0) or an RTO (1); lwIP sets cwnd. */
static tcpwnd_size_t
tcp_cubic_ssthresh(struct tcp_pcb *pcb, u8_t timeout)
{
  struct tcp_cubic *c = &pcb->cubic;
  u32_t wnd = LWIP_MIN(pcb->cwnd, pcb->snd_wnd);
  /* fast convergence (4.7): a window that did not get back to the last W_max gives way */
  if (pcb->cwnd < c->wmax) {
    c->wmax = (u32_t)(pcb->cwnd * (1.0 + TCP_CUBIC_BETA) / 2.0);
  } else {
    c->wmax = pcb->cwnd;
  }
  /* after a timeout the next stage starts from its own cwnd with K = 0 (4.8) */
  if (timeout) {
    c->wmax = 0;
  }
  c->epoch = 0;
  return (tcpwnd_size_t)LWIP_MAX((u32_t)(wnd * TCP_CUBIC_BETA), 2U * pcb->mss);
}

/* Congestion avoidance: an ACK acknowledged `acked` new bytes. */
static void
tcp_cubic_cong_avoid(struct tcp_pcb *pcb, tcpwnd_size_t acked)
{
  struct tcp_cubic *c = &pcb->cubic;
  const double mss = pcb->mss;
  double cwnd = pcb->cwnd, t, w_cubic, alpha, target;
  if (c->epoch == 0) {
    c->epoch = tcp_rtt_ticks; /* never 0 */
    if (c->wmax == 0) {
      c->wmax = pcb->cwnd;
    }
    /* K = cbrt((W_max - cwnd_epoch) / C) in segments and seconds: negative above W_max */
    c->k_ms = (s32_t)(1000.0 * cbrt(((double)c->wmax - cwnd) / mss / TCP_CUBIC_C));
    c->west = pcb->cwnd;
  }
  t = (double)(u32_t)(tcp_rtt_ticks - c->epoch) * TCP_TMR_INTERVAL / 1000.0;
  if (pcb->sv >= 0) {
    t += (double)pcb->sa / 8.0 * TCP_TMR_INTERVAL / 1000.0;
  }
  t -= c->k_ms / 1000.0;
  w_cubic = TCP_CUBIC_C * t * t * t * mss + c->wmax;

  alpha = c->west >= c->wmax ? 1.0 : 3.0 * (1.0 - TCP_CUBIC_BETA) / (1.0 + TCP_CUBIC_BETA);
  c->west = (u32_t)(c->west + alpha * acked * mss / cwnd);

  if (w_cubic < c->west) {
    /* Reno-friendly region: as fast as Reno with the same average window would grow */
    cwnd = c->west;
  } else {
    /* concave or convex region: 1/cwnd of the way to W_cubic(t + RTT) per SMSS acknowledged */
    target = LWIP_MIN(LWIP_MAX(w_cubic, cwnd), 1.5 * cwnd);
    cwnd += (target - cwnd) * acked / cwnd;
  }
  if (cwnd > pcb->cwnd) {
    TCP_WND_INC(pcb->cwnd, (tcpwnd_size_t)(cwnd - pcb->cwnd));
  }
}

const struct tcp_cc_ops tcp_cc_cubic = {
  .ssthresh = tcp_cubic_ssthresh,
  .cong_avoid = tcp_cubic_cong_avoid,
};
