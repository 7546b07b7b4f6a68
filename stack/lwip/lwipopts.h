/* lwIP configuration for xdpfwd: NO_SYS, TCP over IPv4 and IPv6, driven by one busy-polling
 * worker. ARP, neighbour discovery, ICMP and routing stay with the kernel (DESIGN.md), so lwIP
 * only does TCP.
 * Numbers here are a first cut for a relay; the stack issue measures and tunes them. */
#ifndef XDPFWD_LWIPOPTS_H
#define XDPFWD_LWIPOPTS_H

/* ---- threading and OS ---- */
#define NO_SYS 1                 /* one lwIP per worker process, no locks, no threads */
#define SYS_LIGHTWEIGHT_PROT 0
#define LWIP_TIMERS 1            /* sys_check_timeouts() from the worker loop */
#define LWIP_NETCONN 0
#define LWIP_SOCKET 0
/* C++ code includes <arpa/inet.h>; lwIP must not define htons()/ntohs() macros over it. */
#define LWIP_DONT_PROVIDE_BYTEORDER_FUNCTIONS 1

/* ---- protocols: the kernel keeps ARP, ND, ICMP, ICMPv6, UDP and DHCP ---- */
#define LWIP_IPV4 1
/* Dual-stack (issue #31): a pcb's addresses are ip_addr_t, 20 bytes instead of 4, so every
 * pcb grows by 32 bytes whatever its family (docs/stack.md, "IPv6"). */
#define LWIP_IPV6 1
/* What an IPv6 host needs besides TCP the kernel does for us, as for IPv4: neighbour
 * discovery (next hops come from its neighbour table, stack/next_hop_route.h), router and
 * prefix discovery, duplicate address detection, MLD, ICMPv6 (packet too big included: XDP
 * passes every ICMPv6 packet to the kernel), fragments (passed to the kernel; TCP segments
 * are sized to the MTU). lwIP still compiles nd6.c and runs nd6_tmr once a second over
 * tables nothing fills, so they are one entry each. ICMPv6 stays compiled in: lwIP 2.1.3's
 * ip6_input calls icmp6_param_problem for bad extension headers whatever LWIP_ICMP6 says (the
 * link fails without it). It never runs here: the steering program passes every packet with
 * an extension header, and every ICMPv6 packet, to the kernel. */
#define LWIP_ICMP6 1
#define LWIP_IPV6_MLD 0
#define LWIP_IPV6_AUTOCONFIG 0
#define LWIP_IPV6_ADDRESS_LIFETIMES 0
#define LWIP_IPV6_SEND_ROUTER_SOLICIT 0
#define LWIP_IPV6_DUP_DETECT_ATTEMPTS 0
#define LWIP_IPV6_DHCP6 0
#define LWIP_IPV6_FRAG 0
#define LWIP_IPV6_REASS 0
#define LWIP_IPV6_FORWARD 0
#define LWIP_ND6_QUEUEING 0
#define LWIP_ND6_NUM_NEIGHBORS 1
#define LWIP_ND6_NUM_DESTINATIONS 1
#define LWIP_ND6_NUM_PREFIXES 1
#define LWIP_ND6_NUM_ROUTERS 1
/* No MTU from router advertisements (the netif's MTU is the interface's), and no
 * reachability hint into ND6's cache on every ACK that advances (a lookup per segment for a
 * cache the kernel keeps instead). */
#define LWIP_ND6_ALLOW_RA_UPDATES 0
#define LWIP_ND6_TCP_REACHABILITY_HINTS 0
/* One address per netif, as for IPv4: more local addresses are more netifs (--backend-source
 * aliases). Zones off: a link-local address is never a connection's endpoint here, only a next
 * hop, which NextHopRoute resolves outside lwIP; zones would add 4 bytes to every address. */
#define LWIP_IPV6_NUM_ADDRESSES 1
#define LWIP_IPV6_SCOPES 0
#define LWIP_ARP 0               /* next-hop MACs come from the kernel's neighbour table */
#define LWIP_ETHERNET 1
#define LWIP_ICMP 0
#define LWIP_RAW 0
#define LWIP_UDP 0
#define LWIP_DHCP 0
#define LWIP_AUTOIP 0
#define LWIP_IGMP 0
#define LWIP_DNS 0
#define IP_REASSEMBLY 0          /* XDP passes fragments to the kernel */
#define IP_FRAG 0                /* TCP segments are sized to the MTU; nothing to fragment */
#define LWIP_SINGLE_NETIF 0      /* one netif per interface (client side, backend side) */
#define LWIP_NETIF_STATUS_CALLBACK 0
#define LWIP_NETIF_LINK_CALLBACK 0

/* Checksums are checked per interface at run time: a veth peer hands over frames with only the
 * pseudo-header sum (CHECKSUM_PARTIAL), a real NIC must not have corrupt frames accepted. TCP
 * checksums are generated per interface too: off where the AF_XDP port offloads them through TX
 * metadata (the netif then writes the pseudo-header sum, see stack/lwip_netif.cpp). */
#define LWIP_CHECKSUM_CTRL_PER_NETIF 1

/* ---- memory: static pools for pcbs, segments and pbuf headers; payload copies from malloc ---- */
/* PBUF_RAM (relayed data copied into send queues, backlogs a slow reader holds) comes from
 * glibc's malloc, not lwIP's own heap: that heap is first-fit and scans every live block on each
 * allocation. With 100,000 connections proving themselves at once, thousands of segment copies
 * were live and mem_malloc took 75% of the worker (perf, bench/run's idle test); glibc's size
 * bins make it O(1). Byte counts stay in lwip_stats.mem (lwIP keeps a size header per block).
 * Still one allocation per sent segment, as before: a preallocated TX pool is the next lever. */
#define MEM_LIBC_MALLOC 1
#define MEMP_MEM_MALLOC 0
#define MEM_ALIGNMENT 8
/* Not a heap any more (MEM_LIBC_MALLOC); above 64000 it makes mem_size_t (byte counts) 32 bits. */
#define MEM_SIZE (64 * 1024 * 1024)
#define MEMP_NUM_PBUF 8192           /* PBUF_REF/ROM: zero-copy tcp_write of received data */
/* RX uses custom pbufs over UMEM frames; the pbuf pool holds only out-of-order data, copied out
 * of those frames (patch 0022) so that a hole a peer never fills pins no frame. The pool is the
 * bound on all out-of-order data: 32768 x 2 KiB, carved on first use (patch 0002). A segment
 * that finds it empty is dropped (and resent by its peer), never queued in its frame. */
#if defined(__SANITIZE_ADDRESS__)
/* The sanitizer tree: a quarter (below, MEMP_NUM_TCP_PCB says why). */
#define PBUF_POOL_SIZE 8192
#else
#define PBUF_POOL_SIZE 32768
#endif
#define PBUF_POOL_BUFSIZE 2048
#define TCP_OOSEQ_COPY_EXTERNAL 1
/* tcp_write_ref (patch 0032): the relay sends received data without copying it, lwIP's send
 * queue holding a reference on the frame it arrived in until the data is acknowledged. */
#define TCP_WRITE_REF 1
/* One pcb's share of that pool: a whole window (TCP_WND) of full-sized segments at MTU 1500
 * (718, a buffer each), so an honest sender never loses queued data to it (a limit of 256 made
 * the wire tests' 400-segment flights resend what lay above 256); what it bounds is a window
 * cut into small segments. 42 pcbs at the limit fill the pool. */
#define TCP_OOSEQ_MAX_PBUFS 768
/* lwIP's answer to an empty pool is to drop every pcb's out-of-order queue (data already
 * SACKed, so peers wait for their RTO); with NO_SYS the application would have to run it. */
#define PBUF_POOL_FREE_OOSEQ 0
/* Received frames enter lwIP as custom pbufs over UMEM (zero-copy) and go back to the port's
 * pool from their free callback. lwIP only turns this on by itself for IP fragmentation. */
#define LWIP_SUPPORT_CUSTOM_PBUF 1
/* Two pcbs per relayed connection: up to 1,179,648 connections a worker (--max-connections;
 * issue #32 holds 1,000,000 on one worker, +10% for bench/run's margin). Legs are freed when
 * they reach TIME_WAIT (docs/relay.md), so no pcb waits out 2 * MSL. Above 65535 only with our
 * patch 0002, which also carves elements on first use: resident memory follows the peak number
 * of connections, not this number. Of the pool's ~970 MiB (2,360,320 pcbs of 432 bytes), a
 * worker that locks its memory locks only the XDPFWD_TCP_PCB_PRELOCKED carved first (131,072
 * connections, the fast path's default cap, ~110 MiB) at its start; the rest is locked page by
 * page as pcbs are first carved there (stack/lwip_pools.h), so the default costs what it did
 * before the pool grew. */
#if defined(__SANITIZE_ADDRESS__)
/* The sanitizer tree: 32,768 connections a worker, all of them the default cap, and a quarter
 * of the pbuf pool (above). LeakSanitizer reads every global at each process's exit, looking
 * for pointers: the whole pool cost each of the ~480 test processes there 0.38 s (0.47 against
 * 0.09 s with detect_leaks=0), the default cap's 221 MB of pools 1.3-1.5 s on a machine whose
 * every page read is a page allocated (a paravirtualised guest without the zero page). No
 * sanitized test holds more than 10,000 connections; the pcb pool stays above 65,535, the
 * number patch 0002 exists for (LwipPoolTest). */
#define XDPFWD_TCP_PCB_PRELOCKED (2 * 32768 + 1024)
#define MEMP_NUM_TCP_PCB XDPFWD_TCP_PCB_PRELOCKED
#else
#define XDPFWD_TCP_PCB_PRELOCKED (2 * 131072 + 1024)
#define MEMP_NUM_TCP_PCB (2 * 1179648 + 1024)
#endif
#define MEMP_NUM_TCP_PCB_LISTEN 64
/* Pools of our own, in lwippools.h: BBR's state, outside the pcb (issue #32's memory per idle
 * connection). Its element size is a number here because lwippools.h is read where struct
 * tcp_bbr may not be declared (inside memp.h's enum; in memp.c before our patch 0018 makes
 * lwip/tcp.h include stack/lwip/cc/tcp_cc.h); bbr.c checks it against sizeof(struct tcp_bbr). */
#define MEMP_USE_CUSTOM_POOLS 1
#define XDPFWD_TCP_BBR_BYTES 104
/* One pool shared by every connection's queues: send queues, plus one per out-of-order segment
 * (at most PBUF_POOL_SIZE of those), so out-of-order data cannot starve the send queues. */
#define MEMP_NUM_TCP_SEG (32768 + PBUF_POOL_SIZE)
#define MEMP_NUM_SYS_TIMEOUT 8
#define MEMP_NUM_REASSDATA 0
#define MEMP_NUM_FRAG_PBUF 0

/* ---- TCP ---- */
#define LWIP_TCP 1
#define TCP_MSS 8960                 /* upper bound; the effective MSS follows each netif's MTU */
#define TCP_CALCULATE_EFF_SEND_MSS 1
#define LWIP_WND_SCALE 1
#define TCP_RCV_SCALE 7              /* 65535 << 7: windows up to 8 MiB */
#define TCP_WND (1024 * 1024)
#define TCP_SND_BUF (1024 * 1024)
/* lwIP defaults TCP_SNDLOWAT from TCP_SND_BUF, which overflows its u16 above ~120 KiB. */
#define TCP_SNDLOWAT (16 * 1024)
#define TCP_SND_QUEUELEN 4096        /* segments per pcb: TCP_SND_BUF at the 1460-byte MSS */
#define TCP_SNDQUEUELOWAT 2048
#define TCP_QUEUE_OOSEQ 1
#define LWIP_TCP_SACK_OUT 1
#define LWIP_TCP_MAX_SACK_NUM 4
#define TCP_OVERSIZE TCP_MSS
#define LWIP_TCP_TIMESTAMPS 0
/* lwIP's backlog counter is a u8 (at most 255 handshakes in flight per listener); the relay
 * accepts at once and enforces its own connection cap, so the backlog is off. */
#define TCP_LISTEN_BACKLOG 0
/* lwIP ticks its fast timer (delayed ACKs, a FIN waiting for memory, refused data) every
 * TCP_TMR_INTERVAL: 250 ms by default, far too coarse for a relay on a LAN. With our patch 0003
 * it visits only pcbs with such work, so 10 ms costs nothing per idle connection. */
#define TCP_TMR_INTERVAL 10
/* The slow timer (RTO, persist, keepalive, FIN_WAIT_2/TIME_WAIT expiry) runs every 100 ms
 * rather than every 20. It visits each active pcb that has slow-timer work once per interval, a
 * tenth of them per fast tick (our patches 0030, 0035: an idle established pcb costs nothing),
 * and frees TIME_WAIT pcbs from buckets by expiry tick without walking the others (0037). It is
 * also the RTO's grain; Linux's minimum RTO is 200 ms. (Patch 0003 lets it differ from
 * 2 * TCP_TMR_INTERVAL.) */
#define TCP_SLOW_INTERVAL 100
/* Retransmission timeout, RFC 6298 with Linux's floor (our patch 0005): 1 s until a round trip
 * has been timed, then SRTT + max(100 ms, 4 * RTTVAR) from 10 ms-grain samples, never below
 * 200 ms, at most 60 s, doubling per expiry. The slow timer fires it up to 100 ms late, never
 * early. docs/stack.md, "Loss recovery". */
#define TCP_RTO_INITIAL_MS 1000
#define TCP_RTO_MIN_MS 200
#define TCP_RTO_MAX_MS 60000
/* Congestion control: RFC 6928's initial window of ten segments (as Linux; lwIP's is three, our
 * patch 0017 makes it settable), and our controllers behind the table of steps our patch 0018
 * adds to lwIP (struct tcp_cc_ops, after Linux's tcp_congestion_ops): CUBIC (RFC 9438,
 * stack/lwip/cc/cubic.c) instead of Reno, or a rate-based controller after BBR's model
 * (stack/lwip/cc/bbr.c) when xdpfwd_tcp_cc says so at a connection's creation (xdpfwd --tune
 * congestion-control). With the relay's sub-millisecond round trips CUBIC stays in its
 * Reno-friendly region: a loss costs 30% of the window instead of 50%, regained at 0.53
 * segments per round trip instead of one, which is Reno's average window (measured: no change
 * to the loss benchmark). BBR times round trips and delivery rates in microseconds, from the
 * clock the worker reads once per iteration. Their state: pcb->cubic in the pcb, BBR's behind
 * pcb->bbr from a pool of its own (lwippools.h; only a BBR pcb takes one), seg->cc
 * (stack/lwip/cc/tcp_cc.h). docs/stack.md, "Congestion control". */
#define LWIP_TCP_CALC_INITIAL_CWND(mss) \
  ((tcpwnd_size_t)LWIP_MIN(10U * (mss), LWIP_MAX(2U * (mss), 14600U)))
#define LWIP_TCP_CC_HEADER "cc/tcp_cc.h"
#define LWIP_TCP_CC_PCB_STATE \
  struct tcp_cubic cubic;     \
  struct tcp_bbr* bbr;
#define LWIP_TCP_CC_SEG_STATE struct tcp_bbr_seg
#define LWIP_TCP_CC_DEFAULT() xdpfwd_tcp_cc_default()
/* Active opens use ports above the kernel's default ephemeral range (32768-60999), so return
 * traffic of our backend connections can never collide with a kernel socket's 4-tuple. */
#define TCP_LOCAL_PORT_RANGE_START 61000
#define TCP_LOCAL_PORT_RANGE_END 65535
#define LWIP_RANDOMIZE_INITIAL_LOCAL_PORTS 0
/* TIME_WAIT lasts 2 * TCP_MSL. RFC 793's two minutes assume internet-wide segment lifetimes; a
 * forwarder's legs are a LAN hop, and the relay's own port allocator recycles backend ports
 * safely anyway (ISNs grow with the clock). 4 s still absorbs a retransmitted final FIN. */
#define TCP_MSL 2000UL
/* A handshake that has not completed in 5 s is dropped (lwIP's default is 20 s): the client's
 * next SYN starts over, and the steering program's entry for it is reaped as a stray a second
 * later, so a SYN flood holds pcbs and --flow-capacity slots for seconds, not minutes. */
#define TCP_SYN_RCVD_TIMEOUT 5000UL
#define TCP_ENSURE_LOCAL_PORT_RANGE(port) \
  ((u16_t)(TCP_LOCAL_PORT_RANGE_START +   \
           ((port) % (TCP_LOCAL_PORT_RANGE_END - TCP_LOCAL_PORT_RANGE_START + 1))))

/* Buckets of the 4-tuple hash over active and TIME-WAIT pcbs (our patch 0001); a power of two.
 * One pointer each: 8 MiB, touched as connections spread over it. 2^20 keeps chains at about
 * two pcbs at 1,000,000 relayed connections (2,000,000 pcbs); 2^18 had eight. */
#if defined(__SANITIZE_ADDRESS__)
#define TCP_PCB_HASH_SIZE (1u << 16) /* the sanitizer tree's pool (MEMP_NUM_TCP_PCB) */
#else
#define TCP_PCB_HASH_SIZE (1u << 20)
#endif
/* Seeds the pcb hash (and lwIP's unused port cursor) from getrandom. */
#define LWIP_RAND() xdpfwd_random_u32()

/* ---- hooks: random initial sequence numbers (RFC 6528) ---- */
#define LWIP_HOOK_FILENAME "xdpfwd_lwip_hooks.h"
#define LWIP_HOOK_TCP_ISN(local_ip, local_port, remote_ip, remote_port) \
  xdpfwd_tcp_isn((local_ip), (local_port), (remote_ip), (remote_port))
/* Route by source address first: a reply leaves through the netif that owns the connection's
 * local address (the client side or the backend side), whatever lwIP's subnet match says. */
#define LWIP_HOOK_IP4_ROUTE_SRC(src, dest) xdpfwd_route_by_source((src), (dest))
#define LWIP_HOOK_IP6_ROUTE(src, dest) xdpfwd_route6_by_source((src), (dest))
/* A connection's TCP trouble (retransmission, RTO, fast recovery, zero windows; our patch 0036)
 * for the flight recorder. */
#define LWIP_HOOK_TCP_TRACE(pcb, what, arg0, arg1) xdpfwd_tcp_trace((pcb), (what), (arg0), (arg1))
/* The ACK of out-of-order data waits one round of input while tcp_ooseq_ack_hold is set (the
 * worker's --tune ooseq-ack), so a segment that was only late does not make a SACK peer resend
 * it: stack/lwip/ack_hold/ooseq_ack_hold.c, behind our patch 0033's hooks, with its list links
 * in the pcb. */
#define LWIP_HOOK_TCP_OOSEQ_ACK(pcb) xdpfwd_ooseq_ack_later(pcb)
#define LWIP_HOOK_TCP_EMPTY_ACK_SENT(pcb) xdpfwd_ooseq_ack_cancel(pcb)
#define LWIP_HOOK_TCP_PCB_PURGE(pcb) xdpfwd_ooseq_ack_cancel(pcb)
#define LWIP_TCP_PCB_HOOK_STATE \
  u8_t ooseq_ack_round;         \
  struct tcp_pcb *ooseq_ack_next, **ooseq_ack_pprev;

/* ---- statistics: counters and leak checks read these ---- */
#define LWIP_STATS 1
#define LWIP_STATS_DISPLAY 0
#define MEM_STATS 1
#define MEMP_STATS 1
#define TCP_STATS 1
#define MIB2_STATS 1            /* for tcpretranssegs: retransmissions the worker reports */
#define IP_STATS 1
#define LINK_STATS 1
#define ETHARP_STATS 0
#define ICMP_STATS 0
#define UDP_STATS 0
#define SYS_STATS 0

/* lwIP's TCP sanity checks include "TCP_WND fits in the pbuf pool", which assumes RX data lands
 * in PBUF_POOL; ours lands in UMEM frames wrapped as custom pbufs, so that check is wrong here.
 * The switch turns off the whole group, so the ones that still apply are restated. */
#define LWIP_DISABLE_TCP_SANITY_CHECKS 1
#if MEMP_NUM_TCP_SEG < TCP_SND_QUEUELEN
#error "MEMP_NUM_TCP_SEG must be at least TCP_SND_QUEUELEN"
#endif
#if TCP_SND_BUF < 2 * TCP_MSS
#error "TCP_SND_BUF must be at least 2 * TCP_MSS"
#endif
#if TCP_SND_QUEUELEN < 2 * (TCP_SND_BUF / 1460)
#error "TCP_SND_QUEUELEN must cover TCP_SND_BUF at the smallest (1460-byte) MSS, twice"
#endif
#if TCP_SNDLOWAT >= TCP_SND_BUF || TCP_SNDLOWAT >= (0xFFFF - 4 * TCP_MSS)
#error "TCP_SNDLOWAT must be below TCP_SND_BUF and 4 * TCP_MSS below u16 overflow"
#endif
#if TCP_SNDQUEUELOWAT >= TCP_SND_QUEUELEN
#error "TCP_SNDQUEUELOWAT must be below TCP_SND_QUEUELEN"
#endif
#if TCP_WND < TCP_MSS
#error "TCP_WND must be at least TCP_MSS"
#endif

#endif /* XDPFWD_LWIPOPTS_H */
