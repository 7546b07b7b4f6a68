// Raw AF_XDP socket set-up; see xsk_socket.h.
#include "stack/xsk_socket.h"

#include <linux/if_xdp.h>
#include <net/if.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace xdpfwd {
namespace {

// struct xdp_umem_reg with 6.8's tx_metadata_len; older kernels read the prefix they know.
struct UmemReg {
  uint64_t addr;
  uint64_t len;
  uint32_t chunk_size;
  uint32_t headroom;
  uint32_t flags;
  uint32_t tx_metadata_len;
};
static_assert(sizeof(UmemReg) == 32);

template <typename Ring>
void* MapRing(int fd, const xdp_ring_offset& o, uint32_t entries, size_t entry_size, off_t pgoff,
              bool producer, Ring* ring, size_t* len) {
  *len = o.desc + size_t{entries} * entry_size;
  void* p = mmap(nullptr, *len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, pgoff);
  if (p == MAP_FAILED) return nullptr;
  auto* base = static_cast<uint8_t*>(p);
  // What libxdp's own set-up writes into these structs (its helpers read nothing else).
  ring->mask = entries - 1;
  ring->size = entries;
  ring->producer = reinterpret_cast<uint32_t*>(base + o.producer);
  ring->consumer = reinterpret_cast<uint32_t*>(base + o.consumer);
  ring->ring = base + o.desc;
  ring->flags = reinterpret_cast<uint32_t*>(base + o.flags);
  ring->cached_prod = *ring->producer;
  // A producer's cached_cons runs one ring ahead of the consumer: free = cached_cons - prod.
  ring->cached_cons = *ring->consumer + (producer ? entries : 0);
  return p;
}

}  // namespace

XskSocket::~XskSocket() {
  for (Mapping& m : maps_) {
    if (m.addr != nullptr) munmap(m.addr, m.len);
  }
  if (fd_ >= 0) close(fd_);
}

Result<std::unique_ptr<XskSocket>> XskSocket::Open(const XskSocketOptions& o) {
  const std::string where = o.ifname + " queue " + std::to_string(o.queue);
  std::unique_ptr<XskSocket> s(new XskSocket());
  s->fd_ = socket(AF_XDP, SOCK_RAW | SOCK_CLOEXEC, 0);
  if (s->fd_ < 0) return SystemError(where + ": creating the AF_XDP socket");

  UmemReg reg{reinterpret_cast<uint64_t>(o.area), o.area_size, o.frame_size, 0, 0, 0};
  int reg_err = EOPNOTSUPP;
  if (o.tx_metadata) {
    reg.flags = kXdpUmemTxMetadataLen;
    reg.tx_metadata_len = sizeof(XskTxMetadata);
    if (setsockopt(s->fd_, SOL_XDP, XDP_UMEM_REG, &reg, sizeof(reg)) == 0) {
      s->tx_metadata_len_ = reg.tx_metadata_len;
      reg_err = 0;
    } else {
      // EINVAL before 6.11 (flag unknown); the registration below is the pre-6.8 one.
      s->tx_metadata_status_ = std::string("kernel refused tx_metadata_len: ") + strerror(errno);
    }
  } else {
    s->tx_metadata_status_ = "not requested";
  }
  if (reg_err != 0) {
    reg.flags = 0;
    reg.tx_metadata_len = 0;
    if (setsockopt(s->fd_, SOL_XDP, XDP_UMEM_REG, &reg, sizeof(reg)) != 0) {
      return SystemError(where + ": registering the UMEM");
    }
  }

  const int n = static_cast<int>(o.ring_size);
  for (int opt : {XDP_UMEM_FILL_RING, XDP_UMEM_COMPLETION_RING, XDP_RX_RING, XDP_TX_RING}) {
    if (setsockopt(s->fd_, SOL_XDP, opt, &n, sizeof(n)) != 0) {
      return SystemError(where + ": sizing the AF_XDP rings to " + std::to_string(n));
    }
  }
  xdp_mmap_offsets off{};
  socklen_t off_len = sizeof(off);
  if (getsockopt(s->fd_, SOL_XDP, XDP_MMAP_OFFSETS, &off, &off_len) != 0) {
    return SystemError(where + ": reading the ring offsets");
  }
  Mapping* m = s->maps_;
  m[0].addr = MapRing(s->fd_, off.fr, o.ring_size, sizeof(uint64_t), XDP_UMEM_PGOFF_FILL_RING, true,
                      &s->fill, &m[0].len);
  m[1].addr = MapRing(s->fd_, off.cr, o.ring_size, sizeof(uint64_t), XDP_UMEM_PGOFF_COMPLETION_RING,
                      false, &s->comp, &m[1].len);
  m[2].addr = MapRing(s->fd_, off.rx, o.ring_size, sizeof(xdp_desc), XDP_PGOFF_RX_RING, false,
                      &s->rx, &m[2].len);
  m[3].addr = MapRing(s->fd_, off.tx, o.ring_size, sizeof(xdp_desc), XDP_PGOFF_TX_RING, true,
                      &s->tx, &m[3].len);
  for (const Mapping& map : s->maps_) {
    if (map.addr == nullptr) return SystemError(where + ": mapping the AF_XDP rings");
  }

  sockaddr_xdp sa{};
  sa.sxdp_family = AF_XDP;
  sa.sxdp_flags = o.bind_flags;
  sa.sxdp_ifindex = if_nametoindex(o.ifname.c_str());
  sa.sxdp_queue_id = o.queue;
  if (sa.sxdp_ifindex == 0) return SystemError("interface " + o.ifname);
  if (bind(s->fd_, reinterpret_cast<sockaddr*>(&sa), sizeof(sa)) != 0) {
    return SystemError(where + ": binding the AF_XDP socket");
  }
  return s;
}

}  // namespace xdpfwd
