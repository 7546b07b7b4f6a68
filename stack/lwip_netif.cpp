// lwIP netif over an AF_XDP port; see lwip_netif.h.
#include "stack/lwip_netif.h"

#include <arpa/inet.h>

#include <algorithm>
#include <cstring>

#include "os/clock.h"
#include "os/endpoint.h"
#include "xdp/rx_meta.h"

extern "C" {
#include "lwip/inet_chksum.h"
#include "lwip/ip4.h"
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

void WriteEthernetHeader(uint8_t* d, const MacAddress& to, const MacAddress& from) {
  std::memcpy(d, to.data(), 6);
  std::memcpy(d + 6, from.data(), 6);
  d[12] = 0x08;  // IPv4
  d[13] = 0x00;
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
    const LwipNetifConfig& c = self->config_;
    in_addr destination{};
    destination.s_addr = ip4_addr_get_u32(dest);
    const auto mac = self->route_.Resolve(destination, sys_now());
    if (!mac) {
      ++self->stats_.tx_no_neighbor;
      return ERR_RTE;  // lwIP keeps the segment queued and sends it again later
    }
    if (p->tot_len > c.mtu) {
      ++self->stats_.tx_oversize;
      return ERR_BUF;
    }
    if (self->packet_tx_) {
      uint8_t eth[SIZEOF_ETH_HDR];
      WriteEthernetHeader(eth, *mac, c.mac);
      if (!self->packet_tx_->Queue(eth, p)) {
        self->NoteRefused(p);
        return ERR_MEM;  // refused packets fill the batch: lwIP keeps the segment for later
      }
      ++self->stats_.tx_frames;
      return ERR_OK;
    }
    if (size_t{SIZEOF_ETH_HDR} + p->tot_len > self->port_.tx_frame_bytes()) {
      return self->OutputChain(p, *mac);
    }
    auto frame = self->port_.AllocTx();
    if (!frame) {
      ++self->stats_.tx_pool_empty;
      return ERR_MEM;
    }
    uint8_t* d = frame->data;
    WriteEthernetHeader(d, *mac, c.mac);
    pbuf_copy_partial(p, d + SIZEOF_ETH_HDR, p->tot_len, 0);
    uint8_t* ip = d + SIZEOF_ETH_HDR;
    const uint32_t ihl = (ip[0] & 0x0fu) * 4;
    if (self->port_.tx_checksum_offload() && ip[9] == IPPROTO_TCP &&
        p->tot_len >= ihl + kTcpChecksumAt + 2) {
      // lwIP left the field 0 (NETIF_CHECKSUM_GEN_TCP is off): the pseudo-header sum goes in,
      // the kernel completes it over the TCP header and payload.
      WritePseudoHeaderSum(ip, ihl, p->tot_len - ihl);
      self->port_.QueueTxWithChecksum(frame->addr, SIZEOF_ETH_HDR + p->tot_len,
                                      static_cast<uint16_t>(SIZEOF_ETH_HDR + ihl), kTcpChecksumAt);
    } else {
      self->port_.QueueTx(frame->addr, SIZEOF_ETH_HDR + p->tot_len);
    }
    ++self->stats_.tx_frames;
    return ERR_OK;
  }

  static void FreeRx(struct pbuf* p) {
    auto* rx = reinterpret_cast<LwipNetif::RxPbuf*>(p);
    rx->port->Release(rx->addr);
    --rx->owner->rx_pbufs_in_use_;
  }
};

LwipNetif::LwipNetif(const std::vector<XskPort*>& ports, const LwipNetifConfig& config)
    : ports_(ports),
      port_(*ports.front()),
      config_(config),
      netif_(std::make_unique<struct netif>()),
      route_(config.ifindex, config.addr, config.netmask, config.gateway) {
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
    // Poll strips the Ethernet header and hands lwIP the IPv4 packet (LwipNetif::Input), so
    // the netif's input function, which lwIP itself never calls under NO_SYS, is ip4_input.
    if (netif_add(nif, &addr, &mask, &gw, self.get(), LwipNetifCallbacks::Init, ip4_input) ==
        nullptr) {
      return false;
    }
    netif_set_up(nif);
    return true;
  };
  if (!add(self->netif_.get(), config.addr)) {
    return Error{{}, port.ifname() + ": lwIP refused the interface"};
  }
  for (in_addr a : config.aliases) {
    self->aliases_.push_back(std::make_unique<struct netif>());
    if (!add(self->aliases_.back().get(), a)) {
      self->aliases_.pop_back();
      return Error{{}, port.ifname() + ": lwIP refused the address " + ToString(a)};
    }
  }
  return self;
}

void LwipNetif::NoteRefused(const pbuf* p) {
  if (refused_overflow_) return;
  const auto* ip = static_cast<const uint8_t*>(p->payload);
  const uint32_t ihl = p->len >= 1 ? (ip[0] & 0x0fu) * 4 : 0;
  if (ihl < 20 || p->len < ihl + 4 || ip[9] != IPPROTO_TCP) return;  // lwIP sends TCP only
  RefusedFlow f{};
  std::memcpy(&f.local_ip, ip + 12, 4);
  std::memcpy(&f.remote_ip, ip + 16, 4);
  f.local_port = static_cast<uint16_t>(ip[ihl] << 8 | ip[ihl + 1]);
  f.remote_port = static_cast<uint16_t>(ip[ihl + 2] << 8 | ip[ihl + 3]);
  uint32_t h = (f.local_ip ^ (f.remote_ip * 0x9e3779b1u)) +
               (static_cast<uint32_t>(f.local_port) << 16 | f.remote_port);
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
      ip_addr_set_ip4_u32(&local, f.local_ip);
      ip_addr_set_ip4_u32(&remote, f.remote_ip);
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
int8_t LwipNetif::OutputChain(pbuf* p, const MacAddress& next_hop) {
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
  const uint32_t ihl = (ip[0] & 0x0fu) * 4;
  uint16_t checksum = 0;
  const bool fill_checksum = port_.tx_checksum_offload() && ip[9] == IPPROTO_TCP && p->len >= ihl &&
                             p->tot_len >= ihl + kTcpChecksumAt + 2;
  if (fill_checksum) {
    // lwIP left the field 0 (NETIF_CHECKSUM_GEN_TCP is off on this netif); lwIP's own
    // checksum over the TCP part of its pbuf chain fills it in.
    ip4_addr_t src, dst;
    std::memcpy(&src.addr, ip + 12, 4);
    std::memcpy(&dst.addr, ip + 16, 4);
    pbuf_remove_header(p, ihl);
    checksum = inet_chksum_pseudo(p, IPPROTO_TCP, p->tot_len, &src, &dst);
    pbuf_add_header_force(p, ihl);  // back where lwIP left it, whatever the pbuf's type
  }
  uint32_t copied = 0;  // of the IP packet
  for (uint32_t i = 0; i < count; ++i) {
    uint8_t* d = frames[i].data;
    uint32_t room = cap;
    if (i == 0) {
      WriteEthernetHeader(d, next_hop, config_.mac);
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
// with LWIP_ARP), so the netif demuxes itself: the steering program only redirects IPv4 TCP.
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
  const bool ipv4 = first.len > SIZEOF_ETH_HDR && first.data[12] == 0x08 && first.data[13] == 0x00;
  if (!ipv4 || ip_bytes > 0xffff) {
    ++(ipv4 ? stats_.rx_oversize : stats_.rx_not_ipv4);
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
  ip4_input(head, netif_.get());  // consumes the chain whatever it decides
}

void LwipNetif::InputCopy(std::span<const uint8_t> frame) {
  ++stats_.rx_copied;
  if (frame.size() <= SIZEOF_ETH_HDR || frame.size() - SIZEOF_ETH_HDR > 0xffff) return;
  route_.LearnFromSyn(frame.data(), frame.size(), sys_now());
  const auto len = static_cast<u16_t>(frame.size() - SIZEOF_ETH_HDR);
  pbuf* p = pbuf_alloc(PBUF_RAW, len, PBUF_POOL);
  if (p == nullptr) {
    ++stats_.rx_copy_no_pool;
    return;
  }
  pbuf_take(p, frame.data() + SIZEOF_ETH_HDR, len);
  ip4_input(p, netif_.get());
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
