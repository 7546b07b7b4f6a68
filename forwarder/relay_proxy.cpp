// [accept-proxy] on the fast path (docs/configuration.md): a client connection of such a rule
// begins with a PROXY header from a trusted proxy in front of xdpfwd. Its bytes wait in the
// client leg's backlog until the header is whole; the header's bytes are then dropped (never
// relayed, their window given back), the client it names becomes the connection's client (the
// allow/deny lines, the source hash, the PROXY header toward the backend, the access log), and
// the backend leg opens as for any connection. The kernel path does the same
// (kernel_path_proxy.cpp).
#include <algorithm>
#include <string>

#include "forwarder/access.h"
#include "forwarder/relay_internal.h"

namespace xdpfwd {

bool Relay::ProxyTrusted(const RelayRule& rule, const IpAddress& peer) {
  const std::string text = ToString(peer);
  return std::any_of(rule.accept_proxy.from.begin(), rule.accept_proxy.from.end(),
                     [&](const AccessPattern& p) { return GlobMatch(text, p.pattern); });
}

void Relay::ReceiveProxyHeader(Connection& c, pbuf* p) {
  if (p == nullptr) {
    RefuseProxyHeader(c, counters_.proxy_invalid, "the client ended before a whole header");
    return;
  }
  Touch(c);
  c.client.received += p->tot_len;
  c.client.backlog.push(p);
  uint8_t bytes[kProxyHeaderMaxBytes];
  const size_t n = c.client.backlog.Copy(bytes, sizeof bytes);
  const ProxyParse header = ParseProxyHeader({bytes, n});
  if (header.status == ProxyParse::Status::kIncomplete) return;
  if (header.status == ProxyParse::Status::kInvalid) {
    RefuseProxyHeader(c, counters_.proxy_invalid, header.error);
    return;
  }
  ProxyHeaderRead(c, header);
}

void Relay::ProxyHeaderRead(Connection& c, const ProxyParse& header) {
  RelayCounters::Add(counters_.proxy_headers);
  RelayCounters::Add(c.rule_counters->proxy_headers);
  // The header's bytes are the proxy's, not the client's: dropped, and their window reopened.
  c.client.backlog.DropFront(header.length);
  c.client.received -= header.length;
  tcp_recved(c.client.pcb, static_cast<u16_t>(header.length));
  ProxyOrigin& origin = *c.origin;
  origin.has_addresses = header.has_addresses;
  origin.source = header.source;
  origin.destination = header.destination;
  if (HasAccessPatterns(config_.global_access, c.rule->access)) {
    const std::string client =
        origin.has_addresses ? ClientAddressText(reinterpret_cast<const sockaddr*>(&origin.source))
                             : ToString(c.flows.client_flow.saddr);
    const AccessVerdict verdict = CheckAccess(config_.global_access, c.rule->access, client);
    if (verdict != AccessVerdict::kAllowed) {  // refused as any client is: closed, not relayed
      const bool denied = verdict == AccessVerdict::kDenied;
      RelayCounters::Add(denied ? counters_.denied : counters_.not_allowed);
      RelayCounters::Add(denied ? c.rule_counters->denied : c.rule_counters->not_allowed);
      c.end = denied ? SessionResult::kDenied : SessionResult::kNotAllowed;
      CloseRefused(c);
      return;
    }
  }
  awaiting_.Remove(c);
  origin.awaiting = false;
  RelayCounters::Add(counters_.accepted);  // a client connection from here, as any rule's
  RelayCounters::Add(c.rule_counters->accepted);
  // The connect timeout counts from here; the handshake lists stay in start order.
  c.started_ms = c.attempt_ms = now_ms_;
  ConnectingOf(c).PushBack(c);
  OpenBackend(c);
}

void Relay::RefuseProxyHeader(Connection& c, std::atomic<uint64_t>& reason, const char* what) {
  LogProxyRefusal(*c.rule, c.flows.client_flow.saddr, what);
  Reset(c, reason);  // counted, logged "proxy-refused"
}

// One line a second at most: a misconfigured proxy (or a scan) would refuse every connection.
void Relay::LogProxyRefusal(const RelayRule& rule, const IpAddress& sender, const char* what) {
  uint64_t held_back = 0;
  if (!proxy_log_.Count(now_ms_, held_back)) return;
  std::string line = "relay: " + ToString(rule.listen) + ": PROXY header from " + ToString(sender) +
                     " refused: " + what;
  if (held_back > 0) line += "; " + std::to_string(held_back) + " more since the last such line";
  Log(line);
}

}  // namespace xdpfwd
