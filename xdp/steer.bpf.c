// SPDX-License-Identifier: GPL-2.0
/* xdpfwd's steering program: new TCP flows to a configured listener and every
 * packet of a known flow go to the AF_XDP socket of the rx queue they arrived
 * on (userspace binds one on every queue); everything
 * else passes to the kernel. Nothing is ever dropped. Each decision is counted
 * per CPU under a stable reason code. IPv4 and IPv6 are decided alike, over
 * one set of maps whose keys carry the address family.
 *
 * It is an xdp.frags program: a packet may come in several buffers (a TSO
 * super-segment in generic mode, a jumbo frame in native mode), and the
 * AF_XDP socket receives it as a chain of descriptors. The headers are read
 * from the first buffer, or copied out of the packet where that buffer is
 * shorter than they are. */
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/in.h>
#include <linux/in6.h>
#include <linux/ip.h>
#include <linux/ipv6.h>
#include <linux/tcp.h>
#include <bpf/bpf_endian.h>
#include <bpf/bpf_helpers.h>

#include "steer_shared.h"

#ifndef E2BIG
#define E2BIG 7
#endif
#ifndef EEXIST
#define EEXIST 17
#endif
#ifndef ENOENT
#define ENOENT 2
#endif
#define IP_MF 0x2000
#define IP_OFFSET 0x1fff
/* IPv6 next headers that are extension headers (IANA's list; in6.h has the
 * older ones). */
#define IPPROTO_HIP 139
#define IPPROTO_SHIM6 140
#define IPPROTO_EXP1 253
#define IPPROTO_EXP2 254

/* Runtime settings, written through the skeleton before load. */
const volatile __u8 check_kernel_sockets = 1;
/* How many client flows (entries this program inserts on SYNs) may exist at
 * once. The flow map has room for twice as many: the backend legs' entries,
 * which the worker inserts after accepting a client, must always fit, or an
 * accepted client would have to be reset instead of going to the kernel. */
const volatile __u32 syn_flow_budget = STEER_DEFAULT_FLOW_CAPACITY;
/* Client flows in the map: +1 here on insertion, -1 by userspace when it
 * removes one (through the mmap'ed .bss). Several CPUs may pass the check
 * at once, so the budget can be overshot by at most one entry per CPU; the
 * map's spare room absorbs that. */
__u64 syn_flows = 0;
/* Client entries written not yet accepted: +1 here after each SYN inserts or
 * re-stamps one, +1 by userspace after it puts such an entry back. Only
 * these can become strays, so the reaper skips its walks while this has not
 * moved since a whole walk that left none (xdp/steer_maps.cpp). */
__u64 unaccepted_writes = 0;
/* Who attached the program (read-only after load): lets a later start tell a
 * live xdpfwd from a stale one. Userspace finds it through the .rodata map's
 * BTF. */
const volatile struct steer_owner steer_owner_info = {};
/* N workers whose rx queues do not spread flows (generic XDP on veth puts
 * them on few queues): a new client flow's owner is a hash of its 4-tuple
 * mod N instead of its queue's worker, and the worker that receives it hands
 * it over. 0: the queue's worker owns it. */
const volatile __u32 hash_owner_workers = 0;

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, STEER_MAX_LISTENERS);
	__type(key, struct steer_listener_key);
	__type(value, struct steer_listener);
} steer_listeners SEC(".maps");

/* Not LRU: a live flow must never be evicted. The loader sizes it; when it is
 * full, new SYNs pass to the kernel instead. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, STEER_DEFAULT_FLOW_CAPACITY);
	__type(key, struct steer_flow_key);
	__type(value, struct steer_flow);
} steer_flows SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_XSKMAP);
	__uint(max_entries, STEER_MAX_QUEUES);
	__type(key, __u32);
	__type(value, __u32);
} steer_xsks SEC(".maps");

/* rx queue -> worker that serves it, per interface (each interface loads its
 * own program). Zero-filled, so STEER_SOLE_WORKER everywhere until userspace
 * writes it. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, STEER_MAX_QUEUES);
	__type(key, __u32);
	__type(value, __u32);
} steer_queue_workers SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, STEER_NR_REASONS);
	__type(key, __u32);
	__type(value, struct steer_counter);
} steer_counters SEC(".maps");

struct hdr_cursor {
	void *pos;
	void *end;
};

/* Ethernet, IPv4 without options or IPv6 without extension headers, and TCP
 * without options: all the program reads (TCP options are only measured).
 * Two bytes of padding in front put the IP and TCP headers on 4-byte
 * boundaries: the verifier refuses misaligned stack reads. */
struct packet_head {
	__u8 pad[2];
	struct ethhdr eth;
	union {
		struct {
			struct iphdr ip;
			struct tcphdr tcp;
		} v4;
		struct {
			struct ipv6hdr ip;
			struct tcphdr tcp;
		} v6;
	};
};

/* Sized for IPv6's headers, the longer. A packet in one buffer has all its
 * bytes there however short it is: only a multi-buffer packet whose first
 * buffer is shorter than this is copied. */
#define HEAD_BYTES (sizeof(struct packet_head) - 2)

static __always_inline int decide(struct xdp_md *ctx, __u32 reason, int action)
{
	struct steer_counter *c = bpf_map_lookup_elem(&steer_counters, &reason);

	if (c) {
		c->packets += 1;
		c->bytes += bpf_xdp_get_buff_len(ctx);
	}
	return action;
}

/* Points the cursor at the headers: in the packet's first buffer where they
 * fit there (always, for a packet in one buffer), else at a copy in `head`.
 * A packet shorter than the headers keeps the first buffer and fails the
 * parse as truncated. */
static __always_inline void head_cursor(struct xdp_md *ctx,
					struct hdr_cursor *c,
					struct packet_head *head, __u64 pkt_len)
{
	c->pos = (void *)(long)ctx->data;
	c->end = (void *)(long)ctx->data_end;
	if (c->pos + HEAD_BYTES <= c->end || pkt_len < HEAD_BYTES)
		return;
	if (bpf_xdp_load_bytes(ctx, 0, &head->eth, HEAD_BYTES) == 0) {
		c->pos = &head->eth;
		c->end = head + 1;
	}
}

static __always_inline struct ethhdr *parse_eth(struct hdr_cursor *c)
{
	struct ethhdr *eth = c->pos;

	if ((void *)(eth + 1) > c->end)
		return NULL;
	c->pos = eth + 1;
	return eth;
}

static __always_inline struct iphdr *parse_ipv4(struct hdr_cursor *c)
{
	struct iphdr *ip = c->pos;

	if ((void *)(ip + 1) > c->end)
		return NULL;
	c->pos = ip + 1;
	return ip;
}

static __always_inline struct ipv6hdr *parse_ipv6(struct hdr_cursor *c)
{
	struct ipv6hdr *ip6 = c->pos;

	if ((void *)(ip6 + 1) > c->end)
		return NULL;
	c->pos = ip6 + 1;
	return ip6;
}

static __always_inline struct tcphdr *parse_tcp(struct hdr_cursor *c)
{
	struct tcphdr *tcp = c->pos;

	if ((void *)(tcp + 1) > c->end)
		return NULL;
	c->pos = tcp + 1;
	return tcp;
}

/* What parse_ipv4_tcp and parse_ipv6_tcp return for a TCP segment the program
 * goes on to decide: no reason yet. */
#define STEER_TCP_SEGMENT STEER_NR_REASONS

/* The TCP header after `ip_hlen` bytes of IP header and an IP datagram of
 * `ip_len` bytes: where `*tcp` points, or the reason to pass the packet.
 * Lengths are checked against the whole packet, every buffer of it: the TCP
 * options and the payload may lie beyond the first. The datagram must cover
 * the headers and fit in the packet (which may carry Ethernet padding beyond
 * it). */
static __always_inline __u32 parse_tcp_in(struct hdr_cursor *c, __u64 pkt_len,
					  __u32 ip_hlen, __u32 ip_len,
					  struct tcphdr **tcp)
{
	__u32 tcp_hlen;

	*tcp = parse_tcp(c);
	if (!*tcp)
		return STEER_PASS_TRUNCATED;
	tcp_hlen = (*tcp)->doff * 4;
	if (tcp_hlen < sizeof(**tcp) ||
	    sizeof(struct ethhdr) + ip_hlen + tcp_hlen > pkt_len)
		return STEER_PASS_MALFORMED;
	if (ip_len < ip_hlen + tcp_hlen ||
	    sizeof(struct ethhdr) + ip_len > pkt_len)
		return STEER_PASS_MALFORMED;
	return STEER_TCP_SEGMENT;
}

/* An IPv4 TCP segment's 4-tuple into `key`, or the reason to pass it. */
static __always_inline __u32 parse_ipv4_tcp(struct hdr_cursor *c, __u64 pkt_len,
					    struct steer_flow_key *key,
					    struct tcphdr **tcp)
{
	struct iphdr *ip = parse_ipv4(c);
	__u32 reason;

	if (!ip)
		return STEER_PASS_TRUNCATED;
	if (ip->version != 4 || ip->ihl < 5)
		return STEER_PASS_MALFORMED;
	if (ip->ihl != 5)
		return STEER_PASS_IP_OPTIONS;
	if (ip->frag_off & bpf_htons(IP_MF | IP_OFFSET))
		return STEER_PASS_FRAGMENT;
	if (ip->protocol != IPPROTO_TCP)
		return STEER_PASS_NOT_TCP;
	reason = parse_tcp_in(c, pkt_len, sizeof(*ip), bpf_ntohs(ip->tot_len),
			      tcp);
	if (reason != STEER_TCP_SEGMENT)
		return reason;
	key->family = STEER_AF_INET;
	key->saddr[0] = ip->saddr;
	key->daddr[0] = ip->daddr;
	key->sport = (*tcp)->source;
	key->dport = (*tcp)->dest;
	return STEER_TCP_SEGMENT;
}

/* Next headers that are IPv6 extension headers, the fragment header aside. */
static __always_inline int ipv6_ext_header(__u8 nexthdr)
{
	switch (nexthdr) {
	case IPPROTO_HOPOPTS:
	case IPPROTO_ROUTING:
	case IPPROTO_ESP:
	case IPPROTO_AH:
	case IPPROTO_DSTOPTS:
	case IPPROTO_MH:
	case IPPROTO_HIP:
	case IPPROTO_SHIM6:
	case IPPROTO_EXP1:
	case IPPROTO_EXP2:
		return 1;
	}
	return 0;
}

/* An IPv6 TCP segment's 4-tuple into `key`, or the reason to pass it. Only a
 * TCP header right after the fixed header is steered: the first next header
 * decides, and the program walks no extension header chain (the kernel takes
 * those packets, as it takes IPv4 ones with options). A payload length of 0
 * (a jumbogram, which needs a hop-by-hop header) is malformed here. */
static __always_inline __u32 parse_ipv6_tcp(struct hdr_cursor *c, __u64 pkt_len,
					    struct steer_flow_key *key,
					    struct tcphdr **tcp)
{
	struct ipv6hdr *ip6 = parse_ipv6(c);
	__u32 reason;

	if (!ip6)
		return STEER_PASS_TRUNCATED;
	if (ip6->version != 6)
		return STEER_PASS_MALFORMED;
	if (ip6->nexthdr == IPPROTO_FRAGMENT)
		return STEER_PASS_FRAGMENT;
	if (ipv6_ext_header(ip6->nexthdr))
		return STEER_PASS_IPV6_EXT_HEADER;
	if (ip6->nexthdr != IPPROTO_TCP) /* ICMPv6 among them */
		return STEER_PASS_NOT_TCP;
	reason = parse_tcp_in(c, pkt_len, sizeof(*ip6),
			      sizeof(*ip6) + bpf_ntohs(ip6->payload_len), tcp);
	if (reason != STEER_TCP_SEGMENT)
		return reason;
	key->family = STEER_AF_INET6;
	__builtin_memcpy(key->saddr, &ip6->saddr, sizeof(key->saddr));
	__builtin_memcpy(key->daddr, &ip6->daddr, sizeof(key->daddr));
	key->sport = (*tcp)->source;
	key->dport = (*tcp)->dest;
	return STEER_TCP_SEGMENT;
}

/* Does a kernel socket already own this 4-tuple? A SYN finds the kernel's
 * listening socket when one is bound to the same address and port (auto mode
 * serves both paths on one listener): a listener owns no 4-tuple, so only a
 * non-listening socket counts. */
static __always_inline int kernel_owns(struct xdp_md *ctx,
				       const struct steer_flow_key *key)
{
	struct bpf_sock_tuple tuple = {};
	struct bpf_sock *sk;
	__u32 tuple_len;
	int owns;

	if (key->family == STEER_AF_INET6) {
		__builtin_memcpy(tuple.ipv6.saddr, key->saddr,
				 sizeof(key->saddr));
		__builtin_memcpy(tuple.ipv6.daddr, key->daddr,
				 sizeof(key->daddr));
		tuple.ipv6.sport = key->sport;
		tuple.ipv6.dport = key->dport;
		tuple_len = sizeof(tuple.ipv6);
	} else {
		tuple.ipv4.saddr = key->saddr[0];
		tuple.ipv4.daddr = key->daddr[0];
		tuple.ipv4.sport = key->sport;
		tuple.ipv4.dport = key->dport;
		tuple_len = sizeof(tuple.ipv4);
	}
	sk = bpf_skc_lookup_tcp(ctx, &tuple, tuple_len, BPF_F_CURRENT_NETNS, 0);
	if (!sk)
		return 0;
	owns = sk->state != BPF_TCP_LISTEN;
	bpf_sk_release(sk);
	return owns;
}

/* The listener of the flow's destination: on its address, else on any
 * address of its family. */
static __always_inline struct steer_listener *
find_listener(const struct steer_flow_key *flow)
{
	struct steer_listener_key key = {};
	struct steer_listener *l;

	__builtin_memcpy(key.addr, flow->daddr, sizeof(key.addr));
	key.port = flow->dport;
	key.family = flow->family;
	l = bpf_map_lookup_elem(&steer_listeners, &key);
	if (l)
		return l;
	__builtin_memset(key.addr, 0, sizeof(key.addr));
	return bpf_map_lookup_elem(&steer_listeners, &key);
}

/* Per-queue ownership: which worker serves this rx queue. */
/* Spreads 4-tuples over workers: a multiplicative mix of the addresses and
 * ports (the high bits of the product are the well-mixed ones). An IPv4 key's
 * upper address words are zero, so its hash is what it was before IPv6. */
static __always_inline __u32 flow_hash(const struct steer_flow_key *key)
{
	__u32 h = (__u32)key->sport << 16 | (__u32)key->dport;
	int i;

	for (i = 0; i < 4; i++)
		h ^= key->saddr[i] ^ key->daddr[i];
	return (h * 0x9e3779b1u) >> 16;
}

static __always_inline __u32 queue_worker(struct xdp_md *ctx)
{
	__u32 queue = ctx->rx_queue_index;
	__u32 *worker = bpf_map_lookup_elem(&steer_queue_workers, &queue);

	return worker ? *worker : STEER_SOLE_WORKER;
}

/* Puts the flow's owner in front of the frame for the worker that receives it.
 * Invalidates every packet pointer: call it last. A device without metadata
 * room (adjust_meta fails) delivers the frame unstamped; the magic lets the
 * worker notice. */
static __always_inline void stamp_owner(struct xdp_md *ctx, __u32 owner)
{
	struct steer_rx_meta *meta;

	if (bpf_xdp_adjust_meta(ctx, -(int)sizeof(*meta)))
		return;
	meta = (void *)(long)ctx->data_meta;
	if ((void *)(meta + 1) > (void *)(long)ctx->data)
		return;
	meta->owner = owner;
	meta->magic = STEER_RX_META_MAGIC;
}

/* A packet of a known flow goes to this queue's socket whoever owns the flow (a
 * slot pointing at another queue's socket would drop it); when the owner is not
 * this queue's worker, the receiving worker hands it over and the decision is
 * counted apart. */
static __always_inline int redirect_known_flow(struct xdp_md *ctx, __u32 owner)
{
	__u32 reason = owner == queue_worker(ctx) ? STEER_REDIRECT_FLOW
						  : STEER_REDIRECT_HANDOFF;
	int action;

	action = bpf_redirect_map(&steer_xsks, ctx->rx_queue_index, XDP_DROP);
	/* No socket on this queue: its worker died and is being restarted.
	 * The kernel would answer with a reset and end a connection another
	 * worker serves; dropped, the peer sends it again. */
	if (action != XDP_REDIRECT)
		return decide(ctx, STEER_DROP_NO_SOCKET, XDP_DROP);
	stamp_owner(ctx, owner);
	return decide(ctx, reason, XDP_REDIRECT);
}

SEC("xdp.frags")
int xdpfwd_steer(struct xdp_md *ctx)
{
	__u64 pkt_len = bpf_xdp_get_buff_len(ctx); /* every buffer */
	struct packet_head head;
	struct hdr_cursor c;
	struct steer_flow_key key = {};
	struct steer_listener *listener;
	struct steer_flow *existing;
	struct steer_flow flow = {};
	struct ethhdr *eth;
	struct tcphdr *tcp;
	__u32 reason;
	int action;
	long err;

	head_cursor(ctx, &c, &head, pkt_len);
	eth = parse_eth(&c);
	if (!eth)
		return decide(ctx, STEER_PASS_TRUNCATED, XDP_PASS);
	if (eth->h_proto == bpf_htons(ETH_P_IP))
		reason = parse_ipv4_tcp(&c, pkt_len, &key, &tcp);
	else if (eth->h_proto == bpf_htons(ETH_P_IPV6))
		reason = parse_ipv6_tcp(&c, pkt_len, &key, &tcp);
	else
		return decide(ctx, STEER_PASS_NOT_IP, XDP_PASS);
	if (reason != STEER_TCP_SEGMENT)
		return decide(ctx, reason, XDP_PASS);

	existing = bpf_map_lookup_elem(&steer_flows, &key);
	if (existing) {
		if (existing->origin != STEER_FLOW_FROM_SYN || !tcp->syn ||
		    tcp->ack || tcp->rst)
			return redirect_known_flow(ctx, existing->owner);
		/* A client that reuses its 4-tuple soon after a close finds
		 * the old connection's lingering entry. Its bare SYN makes
		 * the entry the new connection's: a removal scheduled for the
		 * old one must not take it (userspace removes only entries
		 * stamped no later than the old connection's accept), and the
		 * reaper must see a connection not yet accepted.
		 *
		 * The entry is replaced whole, under its bucket's lock, not
		 * written where it lies: that removal may be deleting it at
		 * this moment, reading its stamp as it unlinks it, and a
		 * write landing in the unlinked element would be lost; the
		 * new connection's next packet would then find no entry and
		 * the kernel would reset it. Replaced, the removal either
		 * sees the new stamp and puts the entry back, or came first:
		 * then the update finds nothing and the SYN enters the flow
		 * anew, below. (A lookup of this 4-tuple racing the
		 * replacement could miss it, but nothing else of the client's
		 * is in flight while it waits for its SYN's answer.) */
		flow.owner = existing->owner; /* a resent SYN's pcb is there */
		flow.rule_id = existing->rule_id;
		flow.created_ns = bpf_ktime_get_ns();
		flow.origin = STEER_FLOW_FROM_SYN;
		err = bpf_map_update_elem(&steer_flows, &key, &flow, BPF_EXIST);
		if (!err)
			__sync_fetch_and_add(&unaccepted_writes, 1);
		if (err != -ENOENT)
			return redirect_known_flow(ctx, flow.owner);
	} else if (!tcp->syn || tcp->ack) {
		return decide(ctx, STEER_PASS_UNKNOWN_FLOW, XDP_PASS);
	}

	listener = find_listener(&key);
	if (!listener)
		return decide(ctx, STEER_PASS_NOT_LISTENER, XDP_PASS);
	if (check_kernel_sockets && kernel_owns(ctx, &key))
		return decide(ctx, STEER_PASS_KERNEL_OWNS, XDP_PASS);

	if (syn_flows >= syn_flow_budget)
		return decide(ctx, STEER_PASS_FLOW_TABLE_FULL, XDP_PASS);

	flow.owner = hash_owner_workers
			     ? flow_hash(&key) % hash_owner_workers
			     : queue_worker(ctx); /* the SYN's queue's */
	flow.rule_id = listener->rule_id;
	flow.created_ns = bpf_ktime_get_ns();
	flow.origin = STEER_FLOW_FROM_SYN;
	err = bpf_map_update_elem(&steer_flows, &key, &flow, BPF_NOEXIST);
	if (err == -E2BIG)
		return decide(ctx, STEER_PASS_FLOW_TABLE_FULL, XDP_PASS);
	if (err && err != -EEXIST) /* -EEXIST: another CPU inserted it */
		return decide(ctx, STEER_PASS_FLOW_TABLE_FULL, XDP_PASS);
	if (!err) {
		__sync_fetch_and_add(&syn_flows, 1);
		__sync_fetch_and_add(&unaccepted_writes, 1);
	}

	action = bpf_redirect_map(&steer_xsks, ctx->rx_queue_index, XDP_PASS);
	if (action != XDP_REDIRECT) {
		/* Nobody on this queue would serve the flow: let the kernel
		 * have it. */
		if (!err && bpf_map_delete_elem(&steer_flows, &key) == 0)
			__sync_fetch_and_add(&syn_flows, -1);
		return decide(ctx, STEER_PASS_NO_SOCKET, XDP_PASS);
	}
	stamp_owner(ctx, flow.owner);
	return decide(ctx, STEER_REDIRECT_NEW_FLOW, XDP_REDIRECT);
}

char LICENSE[] SEC("license") = "GPL";
