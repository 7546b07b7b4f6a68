// rinetd-compatible access control (see access.h).
#include "forwarder/access.h"

#include <arpa/inet.h>

namespace xdpfwd {
namespace {

// The allow lines decide when there are any; deny lines are looked at only after them.
AccessVerdict CheckList(const std::vector<AccessPattern>& list, std::string_view text) {
  bool any_allow = false, allowed = false;
  for (const AccessPattern& p : list) {
    if (!p.allow) continue;
    any_allow = true;
    if (GlobMatch(text, p.pattern)) {
      allowed = true;
      break;
    }
  }
  if (any_allow && !allowed) return AccessVerdict::kNotAllowed;
  for (const AccessPattern& p : list) {
    if (!p.allow && GlobMatch(text, p.pattern)) return AccessVerdict::kDenied;
  }
  return AccessVerdict::kAllowed;
}

}  // namespace

std::string_view VerdictName(AccessVerdict verdict) {
  switch (verdict) {
    case AccessVerdict::kAllowed:
      return "allowed";
    case AccessVerdict::kNotAllowed:
      return "not-allowed";
    case AccessVerdict::kDenied:
      return "denied";
  }
  return "?";
}

bool GlobMatch(std::string_view text, std::string_view pattern) {
  // Iterative matching with one backtrack point (the last '*'): linear in practice, never
  // exponential, whatever the pattern.
  size_t t = 0, p = 0;
  size_t star_p = std::string_view::npos, star_t = 0;
  while (t < text.size()) {
    if (p < pattern.size() && pattern[p] == '*') {
      star_p = ++p;
      star_t = t;
      continue;
    }
    if (p < pattern.size()) {
      char want = pattern[p];
      size_t width = 1;
      bool any = want == '?';
      if (want == '\\' && p + 1 < pattern.size()) {
        want = pattern[p + 1];
        width = 2;
        any = false;
      }
      if (any || want == text[t]) {
        p += width;
        ++t;
        continue;
      }
    }
    if (star_p == std::string_view::npos) return false;
    p = star_p;
    t = ++star_t;
  }
  while (p < pattern.size() && pattern[p] == '*') ++p;
  return p == pattern.size();
}

std::string ClientAddressText(in_addr client) {
  char buf[INET_ADDRSTRLEN] = {};
  inet_ntop(AF_INET, &client, buf, sizeof(buf));
  return buf;
}

std::string ClientAddressText(const sockaddr* client) {
  if (client->sa_family == AF_INET) {
    return ClientAddressText(reinterpret_cast<const sockaddr_in*>(client)->sin_addr);
  }
  if (client->sa_family == AF_INET6) {
    const in6_addr& a = reinterpret_cast<const sockaddr_in6*>(client)->sin6_addr;
    if (IN6_IS_ADDR_V4MAPPED(&a)) {
      in_addr v4{};
      static_assert(sizeof(v4) == 4);
      __builtin_memcpy(&v4, &a.s6_addr[12], 4);
      return ClientAddressText(v4);
    }
    char buf[INET6_ADDRSTRLEN] = {};
    inet_ntop(AF_INET6, &a, buf, sizeof(buf));
    return buf;
  }
  return "?";
}

AccessVerdict CheckAccess(const std::vector<AccessPattern>& global,
                          const std::vector<AccessPattern>& rule, std::string_view client_text) {
  const AccessVerdict g = CheckList(global, client_text);
  if (g != AccessVerdict::kAllowed) return g;
  return CheckList(rule, client_text);
}

}  // namespace xdpfwd
