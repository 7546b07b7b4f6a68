// SPDX-License-Identifier: GPL-2.0
/* TCP events of the kernel path's own sockets: retransmitted segments, RTO
 * expiry, fast recovery, zero window in and out, and the Nagle/delayed-ACK
 * stall. The kernel path tags each socket of a connection that lives past its
 * first 10 ms in `tagged` (socket storage, keyed by its fd from user space);
 * every program here that has a socket first looks its tag up and leaves an
 * untagged socket at once, so another socket costs one pointer test (its
 * sk_bpf_storage is NULL). Events go to the ring of the thread that owns the
 * socket, drained by that thread between two epoll batches
 * (forwarder/kernel_path_loop.cpp). */
#include <linux/bpf.h>
#include <linux/ptrace.h>
#include <linux/tcp.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>

#include "tcp_events_shared.h"

/* BPF_PROG names its context argument whether a program reads it or not. */
#pragma clang diagnostic ignored "-Wunused-parameter"

char LICENSE[] SEC("license") = "GPL";

/* The kernel's types, only the fields read here: CO-RE relocates each field to
 * where the running kernel has it (its BTF), so no vmlinux.h is needed. */
struct sock {
	int __unused;
} __attribute__((preserve_access_index));

struct sk_buff {
	unsigned int len;
	unsigned char *data;
} __attribute__((preserve_access_index));

struct timer_list {
	void (*function)(struct timer_list *);
} __attribute__((preserve_access_index));

struct inet_connection_sock {
	struct timer_list icsk_delack_timer;
	__u32 icsk_rto;
	__u8 icsk_backoff;
	struct {
		__u8 pending;
		__u16 rcv_mss;
	} icsk_ack;
} __attribute__((preserve_access_index));

struct tcp_sock {
	struct inet_connection_sock inet_conn;
	__u32 rcv_wnd;
	__u32 snd_cwnd;
	__u32 snd_ssthresh;
} __attribute__((preserve_access_index));

/* include/net/inet_connection_sock.h and include/net/tcp.h. */
#define ICSK_ACK_TIMER 2
#define TCPHDR_SYN 0x02
#define TCPHDR_RST 0x04
#define TCP_CA_Recovery 3
#define TCP_CA_Loss 4

/* The RTO is kept in jiffies; libbpf fills this from the kernel's config. */
extern unsigned int CONFIG_HZ __kconfig __weak;

/* A segment's bytes that arrive within this of our delayed ACK may have waited
 * for it; three times in a row, the peer did (forwarder/relay.cpp's rule). */
#define NAGLE_ANSWER_NS 1000000ULL
#define NAGLE_RUN 3

struct {
	__uint(type, BPF_MAP_TYPE_SK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct tcp_socket_tag);
} tagged SEC(".maps");

struct thread_ring {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, TCP_EVENTS_RING_BYTES);
};

/* A ring per kernel-path thread, created and put here by user space. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY_OF_MAPS);
	__uint(max_entries, TCP_EVENTS_MAX_THREADS);
	__type(key, __u32);
	__array(values, struct thread_ring);
} rings SEC(".maps");

/* Events a full (or missing) ring dropped, per CPU. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} dropped SEC(".maps");

static __always_inline struct tcp_socket_tag *tag_of(struct sock *sk)
{
	return bpf_sk_storage_get(&tagged, sk, 0, 0);
}

static __always_inline void emit(struct tcp_socket_tag *tag, __u64 now,
				 __u16 kind, __u32 arg0, __u32 arg1)
{
	__u32 thread = tag->thread;
	void *ring = bpf_map_lookup_elem(&rings, &thread);
	struct tcp_event event = {
		.monotonic_ns = now,
		.connection = tag->connection,
		.rule = tag->rule,
		.kind = kind,
		.leg = tag->leg,
		.args = {arg0, arg1},
	};

	/* No wake-up: the thread drains its ring between epoll batches anyway,
	 * and a wake-up per event would cost an irq_work each. */
	if (ring && bpf_ringbuf_output(ring, &event, sizeof(event),
				       BPF_RB_NO_WAKEUP) == 0)
		return;
	__u32 zero = 0;
	__u64 *n = bpf_map_lookup_elem(&dropped, &zero);

	if (n)
		*n += 1;
}

SEC("tp_btf/tcp_retransmit_skb")
int BPF_PROG(retransmit, struct sock *sk, struct sk_buff *skb, int err)
{
	struct tcp_socket_tag *tag = tag_of(sk);

	if (!tag || err)
		return 0;
	emit(tag, bpf_ktime_get_ns(), TCP_EVENT_RETRANSMIT, 1,
	     BPF_CORE_READ(skb, len));
	return 0;
}

/* Loss is entered at each expiry of the retransmission timer (tcp_enter_loss),
 * recovery once per fast retransmit episode (tcp_enter_recovery). */
SEC("tp_btf/tcp_cong_state_set")
int BPF_PROG(cong_state, struct sock *sk, __u8 ca_state)
{
	struct tcp_socket_tag *tag;

	if (ca_state != TCP_CA_Loss && ca_state != TCP_CA_Recovery)
		return 0;
	tag = tag_of(sk);
	if (!tag)
		return 0;
	if (ca_state == TCP_CA_Loss) {
		struct inet_connection_sock *icsk = (void *)sk;
		__u32 hz = CONFIG_HZ ? CONFIG_HZ : 1000;
		/* The timeout that expired, and how often it had been backed
		 * off before (the timer doubles both after this). */
		__u32 rto = BPF_CORE_READ(icsk, icsk_rto);

		emit(tag, bpf_ktime_get_ns(), TCP_EVENT_RTO, rto * 1000 / hz,
		     BPF_CORE_READ(icsk, icsk_backoff) + 1);
	} else {
		struct tcp_sock *tp = (void *)sk;

		emit(tag, bpf_ktime_get_ns(), TCP_EVENT_RECOVERY,
		     BPF_CORE_READ(tp, snd_cwnd),
		     BPF_CORE_READ(tp, snd_ssthresh));
	}
	return 0;
}

/* When a socket's delayed-ACK timer last fired with an ACK pending, by the
 * socket's address: the timer's hook is the timer tracepoint, which names the
 * timer, not a socket with its storage (this kernel refuses fentry and has no
 * kprobes), so every socket on the host whose delayed ACK goes out by its timer
 * lands here, and the least recently used go. Nothing removes an entry: a
 * socket at the address of a freed one reads its time as older than its own
 * last segment, and tcp_probe only counts a time after that. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 65536);
	__type(key, __u64);
	__type(value, __u64);
} delack_fired SEC(".maps");

/* The delayed-ACK timer's function (net/ipv4/tcp_timer.c), found by libbpf in
 * /proc/kallsyms. */
extern void tcp_delack_timer(struct timer_list *) __ksym;

/* Every timer_list that expires on the host: one comparison for any other
 * timer; a delayed-ACK timer with an ACK pending notes the time. */
SEC("tp_btf/timer_expire_entry")
int BPF_PROG(timer_expires, struct timer_list *timer, unsigned long baseclk)
{
	struct inet_connection_sock *icsk;
	__u64 key, now;

	if (BPF_CORE_READ(timer, function) != &tcp_delack_timer)
		return 0;
	icsk = (void *)((unsigned char *)timer -
			bpf_core_field_offset(struct inet_connection_sock,
					      icsk_delack_timer));
	if (!(BPF_CORE_READ(icsk, icsk_ack.pending) & ICSK_ACK_TIMER))
		return 0;
	key = (__u64)icsk;
	now = bpf_ktime_get_ns();
	bpf_map_update_elem(&delack_fired, &key, &now, BPF_ANY);
	return 0;
}

/* Every segment an established socket receives, before it is processed: skb
 * starts at the TCP header. It runs for every segment of every socket on the
 * host, and for each one of a tagged socket (a bulk transfer's too), so it
 * reads by direct loads from the kernel's structures (the socket made a
 * tcp_sock by bpf_skc_to_tcp_sock) and one 4-byte copy of the header, and reads
 * the clock only to record or after a small segment. */
SEC("tp_btf/tcp_probe")
int BPF_PROG(segment_in, struct sock *sk, struct sk_buff *skb)
{
	struct tcp_socket_tag *tag = tag_of(sk);
	struct tcp_sock *tp;
	__u64 key = (__u64)sk;
	__u64 now = 0, *fired;
	__u32 payload, header;
	/* Bytes 12-15 of the TCP header: data offset, flags, window. */
	struct {
		__u8 doff;
		__u8 flags;
		__be16 window;
	} th;
	__u8 small;

	if (!tag)
		return 0;
	tp = bpf_skc_to_tcp_sock(sk);
	if (!tp || bpf_probe_read_kernel(&th, sizeof(th), skb->data + 12))
		return 0;
	/* The peer closed its window (an unscaled 0 is 0 at any scale). */
	if (th.window == 0 && !(th.flags & (TCPHDR_SYN | TCPHDR_RST))) {
		if (!tag->peer_window_closed)
			emit(tag, bpf_ktime_get_ns(), TCP_EVENT_ZERO_WINDOW_IN,
			     0, 0);
		tag->peer_window_closed = 1;
	} else {
		tag->peer_window_closed = 0;
	}
	/* We closed ours: rcv_wnd is the window our last segment announced
	 * (tcp_select_window, inlined where each segment is built, has no hook
	 * of its own). Seen at the next segment the peer sends after it: its
	 * ACK of our data, or its window probe. */
	if (tp->rcv_wnd == 0) {
		if (!tag->window_closed)
			emit(tag, bpf_ktime_get_ns(), TCP_EVENT_ZERO_WINDOW_OUT,
			     0, 0);
		tag->window_closed = 1;
	} else {
		tag->window_closed = 0;
	}
	if (tag->nagle_found)
		return 0;
	header = (th.doff >> 4) * 4;
	payload = skb->len;
	payload = payload > header ? payload - header : 0;
	if (payload == 0)
		return 0;
	/* last_data_ns is the time of the last segment only when it was small:
	 * the rule looks at no other. */
	small = payload < tp->inet_conn.icsk_ack.rcv_mss;
	fired = tag->last_data_small ? bpf_map_lookup_elem(&delack_fired, &key)
				     : 0;
	if (fired && *fired > tag->last_data_ns) {
		now = bpf_ktime_get_ns();
		if (now - *fired > NAGLE_ANSWER_NS) {
			tag->nagle_run = 0;
		} else if (++tag->nagle_run == NAGLE_RUN) {
			__u64 stall_us = (now - tag->last_data_ns) / 1000;

			tag->nagle_found = 1;
			emit(tag, now, TCP_EVENT_NAGLE_PEER,
			     stall_us > 0xffffffff ? 0xffffffff : stall_us, 0);
		}
	}
	if (small)
		tag->last_data_ns = now ? now : bpf_ktime_get_ns();
	tag->last_data_small = small;
	return 0;
}
