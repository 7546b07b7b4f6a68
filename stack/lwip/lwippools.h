/* lwIP pools of our own (MEMP_USE_CUSTOM_POOLS in lwipopts.h), beside lwIP's standard ones in
 * lwip/priv/memp_std.h: each gets a MEMP_<name> id, memp_init() sets it up, memp stats count
 * it, and elements are carved on first use (our patch 0002). */

/* BBR's state (struct tcp_bbr, stack/lwip/cc/tcp_cc.h; XDPFWD_TCP_BBR_BYTES, 104 bytes), taken
 * by a pcb whose controller is BBR when it is allocated and given back when it is freed (our
 * patch 0042's release step), instead of being in every pcb: a CUBIC pcb carries only the
 * pointer (BBR is xdpfwd's default, --tune congestion-control). One per pcb, so it cannot run
 * out before the pcbs do; if it did, the connection would run CUBIC (stack/lwip/cc/bbr.c). A
 * worker that locks its memory locks as many at start as pcbs when it runs BBR
 * (stack/lwip_pools.h). */
LWIP_MEMPOOL(TCP_BBR, MEMP_NUM_TCP_PCB, XDPFWD_TCP_BBR_BYTES, "TCP_BBR")
