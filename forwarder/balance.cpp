// Backend selection (see balance.h): smooth weighted round robin as nginx does it, least
// connections relative to weight, and Maglev consistent hashing of the client's address
// (Eisenbud et al., NSDI 2016, section 3.4) with weights.
#include "forwarder/balance.h"

#include <algorithm>
#include <bit>
#include <cstdint>
#include <cstdlib>

#include "stack/siphash.h"

namespace xdpfwd {
namespace {

// Maglev's lookup table size: prime, so that every backend's permutation (a fixed skip through
// the table) visits every entry; and about 1,000 times kMaxBackends, so that the entries split
// within 0.1% of the weights and removing a backend moves few clients besides its own.
constexpr uint32_t kTableSize = 65'537;
constexpr uint8_t kEmptyEntry = 0xff;  // no backend index reaches it (kMaxBackends is 64)
static_assert(kMaxBackends <= kEmptyEntry);
// The scans rotate a 64-bit mask so that bit k is backend (start + k) mod 64.
static_assert(kMaxBackends == 64);

// SipHash keys for the source hash. Fixed, not random per process: every process (the fast
// path's workers, the kernel path's threads, a restarted worker) must send a client to the same
// backend. Secrecy would buy nothing: a client reaches one backend whatever the key.
constexpr uint64_t kPermutationKey[2] = {0x78647066'77646d67ULL, 0x6c657620'7065726dULL};
constexpr uint64_t kClientKey[2] = {0x78647066'77646d67ULL, 0x6c657620'636c6e74ULL};

// FNV-1a (64-bit) of a backend's key: folds a name of any length into a word for SipHash,
// whose implementation here takes 16-byte messages.
uint64_t Fnv1a(std::string_view s) {
  uint64_t h = 0xcbf29ce484222325ULL;
  for (char c : s) {
    h ^= static_cast<uint8_t>(c);
    h *= 0x100000001b3ULL;
  }
  return h;
}

uint64_t LittleEndianWord(const uint8_t* p) {
  uint64_t w = 0;
  for (int i = 7; i >= 0; --i) w = (w << 8) | p[i];
  return w;
}

// The table entry of a client. An IPv4 address is hashed in its IPv4-mapped IPv6 form, so that
// a client seen by a dual-stack listener (IPv4-mapped) and by an IPv4 one gets the same backend.
uint32_t ClientEntry(std::span<const uint8_t> client) {
  uint8_t v6[16] = {};
  if (client.size() == 4) {
    v6[10] = 0xff;
    v6[11] = 0xff;
    std::copy(client.begin(), client.end(), v6 + 12);
  } else {
    std::copy_n(client.begin(), std::min<size_t>(client.size(), sizeof(v6)), v6);
  }
  return SipHash24(kClientKey, LittleEndianWord(v6), LittleEndianWord(v6 + 8)) % kTableSize;
}

uint32_t Advance(uint32_t entry, uint32_t skip) {
  entry += skip;  // both below kTableSize: no overflow, at most one subtraction
  return entry >= kTableSize ? entry - kTableSize : entry;
}

}  // namespace

std::string_view BalanceMethodName(BalanceMethod m) {
  switch (m) {
    case BalanceMethod::kLeastConnections:
      return "leastconn";
    case BalanceMethod::kSourceHash:
      return "source";
    case BalanceMethod::kRoundRobin:
      break;
  }
  return "roundrobin";
}

BackendPicker::BackendPicker(BalanceMethod method, std::vector<PickerBackend> backends)
    : method_(method) {
  if (backends.empty() || backends.size() > kMaxBackends) {
    std::abort();  // the config parser refuses such a rule: a caller's bug
  }
  backends_.resize(backends.size());
  all_ = backends.size() == 64 ? ~uint64_t{0} : (uint64_t{1} << backends.size()) - 1;
  for (size_t i = 0; i < backends.size(); ++i) {
    Backend& b = backends_[i];
    b.weight = std::max<uint32_t>(backends[i].weight, 1);
    if (backends[i].backup) backups_ |= uint64_t{1} << i;
    // Two independent hashes of the key give the permutation; skip is never 0, and below the
    // prime table size it is coprime with it, so the permutation is a whole cycle.
    const uint64_t digest = Fnv1a(backends[i].key);
    b.offset = SipHash24(kPermutationKey, digest, 0) % kTableSize;
    b.skip = SipHash24(kPermutationKey, digest, 1) % (kTableSize - 1) + 1;
  }
  if (method_ == BalanceMethod::kSourceHash) {
    table_.resize(kTableSize);
    key_order_.resize(backends.size());
    for (size_t i = 0; i < backends.size(); ++i) key_order_[i] = static_cast<uint8_t>(i);
    // Ties (two backends with one key) keep the listed order; stable_sort keeps it the same
    // in every process.
    std::stable_sort(key_order_.begin(), key_order_.end(),
                     [&](uint8_t a, uint8_t b) { return backends[a].key < backends[b].key; });
  }
}

uint64_t BackendPicker::Usable(uint64_t allowed) const {
  const uint64_t healthy = allowed & all_;
  const uint64_t primaries = healthy & ~backups_;
  return primaries != 0 ? primaries : healthy;
}

std::optional<size_t> BackendPicker::Pick(uint64_t up, uint64_t tried,
                                          std::span<const uint8_t> client) {
  const uint64_t usable = Usable(up & ~tried);
  if (usable == 0) return std::nullopt;
  switch (method_) {
    case BalanceMethod::kLeastConnections:
      return PickLeastConnections(usable);
    case BalanceMethod::kSourceHash:
      return PickSourceHash(up, usable, client);
    case BalanceMethod::kRoundRobin:
      break;
  }
  return PickRoundRobin(usable);
}

// nginx's smooth weighted round robin: weights 5,1,1 give a,a,b,a,c,a,a rather than five a's in
// a row. Each pick adds every usable backend's weight to its credit and charges the chosen one
// the usable total, so credits stay bounded and the shares match the weights exactly.
size_t BackendPicker::PickRoundRobin(uint64_t usable) {
  int64_t total = 0;
  size_t best = 0;
  int64_t best_current = INT64_MIN;
  for (uint64_t rest = usable; rest != 0; rest &= rest - 1) {
    const size_t i = std::countr_zero(rest);
    Backend& b = backends_[i];
    b.current_weight += b.weight;
    total += b.weight;
    if (b.current_weight > best_current) {
      best = i;
      best_current = b.current_weight;
    }
  }
  backends_[best].current_weight -= total;
  return best;
}

// Fewest connections per unit of weight, compared as open_i * weight_j < open_j * weight_i so
// that no division rounds. The scan starts after the last pick and only a strictly lighter
// backend displaces the first one found, so equally loaded backends take turns.
size_t BackendPicker::PickLeastConnections(uint64_t usable) {
  const uint64_t from_next = std::rotr(usable, static_cast<int>(next_));
  size_t best = (next_ + std::countr_zero(from_next)) % 64;
  uint64_t best_connections = backends_[best].connections;
  uint64_t best_weight = backends_[best].weight;
  for (uint64_t rest = from_next & (from_next - 1); rest != 0; rest &= rest - 1) {
    const size_t i = (next_ + std::countr_zero(rest)) % 64;
    const Backend& b = backends_[i];
    if (b.connections * best_weight < best_connections * b.weight) {
      best = i;
      best_connections = b.connections;
      best_weight = b.weight;
    }
  }
  next_ = (best + 1) % 64;
  return best;
}

size_t BackendPicker::PickSourceHash(uint64_t up, uint64_t usable,
                                     std::span<const uint8_t> client) {
  // The table covers the usable set of `up` alone: a retry (tried bits) must not rebuild it.
  const uint64_t members = Usable(up);
  if (members != table_members_) BuildMaglevTable(members);
  const size_t chosen = table_[ClientEntry(client)];
  if ((usable >> chosen) & 1) return chosen;
  // Failover: the next usable backend after the table's choice, in index order, wrapping.
  const size_t start = (chosen + 1) % 64;
  return (start + std::countr_zero(std::rotr(usable, static_cast<int>(start)))) % 64;
}

// Maglev's population: the members take turns claiming the next free entry of their own
// permutation until the table is full. Weighted: each round a member earns its weight in credit
// and takes a turn whenever its credit reaches the heaviest member's weight (every round for the
// heaviest), so its share of the entries is its weight's. Equal weights give the paper's
// algorithm exactly.
void BackendPicker::BuildMaglevTable(uint64_t members) {
  std::fill(table_.begin(), table_.end(), kEmptyEntry);
  uint32_t position[kMaxBackends] = {};  // each member's next entry in its permutation
  uint32_t credit[kMaxBackends] = {};
  uint32_t heaviest = 0;
  for (uint64_t rest = members; rest != 0; rest &= rest - 1) {
    const size_t i = std::countr_zero(rest);
    position[i] = backends_[i].offset;
    heaviest = std::max(heaviest, backends_[i].weight);
  }
  uint32_t filled = 0;
  for (;;) {
    for (uint8_t i : key_order_) {
      if (((members >> i) & 1) == 0) continue;
      const Backend& b = backends_[i];
      credit[i] += b.weight;
      if (credit[i] < heaviest) continue;
      credit[i] -= heaviest;
      uint32_t& p = position[i];
      while (table_[p] != kEmptyEntry) p = Advance(p, b.skip);
      table_[p] = i;
      p = Advance(p, b.skip);
      if (++filled == kTableSize) {
        table_members_ = members;
        return;
      }
    }
  }
}

void BackendPicker::SetWeights(std::span<const uint32_t> weights) {
  for (size_t i = 0; i < backends_.size() && i < weights.size(); ++i) {
    backends_[i].weight = std::max<uint32_t>(weights[i], 1);
    backends_[i].current_weight = 0;
  }
  table_members_ = 0;
}

void BackendPicker::Opened(size_t i) { ++backends_[i].connections; }

// Each Closed pairs with an Opened of the same backend: the caller's books say so.
void BackendPicker::Closed(size_t i) { --backends_[i].connections; }

}  // namespace xdpfwd
