// SPDX-License-Identifier: GPL-2.0
/* Fixture for the bpf_warning_* tests: clean as it stands, and with
 * -DWITH_WARNING it gains one unused variable, which the build's BPF flags must
 * turn into an error. Not part of any program. */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

SEC("xdp")
int fixture(struct xdp_md *ctx)
{
#ifdef WITH_WARNING
	int unused = 1;
#endif
	return ctx->ingress_ifindex ? XDP_PASS : XDP_PASS;
}

char LICENSE[] SEC("license") = "GPL";
