// lwIP netif over an AF_XDP port; see lwip_netif.h.
#include "stack/lwip_netif.h"

#include <arpa/inet.h>

#include <algorithm>
#include <cstring>

#include "os/clock.h"
#include "os/endpoint.h"
#include "os/inet_checksum.h"
#include "os/ip_address.h"
#include "xdp/rx_meta.h"

extern "C" {
#include "lwip/inet_chksum.h"
#include "lwip/ip.h"
#include "lwip/ip4.h"
#include "lwip/ip6.h"
#include "lwip/ip6_addr.h"
#include "lwip/netif.h"
#include "lwip/pbuf.h"
#include "lwip/priv/tcp_priv.h"
#include "lwip/prot/ethernet.h"
#include "lwip/prot/tcp.h"
#include "lwip/sys.h"
}

namespace xdpfwd {

bool ShouldVerifyTcpChecksum(const std::string& ifname) {
  auto driver = InterfaceDriver(ifname);
  return !(driver && *driver == "veth");
}

namespace {

constexpr uint32_t kTcpChecksumAt = 16;  // offset of the checksum in the TCP header
constexpr uint32_t kIpv6Header = 40;     // lwIP sends no extension headers

void WriteEthernetHeader(uint8_t* d, const MacAddress& to, const MacAddress& from, bool ipv6) {
  std::memcpy(d, to.data(), 6);
  std::memcpy(d + 6, from.data(), 6);
  d[12] = ipv6 ? 0x86 : 0x08;  // 0x86dd IPv6, 0x0800 IPv4
  d[13] = ipv6 ? 0xdd : 0x00;
}

// An IPv4 (0x0800) or IPv6 (0x86dd) frame, by its EtherType.
bool IsIpFrame(const uint8_t* frame) {
  return (frame[12] == 0x08 && frame[13] == 0x00) || (frame[12] == 0x86 && frame[13] == 0xdd);
}

// Where the TCP header of lwIP's packet `ip` starts, or 0 when it is not TCP (lwIP sends TCP
// only, but the packet is read, not assumed).
uint32_t TcpHeaderAt(const uint8_t* ip, bool ipv6) {
  if (ipv6) return ip[6] == IPPROTO_TCP ? kIpv6Header : 0;
  return ip[9] == IPPROTO_TCP ? (ip[0] & 0x0fu) * 4 : 0;
}

// The pseudo-header sum of lwIP's TCP packet, folded, into its checksum field: what Linux's
// TCP leaves there for a device that completes the checksum (TX metadata, CHECKSUM_PARTIAL).
void WriteTcpPseudoHeaderSum(uint8_t* ip, bool ipv6, uint32_t ip_len) {
  if (!ipv6) {
    const uint32_t ihl = (ip[0] & 0x0fu) * 4;
    WritePseudoHeaderSum(ip, ihl, ip_len - ihl);
    return;
  }
  const uint16_t sum = InetFold(Ipv6PseudoHeaderSum(ip, IPPROTO_TCP, ip_len - kIpv6Header));
  ip[kIpv6Header + kTcpChecksumAt] = static_cast<uint8_t>(sum >> 8);
  ip[kIpv6Header + kTcpChecksumAt + 1] = static_cast<uint8_t>(sum);
}

// Static and usable at once: the kernel did duplicate address detection when the address was
// configured (lwIP's own is off, as the rest of its neighbour discovery).
void SetIpv6Address(struct netif* nif, const in6_addr& addr) {
  ip6_addr_t a6;
  std::memcpy(a6.addr, &addr, sizeof(a6.addr));
  netif_ip6_addr_set(nif, 0, &a6);
  netif_ip6_addr_set_state(nif, 0, IP6_ADDR_PREFERRED);
}

}  // namespace

struct LwipNetif::RxPbuf {
  pbuf_custom custom;  // first member: lwIP hands back the pbuf, we cast to RxPbuf
  LwipNetif* owner;
  XskPort* port;  // the frame's UMEM: a frame goes back to the port it came from
  uint64_t addr;
};

struct LwipNetifCallbacks {
  static err_t Init(struct netif* nif) {
    auto* self = static_cast<LwipNetif*>(nif->state);
    nif->name[0] = 'x';
    nif->name[1] = 'f';
    nif->mtu = self->config_.mtu;
    nif->hwaddr_len = ETH_HWADDR_LEN;
    std::memcpy(nif->hwaddr, self->config_.mac.data(), ETH_HWADDR_LEN);
    nif->flags = NETIF_FLAG_ETHERNET | NETIF_FLAG_LINK_UP;
    nif->output = Output;
    nif->output_ip6 = Output6;
    // lwIP verifies IP header checksums everywhere (the kernel always completes them); TCP
    // checksums as the interface allows (see LwipNetifConfig::verify_tcp_checksum). With TX
    // checksum offload lwIP generates no TCP checksum: Output asks the kernel for it.
    u16_t checksums = NETIF_CHECKSUM_ENABLE_ALL;
    if (!self->config_.verify_tcp_checksum) checksums &= ~NETIF_CHECKSUM_CHECK_TCP;
    if (self->port_.tx_checksum_offload() || self->packet_tx_) checksums &= ~NETIF_CHECKSUM_GEN_TCP;
    NETIF_SET_CHECKSUM_CTRL(nif, checksums);
    return ERR_OK;
  }

  static err_t Output(struct netif* nif, struct pbuf* p, const ip4_addr_t* dest) {
    auto* self = static_cast<LwipNetif*>(nif->state);
    in_addr destination{};
    destination.s_addr = ip4_addr_get_u32(dest);
    const auto mac = self->route_.Resolve(destination, sys_now());
    if (!mac) {
      ++self->stats_.tx_no_neighbor;
      return ERR_RTE;  // lwIP keeps the segment queued and sends it again later
    }
    return self->Transmit(p, *mac, false);
  }

  static err_t Output6(struct netif* nif, struct pbuf* p, const ip6_addr_t* dest) {
    auto* self = static_cast<LwipNetif*>(nif->state);
    in6_addr destination;
    std::memcpy(&destination, dest->addr, sizeof(destination));
    const auto mac = self->route_.Resolve(destination, sys_now());
    if (!mac) {
      ++self->stats_.tx_no_neighbor;
      return ERR_RTE;
    }
    return self->Transmit(p, *mac, true);
  }

  static void FreeRx(struct pbuf* p) {
    auto* rx = reinterpret_cast<LwipNetif::RxPbuf*>(p);
    rx->port->Release(rx->addr);
    --rx->owner->rx_pbufs_in_use_;
  }
};

int8_t LwipNetif::Transmit(pbuf* p, const MacAddress& next_hop, bool ipv6) {
  if (p->tot_len > config_.mtu) {
    ++stats_.tx_oversize;
    return ERR_BUF;
  }
  if (packet_tx_) {
    uint8_t eth[SIZEOF_ETH_HDR];
    WriteEthernetHeader(eth, next_hop, config_.mac, ipv6);
    if (!packet_tx_->Queue(eth, p)) {
      NoteRefused(p);
      return ERR_MEM;  // refused packets fill the batch: lwIP keeps the segment for later
    }
    ++stats_.tx_frames;
    return ERR_OK;
  }
  if (size_t{SIZEOF_ETH_HDR} + p->tot_len > port_.tx_frame_bytes()) {
    return OutputChain(p, next_hop, ipv6);
  }
  auto frame = port_.AllocTx();
  if (!frame) {
    ++stats_.tx_pool_empty;
    return ERR_MEM;
  }
  uint8_t* d = frame->data;
  WriteEthernetHeader(d, next_hop, config_.mac, ipv6);
  pbuf_copy_partial(p, d + SIZEOF_ETH_HDR, p->tot_len, 0);
  uint8_t* ip = d + SIZEOF_ETH_HDR;
  const uint32_t tcp_at = TcpHeaderAt(ip, ipv6);
  if (port_.tx_checksum_offload() && tcp_at != 0 && p->tot_len >= tcp_at + kTcpChecksumAt + 2) {
    // lwIP left the field 0 (NETIF_CHECKSUM_GEN_TCP is off): the pseudo-header sum goes in,
    // the kernel completes it over the TCP header and payload.
    WriteTcpPseudoHeaderSum(ip, ipv6, p->tot_len);
    port_.QueueTxWithChecksum(frame->addr, SIZEOF_ETH_HDR + p->tot_len,
                              static_cast<uint16_t>(SIZEOF_ETH_HDR + tcp_at), kTcpChecksumAt);
  } else {
    port_.QueueTx(frame->addr, SIZEOF_ETH_HDR + p->tot_len);
  }
  ++stats_.tx_frames;
  return ERR_OK;
}

LwipNetif::LwipNetif(const std::vector<XskPort*>& ports, const LwipNetifConfig& config)
    : ports_(ports),
      port_(*ports.front()),
      config_(config),
      netif_(std::make_unique<struct netif>()),
      route_(config.ifindex, config.addr, config.netmask, config.gateway, config.ipv6) {
  // Noting and retrying refused flows allocates nothing on the worker: the two lists swap.
  refused_.reserve(kMaxRefusedFlows);
  retrying_.reserve(kMaxRefusedFlows);
  noted_.resize(kNotedSlots);
  noted_round_.resize(kNotedSlots);
}

LwipNetif::~LwipNetif() {
  for (auto& alias : aliases_) netif_remove(alias.get());
  netif_remove(netif_.get());
}

Result<std::unique_ptr<LwipNetif>> LwipNetif::Create(const std::vector<XskPort*>& ports,
                                                     const LwipNetifConfig& config) {
  if (ports.empty()) return Error{{}, "an lwIP netif needs at least one AF_XDP port"};
  XskPort& port = *ports.front();
  std::unique_ptr<LwipNetif> self(new LwipNetif(ports, config));
  if (config.packet_tx) {
    auto tx = PacketTx::Open(config.ifindex, port.ifname());
    if (!tx) return tx.error();
    self->packet_tx_ = std::move(*tx);
  }
  self->rx_pbufs_.resize(ports.size());
  for (size_t k = 0; k < ports.size(); ++k) {
    self->rx_pbufs_[k].resize(ports[k]->frames().total);
    for (RxPbuf& rx : self->rx_pbufs_[k]) {
      rx.owner = self.get();
      rx.port = ports[k];
      rx.custom.custom_free_function = LwipNetifCallbacks::FreeRx;
    }
  }
  ip4_addr_t mask, gw;
  ip4_addr_set_u32(&mask, config.netmask.s_addr);
  ip4_addr_set_u32(&gw, config.gateway.s_addr);
  auto add = [&](struct netif* nif, in_addr a) {
    ip4_addr_t addr;
    ip4_addr_set_u32(&addr, a.s_addr);
    // Poll strips the Ethernet header and hands lwIP the IP packet (LwipNetif::Input), so
    // the netif's input function, which lwIP itself never calls under NO_SYS, is ip_input
    // (either family, by the version nibble).
    if (netif_add(nif, &addr, &mask, &gw, self.get(), LwipNetifCallbacks::Init, ip_input) ==
        nullptr) {
      return false;
    }
    netif_set_up(nif);
    return true;
  };
  if (!add(self->netif_.get(), config.addr)) {
    return Error{{}, port.ifname() + ": lwIP refused the interface"};
  }
  if (config.ipv6.enabled()) SetIpv6Address(self->netif_.get(), config.ipv6.addr);
  for (in_addr a : config.aliases) {
    self->aliases_.push_back(std::make_unique<struct netif>());
    if (!add(self->aliases_.back().get(), a)) {
      self->aliases_.pop_back();
      return Error{{}, port.ifname() + ": lwIP refused the address " + ToString(a)};
    }
  }
  for (const in6_addr& a : config.aliases6) {
    self->aliases_.push_back(std::make_unique<struct netif>());
    struct netif* nif = self->aliases_.back().get();
    if (!add(nif, in_addr{})) {
      self->aliases_.pop_back();
      return Error{{}, port.ifname() + ": lwIP refused the address " + ToString(IpAddress::V6(a))};
    }
    SetIpv6Address(nif, a);
  }
  return self;
}

bool LwipNetif::AddIpv6(const Ipv6Interface& ipv6) {
  if (!ipv6.enabled() || !ip6_addr_isany(netif_ip6_addr(netif_.get(), 0))) return false;
  SetIpv6Address(netif_.get(), ipv6.addr);
  route_.SetIpv6(ipv6);
  return true;
}

void LwipNetif::NoteRefused(const pbuf* p) {
  if (refused_overflow_) return;
  const auto* ip = static_cast<const uint8_t*>(p->payload);
  if (p->len < 1) return;
  const bool ipv6 = (ip[0] >> 4) == 6;
  const uint32_t min_header = ipv6 ? kIpv6Header : 20;
  if (p->len < min_header) return;
  const uint32_t tcp_at = TcpHeaderAt(ip, ipv6);  // lwIP sends TCP only
  if (tcp_at < min_header || p->len < tcp_at + 4) return;
  RefusedFlow f{};
  f.ipv6 = ipv6;
  std::memcpy(f.local_ip, ip + (ipv6 ? 8 : 12), ipv6 ? 16 : 4);
  std::memcpy(f.remote_ip, ip + (ipv6 ? 24 : 16), ipv6 ? 16 : 4);
  f.local_port = static_cast<uint16_t>(ip[tcp_at] << 8 | ip[tcp_at + 1]);
  f.remote_port = static_cast<uint16_t>(ip[tcp_at + 2] << 8 | ip[tcp_at + 3]);
  uint32_t h = (static_cast<uint32_t>(f.local_port) << 16 | f.remote_port);
  for (int k = 0; k < 4; ++k) {
    h = (h ^ f.local_ip[k] ^ (f.remote_ip[k] * 0x9e3779b1u)) * 0x85ebca6bu;
    h ^= h >> 15;
  }
  h = (h ^ (h >> 15)) * 0x2c1b3c6du;
  const size_t slot = (h ^ (h >> 12)) & (kNotedSlots - 1);
  if (noted_round_[slot] == refused_round_ && noted_[slot] == f) return;  // noted already
  noted_[slot] = f;
  noted_round_[slot] = refused_round_;
  if (refused_.size() == kMaxRefusedFlows) {
    refused_overflow_ = true;
    return;
  }
  refused_.push_back(f);
}

void LwipNetif::RetryRefused() {
  const uint64_t start_ns = MonotonicNs();
  // tcp_output may be refused again and note flows meanwhile: retry a copy, note afresh.
  std::swap(refused_, retrying_);
  refused_.clear();
  const bool walk = refused_overflow_;
  refused_overflow_ = false;
  ++refused_round_;  // every slot of noted_ is stale now
  if (walk) {
    tcp_txnow();  // every active pcb with TF_NAGLEMEMERR
    ++stats_.tx_refused_walks;
  } else {
    for (const RefusedFlow& f : retrying_) {
      ip_addr_t local, remote;
      if (f.ipv6) {
        IP_ADDR6(&local, f.local_ip[0], f.local_ip[1], f.local_ip[2], f.local_ip[3]);
        IP_ADDR6(&remote, f.remote_ip[0], f.remote_ip[1], f.remote_ip[2], f.remote_ip[3]);
      } else {
        ip_addr_set_ip4_u32(&local, f.local_ip[0]);
        ip_addr_set_ip4_u32(&remote, f.remote_ip[0]);
      }
      tcp_pcb* pcb = tcp_pcb_hash_lookup(0, &local, f.local_port, &remote, f.remote_port);
      // Gone meanwhile, or sent already (an ACK came and lwIP sent it): nothing to do.
      if (pcb == nullptr || !(pcb->flags & TF_NAGLEMEMERR)) continue;
      ++stats_.tx_refused_flows_retried;
      tcp_output(pcb);
    }
  }
  retrying_.clear();
  stats_.tx_refused_retry_ns += MonotonicNs() - start_ns;
}

void LwipNetif::FlushTx() {
  if (!packet_tx_) return;
  // Segments refused while the batch was full of deferred packets (Output's ERR_MEM) wait in
  // lwIP with TF_NAGLEMEMERR; a pcb with nothing else in flight would wait for good, so once
  // the batch has room again every such pcb sends.
  if (packet_tx_->stats().full != full_seen_ && !packet_tx_->deferring()) {
    full_seen_ = packet_tx_->stats().full;
    RetryRefused();
  }
  if (packet_tx_->batch().empty()) return;
  TxBatch& b = packet_tx_->batch();
  // The whole batch goes one way: part through each would let the packet socket's frames
  // overtake the AF_XDP ones, which leave at the ports' Flush.
  const uint64_t now_ns = MonotonicNs();
  bool held = false, ack_run = false;
  for (uint32_t i = b.first_unsent(); i < b.size(); ++i) {
    held = held || packet_flows_.Held(b.flow(i), now_ns);
    ack_run = ack_run || packet_flows_.InAckRun(b.flow(i));
  }
  const bool small_through_packet =
      config_.small_batches == SmallBatchTx::kPacket ||
      (config_.small_batches == SmallBatchTx::kAcksThroughPacket && b.bare_acks_only() && ack_run);
  const bool port_can = !packet_tx_->deferring() && !b.has_gso() && port_.tx_checksum_offload() &&
                        b.longest() <= port_.tx_frame_bytes() && port_.frames().in_pool >= b.size();
  const bool through_packet = small_through_packet || !port_can || held;
  if (held && !small_through_packet && port_can) stats_.tx_singles_kept_to_packet += b.size();
  for (uint32_t i = b.first_unsent(); i < b.size(); ++i) {
    packet_flows_.Sent(b.flow(i), b.bare_ack(i), through_packet, now_ns);
  }
  if (through_packet) {
    packet_tx_->Flush();
    return;
  }
  b.Seal();
  for (uint32_t i = 0; i < b.size(); ++i) {
    const auto frame = port_.AllocTx();  // enough are free: checked above
    b.CopyFrame(i, frame->data);
    const VnetHeader& v = b.vnet(i);
    const uint32_t len = b.frame_bytes(i);
    if (v.flags & VnetHeader::kNeedsChecksum) {
      port_.QueueTxWithChecksum(frame->addr, len, v.csum_start, v.csum_offset);
    } else {
      port_.QueueTx(frame->addr, len);
    }
  }
  stats_.tx_singles_af_xdp += b.size();
  b.Clear();
}

NetifStats LwipNetif::stats() const {
  NetifStats s = stats_;
  if (packet_tx_) s.packet_tx = packet_tx_->stats();
  return s;
}

// A packet longer than one TX frame goes out as a chain of frames (multi-buffer TX, jumbo
// MTUs). Its TCP checksum is computed here in software: chains only happen above a 4058-byte
// MTU, and whether 6.18 completes a TX-metadata checksum over a multi-buffer packet was not
// checked (the kernel's selftests for that case are from late 2026).
int8_t LwipNetif::OutputChain(pbuf* p, const MacAddress& next_hop, bool ipv6) {
  const uint32_t cap = port_.tx_frame_bytes();
  const uint32_t total = SIZEOF_ETH_HDR + p->tot_len;
  const uint32_t count = (total + cap - 1) / cap;
  if (!port_.multi_buffer() || count > kMaxTxChain) {
    ++stats_.tx_oversize;
    return ERR_BUF;
  }
  TxFrame frames[kMaxTxChain];
  for (uint32_t i = 0; i < count; ++i) {
    auto frame = port_.AllocTx();
    if (!frame) {
      for (uint32_t k = 0; k < i; ++k) port_.Release(frames[k].addr);
      ++stats_.tx_pool_empty;
      return ERR_MEM;
    }
    frames[i] = *frame;
  }
  const auto* ip = static_cast<const uint8_t*>(p->payload);
  const uint32_t ihl = p->len >= kIpv6Header ? TcpHeaderAt(ip, ipv6) : 0;
  uint16_t checksum = 0;
  const bool fill_checksum = port_.tx_checksum_offload() && ihl != 0 && p->len >= ihl &&
                             p->tot_len >= ihl + kTcpChecksumAt + 2;
  if (fill_checksum) {
    // lwIP left the field 0 (NETIF_CHECKSUM_GEN_TCP is off on this netif); lwIP's own
    // checksum over the TCP part of its pbuf chain fills it in.
    if (ipv6) {
      ip6_addr_t src, dst;
      std::memcpy(src.addr, ip + 8, 16);
      std::memcpy(dst.addr, ip + 24, 16);
      pbuf_remove_header(p, ihl);
      checksum = ip6_chksum_pseudo(p, IPPROTO_TCP, p->tot_len, &src, &dst);
    } else {
      ip4_addr_t src, dst;
      std::memcpy(&src.addr, ip + 12, 4);
      std::memcpy(&dst.addr, ip + 16, 4);
      pbuf_remove_header(p, ihl);
      checksum = inet_chksum_pseudo(p, IPPROTO_TCP, p->tot_len, &src, &dst);
    }
    pbuf_add_header_force(p, ihl);  // back where lwIP left it, whatever the pbuf's type
  }
  uint32_t copied = 0;  // of the IP packet
  for (uint32_t i = 0; i < count; ++i) {
    uint8_t* d = frames[i].data;
    uint32_t room = cap;
    if (i == 0) {
      WriteEthernetHeader(d, next_hop, config_.mac, ipv6);
      d += SIZEOF_ETH_HDR;
      room -= SIZEOF_ETH_HDR;
    }
    const auto len = static_cast<u16_t>(std::min<uint32_t>(room, p->tot_len - copied));
    pbuf_copy_partial(p, d, len, static_cast<u16_t>(copied));
    if (i == 0 && fill_checksum) {
      std::memcpy(d + ihl + kTcpChecksumAt, &checksum, sizeof(checksum));  // network order
    }
    copied += len;
    port_.QueueTx(frames[i].addr, (i == 0 ? SIZEOF_ETH_HDR : 0) + len, i + 1 < count);
  }
  ++stats_.tx_chains;
  ++stats_.tx_frames;  // packets, as in Output
  return ERR_OK;
}

// lwIP's ethernet_input handles IPv4 only when its ARP is compiled in (2.1.3 guards the case
// with LWIP_ARP), and IPv6 only with its ND, so the netif demuxes itself: the steering program
// only redirects TCP over IPv4 or IPv6.
// The pbuf chain starts at the IP header, which keeps a 64 KiB IP packet (a TSO super-segment,
// 18 frames) within lwIP's u16 tot_len; the Ethernet header would push it past.
void LwipNetif::Input(size_t port_index, const RxFrame* frames, uint32_t count) {
  XskPort& port = *ports_[port_index];
  const RxFrame& first = frames[0];
  stats_.rx_frames += count;
  ++stats_.rx_packets;
  size_t ip_bytes = 0;
  for (uint32_t i = 0; i < count; ++i) ip_bytes += frames[i].len;
  ip_bytes -= std::min<size_t>(ip_bytes, SIZEOF_ETH_HDR);
  const bool ip = first.len > SIZEOF_ETH_HDR && IsIpFrame(first.data);
  if (!ip || ip_bytes > 0xffff) {
    ++(ip ? stats_.rx_oversize : stats_.rx_not_ip);
    for (uint32_t i = 0; i < count; ++i) port.Release(frames[i].addr);
    return;
  }
  if (handoff_ != nullptr) {
    // The steering program stamps every frame it redirects with the flow's owner, just in
    // front of the packet (copy mode copies the metadata too: tests/netns/rx_metadata_test).
    // The magic tells a stamp from whatever an earlier packet left in the headroom; an
    // unstamped frame is this worker's to serve.
    steer_rx_meta meta;
    std::memcpy(&meta, first.data - sizeof(meta), sizeof(meta));
    if (meta.magic == STEER_RX_META_MAGIC && meta.owner != handoff_->self() &&
        meta.owner < handoff_->workers()) {
      (void)handoff_->Forward(meta.owner, frames, count, tag_);  // a drop is counted there
      for (uint32_t i = 0; i < count; ++i) port.Release(frames[i].addr);
      return;
    }
  }
  route_.LearnFromSyn(first.data, first.len, sys_now());
  pbuf* head = nullptr;
  for (uint32_t i = 0; i < count; ++i) {
    const RxFrame& f = frames[i];
    const uint32_t skip = i == 0 ? SIZEOF_ETH_HDR : 0;
    const auto len = static_cast<u16_t>(f.len - skip);
    RxPbuf& rx = rx_pbufs_[port_index][port.FrameIndex(f.addr)];
    rx.addr = f.addr;
    ++rx_pbufs_in_use_;
    pbuf* p = pbuf_alloced_custom(PBUF_RAW, len, PBUF_REF, &rx.custom, f.data + skip, len);
    if (head == nullptr) {
      head = p;
    } else {
      pbuf_cat(head, p);  // the chain is at most kMaxRxChain long
    }
  }
  ip_input(head, netif_.get());  // by the version nibble; consumes the chain whatever it decides
}

void LwipNetif::InputCopy(std::span<const uint8_t> frame) {
  ++stats_.rx_copied;
  if (frame.size() <= SIZEOF_ETH_HDR || frame.size() - SIZEOF_ETH_HDR > 0xffff ||
      !IsIpFrame(frame.data())) {
    return;
  }
  route_.LearnFromSyn(frame.data(), frame.size(), sys_now());
  const auto len = static_cast<u16_t>(frame.size() - SIZEOF_ETH_HDR);
  pbuf* p = pbuf_alloc(PBUF_RAW, len, PBUF_POOL);
  if (p == nullptr) {
    ++stats_.rx_copy_no_pool;
    return;
  }
  pbuf_take(p, frame.data() + SIZEOF_ETH_HDR, len);
  ip_input(p, netif_.get());
}

uint32_t LwipNetif::Poll(uint32_t budget) {
  constexpr uint32_t kBatch = 64;
  static_assert(kBatch >= kMaxRxChain);
  RxFrame frames[kBatch];
  const uint32_t take = std::clamp(budget, kMaxRxChain, kBatch);
  uint32_t total = 0;
  for (size_t k = 0; k < ports_.size(); ++k) {
    const uint32_t n = ports_[k]->Receive(std::span<RxFrame>(frames, take));
    // Receive hands out whole packets: the last frame of the batch ends one.
    for (uint32_t i = 0; i < n;) {
      uint32_t end = i;
      while (frames[end].more) ++end;
      Input(k, frames + i, end - i + 1);
      i = end + 1;
    }
    total += n;
  }
  return total;
}

}  // namespace xdpfwd
