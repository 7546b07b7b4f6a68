// The AF_XDP socket itself: UMEM registration, the four rings mapped, bound to (device, queue).
// Done with raw socket options rather than libxdp's xsk_umem__create, because Debian's libxdp
// (1.3.1) cannot register a UMEM with tx_metadata_len, which TX checksum offload needs. The
// rings are libxdp's structs, so its inline ring helpers still apply.
#pragma once

#include <xdp/xsk.h>

#include <cstdint>
#include <memory>
#include <string>

#include "os/result.h"

namespace xdpfwd {

// Kernel 6.8+ AF_XDP TX metadata (include/uapi/linux/if_xdp.h), absent from the 6.1 headers
// this builds against.
inline constexpr uint32_t kXdpUmemTxMetadataLen = 1u << 2;  // XDP_UMEM_TX_METADATA_LEN (6.11+)
inline constexpr uint32_t kXdpTxMetadata = 1u << 1;         // xdp_desc.options: XDP_TX_METADATA
inline constexpr uint64_t kXdpTxmdFlagsChecksum = 1u << 1;  // XDP_TXMD_FLAGS_CHECKSUM
inline constexpr int kXdpMaxTxSkbBudget = 9;                // setsockopt, 6.17+
// Multi-buffer (6.6+): a socket bound with XDP_USE_SG receives a packet longer than a frame as
// a chain of descriptors, each but the last flagged XDP_PKT_CONTD in xdp_desc.options.
inline constexpr uint16_t kXdpUseSg = 1u << 4;     // bind flag XDP_USE_SG
inline constexpr uint32_t kXdpPktContd = 1u << 0;  // xdp_desc.options: XDP_PKT_CONTD

// struct xsk_tx_metadata as 6.14+ lays it out (24 bytes; the kernel reads it at
// desc.addr - tx_metadata_len).
struct XskTxMetadata {
  uint64_t flags;
  uint16_t csum_start;   // from desc.addr: where the checksum starts
  uint16_t csum_offset;  // from csum_start: where it is stored
  uint32_t pad;
  uint64_t launch_time;  // XDP_TXMD_FLAGS_LAUNCH_TIME only; the completion's timestamp
};
static_assert(sizeof(XskTxMetadata) == 24);

struct XskSocketOptions {
  std::string ifname;
  uint32_t queue = 0;
  uint8_t* area = nullptr;  // the UMEM
  uint64_t area_size = 0;
  uint32_t frame_size = 4096;
  uint32_t ring_size = 4096;  // all four rings
  uint16_t bind_flags = 0;    // XDP_COPY / XDP_ZEROCOPY, XDP_USE_NEED_WAKEUP
  // Reserve room for TX metadata in front of every TX frame; registration falls back to none
  // where the kernel refuses it (before 6.11).
  bool tx_metadata = true;
};

class XskSocket {
 public:
  // An error carries the kernel's errno (EBUSY while a previous socket on the queue closes).
  static Result<std::unique_ptr<XskSocket>> Open(const XskSocketOptions& options);
  ~XskSocket();
  XskSocket(const XskSocket&) = delete;
  XskSocket& operator=(const XskSocket&) = delete;

  int fd() const { return fd_; }
  // Bytes of metadata in front of each TX descriptor's address: sizeof(XskTxMetadata), or 0
  // where the kernel took no tx_metadata_len.
  uint32_t tx_metadata_len() const { return tx_metadata_len_; }
  // Why there is no TX metadata ("" when there is).
  const std::string& tx_metadata_status() const { return tx_metadata_status_; }

  xsk_ring_prod fill{}, tx{};
  xsk_ring_cons comp{}, rx{};

 private:
  XskSocket() = default;
  struct Mapping {
    void* addr = nullptr;
    size_t len = 0;
  };
  int fd_ = -1;
  uint32_t tx_metadata_len_ = 0;
  std::string tx_metadata_status_;
  Mapping maps_[4];
};

}  // namespace xdpfwd
