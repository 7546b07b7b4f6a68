// AF_XDP port: UMEM, frame pool and the four rings; see xsk_port.h.
#include "stack/xsk_port.h"

#include <linux/if_xdp.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <xdp/xsk.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <thread>

#include "os/clock.h"
#include "os/log.h"
#include "stack/xsk_socket.h"

namespace xdpfwd {

namespace {

bool PowerOfTwo(uint32_t x) { return x != 0 && (x & (x - 1)) == 0; }

}  // namespace

uint32_t RxFrameBytes(const XskPortConfig& config) {
  constexpr uint32_t kXdpPacketHeadroom = 256;  // XDP_PACKET_HEADROOM, include/linux/bpf.h
  return config.frame_size - kXdpPacketHeadroom;
}

XskPort::XskPort(const XskPortConfig& config)
    : config_(config), fill_depth_(config.fill_floor, config.ring_size) {}

XskPort::~XskPort() {
  socket_.reset();  // unregisters the UMEM before it is unmapped
  if (area_ != nullptr) {
    munlock(area_, area_size_);
    munmap(area_, area_size_);
  }
}

Result<std::unique_ptr<XskPort>> XskPort::Open(const XskPortConfig& config) {
  const std::string where = config.ifname + " queue " + std::to_string(config.queue);
  if (!PowerOfTwo(config.frame_count) || !PowerOfTwo(config.ring_size) ||
      !PowerOfTwo(config.frame_size) || config.frame_size < 2048) {
    return Error{{},
                 where +
                     ": frame count, ring size and frame size (>= 2048) must be powers "
                     "of two"};
  }
  if (config.frame_count < 2 * config.ring_size) {
    return Error{{},
                 where + ": need at least two rings' worth of frames (" +
                     std::to_string(2 * config.ring_size) + ")"};
  }
  std::unique_ptr<XskPort> port(new XskPort(config));

  // UMEM: page-aligned (mmap), pre-faulted (MAP_POPULATE) and locked, so the worker never
  // takes a page fault on a frame.
  port->area_size_ = size_t{config.frame_count} * config.frame_size;
  void* area = mmap(nullptr, port->area_size_, PROT_READ | PROT_WRITE,
                    MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
  if (area == MAP_FAILED)
    return SystemError(where + ": mapping " + std::to_string(port->area_size_) + " bytes of UMEM");
  port->area_ = static_cast<uint8_t*>(area);
  if (mlock(area, port->area_size_) != 0) {
    return SystemError(where + ": locking UMEM (raise RLIMIT_MEMLOCK, or run as root)");
  }

  XskSocketOptions so;
  so.ifname = config.ifname;
  so.queue = config.queue;
  so.area = port->area_;
  so.area_size = port->area_size_;
  so.frame_size = config.frame_size;
  so.ring_size = config.ring_size;
  so.tx_metadata = config.tx_checksum_offload;
  const uint16_t sg = config.multi_buffer ? kXdpUseSg : 0;
  auto bind = [&](uint16_t mode) -> Result<std::unique_ptr<XskSocket>> {
    so.bind_flags = static_cast<uint16_t>(XDP_USE_NEED_WAKEUP | sg | mode);
    // A socket closed just before (a restart) keeps its (device, queue) for a moment: EBUSY.
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(2);
    for (;;) {
      auto s = XskSocket::Open(so);
      if (s || s.error().code.value() != EBUSY || std::chrono::steady_clock::now() >= deadline) {
        return s;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
  };
  Result<std::unique_ptr<XskSocket>> bound = Error{{}, where + ": zero-copy not tried"};
  if (config.try_zero_copy) {
    bound = bind(XDP_ZEROCOPY);
    if (bound) {
      port->zero_copy_ = true;
    } else {
      LogDetail(bound.error().message() + " (zero-copy refused), using copy mode");
    }
  }
  if (!bound) bound = bind(XDP_COPY);
  if (!bound) return bound.error();
  port->socket_ = std::move(*bound);
  port->multi_buffer_ = config.multi_buffer;
  const XskSocket& xsk = *port->socket_;
  port->tx_metadata_len_ = xsk.tx_metadata_len();
  port->tx_checksum_why_ = xsk.tx_metadata_status();
  if (config.tx_budget) {
    // [32, TX ring size] is what the kernel takes; ENOPROTOOPT before 6.17.
    const unsigned budget = config.ring_size;
    if (setsockopt(xsk.fd(), SOL_XDP, kXdpMaxTxSkbBudget, &budget, sizeof(budget)) == 0) {
      port->tx_budget_ = budget;
    } else {
      port->tx_budget_why_ = std::string("XDP_MAX_TX_SKB_BUDGET: ") + std::strerror(errno);
    }
  } else {
    port->tx_budget_why_ = "not requested";
  }

  // Busy polling matters only when the worker makes a syscall on the socket (kicks, wakeups);
  // it is applied where the kernel takes it and reported either way.
  if (config.busy_poll) {
    const int fd = xsk.fd();
    const int one = 1;
    const int usecs = static_cast<int>(config.busy_poll_usecs);
    const int budget = static_cast<int>(config.busy_poll_budget);
    if (setsockopt(fd, SOL_SOCKET, SO_PREFER_BUSY_POLL, &one, sizeof(one)) != 0 ||
        setsockopt(fd, SOL_SOCKET, SO_BUSY_POLL, &usecs, sizeof(usecs)) != 0 ||
        setsockopt(fd, SOL_SOCKET, SO_BUSY_POLL_BUDGET, &budget, sizeof(budget)) != 0) {
      port->busy_poll_status_ = std::string("off: ") + std::strerror(errno);
    } else {
      port->busy_poll_status_ =
          "on: " + std::to_string(usecs) + " us, budget " + std::to_string(budget);
    }
  } else {
    port->busy_poll_status_ = "off: not requested";
  }

  port->pool_.reserve(config.frame_count);
  for (uint32_t i = config.frame_count; i-- > 0;) {
    port->pool_.push_back(uint64_t{i} * config.frame_size);
  }
  port->pending_tx_.reserve(config.ring_size);
  port->RefillFill();
  return port;
}

int XskPort::fd() const { return socket_->fd(); }

std::string XskPort::tx_status() const {
  std::string out = tx_checksum_offload() ? "TX checksum offload"
                                          : "TX checksum software (" + tx_checksum_why_ + ")";
  out += ", " + std::to_string(tx_budget_) + " frames per kick";
  if (!tx_budget_why_.empty()) out += " (" + tx_budget_why_ + ")";
  return out;
}

void XskPort::RefillFill() {
  // Keep half a ring of frames back for TX, so a flood of received data cannot starve the
  // ACKs and relayed segments the worker has to send.
  const uint32_t tx_reserve = config_.ring_size / 2;
  const uint32_t spare =
      pool_.size() > tx_reserve ? static_cast<uint32_t>(pool_.size()) - tx_reserve : 0;
  // What the kernel has not taken yet (one read of its consumer index), and what it took since
  // the last top-up: FillDepth keeps the posted frames few, so warm, under steady load.
  const uint32_t level = config_.ring_size - xsk_prod_nb_free(&socket_->fill, config_.ring_size);
  const uint32_t depth = fill_depth_.Update(level, fill_level_ - level);
  const uint32_t want =
      std::min({depth > level ? depth - level : 0, config_.ring_size - in_fill_, spare});
  fill_level_ = level;
  if (want == 0) return;
  uint32_t idx = 0;
  const uint32_t n = xsk_ring_prod__reserve(&socket_->fill, want, &idx);
  for (uint32_t i = 0; i < n; ++i) {
    *xsk_ring_prod__fill_addr(&socket_->fill, idx + i) = pool_.back();
    pool_.pop_back();
  }
  xsk_ring_prod__submit(&socket_->fill, n);
  in_fill_ += n;
  fill_level_ += n;
}

uint32_t XskPort::Receive(std::span<RxFrame> out) {
  uint32_t idx = 0;
  const uint32_t want = static_cast<uint32_t>(std::min<size_t>(out.size(), config_.ring_size));
  const uint32_t n = xsk_ring_cons__peek(&socket_->rx, want, &idx);
  const uint32_t longest = std::min(want, kMaxRxChain);
  uint32_t consumed = 0;  // descriptors taken off the ring: handed out or dropped
  uint32_t handed = 0;    // of those, handed out (whole packets only)
  uint32_t chain = 0;     // frames of the packet being collected, at out[handed...]
  for (uint32_t i = 0; i < n; ++i) {
    const xdp_desc* d = xsk_ring_cons__rx_desc(&socket_->rx, idx + i);
    const bool more = (d->options & kXdpPktContd) != 0;
    if (dropping_chain_) {
      pool_.push_back(d->addr & ~uint64_t{config_.frame_size - 1});
      dropping_chain_ = more;
      consumed = i + 1;
      continue;
    }
    out[handed + chain] = RxFrame{d->addr, area_ + d->addr, d->len, more};
    ++chain;
    if (!more) {
      for (uint32_t k = handed; k < handed + chain; ++k) stats_.rx_bytes += out[k].len;
      ++stats_.rx_packets;
      if (chain > 1) ++stats_.rx_chains;
      handed += chain;
      chain = 0;
      consumed = i + 1;
    } else if (chain == longest) {
      // No call could take this chain whole: drop it, and its frames still to come.
      for (uint32_t k = handed; k < handed + chain; ++k) {
        pool_.push_back(out[k].addr & ~uint64_t{config_.frame_size - 1});
      }
      ++stats_.rx_chains_dropped;
      chain = 0;
      dropping_chain_ = true;
      consumed = i + 1;
    }
  }
  // The unfinished chain at the end (out was full, or the rest of it is not in the ring yet)
  // goes back to the ring: the next call takes it whole.
  xsk_ring_cons__cancel(&socket_->rx, n - consumed);
  if (consumed > 0) {
    xsk_ring_cons__release(&socket_->rx, consumed);
    in_fill_ -= consumed;
    held_ += handed;
    stats_.rx_descriptors += handed;
  }
  // Only drivers in zero-copy mode set this; copy mode receives in the kernel's softirq.
  if (xsk_ring_prod__needs_wakeup(&socket_->fill)) {
    ++stats_.fill_ring_empty;
    ++stats_.rx_wakeups;
    recvfrom(fd(), nullptr, 0, MSG_DONTWAIT, nullptr, nullptr);
  }
  return handed;
}

void XskPort::Release(uint64_t addr) {
  // In aligned mode a descriptor's address may carry an offset into its frame.
  pool_.push_back(addr & ~uint64_t{config_.frame_size - 1});
  --held_;
}

std::optional<TxFrame> XskPort::AllocTx() {
  if (pool_.empty()) {
    ++stats_.pool_empty;
    return std::nullopt;
  }
  // The TX metadata, when there is any, sits in front of the packet (the kernel reads it at
  // desc.addr - tx_metadata_len), so the packet starts that far into the frame.
  const uint64_t addr = pool_.back() + tx_metadata_len_;
  pool_.pop_back();
  ++held_;
  return TxFrame{addr, area_ + addr, config_.frame_size - tx_metadata_len_};
}

void XskPort::QueueTx(uint64_t addr, uint32_t len, bool more) {
  pending_tx_.push_back({addr, len, more ? kXdpPktContd : 0});
}

void XskPort::QueueTxWithChecksum(uint64_t addr, uint32_t len, uint16_t csum_start,
                                  uint16_t csum_offset) {
  auto* md = reinterpret_cast<XskTxMetadata*>(area_ + addr - tx_metadata_len_);
  md->flags = kXdpTxmdFlagsChecksum;
  md->csum_start = csum_start;
  md->csum_offset = csum_offset;
  pending_tx_.push_back({addr, len, kXdpTxMetadata});
  ++stats_.tx_checksum_offloaded;
}

void XskPort::ReapCompletions() {
  uint32_t idx = 0;
  const uint32_t n = xsk_ring_cons__peek(&socket_->comp, config_.ring_size, &idx);
  for (uint32_t i = 0; i < n; ++i) {
    pool_.push_back(*xsk_ring_cons__comp_addr(&socket_->comp, idx + i) &
                    ~uint64_t{config_.frame_size - 1});
  }
  if (n > 0) {
    xsk_ring_cons__release(&socket_->comp, n);
    in_tx_ -= n;
  }
}

void XskPort::Kick() {
  // Copy mode sends a bounded batch per sendto() and answers EAGAIN while more are queued;
  // ENOBUFS/EBUSY mean the completion ring or the driver is full for now. Loop, bounded by
  // what is in flight, reaping completions in between.
  const uint32_t max_kicks = in_tx_ / 16 + 4;
  for (uint32_t i = 0; i < max_kicks; ++i) {
    ++stats_.tx_kicks;
    if (sendto(fd(), nullptr, 0, MSG_DONTWAIT, nullptr, 0) >= 0) return;
    if (errno != EAGAIN && errno != EBUSY && errno != ENOBUFS) return;
    ++stats_.tx_kick_retries;
    ReapCompletions();
  }
}

void XskPort::Flush() {
  ReapCompletions();
  if (!pending_tx_.empty()) {
    uint32_t idx = 0;
    uint32_t n = static_cast<uint32_t>(pending_tx_.size());
    // reserve() is all-or-nothing: ask for what is free.
    n = std::min(n, xsk_prod_nb_free(&socket_->tx, n));
    // Whole chains only: the rest of a cut one waits for room with the next flush.
    while (n > 0 && (pending_tx_[n - 1].options & kXdpPktContd) != 0) --n;
    n = xsk_ring_prod__reserve(&socket_->tx, n, &idx);
    for (uint32_t i = 0; i < n; ++i) {
      xdp_desc* d = xsk_ring_prod__tx_desc(&socket_->tx, idx + i);
      d->addr = pending_tx_[i].addr;
      d->len = pending_tx_[i].len;
      d->options = pending_tx_[i].options;
      stats_.tx_bytes += pending_tx_[i].len;
    }
    xsk_ring_prod__submit(&socket_->tx, n);
    in_tx_ += n;
    held_ -= n;
    stats_.tx_packets += n;
    pending_tx_.erase(pending_tx_.begin(), pending_tx_.begin() + n);
    stats_.tx_ring_full += pending_tx_.size();
  }
  if (in_tx_ > 0 && xsk_ring_prod__needs_wakeup(&socket_->tx)) {
    const uint64_t start = MonotonicNs();
    Kick();
    stats_.tx_kick_ns += MonotonicNs() - start;
  }
  RefillFill();
}

bool XskPort::DrainTx(uint32_t max_rounds) {
  for (uint32_t i = 0; i < max_rounds && (in_tx_ > 0 || !pending_tx_.empty()); ++i) {
    Flush();
    if (in_tx_ > 0) std::this_thread::sleep_for(std::chrono::microseconds(100));
    ReapCompletions();
  }
  return in_tx_ == 0 && pending_tx_.empty();
}

XskStats XskPort::stats() const {
  XskStats s = stats_;
  s.fill_depth = fill_depth_.target();
  s.fill_depth_grows = fill_depth_.grows();
  // A consumer's view of its producer index: the same read the next Receive makes.
  s.rx_ring_waiting = xsk_cons_nb_avail(&socket_->rx, config_.ring_size);
  xdp_statistics ks{};
  socklen_t len = sizeof(ks);
  if (getsockopt(fd(), SOL_XDP, XDP_STATISTICS, &ks, &len) == 0) {
    s.kernel_rx_dropped = ks.rx_dropped;
    s.kernel_rx_ring_full = ks.rx_ring_full;
    s.kernel_fill_ring_empty = ks.rx_fill_ring_empty_descs;
    s.kernel_tx_invalid = ks.tx_invalid_descs;
  }
  return s;
}

FrameAccount XskPort::frames() const {
  return FrameAccount{config_.frame_count, static_cast<uint32_t>(pool_.size()), in_fill_, in_tx_,
                      held_};
}

}  // namespace xdpfwd
