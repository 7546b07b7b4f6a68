// TX through an AF_PACKET socket with GSO; see packet_tx.h.
#include "stack/packet_tx.h"

#include <linux/if_packet.h>
#include <net/ethernet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <string>

#include "os/clock.h"
#include "os/log.h"

extern "C" {
#include "lwip/pbuf.h"
#include "os/inet_checksum.h"
}

namespace xdpfwd {

namespace {

constexpr uint32_t kEth = 14;
constexpr uint32_t kTcpChecksumAt = 16;
constexpr uint8_t kFin = 0x01, kSyn = 0x02, kRst = 0x04, kPsh = 0x08, kAck = 0x10;
// Flags a segment may carry and still be one of a GSO packet's segments (the kernel gives PSH
// and FIN to the last segment only, which is where they were).
constexpr uint8_t kMergeable = kAck | kPsh | kFin;

uint16_t Get16(const uint8_t* p) { return static_cast<uint16_t>(p[0] << 8 | p[1]); }
uint32_t Get32(const uint8_t* p) { return uint32_t{Get16(p)} << 16 | Get16(p + 2); }
void Put16(uint8_t* p, uint16_t v) {
  p[0] = static_cast<uint8_t>(v >> 8);
  p[1] = static_cast<uint8_t>(v);
}

// The IPv4 header checksum over `ihl` bytes (its checksum field zeroed first).
void WriteIpChecksum(uint8_t* ip, uint32_t ihl) {
  Put16(ip + 10, 0);
  Put16(ip + 10, InetChecksum(ip, ihl));
}

constexpr uint32_t kIpv6Header = 40;  // lwIP sends no extension headers

bool IsIpv6(const uint8_t* ip) { return (ip[0] >> 4) == 6; }
// The IP header's length: IPv4's IHL, IPv6's fixed 40 bytes.
uint32_t IpHeaderBytes(const uint8_t* ip) { return IsIpv6(ip) ? kIpv6Header : (ip[0] & 0x0fu) * 4; }
// Where the source and destination addresses lie in the IP header, and their bytes together.
uint32_t AddressesAt(bool ipv6) { return ipv6 ? 8 : 12; }
uint32_t AddressBytes(bool ipv6) { return ipv6 ? 32 : 8; }

// The headers of an lwIP packet: lwIP puts IP and TCP headers in its first pbuf, but nothing
// in its API promises it, so they are copied out (up to 120 bytes: both at their longest).
struct Headers {
  uint8_t bytes[120];
  uint32_t ip_len = 0;  // the whole IP packet
  bool ipv6 = false;
  uint32_t ihl = 0;         // the IP header: IPv4's with options, or IPv6's 40 bytes
  uint32_t tcp_header = 0;  // 0: not TCP (or too short to tell)
  uint32_t payload = 0;
  uint32_t seq = 0;
  uint8_t flags = 0;

  // Copies the headers and nothing more: the payload may lie in a receive frame the worker
  // has not touched (the zero-copy relay), and reading it here would only move the cache
  // misses of the kernel's copy into this one.
  explicit Headers(const pbuf* p) : ip_len(p->tot_len) {
    if (ip_len < 20) return;
    pbuf_copy_partial(p, bytes, 20, 0);
    ipv6 = IsIpv6(bytes);
    ihl = IpHeaderBytes(bytes);
    const uint8_t protocol = ipv6 ? bytes[6] : bytes[9];
    if (protocol != IPPROTO_TCP || ihl < 20 || ip_len < ihl + 20) return;
    pbuf_copy_partial(p, bytes + 20, static_cast<u16_t>(ihl), 20);  // IP's rest, TCP's 20
    const uint32_t doff = (bytes[ihl + 12] >> 4) * 4u;
    if (doff < 20 || ip_len < ihl + doff) return;
    if (doff > 20) {
      pbuf_copy_partial(p, bytes + ihl + 20, static_cast<u16_t>(doff - 20),
                        static_cast<u16_t>(ihl + 20));
    }
    tcp_header = doff;
    payload = ip_len - ihl - doff;
    seq = Get32(bytes + ihl + 4);
    flags = bytes[ihl + 13];
  }
  bool tcp() const { return tcp_header != 0; }
  // A hash of the addresses and ports (the multiplier is 2^64 over the golden ratio, odd: the
  // high bits of the product mix every input bit), never 0.
  uint32_t flow() const {
    if (!tcp()) return 0;
    uint64_t addresses = uint64_t{Get32(bytes + 12)} << 32 | Get32(bytes + 16);
    if (ipv6) {  // the four 64-bit halves of both addresses, each mixed before the next
      addresses = 0;
      for (uint32_t at = 8; at < 40; at += 8) {
        addresses = (addresses ^ (uint64_t{Get32(bytes + at)} << 32 | Get32(bytes + at + 4))) *
                    0xc2b2ae3d27d4eb4fULL;
      }
    }
    const uint64_t x =
        (addresses ^ Get32(bytes + ihl) * 0xff51afd7ed558ccdULL) * 0x9e3779b97f4a7c15ULL;
    const uint32_t h = static_cast<uint32_t>(x >> 32);
    return h != 0 ? h : 1;
  }
};

}  // namespace

void WritePseudoHeaderSum(uint8_t* ip, uint32_t ihl, uint32_t tcp_len) {
  Put16(ip + ihl + kTcpChecksumAt, InetFold(Ipv4PseudoHeaderSum(ip, IPPROTO_TCP, tcp_len)));
}

TxBatch::TxBatch() : bytes_(kBytes) {}

TxBatch::~TxBatch() { Clear(); }

void TxBatch::Clear() {
  for (uint32_t i = 0; i < pinned_count_; ++i) pbuf_free(pinned_[i]);
  pinned_count_ = 0;
  used_ = 0;
  total_ = 0;
  count_ = 0;
  first_unsent_ = 0;
  iov_used_ = 0;
  open_ = {};
  gso_ = false;
  not_bare_ack_ = false;
  longest_ = 0;
}

void TxBatch::Sent(uint32_t n) {
  first_unsent_ += n;
  if (first_unsent_ >= count_) Clear();
}

void TxBatch::Reference(pbuf* p, uint32_t offset, uint32_t len) {
  for (pbuf* q = p; q != nullptr && len > 0; q = q->next) {
    if (offset >= q->len) {
      offset -= q->len;
      continue;
    }
    const uint32_t n = std::min<uint32_t>(q->len - offset, len);
    iov_[iov_used_++] = {static_cast<uint8_t*>(q->payload) + offset, n};
    offset = 0;
    len -= n;
  }
  pbuf_ref(p);
  pinned_[pinned_count_++] = p;
}

bool TxBatch::Add(const uint8_t (&eth)[14], pbuf* ip) {
  const Headers h(ip);
  // A referenced payload takes an iovec per pbuf of the chain at most.
  const uint32_t links = pbuf_clen(ip);
  const bool room_to_reference = iov_used_ + links <= kMaxIovecs && pinned_count_ < kMaxPinned;
  if (open_.valid && h.tcp() && h.payload > 0 && (h.flags & ~kMergeable) == 0 &&
      (h.flags & kAck) != 0) {
    const uint32_t last = count_ - 1;
    uint8_t* fip = bytes_.data() + at_[last] + kEth;
    const uint32_t ihl = IpHeaderBytes(fip);
    const uint32_t headers = ihl + h.tcp_header;
    // The next segment of the same flow, same header layout and options, after full ones only,
    // and the packet stays within what one IP packet (and GSO) can carry.
    const bool continues =
        kEth + headers == open_.header_bytes && IsIpv6(fip) == h.ipv6 && ihl == h.ihl &&
        h.seq == open_.next_seq && h.payload <= open_.mss && open_.payload % open_.mss == 0 &&
        std::memcmp(fip + AddressesAt(h.ipv6), h.bytes + AddressesAt(h.ipv6),
                    AddressBytes(h.ipv6)) == 0 &&                                   // addresses
        std::memcmp(fip + ihl, h.bytes + ihl, 4) == 0 &&                            // ports
        std::memcmp(fip + ihl + 20, h.bytes + ihl + 20, h.tcp_header - 20) == 0 &&  // options
        headers + open_.payload + h.payload <= 0xffff &&
        segments_[last] < kMaxSegments && iov_count_[last] + links <= kMaxIovecsPerFrame;
    if (continues) {
      if (!room_to_reference || total_ + h.payload > kBytes) return false;
      Reference(ip, headers, h.payload);
      iov_count_[last] = iov_used_ - iov_at_[last];
      total_ += h.payload;
      len_[last] += h.payload;
      ++segments_[last];
      gso_ = true;
      longest_ = std::max(longest_, len_[last]);
      open_.payload += h.payload;
      open_.next_seq += h.payload;
      // The newest acknowledgement and window stand for the whole packet: sending them with
      // earlier bytes too is what a later ACK would have said anyway.
      uint8_t* tcp = fip + ihl;
      std::memcpy(tcp + 8, h.bytes + ihl + 8, 4);    // ack
      std::memcpy(tcp + 14, h.bytes + ihl + 14, 2);  // window
      tcp[13] |= h.flags & (kPsh | kFin);
      if (h.payload < open_.mss || (h.flags & kFin) != 0) open_.valid = false;
      return true;
    }
  }
  const bool bare_ack = h.tcp() && h.payload == 0 && h.flags == kAck;
  if (!bare_ack) not_bare_ack_ = true;
  const uint32_t len = kEth + h.ip_len;
  const bool reference = h.tcp() && h.payload >= kReferenceFrom;
  const uint32_t copied = reference ? kEth + h.ihl + h.tcp_header : len;
  if (count_ == kMaxPackets || total_ + len > kBytes || used_ + copied > kBytes ||
      iov_used_ + 2 + (reference ? links : 0) > kMaxIovecs || (reference && !room_to_reference)) {
    return false;
  }
  uint8_t* frame = bytes_.data() + used_;
  std::memcpy(frame, eth, kEth);
  pbuf_copy_partial(ip, frame + kEth, static_cast<u16_t>(copied - kEth), 0);
  at_[count_] = used_;
  len_[count_] = len;
  segments_[count_] = 1;
  mss_[count_] = h.payload;
  flow_[count_] = h.flow();
  bare_ack_[count_] = bare_ack;
  iov_at_[count_] = iov_used_;
  iov_[iov_used_++] = {&vnet_[count_], sizeof(VnetHeader)};
  iov_[iov_used_++] = {frame, copied};
  if (reference) Reference(ip, copied - kEth, h.payload);
  iov_count_[count_] = iov_used_ - iov_at_[count_];
  longest_ = std::max(longest_, len);
  ++count_;
  used_ += copied;
  total_ += len;
  open_ = {};
  if (h.tcp() && h.payload > 0 && (h.flags & ~(kAck | kPsh)) == 0 && (h.flags & kAck) != 0) {
    open_.valid = true;
    open_.header_bytes = kEth + h.ihl + h.tcp_header;
    open_.mss = h.payload;
    open_.payload = h.payload;
    open_.next_seq = h.seq + h.payload;
  }
  return true;
}

void TxBatch::CopyFrame(uint32_t i, uint8_t* to) const {
  const auto v = iovecs(i);
  for (size_t k = 1; k < v.size(); ++k) {  // iovec 0 is the virtio-net header
    std::memcpy(to, v[k].iov_base, v[k].iov_len);
    to += v[k].iov_len;
  }
}

std::vector<uint8_t> TxBatch::Frame(uint32_t i) const {
  std::vector<uint8_t> f(len_[i]);
  CopyFrame(i, f.data());
  return f;
}

void TxBatch::Seal() {
  for (uint32_t i = 0; i < count_; ++i) {
    uint8_t* ip = bytes_.data() + at_[i] + kEth;
    const uint32_t ip_len = len_[i] - kEth;
    VnetHeader& v = vnet_[i];
    v = {};
    const bool ipv6 = IsIpv6(ip);
    const uint32_t ihl = IpHeaderBytes(ip);
    const uint8_t protocol = ipv6 ? ip[6] : ip[9];
    if (ip_len < 40 || protocol != IPPROTO_TCP || ihl < 20 || ip_len < ihl + 20) continue;
    if (segments_[i] > 1) {
      if (ipv6) {
        Put16(ip + 4, static_cast<uint16_t>(ip_len - ihl));  // payload length; no checksum
      } else {
        Put16(ip + 2, static_cast<uint16_t>(ip_len));
        WriteIpChecksum(ip, ihl);
      }
      v.gso_type = ipv6 ? VnetHeader::kGsoTcpV6 : VnetHeader::kGsoTcpV4;
      v.gso_size = static_cast<uint16_t>(mss_[i]);
      v.hdr_len = static_cast<uint16_t>(kEth + ihl + (ip[ihl + 12] >> 4) * 4u);
    }
    if (ipv6) {
      Put16(ip + ihl + kTcpChecksumAt,
            InetFold(Ipv6PseudoHeaderSum(ip, IPPROTO_TCP, ip_len - ihl)));
    } else {
      WritePseudoHeaderSum(ip, ihl, ip_len - ihl);
    }
    v.flags = VnetHeader::kNeedsChecksum;
    v.csum_start = static_cast<uint16_t>(kEth + ihl);
    v.csum_offset = kTcpChecksumAt;
  }
}

Result<std::unique_ptr<PacketTx>> PacketTx::Open(int ifindex, const std::string& ifname) {
  // Protocol 0: the socket is given no received packet, it only sends.
  UniqueFd fd(socket(AF_PACKET, SOCK_RAW | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  if (!fd) return SystemError(ifname + ": packet socket for TX");
  const int one = 1;
  if (setsockopt(fd.get(), SOL_PACKET, PACKET_VNET_HDR, &one, sizeof(one)) != 0) {
    return SystemError(ifname + ": PACKET_VNET_HDR (GSO through a packet socket)");
  }
  // No PACKET_QDISC_BYPASS: its direct transmit drops any skb the device cannot take as it
  // is (ENOBUFS), and a GSO packet has to be cut in software where the device has no TSO (a
  // veth whose peer runs native XDP loses it). Through dev_queue_xmit it is cut; veth's
  // qdisc is noqueue, a NIC's is what the kernel's own TCP goes through too.
  // A batch is at most TxBatch::kBytes; the kernel charges each skb's truesize until the
  // device (veth: the peer's receive) lets it go. Four batches in flight before EAGAIN.
  const int sndbuf = 4 * static_cast<int>(TxBatch::kBytes);
  if (setsockopt(fd.get(), SOL_SOCKET, SO_SNDBUFFORCE, &sndbuf, sizeof(sndbuf)) != 0) {
    (void)setsockopt(fd.get(), SOL_SOCKET, SO_SNDBUF, &sndbuf, sizeof(sndbuf));
  }
  return std::unique_ptr<PacketTx>(new PacketTx(std::move(fd), ifindex, ifname));
}

std::unique_ptr<PacketTx> PacketTx::ForTest(SendFn send, const std::string& ifname) {
  std::unique_ptr<PacketTx> tx(new PacketTx(UniqueFd(), 0, ifname));
  tx->send_ = std::move(send);
  return tx;
}

bool PacketTx::Queue(const uint8_t (&eth)[14], pbuf* ip) {
  if (batch_.Add(eth, ip)) return true;
  Flush();
  if (batch_.Add(eth, ip)) return true;
  ++stats_.full;  // still full of packets the kernel refused
  return false;
}

void PacketTx::Flush() {
  if (batch_.empty()) return;
  batch_.Seal();  // again for frames kept from the last flush: it only rewrites their headers
  // The protocol becomes the skb's: GSO segments by it, so an IPv6 packet sent as ETH_P_IP
  // was refused (ENOMEM for every GSO_TCPV6 packet, seen in LwipIpv6EchoTest/packet_socket).
  sockaddr_ll to4{}, to6{};
  to4.sll_family = to6.sll_family = AF_PACKET;
  to4.sll_ifindex = to6.sll_ifindex = ifindex_;
  to4.sll_protocol = htons(ETH_P_IP);
  to6.sll_protocol = htons(ETH_P_IPV6);
  mmsghdr msgs[TxBatch::kMaxPackets];
  const uint32_t first = batch_.first_unsent();
  const uint32_t n = batch_.size();
  for (uint32_t i = first; i < n; ++i) {
    const auto iov = batch_.iovecs(i);
    msgs[i] = {};
    msgs[i].msg_hdr.msg_name = batch_.ethertype(i) == ETH_P_IPV6 ? &to6 : &to4;
    msgs[i].msg_hdr.msg_namelen = sizeof(sockaddr_ll);
    msgs[i].msg_hdr.msg_iov = const_cast<iovec*>(iov.data());
    msgs[i].msg_hdr.msg_iovlen = iov.size();
  }
  // sendmmsg stops at the first packet the kernel refuses. For want of room (ENOBUFS: the
  // receiving side's queue, e.g. a veth peer's ring while its NAPI thread is late; EAGAIN: the
  // socket's send buffer) that packet and the rest wait for the next flush; for any other
  // reason that packet is dropped and the rest are tried again.
  uint32_t done = first;
  bool refused_for_room = false;
  while (done < n) {
    ++stats_.sends;
    const uint64_t start = MonotonicNs();
    const int sent = send_ ? send_(msgs + done, n - done)
                           : sendmmsg(fd_.get(), msgs + done, n - done, MSG_DONTWAIT);
    stats_.send_ns += MonotonicNs() - start;
    if (sent > 0) {
      for (uint32_t i = done; i < done + static_cast<uint32_t>(sent); ++i) {
        stats_.segments += batch_.segments(i);
        if (batch_.segments(i) > 1) ++stats_.gso_packets;
      }
      done += static_cast<uint32_t>(sent);
      stats_.packets += static_cast<uint32_t>(sent);
      continue;
    }
    if (sent < 0 && errno == EINTR) continue;
    const int err = sent < 0 ? errno : 0;
    if (err == ENOBUFS || err == EAGAIN) {
      refused_for_room = true;
      break;
    }
    uint64_t held_back = 0;
    if (refusal_log_.Count(MonotonicMs(), held_back)) {
      Log(ifname_ +
          ": the kernel refused a packet from the TX packet socket: " + std::strerror(err) +
          (batch_.segments(done) > 1
               ? " (a GSO packet of " + std::to_string(batch_.segments(done)) + " segments)"
               : "") +
          (held_back > 0 ? "; " + std::to_string(held_back) + " more since the last such line"
                         : ""));
    }
    ++stats_.dropped;  // this packet only
    ++done;
  }
  if (!refused_for_room) {
    deferring_ = false;
    batch_.Clear();
    return;
  }
  const uint64_t now = MonotonicMs();
  if (!deferring_ || done > first) stalled_since_ms_ = now;
  deferring_ = true;
  if (now - stalled_since_ms_ > kMaxDeferralMs) {  // nothing went out for that long: TCP's turn
    uint64_t held_back = 0;
    if (refusal_log_.Count(now, held_back)) {
      Log(ifname_ + ": the kernel refused the TX packet socket's packets for " +
          std::to_string(kMaxDeferralMs) + " ms; " + std::to_string(n - done) +
          " dropped (TCP resends them)");
    }
    stats_.dropped += n - done;
    deferring_ = false;
    batch_.Clear();
    return;
  }
  stats_.deferred += n - done;
  batch_.Sent(done - first);
}

}  // namespace xdpfwd
