// One AF_XDP socket on (interface, queue) with its own UMEM: locked, pre-faulted frames, an
// exactly-counted frame pool, batched RX and TX, and at most one TX kick loop per flush. Each
// interface a worker serves gets its own port (and UMEM): lwIP rewrites every header on the way
// through, so a shared UMEM would save no copy (docs/stack.md).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "os/result.h"
#include "stack/fill_depth.h"

namespace xdpfwd {

struct XskPortConfig {
  std::string ifname;
  uint32_t queue = 0;
  uint32_t frame_count = 8192;  // UMEM frames; power of two
  uint32_t frame_size = 4096;   // bytes per frame: one page, so a frame never spans two
  // rx, tx, fill and completion rings; power of two. The fill and RX rings together hold at
  // most ring_size frames, so this is the burst the worker may fall behind by before the kernel
  // drops frames for want of a fill entry (xsk_fill_ring_empty). 2048 dropped 90,000-160,000
  // frames in bench/run's 100,000-connection idle test (a stall of lwIP's slow timer over
  // 200,000 pcbs meeting a burst of proofs and closes), and 7-58 clients' retransmissions then
  // backed off past 5 s; 4096 held all 100,000 (one run; drops 92,000).
  uint32_t ring_size = 4096;
  // The fewest frames the fill ring keeps posted under steady load (FillDepth: it deepens at
  // once after a burst, back to ring_size). ring_size (xdpfwd --tune fill-depth=full): always all.
  uint32_t fill_floor = 512;
  bool try_zero_copy = true;  // bind with XDP_ZEROCOPY first, copy mode if the driver refuses
  // Bind with XDP_USE_SG: a packet longer than a frame (a TSO super-segment in generic mode, a
  // jumbo frame) arrives as a chain of descriptors instead of being dropped by the kernel.
  bool multi_buffer = true;
  bool busy_poll = true;  // SO_PREFER_BUSY_POLL + SO_BUSY_POLL(+_BUDGET) where supported
  uint32_t busy_poll_usecs = 20;
  uint32_t busy_poll_budget = 64;
  // TX checksum offload through AF_XDP TX metadata where the kernel takes it (6.11+): the
  // netif leaves the TCP checksum to the kernel or the device. false: lwIP computes every
  // checksum in software (xdpfwd --tune tx-checksum=software, the A/B switch).
  bool tx_checksum_offload = true;
  // Frames one copy-mode sendto() may send: the TX ring size where the kernel takes
  // XDP_MAX_TX_SKB_BUDGET (6.17+), else its fixed 32. false: leave the kernel's 32.
  bool tx_budget = true;
};

// The longest packet (Ethernet header included) one frame of `config` receives: the kernel
// puts XDP_PACKET_HEADROOM (256 bytes) in front of it, and drops a longer one on a socket
// without multi-buffer (counted in XDP_STATISTICS' rx_dropped).
uint32_t RxFrameBytes(const XskPortConfig& config);

// The longest descriptor chain the kernel builds for one packet: MAX_SKB_FRAGS (17 unless the
// kernel was configured otherwise) fragments and the linear part. A 64 KiB packet takes 18
// 3840-byte frames. The kernel takes TX chains up to the same length.
inline constexpr uint32_t kMaxRxChain = 18;
inline constexpr uint32_t kMaxTxChain = 18;

struct XskStats {
  uint64_t rx_packets = 0, rx_bytes = 0;
  uint64_t rx_descriptors = 0;  // frames received: rx_packets plus the chains' further frames
  uint64_t rx_chains = 0;       // packets that came in more than one frame
  // Chains longer than a Receive call could take (more than kMaxRxChain, or than its `out`):
  // dropped whole, never handed out in part.
  uint64_t rx_chains_dropped = 0;
  uint64_t tx_packets = 0, tx_bytes = 0;
  uint64_t tx_kicks = 0;         // sendto() calls that woke the TX path (syscalls)
  uint64_t tx_kick_retries = 0;  // kicks answered EAGAIN/EBUSY/ENOBUFS (included in tx_kicks)
  // Time in those kicks: in copy mode on veth the receiving namespace's stack runs in them.
  uint64_t tx_kick_ns = 0;
  uint64_t rx_wakeups = 0;             // recvfrom() calls because the fill ring asked for a wakeup
  uint64_t tx_ring_full = 0;           // frames that had to wait for a later flush
  uint64_t fill_ring_empty = 0;        // times the kernel flagged the fill ring as needing frames
  uint64_t pool_empty = 0;             // frame allocations that failed
  uint32_t fill_depth = 0;             // frames the fill ring is kept topped up to now
  uint64_t fill_depth_grows = 0;       // times it doubled: the ring ran low (or traffic eased)
  uint64_t tx_checksum_offloaded = 0;  // frames sent with a checksum request in TX metadata
  // From the kernel (XDP_STATISTICS): frames it dropped for this socket.
  uint64_t kernel_rx_dropped = 0, kernel_rx_ring_full = 0, kernel_fill_ring_empty = 0;
  uint64_t kernel_tx_invalid = 0;
  // The rings now: received frames the RX ring holds that the worker has not taken yet.
  uint32_t rx_ring_waiting = 0;
};

// Where every UMEM frame is: the four add up to `total` at all times.
struct FrameAccount {
  uint32_t total = 0;
  uint32_t in_pool = 0;  // free, owned by the port
  uint32_t in_fill = 0;  // given to the kernel for RX
  uint32_t in_tx = 0;    // submitted for TX, completion not yet reaped
  uint32_t held = 0;     // received frames and TX frames handed to the caller
};

struct RxFrame {
  uint64_t addr;  // UMEM offset: give it back with Release
  uint8_t* data;
  uint32_t len;
  bool more;  // the packet goes on in the next frame (XDP_PKT_CONTD)
};

struct TxFrame {
  uint64_t addr;  // the descriptor's address: past the TX metadata area, if there is one
  uint8_t* data;
  uint32_t capacity;
};

class XskSocket;

class XskPort {
 public:
  static Result<std::unique_ptr<XskPort>> Open(const XskPortConfig& config);
  ~XskPort();
  XskPort(const XskPort&) = delete;
  XskPort& operator=(const XskPort&) = delete;

  int fd() const;
  bool zero_copy() const { return zero_copy_; }
  const std::string& ifname() const { return config_.ifname; }
  uint32_t queue() const { return config_.queue; }
  // One line on what busy polling does here ("on: 20 us, budget 64" or why not).
  const std::string& busy_poll_status() const { return busy_poll_status_; }
  // Bound with XDP_USE_SG: packets longer than a frame arrive as chains.
  bool multi_buffer() const { return multi_buffer_; }
  // TX checksum offload through TX metadata is available: QueueTxWithChecksum may be used.
  bool tx_checksum_offload() const { return tx_metadata_len_ != 0; }
  // The longest packet (Ethernet header included) one TX frame holds: the frame less its TX
  // metadata.
  uint32_t tx_frame_bytes() const { return config_.frame_size - tx_metadata_len_; }
  // Frames one copy-mode sendto() sends at most (the kernel's 32 unless raised).
  uint32_t tx_budget() const { return tx_budget_; }
  // One line for the ready line: "TX checksum offload, 4096 frames per kick" or what is off
  // and why.
  std::string tx_status() const;

  // Takes up to out.size() received frames, whole packets only: a packet is its frames up to
  // the first with more == false. A chain that does not fit in what is left of `out` stays in
  // the RX ring for the next call; one longer than out.size() (or kMaxRxChain) is dropped and
  // counted. The caller owns the frames until Release. No syscall unless the kernel asked for a
  // fill-ring wakeup.
  uint32_t Receive(std::span<RxFrame> out);
  // Gives a received frame (or an unused TX frame) back; the fill ring is topped up in batches.
  void Release(uint64_t addr);

  // A free frame to build an outgoing packet in, or nullopt when the pool is empty.
  std::optional<TxFrame> AllocTx();
  // Queues a built frame; it goes out on the next Flush. `more`: the packet goes on in the next
  // frame queued (XDP_PKT_CONTD; multi_buffer() only). Flush submits whole chains only.
  void QueueTx(uint64_t addr, uint32_t len, bool more = false);
  // The same, asking the kernel (or the device) to complete a checksum: the 16 bits at
  // csum_start + csum_offset, which must hold the pseudo-header sum, become the ones'
  // complement checksum of everything from csum_start on. Only when tx_checksum_offload().
  void QueueTxWithChecksum(uint64_t addr, uint32_t len, uint16_t csum_start, uint16_t csum_offset);
  // Submits queued frames in one batch, kicks the TX path (copy mode always needs it; the
  // kernel sends a bounded number per kick, so it loops, bounded), reaps completions and tops
  // up the fill ring. Call once per worker-loop iteration.
  void Flush();
  // Waits (bounded) until every submitted TX frame has completed; for shutdown and tests.
  bool DrainTx(uint32_t max_rounds = 1000);

  XskStats stats() const;
  FrameAccount frames() const;
  // Index of the frame an address (with or without an offset into it) lies in.
  uint32_t FrameIndex(uint64_t addr) const {
    return static_cast<uint32_t>(addr / config_.frame_size);
  }

 private:
  struct PendingTx {
    uint64_t addr;
    uint32_t len;
    uint32_t options;  // xdp_desc.options
  };
  explicit XskPort(const XskPortConfig& config);
  void RefillFill();
  void ReapCompletions();
  void Kick();

  XskPortConfig config_;
  std::unique_ptr<XskSocket> socket_;
  uint8_t* area_ = nullptr;
  size_t area_size_ = 0;
  bool zero_copy_ = false;
  bool multi_buffer_ = false;
  bool dropping_chain_ = false;  // the rest of a chain too long to hand out is being dropped
  std::string busy_poll_status_;
  uint32_t tx_metadata_len_ = 0;  // bytes in front of each TX frame's data
  uint32_t tx_budget_ = 32;
  std::string tx_checksum_why_, tx_budget_why_;  // why not, where not

  std::vector<uint64_t> pool_;  // free frames (a stack: reuse the warmest frame first)
  FillDepth fill_depth_;
  uint32_t fill_level_ = 0;            // frames posted in the fill ring after the last top-up
  std::vector<PendingTx> pending_tx_;  // queued but not yet in the TX ring
  uint32_t in_fill_ = 0, in_tx_ = 0, held_ = 0;
  XskStats stats_;
};

}  // namespace xdpfwd
