// TX through an AF_PACKET socket with a virtio-net header per packet (PACKET_VNET_HDR), for
// interfaces whose AF_XDP sockets run in copy mode. There AF_XDP builds one skb per frame and
// cannot send GSO, so each MTU-sized frame costs the receiver a whole TCP receive (on veth, in
// the worker's own softirq). Here the consecutive TCP segments of one flow queued in a batch
// leave as one GSO packet, as Linux's own TCP sends them: the kernel or the device cuts it,
// and on veth the peer's TCP takes it whole. Checksums are left to the kernel (NEEDS_CSUM).
// One sendmmsg per batch (docs/stack.md, "TX through a packet socket").
#pragma once

#include <sys/uio.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "os/log.h"
#include "os/result.h"
#include "os/unique_fd.h"

struct mmsghdr;
struct pbuf;

namespace xdpfwd {

// struct VnetHeader of <linux/virtio_net.h> (which C++ cannot include: it has a field
// named `class`), in the host's byte order as PACKET_VNET_HDR takes it on little-endian hosts.
struct VnetHeader {
  static constexpr uint8_t kNeedsChecksum = 1;  // VIRTIO_NET_HDR_F_NEEDS_CSUM
  static constexpr uint8_t kGsoTcpV4 = 1;       // VIRTIO_NET_HDR_GSO_TCPV4
  static constexpr uint8_t kGsoTcpV6 = 4;       // VIRTIO_NET_HDR_GSO_TCPV6
  uint8_t flags;
  uint8_t gso_type;
  uint16_t hdr_len;  // Ethernet, IP and TCP headers
  uint16_t gso_size;
  uint16_t csum_start;
  uint16_t csum_offset;
};
static_assert(sizeof(VnetHeader) == 10, "the kernel's struct VnetHeader");

// With a packet socket for TX, where a batch without a GSO packet goes: through the AF_XDP port,
// cheaper per small packet; through the packet socket when it holds bare ACKs only and one of
// their flows is in a run of them (the default: a bulk receiver's ACKs; a veth peer with GRO and
// threaded NAPI receives a packet socket's skbs in its own thread, AF_XDP's in the sender's
// softirq, docs/stack.md); or through the packet socket always. In every mode a flow that sent
// through the packet socket lately keeps to it (PacketPathFlows).
enum class SmallBatchTx { kAfXdp, kAcksThroughPacket, kPacket };

struct PacketTxStats {
  uint64_t packets = 0;      // handed to the kernel; a GSO packet counts once
  uint64_t segments = 0;     // lwIP's packets in them
  uint64_t gso_packets = 0;  // of `packets`, those carrying more than one segment
  uint64_t sends = 0;        // sendmmsg calls
  // Time in them: on veth the receiving namespace's stack (its TCP) runs in the sender's call.
  uint64_t send_ns = 0;
  // Packets the kernel refused for want of room (ENOBUFS: the receiver's queue; EAGAIN: the
  // socket's send buffer), kept for the next flush; counted once per refusal.
  uint64_t deferred = 0;
  uint64_t dropped = 0;  // given up (another error, or refused for kMaxDeferralMs without
                         // progress): TCP resends them
  uint64_t full = 0;     // packets Queue could not take, the batch full of deferred ones: the
                         // caller keeps them (lwIP sends them again)
};

// Writes into the TCP checksum field of the IPv4 packet at `ip` (header `ihl` bytes) what it
// holds when the kernel or the device completes the checksum (CHECKSUM_PARTIAL, NEEDS_CSUM,
// AF_XDP TX metadata): the pseudo-header sum over `tcp_len` bytes, folded, not complemented, as
// Linux's TCP leaves it for an offloading device (GSO adjusts it per segment).
void WritePseudoHeaderSum(uint8_t* ip, uint32_t ihl, uint32_t tcp_len);

// The batch. Each frame is a list of iovecs for sendmmsg: its virtio-net header, then its
// Ethernet, IP and TCP headers (copied into the batch's own buffer, where Seal completes them),
// then its payload, which stays where lwIP put it: the iovecs point into lwIP's pbufs, and the
// batch holds a reference on each packet (pbuf_ref) until Clear, so an ACK that frees a
// segment's memory in lwIP before the batch is sent cannot free what the batch points at. The
// kernel's copy into its skb is then the only copy of the payload on TX. Short packets (bare
// ACKs, SYNs, payloads below kReferenceFrom) are copied whole: cheaper than pinning them.
// Only the last frame can grow, so appending a segment to it is appending iovecs.
class TxBatch {
 public:
  static constexpr uint32_t kMaxPackets = 128;
  // Bytes in a batch at most, headers and payload (the packet socket's send buffer is sized
  // from it); a batch that fills up is sent early.
  static constexpr uint32_t kBytes = 1u << 20;
  // Segments per GSO packet at most (Linux's own TCP stops at 64 KiB; so does the IP length).
  static constexpr uint32_t kMaxSegments = 64;
  // Payloads from this size on are pointed at, not copied.
  static constexpr uint32_t kReferenceFrom = 256;
  // iovecs in a batch, and per frame (the kernel takes UIO_MAXIOV, 1024, per message).
  static constexpr uint32_t kMaxIovecs = 4096;
  static constexpr uint32_t kMaxIovecsPerFrame = 512;
  // Packets referenced at once.
  static constexpr uint32_t kMaxPinned = 2048;

  TxBatch();
  ~TxBatch();
  TxBatch(const TxBatch&) = delete;
  TxBatch& operator=(const TxBatch&) = delete;
  // Queues `ip` (lwIP's IPv4 or IPv6 packet, a pbuf chain starting at the IP header) behind `eth`;
  // appends it to the last frame instead where it is the next segment of the same flow. False:
  // no room left (send the batch and queue it again). May take a reference on `ip`.
  bool Add(const uint8_t (&eth)[14], pbuf* ip);
  // Completes the headers (IPv4 length and checksum or IPv6 payload length, the TCP
  // pseudo-header sum, the virtio-net header: GSO_TCPV4 or GSO_TCPV6) of every frame; the batch
  // is then ready for sendmmsg.
  void Seal();
  // Empties the batch and lets go of the packets it referenced.
  void Clear();
  // The first `n` unsent frames went out; the rest stay for the next send, ahead of what is
  // queued meanwhile (the batch empties itself when none is left).
  void Sent(uint32_t n);
  // The first frame not sent yet: frames before it went out in an earlier send.
  uint32_t first_unsent() const { return first_unsent_; }

  uint32_t size() const { return count_; }
  bool empty() const { return count_ == 0; }
  // Whether any frame carries more than one segment, and the longest frame.
  bool has_gso() const { return gso_; }
  // Whether every frame is a bare ACK (TCP, ACK flag alone, no payload; options allowed).
  bool bare_acks_only() const { return !empty() && !not_bare_ack_; }
  uint32_t longest() const { return longest_; }
  // Frame i (Ethernet header first): its length, its iovecs for sendmmsg (the virtio-net
  // header first, valid after Seal), and a copy of its bytes (without the virtio-net header).
  uint32_t frame_bytes(uint32_t i) const { return len_[i]; }
  std::span<const iovec> iovecs(uint32_t i) const { return {iov_ + iov_at_[i], iov_count_[i]}; }
  void CopyFrame(uint32_t i, uint8_t* to) const;
  std::vector<uint8_t> Frame(uint32_t i) const;
  const VnetHeader& vnet(uint32_t i) const { return vnet_[i]; }
  uint32_t segments(uint32_t i) const { return segments_[i]; }
  // Frame i's flow: a hash of its addresses and ports, never 0; 0 for a packet that is not TCP.
  uint32_t flow(uint32_t i) const { return flow_[i]; }
  bool bare_ack(uint32_t i) const { return bare_ack_[i]; }  // TCP, ACK flag alone, no payload
  // Frame i's EtherType (host order): 0x0800 IPv4, 0x86dd IPv6.
  uint16_t ethertype(uint32_t i) const {
    const uint8_t* eth = bytes_.data() + at_[i];
    return static_cast<uint16_t>(eth[12] << 8 | eth[13]);
  }
  uint32_t pinned() const { return pinned_count_; }

 private:
  // The last frame, while it may still take the next segment of its flow.
  struct Open {
    bool valid = false;
    uint32_t header_bytes = 0;  // Ethernet + IP + TCP
    uint32_t mss = 0;           // payload of its first segment: every segment but the last
    uint32_t payload = 0;
    uint32_t next_seq = 0;
  };
  // Appends iovecs for `len` bytes of `p` from `offset` on, and references `p`.
  void Reference(pbuf* p, uint32_t offset, uint32_t len);

  std::vector<uint8_t> bytes_;  // the copied parts: headers, short packets
  uint32_t used_ = 0;           // of bytes_
  uint32_t total_ = 0;          // bytes in all frames
  uint32_t count_ = 0;
  uint32_t first_unsent_ = 0;
  uint32_t at_[kMaxPackets];  // each frame's copied part in bytes_
  uint32_t len_[kMaxPackets];
  uint32_t segments_[kMaxPackets];
  uint32_t mss_[kMaxPackets];  // payload of each frame's first segment: its GSO size
  uint32_t flow_[kMaxPackets];
  bool bare_ack_[kMaxPackets];
  uint32_t iov_at_[kMaxPackets];
  uint32_t iov_count_[kMaxPackets];
  bool gso_ = false;
  bool not_bare_ack_ = false;
  uint32_t longest_ = 0;
  VnetHeader vnet_[kMaxPackets];
  iovec iov_[kMaxIovecs];
  uint32_t iov_used_ = 0;
  pbuf* pinned_[kMaxPinned];
  uint32_t pinned_count_ = 0;
  Open open_;
};

class PacketTx {
 public:
  // An AF_PACKET socket sending on `ifindex` (receiving nothing: protocol 0), with virtio-net
  // headers.
  static Result<std::unique_ptr<PacketTx>> Open(int ifindex, const std::string& ifname);
  // What Flush calls instead of sendmmsg(2) on the socket (same contract: packets sent, or -1
  // and errno). For the tests of what a refusal does: a veth refuses for want of room only
  // when its peer's NAPI thread is late, which no test can arrange on purpose.
  using SendFn = std::function<int(mmsghdr* msgs, unsigned count)>;
  static std::unique_ptr<PacketTx> ForTest(SendFn send, const std::string& ifname);

  // Queues one packet; sends the batch first when it is full. False: the batch is still full
  // (the kernel refused what it holds): the caller keeps the packet (lwIP: ERR_MEM, and the
  // segment stays queued) rather than have it dropped.
  bool Queue(const uint8_t (&eth)[14], pbuf* ip);
  // Sends what is queued: one sendmmsg, more only if the kernel refuses a packet midway. A
  // packet refused for want of room (the receiving side's queue, the send buffer) and those
  // behind it stay queued for the next Flush, in order, for kMaxDeferralMs without progress at
  // most; one refused for any other reason is dropped. Either way TCP would resend it, but a
  // GSO packet is up to 45 segments, and a veth peer whose NAPI thread is late refuses often.
  void Flush();
  // Whether packets refused at the last Flush are still queued (LwipNetif::FlushTx sends such a
  // batch through this socket, so that nothing overtakes them). kMaxDeferralMs: how long they
  // may wait without a packet going out before they are given up to TCP.
  bool deferring() const { return deferring_; }
  static constexpr uint64_t kMaxDeferralMs = 200;
  // What is queued, for a caller that sends a batch of single segments another way (then
  // Clear()s it): LwipNetif::FlushTx.
  TxBatch& batch() { return batch_; }
  const PacketTxStats& stats() const { return stats_; }

 private:
  PacketTx(UniqueFd fd, int ifindex, std::string ifname)
      : fd_(std::move(fd)), ifindex_(ifindex), ifname_(std::move(ifname)) {}

  UniqueFd fd_;
  SendFn send_;  // empty: sendmmsg on fd_
  int ifindex_;
  std::string ifname_;
  LogThrottle refusal_log_{1000};
  TxBatch batch_;
  PacketTxStats stats_;
  bool deferring_ = false;
  uint64_t stalled_since_ms_ = 0;  // while deferring: since the last packet went out
};

}  // namespace xdpfwd
