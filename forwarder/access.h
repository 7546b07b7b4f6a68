// Access control as rinetd does it: "allow PATTERN" / "deny PATTERN" lines, globs over the
// client's numeric address text, evaluated global allow, global deny, rule allow, rule deny.
// Both paths decide with this before a backend leg is opened.
#pragma once

#include <netinet/in.h>
#include <sys/socket.h>

#include <string>
#include <string_view>
#include <vector>

#include "forwarder/rules.h"

namespace xdpfwd {

enum class AccessVerdict : uint8_t {
  kAllowed,
  kNotAllowed,  // an allow list exists (global or the rule's) and no pattern of it matched
  kDenied,      // a deny pattern matched
};

// The result word of the access log and the counters: "allowed", "not-allowed", "denied".
// (rinetd 0.73 logs its not-allowed events as "denied", an off-by-one in its message table;
// these are the names its man page and source mean.)
std::string_view VerdictName(AccessVerdict verdict);

// rinetd's glob: '*' matches any run of characters (also none), '?' exactly one, '\' makes the
// next character literal; everything else matches itself.
bool GlobMatch(std::string_view text, std::string_view pattern);

// The text patterns are matched against: "10.0.0.1", "2001:db8::1". An IPv4 client on a
// dual-stack listener (::ffff:a.b.c.d) is written as IPv4, so IPv4 patterns match it.
std::string ClientAddressText(const sockaddr* client);
std::string ClientAddressText(in_addr client);

// Whether any pattern applies to a rule's clients; false: every client is allowed and no
// address text need be formatted.
inline bool HasAccessPatterns(const std::vector<AccessPattern>& global,
                              const std::vector<AccessPattern>& rule) {
  return !global.empty() || !rule.empty();
}

// global: the lines before the first rule; rule: the lines after the client's rule.
AccessVerdict CheckAccess(const std::vector<AccessPattern>& global,
                          const std::vector<AccessPattern>& rule, std::string_view client_text);

}  // namespace xdpfwd
