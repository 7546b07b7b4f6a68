// One lwIP netif over the AF_XDP ports of one interface, one port per RX queue. RX is
// zero-copy: each received frame enters lwIP as a custom pbuf pointing into its port's UMEM,
// and its free callback gives the frame back to that port; a packet in a chain of frames
// (multi-buffer) enters as a chain of such pbufs. IPv4 and IPv6 (lwIP is dual-stack; each
// netif may have an address of each family). TX goes out through the first port:
// it copies lwIP's finished IP packet behind an Ethernet header into a UMEM frame; or, with
// LwipNetifConfig::packet_tx, into a batch that a packet socket sends with GSO (stack/
// packet_tx.h). Where each packet goes next, and to which MAC, is NextHopRoute's (stack/
// next_hop_route.h: the kernel's neighbour table, lwIP's ARP is off).
#pragma once

#include <netinet/in.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <unordered_map>
#include <vector>

#include "os/result.h"
#include "stack/neighbor.h"
#include "stack/next_hop_route.h"
#include "stack/packet_path_flows.h"
#include "stack/packet_tx.h"
#include "stack/worker_handoff.h"
#include "stack/xsk_port.h"

struct netif;
struct pbuf;

namespace xdpfwd {

struct LwipNetifConfig {
  int ifindex = 0;
  MacAddress mac{};
  in_addr addr{}, netmask{}, gateway{};  // gateway 0: everything on-link
  // More local addresses on the same interface (--backend-source): each is one more lwIP netif
  // over the same port. lwIP's ip4_input accepts a packet for any netif's address, and routing
  // by source address sends a connection's segments out through the netif that owns it.
  std::vector<in_addr> aliases;
  // The interface's IPv6 address, on-link prefix and gateway (none: IPv4 only). The address is
  // the first netif's.
  Ipv6Interface ipv6;
  // More local IPv6 addresses (a rule's IPv6 [src=]): one more netif each, with no IPv4
  // address. lwIP's ip6_input accepts a packet for any netif's address (not a link-local one,
  // which none of these is), and routing by source sends each connection out through its own.
  std::vector<in6_addr> aliases6;
  uint16_t mtu = 1500;
  // TCP checksums of received frames. A veth peer hands over frames whose TCP checksum holds
  // only the pseudo-header sum (CHECKSUM_PARTIAL, the data never crossed a wire), so they are
  // not verified there; on any other device they are (docs/stack.md).
  bool verify_tcp_checksum = true;
  // TX through a packet socket with GSO (stack/packet_tx.h) instead of the AF_XDP port: for
  // ports in copy mode, where AF_XDP builds one skb per frame and cannot send GSO.
  bool packet_tx = false;
  // With packet_tx: where a batch of single segments goes (xdpfwd --tune tx-small).
  SmallBatchTx small_batches = SmallBatchTx::kAcksThroughPacket;
};

// The checksum policy for an interface (see LwipNetifConfig::verify_tcp_checksum): verify
// unless the driver is veth. Unknown drivers are verified.
bool ShouldVerifyTcpChecksum(const std::string& ifname);

struct NetifStats {
  uint64_t rx_frames = 0;
  uint64_t rx_packets = 0;   // whole packets: a chain of frames counts once
  uint64_t rx_not_ip = 0;    // neither IPv4 nor IPv6: not for lwIP (the steering program never
                             // redirects such frames)
  uint64_t rx_oversize = 0;  // an IP packet above 65535 bytes (lwIP's u16 tot_len): dropped
  uint64_t tx_frames = 0;
  uint64_t tx_pool_empty = 0;   // no UMEM frame free: lwIP keeps the segment and retries
  uint64_t tx_no_neighbor = 0;  // next hop not resolved yet: same
  uint64_t tx_oversize = 0;
  uint64_t tx_chains = 0;          // packets longer than a TX frame, sent as a chain of frames
  uint64_t rx_copied = 0;          // packets other workers handed over (InputCopy)
  uint64_t rx_copy_no_pool = 0;    // of those, dropped for want of a pool pbuf (TCP resends)
  PacketTxStats packet_tx;         // with LwipNetifConfig::packet_tx
  uint64_t tx_singles_af_xdp = 0;  // of those packets, sent through the port (FlushTx)
  // Packets of batches that would have gone through the port but went through the packet
  // socket, because one of their flows had sent that way lately (PacketPathFlows).
  uint64_t tx_singles_kept_to_packet = 0;
  // What Output refused while the batch was full (PacketTxStats::full), sent again by FlushTx
  // once the batch had room: the flows it asked lwIP to send again, one by one; the times it
  // had to walk every active pcb instead (more than kMaxRefusedFlows flows refused), and the
  // time all of that took.
  uint64_t tx_refused_flows_retried = 0;
  uint64_t tx_refused_walks = 0;
  uint64_t tx_refused_retry_ns = 0;
};

class LwipNetif {
 public:
  // Adds the netif to lwIP (lwip_init() must have run on this thread). It receives from every
  // port in `ports` (one per RX queue of the interface: the kernel hands a socket only what
  // arrives on its own queue) and sends through ports[0]. The ports must outlive it.
  static Result<std::unique_ptr<LwipNetif>> Create(const std::vector<XskPort*>& ports,
                                                   const LwipNetifConfig& config);
  ~LwipNetif();
  LwipNetif(const LwipNetif&) = delete;
  LwipNetif& operator=(const LwipNetif&) = delete;

  // Feeds up to `budget` received frames from each port to lwIP, whole packets only (at least
  // kMaxRxChain, so that the longest chain fits); returns how many frames in all.
  uint32_t Poll(uint32_t budget = 64);
  // N workers: a received packet whose steering metadata names another worker as its flow's
  // owner goes to that worker through `handoff` (tagged `tag`, this netif's index in every
  // worker's list) instead of into this lwIP. Unset: everything is this worker's.
  void SetHandoff(WorkerHandoff* handoff, uint16_t tag) {
    handoff_ = handoff;
    tag_ = tag;
  }
  // A packet another worker received for one of this worker's flows (Ethernet header first):
  // copied into pool pbufs and into lwIP.
  void InputCopy(std::span<const uint8_t> frame);
  struct netif* get() {
    return netif_.get();
  }
  XskPort& port() { return port_; }  // the TX port
  // Every port, the TX port first: each needs its Flush (completions, fill-ring top-up).
  const std::vector<XskPort*>& ports() const { return ports_; }
  NetifStats stats() const;
  // lwIP's packets handed to a TX path so far (stats().tx_frames), cheaply: once an iteration.
  uint64_t packets_out() const { return stats_.tx_frames; }
  // Sends what Output queued (with LwipNetifConfig::packet_tx): once per worker iteration,
  // before the ports' Flush. A batch with a GSO packet goes through the packet socket; one of
  // single segments (requests, responses, ACKs) as LwipNetifConfig::small_batches says, but
  // through the packet socket whenever one of its flows sent that way lately (PacketPathFlows),
  // so that no packet of a flow overtakes another at the peer.
  void FlushTx();
  // Whether packets the kernel refused at the last FlushTx still wait in the packet socket's
  // batch (PacketTx::deferring).
  bool tx_deferred() const { return packet_tx_ && packet_tx_->deferring(); }
  // Replaces the packet socket (with LwipNetifConfig::packet_tx) by one whose sendmmsg is a
  // script (PacketTx::ForTest): for the tests of what happens to refused packets.
  void ReplacePacketTxForTest(std::unique_ptr<PacketTx> tx) { packet_tx_ = std::move(tx); }
  static constexpr size_t max_refused_flows() { return kMaxRefusedFlows; }
  uint32_t rx_pbufs_in_use() const { return rx_pbufs_in_use_; }
  const NextHopCache& next_hops() const { return route_.next_hops(); }
  // Gives a netif that has no IPv6 address its first (a reload's rules need it), with the
  // prefix that is on-link and the gateway of what is not; false, and nothing changed, if it has
  // one already: an address open connections use is never replaced.
  bool AddIpv6(const Ipv6Interface& ipv6);

 private:
  struct RxPbuf;
  friend struct LwipNetifCallbacks;  // lwIP's C callbacks (output, custom pbuf free)
  LwipNetif(const std::vector<XskPort*>& ports, const LwipNetifConfig& config);
  // lwIP's finished IP packet `p` (either family) to `next_hop`: queued for the packet
  // socket, copied into an AF_XDP frame, or a chain of them. lwIP's err_t.
  int8_t Transmit(pbuf* p, const MacAddress& next_hop, bool ipv6);
  // Sends a packet longer than one TX frame as a chain of frames (multi-buffer TX).
  int8_t OutputChain(pbuf* p, const MacAddress& next_hop, bool ipv6);  // lwIP's err_t
  // One received packet, its frames in order, into lwIP (or back to the port, if not for it).
  void Input(size_t port_index, const RxFrame* frames, uint32_t count);
  // Output's packet `p` was refused while the batch was full: its flow's pcb waits with
  // TF_NAGLEMEMERR until someone calls tcp_output on it. Noted here, once per flow.
  void NoteRefused(const pbuf* p);
  // Has lwIP send again what the noted flows' pcbs hold (FlushTx, once the batch has room).
  void RetryRefused();

  std::vector<XskPort*> ports_;
  XskPort& port_;  // ports_[0], the TX port
  LwipNetifConfig config_;
  std::unique_ptr<struct netif> netif_;
  std::vector<std::unique_ptr<struct netif>> aliases_;
  // Per port, one per UMEM frame, indexed by frame number (each port has its own UMEM).
  std::vector<std::vector<RxPbuf>> rx_pbufs_;
  uint32_t rx_pbufs_in_use_ = 0;
  NextHopRoute route_;  // where each packet goes next (stack/next_hop_route.h)
  NetifStats stats_;
  std::unique_ptr<PacketTx> packet_tx_;
  uint64_t full_seen_ = 0;  // packet_tx_'s stats().full at the last FlushTx
  // The flows of packets Output refused since the last retry, by their 4-tuple: RetryRefused
  // finds each pcb in lwIP's hash (patch 0001) instead of walking every active pcb
  // (tcp_txnow), which with 200,000 pcbs took 1.6-1.8 ms per walk on average, on the worker
  // (docs/stack.md). Past kMaxRefusedFlows, the walk.
  struct RefusedFlow {
    uint32_t local_ip[4], remote_ip[4];  // network order; IPv4 in the first word, the rest 0
    uint16_t local_port, remote_port;    // host order
    bool ipv6;
    bool operator==(const RefusedFlow&) const = default;
  };
  static constexpr size_t kMaxRefusedFlows = 4096;
  std::vector<RefusedFlow> refused_, retrying_;
  bool refused_overflow_ = false;
  // The flows noted since the last retry, by a hash of the 4-tuple (a slot taken by another
  // flow is overwritten: that flow may be noted twice, which costs one more lookup).
  static constexpr size_t kNotedSlots = 4096;
  std::vector<RefusedFlow> noted_;
  std::vector<uint32_t> noted_round_;  // the retry round in which the slot was written
  uint32_t refused_round_ = 1;
  PacketPathFlows packet_flows_;
  WorkerHandoff* handoff_ = nullptr;
  uint16_t tag_ = 0;
};

}  // namespace xdpfwd
