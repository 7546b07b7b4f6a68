// The relay's backend port allocator (see backend_ports.h).
#include "forwarder/backend_ports.h"

#include <algorithm>
#include <array>
#include <fstream>

namespace xdpfwd {

std::vector<PortRange> DefaultBackendPorts(PortRange ephemeral) {
  constexpr uint16_t kFirst = 1024;  // below: ports services are configured on by convention
  std::vector<PortRange> out;
  if (ephemeral.automatic() || ephemeral.last < kFirst) return {PortRange{kFirst, 65535}};
  if (ephemeral.first > kFirst) {
    out.push_back(PortRange{kFirst, static_cast<uint16_t>(ephemeral.first - 1)});
  }
  if (ephemeral.last < 65535) {
    out.push_back(PortRange{static_cast<uint16_t>(ephemeral.last + 1), 65535});
  }
  return out;
}

Result<PortRange> KernelEphemeralPorts() {
  std::ifstream f("/proc/sys/net/ipv4/ip_local_port_range");
  unsigned lo = 0, hi = 0;
  if (!(f >> lo >> hi) || lo == 0 || lo > hi || hi > 65535) {
    return Error{{}, "cannot read net.ipv4.ip_local_port_range"};
  }
  return PortRange{static_cast<uint16_t>(lo), static_cast<uint16_t>(hi)};
}

Result<void> CheckOutsideEphemeral(const PortRange& ours, const PortRange& ephemeral) {
  if (ours.first <= ephemeral.last && ephemeral.first <= ours.last) {
    return Error{{},
                 "the kernel's ephemeral ports (net.ipv4.ip_local_port_range " +
                     std::to_string(ephemeral.first) + "-" + std::to_string(ephemeral.last) +
                     ") overlap the fast path's backend ports " + std::to_string(ours.first) + "-" +
                     std::to_string(ours.last) +
                     ": a kernel connection to the same backend could take one of the fast "
                     "path's 4-tuples. Pass --backend-ports outside the kernel's range, or leave "
                     "it out (the default is every port from 1024 outside it)"};
  }
  return {};
}

std::string ToString(const std::vector<PortRange>& ranges) {
  std::string out;
  for (const PortRange& r : ranges) {
    if (!out.empty()) out += ',';
    out += std::to_string(r.first) + "-" + std::to_string(r.last);
  }
  return out;
}

namespace {

std::vector<uint16_t> PortsOf(const std::vector<PortRange>& ranges) {
  std::vector<uint16_t> ports;
  for (const PortRange& r : ranges) {
    for (uint32_t p = r.first; p <= r.last; ++p) ports.push_back(static_cast<uint16_t>(p));
  }
  return ports;
}

// The device's hash of the backend's reply to `local`:`port`, in the addresses' family.
uint32_t ReplyHash(std::span<const uint8_t> key, const IpAddress& backend, const IpAddress& local,
                   uint16_t backend_port, uint16_t port) {
  return backend.is_v6() ? ToeplitzIpv6Tcp(key, backend.v6(), local.v6(), backend_port, port)
                         : ToeplitzIpv4Tcp(key, backend.v4(), local.v4(), backend_port, port);
}

}  // namespace

std::vector<uint16_t> PortsLandingOn(const RssTable& rss, std::span<const uint32_t> queues,
                                     const IpAddress& local, const IpAddress& backend,
                                     uint16_t backend_port, const std::vector<PortRange>& ranges) {
  std::vector<uint16_t> out;
  if (rss.indirection.empty() || queues.empty() || local.family != backend.family) return out;
  // The hash of (backend, local, backend_port, port) is the hash with port 0 XOR the hash of
  // an input that is zero but for the port's two bytes (Toeplitz is XOR-linear); that input has
  // the family's length, so the port's bytes sit where the device hashes them.
  const uint32_t base = ReplyHash(rss.key, backend, local, backend_port, 0);
  IpAddress zero = backend;
  zero.addr = in6_addr{};
  std::array<uint32_t, 256> high{}, low{};
  for (uint32_t b = 0; b < 256; ++b) {
    high[b] = ReplyHash(rss.key, zero, zero, 0, static_cast<uint16_t>(b << 8));
    low[b] = ReplyHash(rss.key, zero, zero, 0, static_cast<uint16_t>(b));
  }
  std::vector<bool> ours(*std::max_element(rss.indirection.begin(), rss.indirection.end()) + 1);
  for (uint32_t q : queues) {
    if (q < ours.size()) ours[q] = true;
  }
  for (uint16_t port : PortsOf(ranges)) {
    const uint32_t hash = base ^ high[port >> 8] ^ low[port & 0xff];
    if (ours[rss.QueueOf(hash)]) out.push_back(port);
  }
  std::sort(out.begin(), out.end());
  return out;
}

std::vector<uint16_t> SliceOfPorts(const std::vector<PortRange>& ranges, uint32_t worker,
                                   uint32_t workers) {
  std::vector<uint16_t> out;
  if (workers == 0 || worker >= workers) return out;
  const std::vector<uint16_t> all = PortsOf(ranges);
  for (size_t i = worker; i < all.size(); i += workers) out.push_back(all[i]);
  return out;
}

BackendPorts::BackendPorts(const std::vector<PortRange>& ranges) : BackendPorts(PortsOf(ranges)) {}

BackendPorts::BackendPorts(std::vector<uint16_t> ports) : ports_(std::move(ports)) {
  std::sort(ports_.begin(), ports_.end());
  ports_.erase(std::unique(ports_.begin(), ports_.end()), ports_.end());
  free_ = ports_;
  free_count_ = static_cast<uint32_t>(free_.size());
  generation_.assign(free_.size(), 0);
  live_.assign(free_.size(), false);
}

std::optional<uint32_t> BackendPorts::IndexOf(uint16_t port) const {
  const auto it = std::lower_bound(ports_.begin(), ports_.end(), port);
  if (it == ports_.end() || *it != port) return std::nullopt;
  return static_cast<uint32_t>(it - ports_.begin());
}

std::optional<BackendPorts::Lease> BackendPorts::Acquire() {
  if (free_count_ == 0) return std::nullopt;
  const uint16_t port = free_[head_];
  head_ = head_ + 1 == free_.size() ? 0 : head_ + 1;
  --free_count_;
  const uint32_t i = *IndexOf(port);
  live_[i] = true;
  ++in_use_;
  return Lease{port, ++generation_[i]};
}

void BackendPorts::Release(uint16_t port) {
  const auto i = IndexOf(port);
  if (!i || !live_[*i]) return;
  live_[*i] = false;
  --in_use_;
  const size_t tail = (head_ + free_count_) % free_.size();
  free_[tail] = port;
  ++free_count_;
}

bool BackendPorts::IsIdleSince(const Lease& lease) const {
  const auto i = IndexOf(lease.port);
  return i && !live_[*i] && generation_[*i] == lease.generation;
}

}  // namespace xdpfwd
