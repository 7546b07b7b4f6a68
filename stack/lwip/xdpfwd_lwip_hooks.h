/* Hooks lwIP calls into xdpfwd (see LWIP_HOOK_* in lwipopts.h). Included by lwIP's C files
 * and by C++; the definitions live in stack/lwip_hooks.cpp, the out-of-order ACK hold's in
 * stack/lwip/ack_hold/ooseq_ack_hold.c. */
#ifndef XDPFWD_LWIP_HOOKS_H
#define XDPFWD_LWIP_HOOKS_H

#include "lwip/arch.h"
#include "lwip/ip_addr.h"

struct netif;
struct tcp_pcb;
struct tcp_cc_ops;

#ifdef __cplusplus
extern "C" {
#endif

/* Initial sequence number for a new connection: keyed hash of the 4-tuple plus a clock. */
u32_t xdpfwd_tcp_isn(const ip_addr_t* local_ip, u16_t local_port, const ip_addr_t* remote_ip,
                     u16_t remote_port);

/* 32 random bits from the kernel (getrandom): seeds lwIP's pcb hash. */
u32_t xdpfwd_random_u32(void);

/* The clock behind sys_now(), in ms. The worker sets it once per iteration so that lwIP's
 * timer checks and the next-hop cache do not each read the clock; 0 (the default, and what the
 * worker leaves behind) makes sys_now() read the clock itself. */
void xdpfwd_lwip_set_now_ms(u32_t now_ms);

/* The same in microseconds (wraps every 71 minutes), for BBR's round trips and delivery
 * rates (stack/lwip/cc/bbr.c). Set beside the millisecond clock; 0 reads the clock. */
void xdpfwd_lwip_set_now_us(u32_t now_us);
u32_t xdpfwd_lwip_now_us(void);

/* The congestion controller connections created from now on use: 1 BBR, 0 CUBIC
 * (stack/lwip/cc/, behind lwIP patch 0018's struct tcp_cc_ops). Set before the worker starts. */
void xdpfwd_lwip_set_bbr(int on);
/* What a new pcb takes (LWIP_TCP_CC_DEFAULT, read at tcp_alloc): the controller xdpfwd_tcp_cc
 * names. */
const struct tcp_cc_ops* xdpfwd_tcp_cc_default(void);

/* A connection's TCP trouble (LWIP_HOOK_TCP_TRACE, our patch 0036: what is an LWIP_TCP_TRACE_*
 * of lwip/priv/tcp_priv.h) goes to the function set here, if any: the relay records it. It runs
 * inside lwIP's input and timers and must not call back into lwIP. */
typedef void (*xdpfwd_tcp_trace_fn)(struct tcp_pcb* pcb, u8_t what, u32_t arg0, u32_t arg1);
void xdpfwd_lwip_set_tcp_trace(xdpfwd_tcp_trace_fn fn);
void xdpfwd_tcp_trace(struct tcp_pcb* pcb, u8_t what, u32_t arg0, u32_t arg1);

/* The out-of-order ACK hold (our patch 0033's hooks; what the worker calls is in
 * stack/lwip/ack_hold/ooseq_ack_hold.h). later: lwIP would ACK an out-of-order segment at once;
 * 1 if the hold takes the pcb on to send that ACK a round later, 0 to send it now. cancel: an
 * empty ACK went out, or the pcb is purged or freed; it leaves the hold's list. */
u8_t xdpfwd_ooseq_ack_later(struct tcp_pcb* pcb);
void xdpfwd_ooseq_ack_cancel(struct tcp_pcb* pcb);

/* The netif whose address is `src` (NULL src or no such netif: NULL, lwIP's own routing). */
struct netif* xdpfwd_route_by_source(const ip4_addr_t* src, const ip4_addr_t* dest);
/* The same for IPv6 (LWIP_HOOK_IP6_ROUTE; lwIP asks it only for a global source). */
struct netif* xdpfwd_route6_by_source(const ip6_addr_t* src, const ip6_addr_t* dest);

#ifdef __cplusplus
}
#endif

#endif /* XDPFWD_LWIP_HOOKS_H */
