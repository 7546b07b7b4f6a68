// One connection of a kernel-path loop: private to the loop's translation units
// (kernel_path_loop.cpp, kernel_path_proxy.cpp).
#pragma once

#include <netinet/in.h>
#include <sys/socket.h>

#include <atomic>
#include <cstdint>
#include <optional>

#include "forwarder/backend_choice.h"
#include "forwarder/kernel_path_loop.h"
#include "forwarder/session_log.h"

namespace xdpfwd::kernel_path {

// Connection sockets are edge-triggered, registered once with IN|OUT|RDHUP and never
// modified: backpressure is a flag in the Leg ("sink not writable, stop reading"), not an
// EPOLL_CTL_MOD. Level-triggered would need a MOD to mask EPOLLIN while the other side is full
// and another to arm EPOLLOUT only while waiting, or it would spin. An EPOLLOUT edge only comes
// after a write found the send buffer full (TCP's SOCK_NOSPACE), so keeping it armed is free.
// Listeners are level-triggered: a burst larger than one accept batch is picked up on the next
// iteration without a queue of our own.
struct Loop::Connection {
  explicit Connection(bool use_splice) : to_backend(use_splice), to_client(use_splice) {}

  uint64_t id = 0;  // `show sess`, `shutdown session ID`
  Leg client, backend;
  Direction to_backend, to_client;
  ConnectionList::iterator self;  // in its list (see `list`) or ended_
  // Accepted while waiting for a PROXY header, connect start while connecting, then the last
  // byte relayed.
  Clock::time_point since;
  Clock::time_point accepted;  // for its age in `show sess`
  Clock::time_point opening;   // the backend leg's first connect (the accept, or the header)
  BackendLease lease;          // the backend leg's local port, given back at Finish
  const Rule* rule = nullptr;
  // We shut the backend leg down before its FIN arrived: its 4-tuple ends in TIME_WAIT here.
  bool backend_closed_first = false;
  bool connecting = true;
  // [accept-proxy]: no backend picked nor leg opened yet; the client's first bytes are read as
  // a PROXY header (kernel_path_proxy.cpp).
  bool awaiting_header = false;
  bool ended = false;
  bool queued = false;  // in turns_
  bool tagged = false;  // its sockets are the TCP event programs' (Loop::TagDue)
  // Its entry in pending_tags_, counted from the first ever, plus 1; 0: none.
  uint64_t pending_tag = 0;
  // While awaiting_header: how many bytes the last MSG_PEEK saw (parsed again only when more).
  uint16_t header_peeked = 0;
  // For the access log: the client's address (the PROXY header's source, when it names one),
  // bytes each way, and which side's end of stream was read first.
  sockaddr_storage peer{};
  uint64_t bytes_in = 0, bytes_out = 0;
  std::optional<SessionResult> closed_first;
  bool client_fin = false, backend_fin = false;  // recorded once each
  RelayCounters* rule_counters = nullptr;        // its rule's (PathCounters::ForRule)
  // The address the client connected to as a received PROXY header names it, for the header
  // [proxy=] sends on; AF_UNSPEC (none): the client socket's own. Either family fits a
  // sockaddr_in6, which keeps a connection 100 bytes smaller than a sockaddr_storage would.
  sockaddr_in6 destination{};
  // The backend chosen (an index into the rule's backends), those whose handshakes failed for
  // it (failover), and the list it waits in while connecting.
  size_t backend_index = 0;
  uint64_t tried = 0;
  HealthAttempt handshake;  // the backend leg's, as passive health follows it
  BackendChoice* backends = nullptr;
  ConnectionList* list = nullptr;
};

// epoll_event.data: a pointer with what it points to in its low bits.
enum : uint64_t { kWakeTag = 0, kListenerTag = 1, kClientTag = 2, kBackendTag = 3, kTagMask = 3 };

inline uint64_t Tagged(const void* p, uint64_t tag) { return reinterpret_cast<uintptr_t>(p) | tag; }
template <typename T>
T* Untagged(uint64_t data) {
  return reinterpret_cast<T*>(static_cast<uintptr_t>(data & ~kTagMask));
}

// A loop thread's counters have one writer: that thread (RelayCounters::Add).
inline void Add(std::atomic<uint64_t>& counter, uint64_t n = 1) { RelayCounters::Add(counter, n); }

// Closes with a RST (SO_LINGER 0 drops unsent data): the peer must not mistake a cut-short
// stream for a complete one, as it would with a FIN.
inline void ResetClose(UniqueFd& fd) {
  if (!fd) return;
  const linger abort{1, 0};
  setsockopt(fd.get(), SOL_SOCKET, SO_LINGER, &abort, sizeof(abort));
  fd.reset();
}

}  // namespace xdpfwd::kernel_path
