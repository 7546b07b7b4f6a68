// Minimal copy-mode AF_XDP socket for tests; see test_xsk.h.
#include "tests/support/test_xsk.h"

#include <poll.h>
#include <sys/mman.h>
#include <xdp/xsk.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>
#include <thread>

namespace xdpfwd::test {

namespace {
constexpr uint32_t kFrames = 1024;
constexpr uint32_t kFrameSize = XSK_UMEM__DEFAULT_FRAME_SIZE;
constexpr uint32_t kRing = 512;
}  // namespace

struct TestXsk::Impl {
  void* area = MAP_FAILED;
  xsk_umem* umem = nullptr;
  xsk_socket* xsk = nullptr;
  xsk_ring_prod fill{}, tx{};
  xsk_ring_cons comp{}, rx{};

  ~Impl() {
    if (xsk != nullptr) xsk_socket__delete(xsk);
    if (umem != nullptr) xsk_umem__delete(umem);
    if (area != MAP_FAILED) munmap(area, size_t{kFrames} * kFrameSize);
  }

  void Refill(uint64_t addr) {
    uint32_t idx = 0;
    if (xsk_ring_prod__reserve(&fill, 1, &idx) == 1) {
      *xsk_ring_prod__fill_addr(&fill, idx) = addr;
      xsk_ring_prod__submit(&fill, 1);
    }
  }
};

TestXsk::TestXsk(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
TestXsk::~TestXsk() = default;

std::unique_ptr<TestXsk> TestXsk::Create(const std::string& ifname, uint32_t queue) {
  auto impl = std::make_unique<Impl>();
  impl->area = mmap(nullptr, size_t{kFrames} * kFrameSize, PROT_READ | PROT_WRITE,
                    MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (impl->area == MAP_FAILED)
    throw std::runtime_error("mmap umem: " + std::string(strerror(errno)));
  xsk_umem_config ucfg{};
  ucfg.fill_size = kRing;
  ucfg.comp_size = kRing;
  ucfg.frame_size = kFrameSize;
  ucfg.frame_headroom = 0;
  if (int err = xsk_umem__create(&impl->umem, impl->area, uint64_t{kFrames} * kFrameSize,
                                 &impl->fill, &impl->comp, &ucfg)) {
    throw std::runtime_error("xsk_umem__create: " + std::string(strerror(-err)));
  }
  xsk_socket_config scfg{};
  scfg.rx_size = kRing;
  scfg.tx_size = kRing;
  scfg.libxdp_flags = XSK_LIBXDP_FLAGS__INHIBIT_PROG_LOAD;  // the test attaches its own program
  scfg.bind_flags = XDP_COPY;
  // The kernel releases a closed socket's (device, queue) binding asynchronously, so a socket
  // created right after another one closed can see EBUSY for a moment: poll, bounded.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  for (;;) {
    const int err = xsk_socket__create(&impl->xsk, ifname.c_str(), queue, impl->umem, &impl->rx,
                                       &impl->tx, &scfg);
    if (err == 0) break;
    if (err != -EBUSY || std::chrono::steady_clock::now() >= deadline) {
      throw std::runtime_error("xsk_socket__create on " + ifname + ": " + strerror(-err));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  for (uint32_t i = 0; i < kRing; ++i) impl->Refill(uint64_t{i} * kFrameSize);
  return std::unique_ptr<TestXsk>(new TestXsk(std::move(impl)));
}

int TestXsk::fd() const { return xsk_socket__fd(impl_->xsk); }

std::vector<std::vector<uint8_t>> TestXsk::Receive(std::chrono::milliseconds timeout) {
  std::vector<std::vector<uint8_t>> frames;
  pollfd p{fd(), POLLIN, 0};
  if (poll(&p, 1, static_cast<int>(timeout.count())) <= 0) return frames;
  uint32_t idx = 0;
  const uint32_t n = xsk_ring_cons__peek(&impl_->rx, kRing, &idx);
  for (uint32_t i = 0; i < n; ++i) {
    const xdp_desc* desc = xsk_ring_cons__rx_desc(&impl_->rx, idx + i);
    const auto* data = static_cast<const uint8_t*>(xsk_umem__get_data(impl_->area, desc->addr));
    frames.emplace_back(data, data + desc->len);
    impl_->Refill(xsk_umem__extract_addr(desc->addr));
  }
  xsk_ring_cons__release(&impl_->rx, n);
  return frames;
}

}  // namespace xdpfwd::test
