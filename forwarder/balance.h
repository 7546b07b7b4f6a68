// Which of a rule's backends a new connection goes to: weighted round robin, least connections
// or the client's address through Maglev consistent hashing. Both paths use it: one picker per
// rule in a fast-path worker, one per rule in each kernel-path thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace xdpfwd {

enum class BalanceMethod : uint8_t { kRoundRobin, kLeastConnections, kSourceHash };
std::string_view BalanceMethodName(BalanceMethod m);  // "roundrobin", "leastconn", "source"

inline constexpr size_t kMaxBackends = 64;  // per rule: a connection's tried set is a 64-bit mask

struct PickerBackend {
  std::string key;      // its stable name, e.g. "10.0.0.2:9001": the source hash's input, so the
                        // table is the same in every process that has the same backends
  uint32_t weight = 1;  // 1..256; 0 is refused by the config parser, treat as 1 here
  bool backup = false;  // used only while no non-backup backend is usable
};

// Single-threaded: its owner calls it for the connections it accepts. Pick allocates nothing
// and costs O(backends), except that the source hash rebuilds its table (65,537 entries) on the
// first pick after the usable set changed, which happens on health changes only.
class BackendPicker {
 public:
  BackendPicker(BalanceMethod method, std::vector<PickerBackend> backends);  // 1..kMaxBackends

  // The backend for a new connection, an index into the backends; nullopt when none is usable.
  // `up`: bit i set = backend i is healthy. `tried`: bit i set = this connection already failed
  // on backend i (failover), skip it. `client`: the client's address bytes (4 or 16), read by
  // the source hash only.
  std::optional<size_t> Pick(uint64_t up, uint64_t tried, std::span<const uint8_t> client);

  // New weights, one per backend in order (`set weight`, a reload): round robin's credits start
  // over, the source hash's table is built again on the next pick, least connections' counts
  // stay.
  void SetWeights(std::span<const uint32_t> weights);

  // Least connections: a connection to backend i began / ended (the others ignore them).
  void Opened(size_t i);
  void Closed(size_t i);

  size_t size() const { return backends_.size(); }

 private:
  struct Backend {
    uint32_t weight = 1;
    int64_t current_weight = 0;  // round robin: its credit (nginx's name)
    uint64_t connections = 0;    // least connections: open now
    uint32_t offset = 0;         // source hash: its permutation, (offset + j * skip) mod M
    uint32_t skip = 1;
  };

  // Which of `allowed` (healthy, and untried for a retry) a connection may use: the primaries
  // among them, or the backups when there is no primary.
  uint64_t Usable(uint64_t allowed) const;
  size_t PickRoundRobin(uint64_t usable);
  size_t PickLeastConnections(uint64_t usable);
  size_t PickSourceHash(uint64_t up, uint64_t usable, std::span<const uint8_t> client);
  void BuildMaglevTable(uint64_t members);

  BalanceMethod method_;
  std::vector<Backend> backends_;
  uint64_t all_ = 0;      // a bit for each backend
  uint64_t backups_ = 0;  // a bit for each backup
  size_t next_ = 0;       // least connections: where the scan for a tie starts
  // Source hash: the backends in the order of their keys, which Maglev fills the table in, so
  // that the same backends listed in another order still give the same backend per client.
  std::vector<uint8_t> key_order_;
  std::vector<uint8_t> table_;  // backend index per entry; empty for the other methods
  uint64_t table_members_ = 0;  // the usable set table_ was built for; 0: not built
};

}  // namespace xdpfwd
