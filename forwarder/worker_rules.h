// The rules the fast path's workers serve, as one table in their shared memory
// (forwarder/worker_memory.h): the control process writes it at start and at every reload, each
// worker builds its relay's rules from it at its start and again whenever its generation moves
// (one load per worker iteration). So a reload reaches running workers, and a worker restarted
// after one starts with the rules of the day, not those of the fork.
#pragma once

#include <netinet/in.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

#include "forwarder/relay.h"
#include "forwarder/rules.h"
#include "os/ip_address.h"
#include "os/result.h"
#include "stack/next_hop_route.h"

namespace xdpfwd {

// One rule as a worker needs it: addresses, and where its flows go by interface (an index into
// the control process's interface list, which every worker inherits at its fork).
struct WorkerRule {
  uint32_t id = 0;
  uint16_t client_iface = 0;
  uint16_t backend_iface = 0;
  IpEndpoint listen;  // either family, and the backends either or both (4-to-6, 6-to-4)
  IpEndpoint backend;
  // Local addresses of backend legs, in turn: of its backends' families, a leg taking those of
  // its backend's (FlowLedger::LeaseBackendPort); a family with none takes the netif's address.
  std::vector<IpAddress> sources;
  std::vector<AccessPattern> access;  // the rule's own allow/deny lines
  ProxyVersion proxy = ProxyVersion::kNone;
  AcceptProxy accept_proxy;
  bool retry_empty_response = false;
  // Several backends: `backend` first, with this weight, then these (forwarder/relay.h).
  uint32_t backend_weight = 1;
  std::vector<RelayBackend> more_backends;
  BalanceMethod balance = BalanceMethod::kRoundRobin;
};

struct WorkerRuleSet {
  std::vector<WorkerRule> rules;
  std::vector<AccessPattern> global_access;  // allow/deny lines before the first rule
  // Each interface's IPv6 address, prefix and gateway as the workers answer on them, in the
  // control process's interface order: a reload may give an interface its first one, which
  // each worker then adds to its netif (LwipNetif::AddIpv6) before serving the rules.
  std::vector<Ipv6Interface> ipv6;
};

// The table: a generation (odd while the control process writes) and the rules, encoded. One
// writer (the control process, one reload at a time); readers copy and check the generation
// did not move meanwhile, as a seqlock's do.
class WorkerRuleTable {
 public:
  // 1 MiB: 1,024 rules (the steering program's most listeners) with long access lists fit; a
  // set that does not is refused by Write.
  static constexpr size_t kMemoryBytes = size_t{1} << 20;
  // Zeroed memory is an empty table of generation 0; Format makes it so.
  static void Format(uint8_t* memory);
  explicit WorkerRuleTable(uint8_t* memory) : memory_(memory) {}

  // Replaces the rules and returns the new generation (even, never 0); an error, the table
  // unchanged, when the set does not fit.
  Result<uint64_t> Write(const WorkerRuleSet& set);
  // Acquire: even, and odd while a write is under way.
  uint64_t generation() const;
  struct Copy {
    uint64_t generation = 0;
    WorkerRuleSet set;
  };
  // A consistent copy, or nullopt while a write is under way or if one happened during the
  // copy (try again on a later iteration).
  std::optional<Copy> Read() const;

  // The encoding, apart so that it can be tested on its own: false if `set` needs more than
  // `room` bytes (nothing then is meaningful in `out`); Decode refuses what Encode never makes.
  static bool Encode(const WorkerRuleSet& set, uint8_t* out, size_t room, size_t& used);
  static std::optional<WorkerRuleSet> Decode(const uint8_t* in, size_t bytes);

 private:
  struct Header {
    std::atomic<uint64_t> generation;
    uint64_t bytes;  // of encoded rules after the header
  };
  static constexpr size_t kDataOffset = 64;
  Header& header() const { return *reinterpret_cast<Header*>(memory_); }
  uint8_t* data() const { return memory_ + kDataOffset; }

  uint8_t* memory_;
};

}  // namespace xdpfwd
