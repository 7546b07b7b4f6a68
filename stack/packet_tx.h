// TX through an AF_PACKET socket with a virtio-net header per packet (PACKET_VNET_HDR), for
// interfaces whose AF_XDP sockets run in copy mode. There AF_XDP builds one skb per frame and
// cannot send GSO, so each MTU-sized frame costs the receiver a whole TCP receive (on veth, in
// the worker's own softirq). Here the consecutive TCP segments of one flow queued in a batch
// leave as one GSO packet, as Linux's own TCP sends them: the kernel or the device cuts it,
// and on veth the peer's TCP takes it whole. Checksums are left to the kernel (NEEDS_CSUM).
// One sendmmsg per batch (docs/stack.md, "TX through a packet socket").
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "os/log.h"
#include "os/result.h"
#include "os/unique_fd.h"

struct pbuf;

namespace xdpfwd {

// struct VnetHeader of <linux/virtio_net.h> (which C++ cannot include: it has a field
// named `class`), in the host's byte order as PACKET_VNET_HDR takes it on little-endian hosts.
struct VnetHeader {
  static constexpr uint8_t kNeedsChecksum = 1;  // VIRTIO_NET_HDR_F_NEEDS_CSUM
  static constexpr uint8_t kGsoTcpV4 = 1;       // VIRTIO_NET_HDR_GSO_TCPV4
  uint8_t flags;
  uint8_t gso_type;
  uint16_t hdr_len;  // Ethernet, IP and TCP headers
  uint16_t gso_size;
  uint16_t csum_start;
  uint16_t csum_offset;
};
static_assert(sizeof(VnetHeader) == 10, "the kernel's struct VnetHeader");

struct PacketTxStats {
  uint64_t packets = 0;      // handed to the kernel; a GSO packet counts once
  uint64_t segments = 0;     // lwIP's packets in them
  uint64_t gso_packets = 0;  // of `packets`, those carrying more than one segment
  uint64_t sends = 0;        // sendmmsg calls
  uint64_t dropped = 0;      // packets the kernel refused (ENOBUFS, EAGAIN): TCP resends them
};

// Writes into the TCP checksum field of the IPv4 packet at `ip` (header `ihl` bytes) what it
// holds when the kernel or the device completes the checksum (CHECKSUM_PARTIAL, NEEDS_CSUM,
// AF_XDP TX metadata): the pseudo-header sum over `tcp_len` bytes, folded, not complemented, as
// Linux's TCP leaves it for an offloading device (GSO adjusts it per segment).
void WritePseudoHeaderSum(uint8_t* ip, uint32_t ihl, uint32_t tcp_len);

// The batch: frames packed in one buffer, each with its virtio-net header. Only the last frame
// can grow, so appending a segment to it is a copy of its payload to the buffer's end.
class TxBatch {
 public:
  static constexpr uint32_t kMaxPackets = 128;
  // Room for two full GSO packets and many small ones; a batch that fills up is sent early.
  static constexpr uint32_t kBytes = 1u << 20;
  // Segments per GSO packet at most (Linux's own TCP stops at 64 KiB; so does the IP length).
  static constexpr uint32_t kMaxSegments = 64;

  TxBatch();
  // Queues `ip` (lwIP's IPv4 packet, a pbuf chain starting at the IP header) behind `eth`;
  // appends it to the last frame instead where it is the next segment of the same flow. False:
  // no room left (send the batch and queue it again).
  bool Add(const uint8_t (&eth)[14], const pbuf* ip);
  // Completes the headers (IP length and checksum, the TCP pseudo-header sum, the virtio-net
  // header) of every frame; the batch is then ready for sendmmsg.
  void Seal();
  void Clear();

  uint32_t size() const { return count_; }
  bool empty() const { return count_ == 0; }
  // Whether any frame carries more than one segment, and the longest frame.
  bool has_gso() const { return gso_; }
  uint32_t longest() const { return longest_; }
  std::span<const uint8_t> frame(uint32_t i) const { return {bytes_.data() + at_[i], len_[i]}; }
  const VnetHeader& vnet(uint32_t i) const { return vnet_[i]; }
  uint32_t segments(uint32_t i) const { return segments_[i]; }

 private:
  // The last frame, while it may still take the next segment of its flow.
  struct Open {
    bool valid = false;
    uint32_t header_bytes = 0;  // Ethernet + IP + TCP
    uint32_t mss = 0;           // payload of its first segment: every segment but the last
    uint32_t payload = 0;
    uint32_t next_seq = 0;
  };

  std::vector<uint8_t> bytes_;
  uint32_t used_ = 0;
  uint32_t count_ = 0;
  uint32_t at_[kMaxPackets];
  uint32_t len_[kMaxPackets];
  uint32_t segments_[kMaxPackets];
  uint32_t mss_[kMaxPackets];  // payload of each frame's first segment: its GSO size
  bool gso_ = false;
  uint32_t longest_ = 0;
  VnetHeader vnet_[kMaxPackets];
  Open open_;
};

class PacketTx {
 public:
  // An AF_PACKET socket sending on `ifindex` (receiving nothing: protocol 0), with virtio-net
  // headers.
  static Result<std::unique_ptr<PacketTx>> Open(int ifindex, const std::string& ifname);

  // Queues one packet; sends the batch first when it is full.
  void Queue(const uint8_t (&eth)[14], const pbuf* ip);
  // Sends what is queued: one sendmmsg, more only if the kernel refuses a packet midway.
  void Flush();
  // What is queued, for a caller that sends a batch of single segments another way (then
  // Clear()s it): LwipNetif::FlushTx.
  TxBatch& batch() { return batch_; }
  const PacketTxStats& stats() const { return stats_; }

 private:
  PacketTx(UniqueFd fd, int ifindex, std::string ifname)
      : fd_(std::move(fd)), ifindex_(ifindex), ifname_(std::move(ifname)) {}

  UniqueFd fd_;
  int ifindex_;
  std::string ifname_;
  LogThrottle refusal_log_{1000};
  TxBatch batch_;
  PacketTxStats stats_;
};

}  // namespace xdpfwd
