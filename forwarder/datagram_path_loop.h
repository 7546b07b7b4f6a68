// The datagram path's event loop, private to it: one thread's epoll set, the rules' listeners,
// the associations with their idle deadlines, and the counters the path reads as totals.
#pragma once

#include <sys/socket.h>

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <list>
#include <memory>
#include <unordered_map>
#include <vector>

#include "forwarder/datagram_path.h"
#include "forwarder/intrusive_list.h"
#include "forwarder/rules.h"
#include "forwarder/session_log.h"
#include "os/log.h"
#include "os/result.h"
#include "os/unique_fd.h"

namespace xdpfwd::datagram_path {

// Any UDP payload fits (IPv6's 65527 included); a bigger one shows as MSG_TRUNC and is dropped.
constexpr size_t kReceiveBytes = 65536;

// A UDP client as the association table knows it: family, address, port (and the IPv6 scope,
// so fe80::1%eth0 and fe80::1%eth1 stay two clients).
struct ClientKey {
  std::array<uint8_t, 16> address{};
  uint32_t scope_id = 0;
  uint16_t port = 0;
  uint16_t family = 0;
  bool operator==(const ClientKey&) const = default;
};

// Keyed with a random seed per path: clients choose their addresses and ports (or spoof them),
// and an unkeyed hash would let them line up every association in one bucket.
struct ClientKeyHash {
  uint64_t seed = 0;
  size_t operator()(const ClientKey& key) const {
    uint64_t lo, hi;
    std::memcpy(&lo, key.address.data(), sizeof(lo));
    std::memcpy(&hi, key.address.data() + 8, sizeof(hi));
    const uint64_t rest = (uint64_t{key.scope_id} << 32) | (uint64_t{key.port} << 16) | key.family;
    uint64_t h = seed;
    for (uint64_t word : {lo, hi, rest}) {
      // splitmix64's finaliser per word: every input bit reaches every output bit.
      h ^= word + 0x9e3779b97f4a7c15u + (h << 6) + (h >> 2);
      h ^= h >> 30;
      h *= 0xbf58476d1ce4e5b9u;
      h ^= h >> 27;
      h *= 0x94d049bb133111ebu;
      h ^= h >> 31;
    }
    return static_cast<size_t>(h);
  }
};

struct Counters {
#define XDPFWD_FIELD(name, kind, what) std::atomic<uint64_t> name{0};
  XDPFWD_DATAGRAM_COUNTERS(XDPFWD_FIELD)
#undef XDPFWD_FIELD

  // One writer (the path's thread): a relaxed load and store, no locked instruction.
  static void Add(std::atomic<uint64_t>& c, uint64_t n = 1) {
    c.store(c.load(std::memory_order_relaxed) + n, std::memory_order_relaxed);
  }
  static void Sub(std::atomic<uint64_t>& c) {
    c.store(c.load(std::memory_order_relaxed) - 1, std::memory_order_relaxed);
  }
  DatagramPathTotals Snapshot() const {
    DatagramPathTotals t;
#define XDPFWD_FIELD(name, kind, what) t.name = name.load(std::memory_order_relaxed);
    XDPFWD_DATAGRAM_COUNTERS(XDPFWD_FIELD)
#undef XDPFWD_FIELD
    return t;
  }
};

class Loop {
 public:
  // Creates the epoll set, the wake-up eventfd and every rule's listener. `config` and
  // `counters` must outlive the loop.
  static Result<std::unique_ptr<Loop>> Create(const DatagramPathConfig& config, Counters& counters);
  ~Loop();
  Loop(const Loop&) = delete;
  Loop& operator=(const Loop&) = delete;

  // Serves until RequestStop(), then ends every association. Call once, on the loop's thread.
  void Run();
  void RequestStop();  // any thread
  SocketAddress bound(size_t rule_index) const { return listeners_[rule_index]->bound; }

 private:
  struct IdleTag {};
  struct Association;
  using AssociationList = std::list<Association>;
  using IdleList = IntrusiveList<Association, IdleTag>;
  // Associations of the rules sharing one udp_timeout_s, ordered by last activity: the front
  // is the next to expire, so expiry never looks at the others.
  struct IdleDeadlines {
    uint64_t timeout_ns = 0;
    IdleList list;
  };
  struct Listener {
    UniqueFd fd;
    const Rule* rule = nullptr;
    SocketAddress bound;
    IdleDeadlines* idle = nullptr;  // UDP clients only: a TCP client's stream says when it ends
    bool resting = false;           // taken out of epoll after accept failed (kAcceptRestNs)
    std::unordered_map<ClientKey, Association*, ClientKeyHash> clients;  // UDP listeners
  };
  // How an association ended; each is a counter and a session result.
  enum class End : uint8_t { kClient, kBackend, kIdle, kConnectFailed, kStopped, kError };

  Loop(const DatagramPathConfig& config, Counters& counters);
  Result<void> Open();
  Result<void> OpenListener(const Rule& rule, uint64_t seed);

  void OnWake();
  void OnDatagramListener(Listener& l);
  void OnStreamListener(Listener& l);
  Association* OpenAssociation(Listener& l, const sockaddr_storage& client, UniqueFd stream);
  void OnBackendEvent(Association& a, uint32_t events);
  void OnDatagramBackend(Association& a);
  void OnStreamLeg(Association& a, bool backend_leg, uint32_t events);
  void ReadStream(Association& a, bool backend_leg);
  bool SendToBackend(Association& a, const uint8_t* p, size_t n);
  void SendToClient(Association& a, const uint8_t* p, size_t n);
  bool WriteStream(Association& a, bool backend_leg, const uint8_t* p, size_t n);
  bool WantOutput(Association& a, bool want);
  void Touch(Association& a);
  void Finish(Association& a, End why);
  void ExpireDeadlines();
  int NextTimeoutMs() const;
  void RestListener(Listener& l);
  void WakeListeners();
  void Report(const Rule& rule, const sockaddr_storage& client, SessionResult result,
              uint64_t bytes_in = 0, uint64_t bytes_out = 0) const;
  void LogBackendFailure(const Rule& rule, const char* what, int err);

  static void Add(std::atomic<uint64_t>& c, uint64_t n = 1) { Counters::Add(c, n); }

  const DatagramPathConfig& config_;
  Counters& counters_;
  std::atomic<bool> stop_{false};
  UniqueFd epoll_, wake_;
  std::vector<std::unique_ptr<Listener>> listeners_;  // in rule order
  std::vector<std::unique_ptr<IdleDeadlines>> idle_;  // one per distinct udp_timeout_s
  // Associations live in live_ and move to ended_ when they end, where they stay until this
  // iteration's epoll events can no longer name them.
  AssociationList live_, ended_;
  uint32_t open_ = 0;
  std::vector<Listener*> resting_;
  uint64_t rest_until_ns_ = 0;
  uint64_t now_ns_ = 0;  // one clock read per iteration
  LogThrottle full_log_{1000}, backend_log_{1000};
  std::array<uint8_t, kReceiveBytes> buffer_{};
};

}  // namespace xdpfwd::datagram_path
