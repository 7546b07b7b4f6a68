// SPDX-License-Identifier: GPL-2.0
/* The kernel's element count of one map, for `show counters` and the flows
 * gauge: a bpf_map iterator that, at the map whose id is target_map_id, writes
 * bpf_map_sum_elem_count() (the per-CPU counter hash maps keep since 6.6, for
 * preallocated ones too) as one __s64. Reading it costs a walk of the map ids,
 * not of the map's entries (xdp/map_count.cpp). */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

char LICENSE[] SEC("license") = "GPL";

/* The kernel's types, only the fields read here: CO-RE relocates each field to
 * where the running kernel has it (its BTF), so no vmlinux.h is needed. */
struct bpf_map {
	__u32 id;
} __attribute__((preserve_access_index));

struct bpf_iter_meta {
	struct seq_file *seq;
} __attribute__((preserve_access_index));

struct bpf_iter__bpf_map {
	struct bpf_iter_meta *meta;
	struct bpf_map *map;
} __attribute__((preserve_access_index));

extern __s64 bpf_map_sum_elem_count(const struct bpf_map *map) __ksym;

/* Set by the loader: each counted map has its own copy of this program. */
const volatile __u32 target_map_id = 0;

SEC("iter/bpf_map")
int count_map_elements(struct bpf_iter__bpf_map *ctx)
{
	struct bpf_map *map = ctx->map;
	__s64 count;

	/* The iterator's last call has no map: it ends the walk. */
	if (!map || map->id != target_map_id)
		return 0;
	count = bpf_map_sum_elem_count(map);
	bpf_seq_write(ctx->meta->seq, &count, sizeof(count));
	return 0;
}
