// The relay's insides (relay.h), shared by its translation units: relay.cpp (connections and
// lwIP's callbacks) and relay_rules.cpp (rules, listeners, backends and failover). Private to
// forwarder/.
#pragma once

#include <sys/socket.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "forwarder/backend_choice.h"
#include "forwarder/relay.h"

extern "C" {
#include "lwip/pbuf.h"
#include "lwip/tcp.h"
}

namespace xdpfwd {

inline ip_addr_t LwipAddress(const IpAddress& a) { return lwip_pcb::ToLwipAddress(a); }

// Received data waiting for the other leg: a queue of pbuf chains (a chain's length is a u16,
// so a window's worth of data cannot be one chain). Empty costs nothing.
class PbufQueue {
 public:
  bool empty() const { return head_ == items_.size(); }
  pbuf*& front() { return items_[head_]; }
  void push(pbuf* p) { items_.push_back(p); }
  void pop() {
    if (++head_ == items_.size()) {
      items_.clear();
      head_ = 0;
    }
  }
  // Copies up to `max` bytes from the front of the queue to `out`; how many it copied.
  size_t Copy(uint8_t* out, size_t max) const {
    size_t n = 0;
    for (size_t i = head_; i < items_.size() && n < max; ++i) {
      const auto want = static_cast<u16_t>(std::min<size_t>(max - n, items_[i]->tot_len));
      n += pbuf_copy_partial(items_[i], out + n, want, 0);
    }
    return n;
  }
  // Frees the first `n` bytes (no more than the queue holds).
  void DropFront(size_t n) {
    while (n > 0 && !empty()) {
      pbuf*& head = front();
      const auto take = static_cast<u16_t>(std::min<size_t>(n, head->tot_len));
      head = pbuf_free_header(head, take);
      n -= take;
      if (head == nullptr) pop();
    }
  }
  void FreeAll() {
    for (size_t i = head_; i < items_.size(); ++i) pbuf_free(items_[i]);
    items_.clear();
    items_.shrink_to_fit();
    head_ = 0;
  }

 private:
  std::vector<pbuf*> items_;
  size_t head_ = 0;
};

struct Relay::Leg : ListHook<Leg, Owed> {
  Connection* conn = nullptr;
  tcp_pcb* pcb = nullptr;
  bool is_client = false;
  bool connected = false;
  bool fin_received = false;   // the peer's FIN has arrived (lwIP's recv with a null pbuf)
  bool fin_sent = false;       // our FIN is queued toward this peer
  bool backpressured = false;  // bytes from this leg wait for the other leg's room (recorded)
  // The Nagle/delayed-ACK stall (Relay::CheckNagle): when the peer's last bytes arrived and
  // whether they were less than a segment, when lwIP's fast timer last sent an ACK it had held
  // back, how many of the peer's segments in a row came right behind such an ACK, and whether
  // the peer was found waiting for them (its small segments are ACKed at once since).
  bool last_data_small = false;
  bool quick_ack = false;
  uint8_t nagle_run = 0;
  uint64_t last_data_ns = 0;
  uint64_t held_ack_ns = 0;
  PbufQueue backlog;      // received from this leg, not yet queued on the other leg
  uint64_t received = 0;  // bytes lwIP delivered from this leg's peer
  uint64_t relayed = 0;   // of those, bytes queued on the other leg
  // While bytes wait for this leg's peer (on owed_): when the peer last acknowledged some, or
  // when they started waiting. The stall timeout counts from here.
  uint64_t progress_ms = 0;
};

// [accept-proxy]: the client's PROXY header, awaited from the accept until it is whole (on
// Relay::awaiting_, by deadline), then what it said. Only connections of such rules have one.
struct Relay::ProxyOrigin {
  bool awaiting = true;
  uint64_t deadline_ms = 0;
  bool has_addresses = false;                // else the connection's own ends stand
  sockaddr_storage source{}, destination{};  // the client behind the proxy, and whom it reached
};

// [retry-on=empty-response]: the client's bytes sent to the backend, kept until the backend
// answers (or there are more than kRetryBytes: then the connection drops it and cannot retry).
struct Relay::RetryCopy {
  std::string bytes;
  bool resend = false;  // a retried backend leg is on its way: they go first once it is up
};

struct Relay::Connection : ListHook<Connection, ByActivity>,
                           ListHook<Connection, Connecting>,
                           ListHook<Connection, Watched>,
                           ListHook<Connection, Unmarked> {
  Relay* relay = nullptr;
  const RelayRule* rule = nullptr;
  Leg client, backend;
  uint64_t started_ms = 0;
  uint64_t last_active_ms = 0;
  FlowBooking flows;     // the ledger's entries and port for this connection
  uint64_t mark_ms = 0;  // when its client entry is due to be marked accepted (on unmarked_)
  bool finished = false;
  // For the access log: how it ended. The first FIN decides which side closed first; a reset
  // or a timeout says its own reason.
  bool end_known = false;
  SessionResult end = SessionResult::kUnknownError;
  uint32_t trace_id = 0;     // the flight recorder's name for it
  uint64_t listed = 0;       // the last `show sess` listing that has it (Relay::listing_)
  uint64_t accepted_ns = 0;  // the worker's clock when the client's connection was taken
  RelayCounters* rule_counters = nullptr;  // its rule's, beside the relay's own
  // Its rule as served, the backend it goes to (an index into the rule's), those whose
  // handshakes failed for it, and when its current handshake began (with whether it is that
  // backend's trial, for passive health).
  RuleVersion* version = nullptr;
  size_t backend_index = 0;
  uint64_t tried = 0;
  uint64_t attempt_ms = 0;
  std::unique_ptr<ProxyOrigin> origin;  // [accept-proxy] rules only
  std::unique_ptr<RetryCopy> retry;     // [retry-on=empty-response] rules, until it is moot
  HealthAttempt handshake;

  Leg& other(Leg& leg) { return &leg == &client ? backend : client; }
  // Its PROXY header is not whole yet: no backend is picked, no backend leg opened.
  bool awaiting_header() const { return origin != nullptr && origin->awaiting; }
};

// A rule as served: the rule, and its backends as this worker picks among them (the picker,
// what its handshakes said about each, and the shared board's states, weights and counters).
struct Relay::RuleVersion {
  RuleVersion(const RelayRule& r, HealthBoard* board)
      : rule(r), backends(r.id, r.balance, Backends(r), board) {}
  IpEndpoint backend(size_t i) const {
    return i == 0 ? rule.backend : rule.more_backends[i - 1].address;
  }
  size_t backend_count() const { return 1 + rule.more_backends.size(); }

  RelayRule rule;
  BackendChoice backends;

 private:
  static std::vector<PickerBackend> Backends(const RelayRule& r) {
    std::vector<PickerBackend> out;
    out.push_back(PickerBackend{ToString(r.backend), r.backend_weight, false});
    for (const RelayBackend& b : r.more_backends) {
      out.push_back(PickerBackend{ToString(b.address), b.weight, b.backup});
    }
    return out;
  }
};

struct Relay::Listener {
  Relay* relay = nullptr;
  RuleVersion* version = nullptr;
  const RelayRule* rule = nullptr;         // version's
  RelayCounters* rule_counters = nullptr;  // the rule's own (Relay::rule_counters_)
  tcp_pcb* pcb = nullptr;
};

}  // namespace xdpfwd
