/* What the steering program writes in front of every frame it redirects, and all the stack
 * (stack/lwip_netif.cpp) reads of it: the rest of the program's ABI, its maps, stays in
 * steer_shared.h, which includes this for xdp/steer.bpf.c. The C++ loader static_asserts the
 * layout (xdp/steer_maps.cpp). */
#ifndef XDPFWD_RX_META_H
#define XDPFWD_RX_META_H

#include <linux/types.h>

/* Written with bpf_xdp_adjust_meta: copy mode copies it into the UMEM frame just before the
 * packet, where zero-copy drivers keep it too. With N workers the one that receives a frame
 * reads which worker owns its flow and hands the frame over when that is another
 * (docs/stack.md, "Next step"). The magic tells a stamped frame from headroom nobody wrote. */
struct steer_rx_meta {
  __u32 owner; /* steer_flow.owner of the frame's flow */
  __u32 magic; /* STEER_RX_META_MAGIC */
};
#define STEER_RX_META_MAGIC 0x58444d31u /* "XDM1" */

#endif /* XDPFWD_RX_META_H */
