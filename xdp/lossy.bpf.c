// SPDX-License-Identifier: GPL-2.0
/* Loss injector for tests: drops a configured share of the TCP packets (IPv4,
 * or IPv6 with TCP as its first next header) arriving on the interface it is
 * attached to. This kernel has no netem, so the relay's loss tests put this on
 * a veth instead. Everything else (ARP and ICMPv6 neighbour discovery above
 * all) always passes. Attached in generic mode it sees a GSO packet whole, so
 * one drop takes all its segments (a burst). */
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/ip.h>
#include <linux/ipv6.h>
#include <linux/in.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

#include "lossy_shared.h"

/* Set through the skeleton's rodata before load. */
const volatile __u32 drop_per_million = 0;

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, LOSSY_NR_COUNTERS);
	__type(key, __u32);
	__type(value, __u64);
} lossy_counters SEC(".maps");

static __always_inline void add(__u32 which, __u64 amount)
{
	__u64 *n = bpf_map_lookup_elem(&lossy_counters, &which);

	if (n)
		*n += amount;
}

static __always_inline void count(__u32 which)
{
	add(which, 1);
}

static __always_inline int is_tcp(void *data, void *data_end)
{
	struct ethhdr *eth = data;

	if ((void *)(eth + 1) > data_end)
		return 0;
	if (eth->h_proto == bpf_htons(ETH_P_IP)) {
		struct iphdr *ip = (void *)(eth + 1);

		return (void *)(ip + 1) <= data_end &&
		       ip->protocol == IPPROTO_TCP;
	}
	if (eth->h_proto == bpf_htons(ETH_P_IPV6)) {
		struct ipv6hdr *ip6 = (void *)(eth + 1);

		return (void *)(ip6 + 1) <= data_end &&
		       ip6->nexthdr == IPPROTO_TCP;
	}
	return 0;
}

SEC("xdp")
int lossy(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;

	if (!is_tcp(data, data_end)) {
		count(LOSSY_PASSED_OTHER);
		return XDP_PASS;
	}
	if (bpf_get_prandom_u32() % 1000000 < drop_per_million) {
		count(LOSSY_DROPPED);
		add(LOSSY_DROPPED_BYTES, data_end - data);
		return XDP_DROP;
	}
	count(LOSSY_PASSED_TCP);
	return XDP_PASS;
}

char LICENSE[] SEC("license") = "GPL";
