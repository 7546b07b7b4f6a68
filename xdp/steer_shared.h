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

/* A listener: destination address (0 = any address) and port of SYNs to take. */
struct steer_listener_key {
  __be32 addr;
  __be16 port;
  __u16 pad;
};

struct steer_listener {
  __u32 rule_id;
};

/* A flow as its packets arrive: source first. The client leg is inserted by the program on
 * the client's SYN; the backend leg by the worker before its own SYN leaves. */
struct steer_flow_key {
  __be32 saddr;
  __be32 daddr;
  __be16 sport;
  __be16 dport;
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

/* Every decision the program makes. The numbers are stable: they appear in stats output and
 * in tests; add new reasons at the end. */
enum steer_reason {
  STEER_REDIRECT_NEW_FLOW = 0,     /* SYN to a listener: flow inserted, redirected */
  STEER_REDIRECT_FLOW = 1,         /* packet of a known flow */
  STEER_PASS_NOT_IPV4 = 2,         /* ARP, IPv6, VLAN, anything not IPv4 */
  STEER_PASS_TRUNCATED = 3,        /* Ethernet, IPv4 or TCP header cut short */
  STEER_PASS_MALFORMED = 4,        /* bad IHL/version, TCP data offset, IP total length */
  STEER_PASS_FRAGMENT = 5,         /* IPv4 fragment */
  STEER_PASS_IP_OPTIONS = 6,       /* IPv4 header with options */
  STEER_PASS_NOT_TCP = 7,          /* ICMP, UDP, other protocols */
  STEER_PASS_UNKNOWN_FLOW = 8,     /* TCP, not a new SYN, no flow entry */
  STEER_PASS_NOT_LISTENER = 9,     /* SYN to an address/port we do not serve */
  STEER_PASS_FLOW_TABLE_FULL = 10, /* SYN to a listener, no room for its flow */
  STEER_PASS_KERNEL_OWNS = 11,     /* SYN whose 4-tuple a kernel socket already has */
  STEER_PASS_NO_SOCKET = 12,       /* no AF_XDP socket bound on this rx queue */
  STEER_REDIRECT_HANDOFF = 13,     /* known flow owned by another worker than this queue's */
  STEER_DROP_NO_SOCKET = 14,       /* known flow, no socket on its queue (worker restarting) */
  STEER_NR_REASONS = 15,
};

#endif /* XDPFWD_STEER_SHARED_H */
