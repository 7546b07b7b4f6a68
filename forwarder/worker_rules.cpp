// The workers' rule table (see worker_rules.h): a seqlock over a small encoding in host order
// (writer and readers are the same build on the same machine).
#include "forwarder/worker_rules.h"

#include <cstring>
#include <new>
#include <string>

namespace xdpfwd {
namespace {

constexpr size_t kAddressBytes = 1 + sizeof(in6_addr);

class Writer {
 public:
  Writer(uint8_t* out, size_t room) : out_(out), room_(room) {}
  template <typename T>
  void Put(T v) {
    Bytes(&v, sizeof v);
  }
  void Bytes(const void* p, size_t n) {
    if (used_ + n > room_) {
      full_ = true;
      return;
    }
    std::memcpy(out_ + used_, p, n);
    used_ += n;
  }
  void Patterns(const std::vector<AccessPattern>& patterns) {
    Put(static_cast<uint32_t>(patterns.size()));
    for (const AccessPattern& a : patterns) {
      Put(static_cast<uint8_t>(a.allow ? 1 : 0));
      Put(static_cast<uint32_t>(a.pattern.size()));
      Bytes(a.pattern.data(), a.pattern.size());
      Put(static_cast<int32_t>(a.line));
    }
  }
  // An address of either family: 4 or 6, then 16 bytes (kAddressBytes).
  void Address(const IpAddress& a) {
    Put(static_cast<uint8_t>(a.is_v6() ? 6 : 4));
    Bytes(&a.addr, sizeof(a.addr));
  }
  bool full() const { return full_; }
  size_t used() const { return used_; }

 private:
  uint8_t* out_;
  size_t room_;
  size_t used_ = 0;
  bool full_ = false;
};

class Reader {
 public:
  Reader(const uint8_t* in, size_t bytes) : in_(in), bytes_(bytes) {}
  template <typename T>
  bool Get(T& v) {
    return Bytes(&v, sizeof v);
  }
  bool Bytes(void* p, size_t n) {
    if (n > bytes_ - at_) return false;
    std::memcpy(p, in_ + at_, n);
    at_ += n;
    return true;
  }
  // A count of items each at least `least` bytes long: never more than what is left can hold.
  bool Count(uint32_t& n, size_t least) { return Get(n) && uint64_t{n} * least <= bytes_ - at_; }
  bool Patterns(std::vector<AccessPattern>& out) {
    uint32_t n = 0;
    if (!Count(n, 9)) return false;
    for (uint32_t i = 0; i < n; ++i) {
      AccessPattern a;
      uint8_t allow = 0;
      uint32_t length = 0;
      int32_t line = 0;
      if (!Get(allow) || allow > 1 || !Get(length) || length > bytes_ - at_) return false;
      a.allow = allow == 1;
      a.pattern.assign(reinterpret_cast<const char*>(in_ + at_), length);
      at_ += length;
      if (!Get(line)) return false;
      a.line = line;
      out.push_back(std::move(a));
    }
    return true;
  }
  bool Address(IpAddress& a) {
    uint8_t family = 0;
    if (!Get(family) || (family != 4 && family != 6) || !Bytes(&a.addr, sizeof(a.addr))) {
      return false;
    }
    a.family = family == 6 ? AF_INET6 : AF_INET;
    return true;
  }
  bool done() const { return at_ == bytes_; }

 private:
  const uint8_t* in_;
  size_t bytes_;
  size_t at_ = 0;
};

}  // namespace

bool WorkerRuleTable::Encode(const WorkerRuleSet& set, uint8_t* out, size_t room, size_t& used) {
  Writer w(out, room);
  w.Patterns(set.global_access);
  w.Put(static_cast<uint32_t>(set.rules.size()));
  for (const WorkerRule& r : set.rules) {
    w.Put(r.id);
    w.Put(r.client_iface);
    w.Put(r.backend_iface);
    w.Address(r.listen.addr);
    w.Put(r.listen.port);
    w.Address(r.backend.addr);
    w.Put(r.backend.port);
    w.Put(static_cast<uint32_t>(r.sources.size()));
    for (const IpAddress& a : r.sources) w.Address(a);
    w.Patterns(r.access);
    w.Put(static_cast<uint8_t>(r.proxy));
    w.Put(static_cast<uint8_t>(r.retry_empty_response ? 1 : 0));
    w.Put(static_cast<uint8_t>(r.accept_proxy.enabled ? 1 : 0));
    w.Put(r.accept_proxy.timeout_ms);
    w.Patterns(r.accept_proxy.from);
    w.Put(static_cast<uint8_t>(r.balance));
    w.Put(r.backend_weight);
    w.Put(static_cast<uint32_t>(r.more_backends.size()));
    for (const RelayBackend& b : r.more_backends) {
      w.Address(b.address.addr);
      w.Put(b.address.port);
      w.Put(b.weight);
      w.Put(static_cast<uint8_t>(b.backup ? 1 : 0));
    }
  }
  w.Put(static_cast<uint32_t>(set.ipv6.size()));
  for (const Ipv6Interface& i : set.ipv6) {
    w.Bytes(&i.addr, sizeof(i.addr));
    w.Put(i.prefix_len);
    w.Bytes(&i.gateway, sizeof(i.gateway));
  }
  used = w.used();
  return !w.full();
}

std::optional<WorkerRuleSet> WorkerRuleTable::Decode(const uint8_t* in, size_t bytes) {
  Reader r(in, bytes);
  WorkerRuleSet set;
  uint32_t rules = 0;
  // A rule is 74 bytes at least (no sources, no patterns, one backend).
  if (!r.Patterns(set.global_access) || !r.Count(rules, 40 + 2 * kAddressBytes)) {
    return std::nullopt;
  }
  for (uint32_t i = 0; i < rules; ++i) {
    WorkerRule w;
    uint32_t sources = 0;
    if (!r.Get(w.id) || !r.Get(w.client_iface) || !r.Get(w.backend_iface) ||
        !r.Address(w.listen.addr) || !r.Get(w.listen.port) || !r.Address(w.backend.addr) ||
        !r.Get(w.backend.port) || !r.Count(sources, kAddressBytes)) {
      return std::nullopt;
    }
    for (uint32_t s = 0; s < sources; ++s) {
      IpAddress a;
      if (!r.Address(a)) return std::nullopt;
      w.sources.push_back(a);
    }
    uint8_t proxy = 0;
    if (!r.Patterns(w.access) || !r.Get(proxy) || proxy > uint8_t(ProxyVersion::kV2)) {
      return std::nullopt;
    }
    w.proxy = static_cast<ProxyVersion>(proxy);
    uint8_t retry = 0, accept_proxy = 0;
    if (!r.Get(retry) || retry > 1 || !r.Get(accept_proxy) || accept_proxy > 1 ||
        !r.Get(w.accept_proxy.timeout_ms) || !r.Patterns(w.accept_proxy.from)) {
      return std::nullopt;
    }
    w.accept_proxy.enabled = accept_proxy == 1;
    w.retry_empty_response = retry == 1;
    uint8_t balance = 0;
    uint32_t backends = 0;
    if (!r.Get(balance) || balance > uint8_t(BalanceMethod::kSourceHash) ||
        !r.Get(w.backend_weight) || !r.Count(backends, kAddressBytes + 7)) {
      return std::nullopt;
    }
    w.balance = static_cast<BalanceMethod>(balance);
    for (uint32_t k = 0; k < backends; ++k) {
      RelayBackend b;
      uint8_t backup = 0;
      if (!r.Address(b.address.addr) || !r.Get(b.address.port) || !r.Get(b.weight) ||
          !r.Get(backup) || backup > 1) {
        return std::nullopt;
      }
      b.backup = backup == 1;
      w.more_backends.push_back(b);
    }
    set.rules.push_back(std::move(w));
  }
  uint32_t interfaces = 0;
  if (!r.Count(interfaces, 2 * sizeof(in6_addr) + 1)) return std::nullopt;
  for (uint32_t k = 0; k < interfaces; ++k) {
    Ipv6Interface i;
    if (!r.Bytes(&i.addr, sizeof(i.addr)) || !r.Get(i.prefix_len) || i.prefix_len > 128 ||
        !r.Bytes(&i.gateway, sizeof(i.gateway))) {
      return std::nullopt;
    }
    set.ipv6.push_back(i);
  }
  if (!r.done()) return std::nullopt;
  return set;
}

void WorkerRuleTable::Format(uint8_t* memory) {
  std::memset(memory, 0, kDataOffset);
  new (memory) Header{};
}

uint64_t WorkerRuleTable::generation() const {
  return header().generation.load(std::memory_order_acquire);
}

Result<uint64_t> WorkerRuleTable::Write(const WorkerRuleSet& set) {
  // Encoded aside first: a set that does not fit leaves the table as it was.
  std::vector<uint8_t> encoded(kMemoryBytes - kDataOffset);
  size_t used = 0;
  if (!Encode(set, encoded.data(), encoded.size(), used)) {
    return Error{{},
                 "the fast path's rule table holds " + std::to_string(encoded.size()) +
                     " bytes, and " + std::to_string(set.rules.size()) +
                     " rules with their allow/deny lines need more"};
  }
  Header& h = header();
  const uint64_t g = h.generation.load(std::memory_order_relaxed);
  h.generation.store(g + 1, std::memory_order_relaxed);  // odd: readers stay away
  std::atomic_thread_fence(std::memory_order_release);
  std::memcpy(data(), encoded.data(), used);
  h.bytes = used;
  h.generation.store(g + 2, std::memory_order_release);
  return g + 2;
}

std::optional<WorkerRuleTable::Copy> WorkerRuleTable::Read() const {
  const Header& h = header();
  const uint64_t before = h.generation.load(std::memory_order_acquire);
  if (before % 2 != 0) return std::nullopt;
  const uint64_t bytes = h.bytes;
  if (bytes > kMemoryBytes - kDataOffset) return std::nullopt;  // torn: a write began
  std::vector<uint8_t> copy(bytes);
  if (bytes != 0) std::memcpy(copy.data(), data(), bytes);
  std::atomic_thread_fence(std::memory_order_acquire);
  if (h.generation.load(std::memory_order_relaxed) != before) return std::nullopt;
  auto set = Decode(copy.data(), copy.size());
  if (!set) return std::nullopt;
  return Copy{before, std::move(*set)};
}

}  // namespace xdpfwd
