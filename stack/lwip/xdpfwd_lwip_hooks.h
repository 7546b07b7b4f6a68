/* Hooks lwIP calls into xdpfwd (see LWIP_HOOK_* in lwipopts.h). Included by lwIP's C files
 * and by C++; the definitions live in stack/lwip_glue.cpp. */
#ifndef XDPFWD_LWIP_HOOKS_H
#define XDPFWD_LWIP_HOOKS_H

#include "lwip/arch.h"
#include "lwip/ip_addr.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Initial sequence number for a new connection: keyed hash of the 4-tuple plus a clock. */
u32_t xdpfwd_tcp_isn(const ip_addr_t* local_ip, u16_t local_port, const ip_addr_t* remote_ip,
                     u16_t remote_port);

#ifdef __cplusplus
}
#endif

#endif /* XDPFWD_LWIP_HOOKS_H */
