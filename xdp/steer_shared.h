/* Shared between xdp/steer.bpf.c and C++ (xdp/steer.h): map keys and values, reason codes,
 * and (from rx_meta.h, which the stack includes alone) what the program writes in front of a
 * frame. The C++ side static_asserts every size and offset, so the two can never drift.
 * Addresses and ports are in network byte order, as on the wire. */
#ifndef XDPFWD_STEER_SHARED_H
#define XDPFWD_STEER_SHARED_H

#include <linux/bpf.h>
#include <linux/types.h>

#include "rx_meta.h" /* struct steer_rx_meta: what the program writes before a frame */

#define STEER_PROG_NAME "xdpfwd_steer"
#define STEER_MAX_QUEUES 64
/* The worker a flow belongs to (steer_flow.owner) when one worker serves every rx queue: the
 * zero-filled steer_queue_workers maps every queue to it. N workers: worker w serves the
 * queues q with q mod N == w (docs/stack.md). */
#define STEER_SOLE_WORKER 0
#define STEER_MAX_LISTENERS 1024
/* As many client flows as the fast path holds connections (FastPath::MaxConnections). */
#define STEER_DEFAULT_FLOW_CAPACITY 131072

/* Address families in keys: the values of AF_INET and AF_INET6 (which the BPF
 * program's headers do not define), so that userspace can store sa_family. */
#define STEER_AF_INET 2
#define STEER_AF_INET6 10

/* A listener: destination address (all zero = any address of the family) and
 * port of SYNs to take. IPv4: the address in addr[0], addr[1..3] zero. */
struct steer_listener_key {
  __be32 addr[4];
  __be16 port;
  __u8 family; /* STEER_AF_INET or STEER_AF_INET6 */
  __u8 pad;
};

struct steer_listener {
  __u32 rule_id;
};

/* A flow as its packets arrive: source first. The client leg is inserted by the program on
 * the client's SYN; the backend leg by the worker before its own SYN leaves. One map holds both
 * families: an IPv4 address is in word 0 and words 1-3 are zero, and the family tells it from
 * an IPv6 address that looks the same. (docs/xdp-steering.md has what the wider key costs.) */
struct steer_flow_key {
  __be32 saddr[4];
  __be32 daddr[4];
  __be16 sport;
  __be16 dport;
  __u8 family; /* STEER_AF_INET or STEER_AF_INET6 */
  __u8 pad[3];
};

enum steer_flow_origin {
  STEER_FLOW_FROM_SYN = 1,    /* inserted by the program on a client SYN */
  STEER_FLOW_FROM_WORKER = 2, /* inserted by userspace (backend leg) */
};

struct steer_flow {
  __u32 owner; /* worker that serves the flow (not a queue: STEER_SOLE_WORKER) */
  __u32 rule_id;
  __u64 created_ns; /* bpf_ktime_get_ns() at insertion: lets userspace reap stray entries */
  __u32 origin;     /* enum steer_flow_origin */
  __u32 flags;      /* STEER_FLOW_ACCEPTED: the worker took the connection (not a stray) */
  /* Nobody takes it. It is there so that userspace can rewrite a live entry in place
   * (BPF_F_LOCK): a plain update links a new element and unlinks the old one, and a lookup by
   * the program walking the same bucket at that moment can miss both (docs/relay.md). */
  struct bpf_spin_lock in_place;
  __u32 pad;
};

/* steer_flow.flags. A client flow the worker never accepted (the handshake did not complete:
 * a lost client, a spoofed SYN) is a stray, reaped by userspace once it is older than the
 * handshake timeout. */
#define STEER_FLOW_ACCEPTED 1u

/* Who attached the program: lets a later start tell a live xdpfwd from a stale one. */
struct steer_owner {
  __u32 pid;
  __u32 pad;
  __u64 start_time; /* field 22 of /proc/<pid>/stat: guards against PID reuse */
};

struct steer_counter {
  __u64 packets;
  __u64 bytes;
};

/* Every decision the program makes, as X(NAME, number, "stats name"): one list for the enum
 * below and the names userspace shows (`xdpfwd-xdp status`, `show steer`, /metrics). The
 * numbers are stable: they appear in stats output and in tests; add new reasons at the end. */
#define STEER_REASONS(X)                                                                          \
  X(REDIRECT_NEW_FLOW, 0, "redirect_new_flow")        /* SYN to a listener: flow inserted */      \
  X(REDIRECT_FLOW, 1, "redirect_flow")                /* packet of a known flow */                \
  X(PASS_NOT_IP, 2, "pass_not_ip")                    /* ARP, VLAN, neither IPv4 nor IPv6 */      \
  X(PASS_TRUNCATED, 3, "pass_truncated")              /* Ethernet, IP or TCP header cut short */  \
  X(PASS_MALFORMED, 4, "pass_malformed")              /* IP version/IHL/lengths, TCP offset */    \
  X(PASS_FRAGMENT, 5, "pass_fragment")                /* IPv4 fragment, IPv6 fragment header */   \
  X(PASS_IP_OPTIONS, 6, "pass_ip_options")            /* IPv4 header with options */              \
  X(PASS_NOT_TCP, 7, "pass_not_tcp")                  /* ICMP, ICMPv6, UDP, other protocols */    \
  X(PASS_UNKNOWN_FLOW, 8, "pass_unknown_flow")        /* TCP, not a new SYN, no flow entry */     \
  X(PASS_NOT_LISTENER, 9, "pass_not_listener")        /* SYN to an address/port not served */     \
  X(PASS_FLOW_TABLE_FULL, 10, "pass_flow_table_full") /* SYN to a listener, no room */            \
  X(PASS_KERNEL_OWNS, 11, "pass_kernel_owns")         /* SYN whose 4-tuple a kernel socket has */ \
  X(PASS_NO_SOCKET, 12, "pass_no_socket")             /* no AF_XDP socket on this rx queue */     \
  X(REDIRECT_HANDOFF, 13, "redirect_handoff")         /* known flow of another queue's worker */  \
  X(DROP_NO_SOCKET, 14, "drop_no_socket")             /* known flow, no socket on its queue */    \
  X(PASS_IPV6_EXT_HEADER, 15, "pass_ipv6_ext_header") /* IPv6 extension header (not fragment) */

/* Left as written: clang-format would indent the member after the macro's expansion. */
/* clang-format off */
enum steer_reason {
#define STEER_REASON_ENUM(name, number, text) STEER_##name = number,
  STEER_REASONS(STEER_REASON_ENUM)
#undef STEER_REASON_ENUM
  STEER_NR_REASONS = 16,
};
/* clang-format on */

#endif /* XDPFWD_STEER_SHARED_H */
