// rinetd's configuration grammar (see config.h). A hand-written line parser rather than
// rinetd's PEG: every error names the line and column where the text stopped making sense.
#include "forwarder/config.h"

#include <arpa/inet.h>
#include <netdb.h>

#include <algorithm>
#include <charconv>
#include <cstring>
#include <fstream>
#include <functional>
#include <optional>
#include <sstream>
#include <string_view>
#include <vector>

#include "forwarder/access.h"
#include "forwarder/options.h"
#include "os/parse_number.h"

namespace xdpfwd {
namespace {

// One word of a line and the column (1-based) it starts at.
struct Word {
  std::string text;
  int column = 0;
};

// A configuration error at a column of the current line.
class Where {
 public:
  Where(const std::string& source, int line) : prefix_(source + ":" + std::to_string(line) + ":") {}
  Error At(int column, const std::string& what) const {
    return Error{{}, prefix_ + std::to_string(column) + ": " + what};
  }

 private:
  std::string prefix_;
};

bool IsBlank(char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\v' || c == '\f'; }

std::string Quote(std::string_view text) { return "'" + std::string(text) + "'"; }

// The words of a line up to a comment ('#' at the start of a word). Brackets group: an option
// list "[src = 10.0.0.1, timeout=5]" is one word, wherever its blanks are, and may follow a
// port without a blank ("22[timeout=5]"), as rinetd's grammar allows.
Result<std::vector<Word>> SplitWords(const std::string& line, const Where& where) {
  std::vector<Word> words;
  // Where an option list may start: after a rule's connect port (the fifth word), or after a
  // backend line's port (the fourth).
  auto options_at = [&] {
    return !words.empty() && words[0].text == "backend" ? size_t{3} : size_t{4};
  };
  size_t i = 0;
  while (i < line.size()) {
    if (IsBlank(line[i])) {
      ++i;
      continue;
    }
    if (line[i] == '#') break;
    const size_t start = i;
    if (line[i] == '[' && !words.empty() && words.size() >= options_at()) {
      const size_t close = line.find(']', i);
      if (close == std::string::npos) {
        return where.At(static_cast<int>(line.size()) + 1,
                        "expected ']' to close the options opened at column " +
                            std::to_string(start + 1) + ", found the end of the line");
      }
      i = close + 1;
    } else if (line[i] == '"') {
      // A quoted file name (rinetd: logfile "/var/log/my log").
      const size_t close = line.find('"', i + 1);
      if (close == std::string::npos) {
        return where.At(static_cast<int>(start) + 1,
                        "expected a closing '\"' for the quoted name, found the end of the line");
      }
      i = close + 1;
    } else {
      while (i < line.size() && !IsBlank(line[i])) {
        // An IPv6 address in brackets is one word; an option list after a port starts a new
        // one.
        if (line[i] == '[' && i > start && words.size() + 1 == options_at()) break;
        ++i;
      }
    }
    words.push_back(Word{line.substr(start, i - start), static_cast<int>(start) + 1});
  }
  return words;
}

// "80", "80/udp", "http", "domain/udp".
struct PortWord {
  std::string_view port;
  Protocol protocol = Protocol::kTcp;
  int protocol_column = 0;
};

Result<PortWord> SplitProtocol(const Word& w, const Where& where) {
  PortWord out;
  std::string_view text = w.text;
  if (const size_t slash = text.find('/'); slash != std::string_view::npos) {
    const std::string_view proto = text.substr(slash + 1);
    if (proto == "tcp") {
      out.protocol = Protocol::kTcp;
    } else if (proto == "udp") {
      out.protocol = Protocol::kUdp;
    } else {
      return where.At(w.column + static_cast<int>(slash),
                      "expected /tcp or /udp after the port, found " + Quote(text.substr(slash)));
    }
    text = text.substr(0, slash);
  }
  out.port = text;
  return out;
}

Result<uint16_t> ResolvePort(std::string_view text, Protocol protocol, int column,
                             const Where& where) {
  if (text.empty()) return where.At(column, "expected a port number or service name, found none");
  if (text.front() >= '0' && text.front() <= '9') {
    const std::optional<uint16_t> port = ParsePortNumber(text);
    if (!port) {
      return where.At(
          column, "expected a port number from 1 to 65535 or a service name, found " + Quote(text));
    }
    return *port;
  }
  const std::string name(text);
  // getservbyname reads /etc/services; xdpfwd is single-threaded while it parses (start and
  // the control loop's reload), so its static result is safe here.
  const servent* s = getservbyname(name.c_str(), std::string(ProtocolName(protocol)).c_str());
  if (s == nullptr) {
    return where.At(column, "expected a port number or a service name from /etc/services, found " +
                                Quote(text) + " (no such " + std::string(ProtocolName(protocol)) +
                                " service)");
  }
  return static_cast<uint16_t>(ntohs(static_cast<uint16_t>(s->s_port)));
}

// An address word: IPv4, IPv6 bare or in brackets, rinetd's "0" for 0.0.0.0, or a host name
// (resolved now; the first answer getaddrinfo gives, as rinetd takes it).
Result<SocketAddress> ResolveAddress(std::string_view text, uint16_t port, Protocol protocol,
                                     bool passive, int column, const Where& where) {
  std::string bare(text);
  if (bare.size() >= 2 && bare.front() == '[' && bare.back() == ']') {
    bare = bare.substr(1, bare.size() - 2);
  }
  if (bare == "0") bare = "0.0.0.0";
  SocketAddress out;
  in_addr v4{};
  in6_addr v6{};
  if (inet_pton(AF_INET, bare.c_str(), &v4) == 1) {
    auto* sin = reinterpret_cast<sockaddr_in*>(&out.storage);
    sin->sin_family = AF_INET;
    sin->sin_addr = v4;
    sin->sin_port = htons(port);
    out.length = sizeof(sockaddr_in);
    return out;
  }
  if (inet_pton(AF_INET6, bare.c_str(), &v6) == 1) {
    auto* sin6 = reinterpret_cast<sockaddr_in6*>(&out.storage);
    sin6->sin6_family = AF_INET6;
    sin6->sin6_addr = v6;
    sin6->sin6_port = htons(port);
    out.length = sizeof(sockaddr_in6);
    return out;
  }
  if (bare.empty() || bare.find_first_of("[]:") != std::string::npos) {
    return where.At(
        column, "expected an IPv4 address, an IPv6 address or a host name, found " + Quote(text));
  }
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = protocol == Protocol::kUdp ? SOCK_DGRAM : SOCK_STREAM;
  hints.ai_flags = passive ? AI_PASSIVE : 0;
  addrinfo* found = nullptr;
  if (const int e = getaddrinfo(bare.c_str(), nullptr, &hints, &found); e != 0) {
    return where.At(column, "host name " + Quote(text) + " does not resolve: " + gai_strerror(e));
  }
  std::memcpy(&out.storage, found->ai_addr, found->ai_addrlen);
  out.length = found->ai_addrlen;
  freeaddrinfo(found);
  if (out.family() == AF_INET) {
    reinterpret_cast<sockaddr_in*>(&out.storage)->sin_port = htons(port);
  } else {
    reinterpret_cast<sockaddr_in6*>(&out.storage)->sin6_port = htons(port);
  }
  return out;
}

bool SameListener(const Rule& a, const SocketAddress& listen, Protocol protocol) {
  return a.listen_protocol == protocol && a.listen == listen;
}

// rinetd's pattern characters: digits, hex digits, '.', ':', brackets and the two globs.
Result<void> CheckPattern(const Word& w, const Where& where) {
  for (size_t i = 0; i < w.text.size(); ++i) {
    const char c = w.text[i];
    const bool ok = (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F') ||
                    c == '.' || c == ':' || c == '[' || c == ']' || c == '*' || c == '?';
    if (!ok) {
      return where.At(w.column + static_cast<int>(i),
                      "expected an address pattern (digits, hex digits, '.', ':', '*', '?'; host "
                      "names are not matched), found " +
                          Quote(w.text));
    }
  }
  return {};
}

std::string Unquote(const std::string& text) {
  if (text.size() >= 2 && text.front() == '"' && text.back() == '"') {
    return text.substr(1, text.size() - 2);
  }
  return text;
}

// One option of a bracketed list: its name, and its value after '=' (none for a flag such as
// `backup`), with the columns they start at; `found` is what follows a name that has no '='.
struct Option {
  std::string key;
  int key_column = 0;
  std::optional<std::string> value;
  int value_column = 0;
  std::string found;
};

// "[timeout=1200]", "[src=192.168.1.2,timeout=1200]", "[ src = 10.0.0.1 ]", "[weight=2, backup]":
// each option in turn to `take`, which knows the names and says what is wrong with one. `what`
// names the options for the messages ("timeout=N, src=ADDRESS, ...").
Result<void> ForEachOption(const Word& w, const Where& where, const std::string& what,
                           const std::function<Result<void>(const Option&)>& take) {
  const std::string& text = w.text;
  if (text.size() < 2 || text.front() != '[' || text.back() != ']') {
    return where.At(w.column, "expected options in brackets (" + what +
                                  ") or the end of the line, found " + Quote(text));
  }
  size_t i = 1;
  const size_t end = text.size() - 1;
  auto skip_blanks = [&] {
    while (i < end && IsBlank(text[i])) ++i;
  };
  auto column = [&](size_t at) { return w.column + static_cast<int>(at); };
  bool any = false;
  for (;;) {
    skip_blanks();
    if (i == end) {
      if (!any) return where.At(column(i), "expected an option (" + what + "), found ']'");
      return where.At(column(i), "expected another option after ',', found ']'");
    }
    Option o;
    const size_t key_start = i;
    while (i < end && text[i] != '=' && text[i] != ',' && !IsBlank(text[i])) ++i;
    o.key = text.substr(key_start, i - key_start);
    o.key_column = column(key_start);
    skip_blanks();
    if (i < end && text[i] == '=') {
      ++i;
      skip_blanks();
      const size_t value_start = i;
      while (i < end && text[i] != ',' && !IsBlank(text[i])) ++i;
      o.value = text.substr(value_start, i - value_start);
      o.value_column = column(value_start);
      if (o.value->empty()) return where.At(o.value_column, "expected a value for " + o.key);
    } else {
      o.value_column = column(i);
      o.found = i == end ? std::string("']'") : Quote(text.substr(i, 1));
    }
    if (auto r = take(o); !r) return r.error();
    any = true;
    skip_blanks();
    if (i == end) return {};
    if (text[i] != ',') {
      return where.At(column(i),
                      "expected ',' or ']' after the option, found " + Quote(text.substr(i, 1)));
    }
    ++i;
  }
}

// An option that takes a value, given without one.
Error NeedsValue(const Option& o, const Where& where) {
  return where.At(o.value_column, "expected '=' after " + o.key + ", found " + o.found);
}

// A whole number from `low` to `high`.
std::optional<uint32_t> Number(const std::string& text, uint32_t low, uint32_t high) {
  return ParseDecimal<uint32_t>(text, low, high);
}

// [state=drain|maint] (ready, the default, may be written too).
std::optional<BackendAdmin> ParseBackendAdmin(const std::string& text) {
  for (BackendAdmin a : {BackendAdmin::kReady, BackendAdmin::kDrain, BackendAdmin::kMaint}) {
    if (text == BackendAdminName(a)) return a;
  }
  return std::nullopt;
}

Result<BackendAdmin> StateOption(const Option& o, const Where& where) {
  auto admin = ParseBackendAdmin(*o.value);
  if (!admin) {
    return where.At(o.value_column,
                    "expected ready, drain or maint for state, found " + Quote(*o.value));
  }
  return *admin;
}

std::optional<BalanceMethod> ParseBalanceMethod(const std::string& text) {
  for (BalanceMethod m :
       {BalanceMethod::kRoundRobin, BalanceMethod::kLeastConnections, BalanceMethod::kSourceHash}) {
    if (text == BalanceMethodName(m)) return m;
  }
  return std::nullopt;
}

// A rule's options: rinetd's timeout and src, and ours (docs/configuration.md).
Result<void> ParseOptions(const Word& w, Rule& rule, const Where& where) {
  return ForEachOption(
      w, where,
      "timeout=N, src=ADDRESS, proxy=v1|v2, accept-proxy, accept-proxy-timeout=DURATION, "
      "balance=METHOD, weight=N, state=STATE, check=DURATION, fall=N, rise=N, "
      "retry-on=empty-response",
      [&](const Option& o) -> Result<void> {
        if (o.key != "timeout" && o.key != "src" && o.key != "proxy" && o.key != "balance" &&
            o.key != "weight" && o.key != "state" && o.key != "check" && o.key != "fall" &&
            o.key != "rise" && o.key != "accept-proxy" && o.key != "accept-proxy-timeout" &&
            o.key != "retry-on") {
          return where.At(o.key_column,
                          "expected an option name (timeout, src, proxy, accept-proxy, "
                          "accept-proxy-timeout, balance, weight, state, check, fall, rise, "
                          "retry-on), found " +
                              Quote(o.key));
        }
        if (o.key == "accept-proxy") {
          if (o.value) {
            return where.At(o.value_column,
                            "accept-proxy takes no value (who may send the header is said by "
                            "`proxy-from PATTERN` lines after the rule)");
          }
          if (!rule.is_stream()) {
            return where.At(o.key_column,
                            "accept-proxy reads a PROXY protocol header on TCP rules (TCP on "
                            "both sides); this rule has UDP on a side");
          }
          rule.accept_proxy.enabled = true;
          return {};
        }
        if (!o.value) return NeedsValue(o, where);
        const std::string& value = *o.value;
        if (o.key == "timeout") {
          const auto seconds = Number(value, 1, UINT32_MAX);
          if (!seconds) {
            return where.At(
                o.value_column,
                "expected a number of seconds (1 or more) for timeout, found " + Quote(value));
          }
          rule.udp_timeout_s = *seconds;
        } else if (o.key == "accept-proxy-timeout") {
          auto timeout = ParseDuration(value);
          if (!timeout || timeout->count() < 10 || timeout->count() > 3'600'000) {
            return where.At(o.value_column,
                            "expected a time from 10ms to 1h (e.g. 3s, 500ms) for "
                            "accept-proxy-timeout, found " +
                                Quote(value));
          }
          rule.accept_proxy.timeout_ms = static_cast<uint32_t>(timeout->count());
        } else if (o.key == "proxy") {
          if (value != "v1" && value != "v2") {
            return where.At(o.value_column,
                            "expected v1 or v2 (the PROXY protocol's version) for proxy, found " +
                                Quote(value));
          }
          if (!rule.is_stream()) {
            return where.At(o.key_column,
                            "proxy= sends a PROXY protocol header on TCP rules (TCP on both "
                            "sides); this rule has UDP on a side");
          }
          rule.proxy = value == "v1" ? ProxyVersion::kV1 : ProxyVersion::kV2;
        } else if (o.key == "balance") {
          auto method = ParseBalanceMethod(value);
          if (!method) {
            return where.At(
                o.value_column,
                "expected roundrobin, leastconn or source for balance, found " + Quote(value));
          }
          rule.balance = *method;
        } else if (o.key == "check") {
          auto every = ParseDuration(value);
          if (!every || every->count() < 10 || every->count() > 3'600'000) {
            return where.At(o.value_column,
                            "expected a check interval from 10ms to 1h (e.g. 2s, 500ms) for "
                            "check, found " +
                                Quote(value));
          }
          if (!rule.is_stream()) {
            return where.At(o.key_column, "health checks are for TCP rules (TCP on both sides)");
          }
          rule.check_ms = static_cast<uint32_t>(every->count());
        } else if (o.key == "fall" || o.key == "rise") {
          const auto n = Number(value, 1, 100);
          if (!n) {
            return where.At(o.value_column, "expected a number of checks from 1 to 100 for " +
                                                o.key + ", found " + Quote(value));
          }
          (o.key == "fall" ? rule.check_fall : rule.check_rise) = *n;
        } else if (o.key == "weight") {
          const auto weight = Number(value, 1, kMaxWeight);
          if (!weight) {
            return where.At(o.value_column, "expected a weight from 1 to " +
                                                std::to_string(kMaxWeight) + ", found " +
                                                Quote(value));
          }
          rule.backend_weight = *weight;
        } else if (o.key == "retry-on") {
          if (value != "empty-response") {
            return where.At(o.value_column,
                            "expected empty-response for retry-on, found " + Quote(value));
          }
          if (!rule.is_stream()) {
            return where.At(o.key_column, "retry-on= is for TCP rules (TCP on both sides)");
          }
          rule.retry_empty_response = true;
        } else if (o.key == "state") {
          auto admin = StateOption(o, where);
          if (!admin) return admin.error();
          if (!rule.is_stream()) {
            return where.At(o.key_column, "state= is for TCP rules (TCP on both sides)");
          }
          rule.backend_admin = *admin;
        } else {
          auto src = ResolveAddress(value, 0, rule.backend_protocol, true, o.value_column, where);
          if (!src) return src.error();
          rule.source = *src;
        }
        return {};
      });
}

// A `backend ADDRESS PORT [weight=N, backup, state=STATE]` line: one more backend of the rule
// above it.
Result<void> ParseBackend(const std::vector<Word>& words, Rule& rule, const Where& where,
                          int line) {
  if (words.size() < 3) {
    const Word& last = words.back();
    return where.At(last.column + static_cast<int>(last.text.size()),
                    std::string("expected ") + (words.size() == 1 ? "an address" : "a port") +
                        " (a backend line is: backend address port [weight=N, backup, "
                        "state=STATE]), found "
                        "the end of the line");
  }
  if (words.size() > 4) {
    return where.At(words[4].column, "expected the end of the line, found " + Quote(words[4].text));
  }
  if (!rule.is_stream()) {
    return where.At(words[0].column, "several backends are for TCP rules; the rule of line " +
                                         std::to_string(rule.line) + " has UDP on a side");
  }
  auto port = SplitProtocol(words[2], where);
  if (!port) return port.error();
  if (port->protocol != Protocol::kTcp) {
    return where.At(words[2].column,
                    "expected a TCP port for a backend, found " + Quote(words[2].text));
  }
  auto number = ResolvePort(port->port, Protocol::kTcp, words[2].column, where);
  if (!number) return number.error();
  auto address =
      ResolveAddress(words[1].text, *number, Protocol::kTcp, false, words[1].column, where);
  if (!address) return address.error();
  if (address->is_any()) {
    return where.At(words[1].column, "expected an address to connect to, found " +
                                         Quote(words[1].text) + " (that is every local address)");
  }
  if (rule.backend == *address ||
      std::any_of(rule.more_backends.begin(), rule.more_backends.end(),
                  [&](const RuleBackend& b) { return b.address == *address; })) {
    return where.At(words[1].column, ToString(*address) +
                                         " is already a backend of the rule of line " +
                                         std::to_string(rule.line));
  }
  if (rule.more_backends.size() + 1 >= kMaxBackends) {
    return where.At(words[0].column,
                    "a rule has at most " + std::to_string(kMaxBackends) + " backends");
  }
  if (rule.source.family() != AF_UNSPEC && rule.source.family() != address->family()) {
    return where.At(words[1].column, "backend " + ToString(*address) +
                                         " is not of the family of the rule's src address " +
                                         HostText(rule.source));
  }
  RuleBackend b;
  b.address = *address;
  b.host = words[1].text;
  b.line = line;
  if (words.size() == 4) {
    auto parsed = ForEachOption(
        words[3], where, "weight=N, backup, state=STATE", [&](const Option& o) -> Result<void> {
          if (o.key == "backup") {
            if (o.value) return where.At(o.key_column, "backup takes no value");
            b.backup = true;
            return {};
          }
          if (o.key != "weight" && o.key != "state") {
            return where.At(
                o.key_column,
                "expected an option name (weight, backup, state), found " + Quote(o.key));
          }
          if (!o.value) return NeedsValue(o, where);
          if (o.key == "state") {
            auto admin = StateOption(o, where);
            if (!admin) return admin.error();
            b.admin = *admin;
            return {};
          }
          const auto weight = Number(*o.value, 1, kMaxWeight);
          if (!weight) {
            return where.At(o.value_column, "expected a weight from 1 to " +
                                                std::to_string(kMaxWeight) + ", found " +
                                                Quote(*o.value));
          }
          b.weight = *weight;
          return {};
        });
    if (!parsed) return parsed.error();
  }
  rule.more_backends.push_back(std::move(b));
  return {};
}

Result<Rule> ParseRule(const std::vector<Word>& words, const Where& where) {
  if (words.size() < 4) {
    const Word& last = words.back();
    const char* expected[] = {"", "a bind port", "a connect address", "a connect port"};
    return where.At(last.column + static_cast<int>(last.text.size()),
                    std::string("expected ") + expected[words.size()] +
                        " (a rule is: bindaddress bindport connectaddress connectport "
                        "[options]), found the end of the line");
  }
  if (words.size() > 5) {
    return where.At(words[5].column, "expected the end of the rule, found " + Quote(words[5].text));
  }
  Rule rule;
  auto bind_port = SplitProtocol(words[1], where);
  if (!bind_port) return bind_port.error();
  auto connect_port = SplitProtocol(words[3], where);
  if (!connect_port) return connect_port.error();
  rule.listen_protocol = bind_port->protocol;
  rule.backend_protocol = connect_port->protocol;
  auto lp = ResolvePort(bind_port->port, rule.listen_protocol, words[1].column, where);
  if (!lp) return lp.error();
  auto cp = ResolvePort(connect_port->port, rule.backend_protocol, words[3].column, where);
  if (!cp) return cp.error();
  auto listen =
      ResolveAddress(words[0].text, *lp, rule.listen_protocol, true, words[0].column, where);
  if (!listen) return listen.error();
  auto backend =
      ResolveAddress(words[2].text, *cp, rule.backend_protocol, false, words[2].column, where);
  if (!backend) return backend.error();
  if (backend->is_any()) {
    return where.At(words[2].column, "expected an address to connect to, found " +
                                         Quote(words[2].text) + " (that is every local address)");
  }
  rule.listen = *listen;
  rule.backend = *backend;
  rule.listen_host = words[0].text;
  rule.backend_host = words[2].text;
  if (words.size() == 5) {
    if (auto o = ParseOptions(words[4], rule, where); !o) return o.error();
    if (rule.source.family() != AF_UNSPEC && rule.source.family() != rule.backend.family()) {
      return where.At(words[4].column, "src address " + HostText(rule.source) +
                                           " is not of the backend's address family (" +
                                           ToString(rule.backend) + ")");
    }
  }
  return rule;
}

}  // namespace

Result<Config> ParseConfig(const std::string& text, const std::string& source_name) {
  Config config;
  std::istringstream in(text);
  int line_no = 0;
  for (std::string line; std::getline(in, line);) {
    ++line_no;
    const Where where(source_name, line_no);
    auto split = SplitWords(line, where);
    if (!split) return split.error();
    const std::vector<Word>& words = *split;
    if (words.empty()) continue;
    const std::string& key = words[0].text;
    auto expect_count = [&](size_t n, const char* shape) -> Result<void> {
      if (words.size() < n) {
        return where.At(static_cast<int>(line.size()) + 1,
                        std::string("expected ") + shape + ", found the end of the line");
      }
      if (words.size() > n) {
        return where.At(words[n].column, "expected the end of the line after " + key + ", found " +
                                             Quote(words[n].text));
      }
      return {};
    };
    if (key == "allow" || key == "deny") {
      if (auto c = expect_count(2, "an address pattern after allow/deny"); !c) return c.error();
      if (auto p = CheckPattern(words[1], where); !p) return p.error();
      AccessPattern pattern{key == "allow", words[1].text, line_no};
      (config.rules.empty() ? config.access : config.rules.back().access).push_back(pattern);
    } else if (key == "proxy-from") {
      if (auto c = expect_count(2, "an address pattern after proxy-from"); !c) return c.error();
      if (config.rules.empty() || !config.rules.back().accept_proxy.enabled) {
        return where.At(words[0].column,
                        "a proxy-from line names who may send PROXY headers to the rule above "
                        "it, which needs [accept-proxy]" +
                            std::string(config.rules.empty()
                                            ? "; no rule comes before this one"
                                            : " (line " + std::to_string(config.rules.back().line) +
                                                  " has none)"));
      }
      if (auto p = CheckPattern(words[1], where); !p) return p.error();
      config.rules.back().accept_proxy.from.push_back(AccessPattern{true, words[1].text, line_no});
    } else if (key == "logfile" || key == "pidlogfile") {
      if (auto c = expect_count(2, "a file name"); !c) return c.error();
      (key == "logfile" ? config.logfile : config.pidfile) = Unquote(words[1].text);
    } else if (key == "backend") {
      if (config.rules.empty()) {
        return where.At(words[0].column,
                        "a backend line adds a backend to the rule above it, and no rule comes "
                        "before this one");
      }
      if (auto b = ParseBackend(words, config.rules.back(), where, line_no); !b) return b.error();
    } else if (key == "logcommon") {
      if (auto c = expect_count(1, ""); !c) return c.error();
      config.log_common = true;
    } else {
      auto rule = ParseRule(words, where);
      if (!rule) return rule.error();
      for (const Rule& r : config.rules) {
        if (SameListener(r, rule->listen, rule->listen_protocol)) {
          return where.At(words[0].column, ToString(rule->listen) + "/" +
                                               std::string(ProtocolName(rule->listen_protocol)) +
                                               " is already the listen address of line " +
                                               std::to_string(r.line));
        }
      }
      rule->id = static_cast<uint32_t>(config.rules.size());
      rule->line = line_no;
      config.rules.push_back(std::move(*rule));
    }
  }
  for (const Rule& r : config.rules) {
    if (r.accept_proxy.enabled && r.accept_proxy.from.empty()) {
      return Error{{},
                   source_name + ":" + std::to_string(r.line) +
                       ":1: the rule takes [accept-proxy] but no `proxy-from PATTERN` line "
                       "after it says who may send the header (`proxy-from *` trusts "
                       "every client)"};
    }
  }
  if (config.rules.empty()) {
    return Error{{},
                 source_name + ":" + std::to_string(line_no + 1) +
                     ":1: expected at least one rule (bindaddress bindport connectaddress "
                     "connectport), found the end of the file"};
  }
  return config;
}

Result<Config> LoadConfigFile(const std::string& path) {
  std::ifstream file(path);
  if (!file) return SystemError("cannot read configuration file " + path);
  std::stringstream text;
  text << file.rdbuf();
  if (file.bad()) return SystemError("cannot read configuration file " + path);
  return ParseConfig(text.str(), path);
}

std::string DescribeConfig(const Config& config) {
  std::ostringstream out;
  auto access_lines = [&](const std::vector<AccessPattern>& list, const char* indent) {
    for (const AccessPattern& p : list) {
      out << indent << (p.allow ? "allow " : "deny ") << p.pattern << "    (line " << p.line
          << ")\n";
    }
  };
  if (!config.access.empty()) {
    out << "global access (checked first, for every rule):\n";
    access_lines(config.access, "  ");
  }
  for (const Rule& r : config.rules) {
    out << "rule " << r.id;
    if (r.line > 0) out << " (line " << r.line << ")";
    out << ": " << ToString(r.listen) << "/" << ProtocolName(r.listen_protocol) << " -> "
        << ToString(r.backend) << "/" << ProtocolName(r.backend_protocol);
    if (r.listen_host != "" && ToString(r.listen).find(r.listen_host) == std::string::npos) {
      out << "  [bind " << r.listen_host << "]";
    }
    if (r.backend_host != "" && ToString(r.backend).find(r.backend_host) == std::string::npos) {
      out << "  [connect " << r.backend_host << "]";
    }
    out << "\n  served by: ";
    if (!r.is_stream()) {
      out << "the datagram relay (kernel sockets), idle timeout " << r.udp_timeout_s << " s";
    } else if (r.listen.is_any()) {
      out << "the kernel path (the fast path needs a concrete listen address)";
    } else {
      out << "the fast path (XDP/AF_XDP) with --path auto or xdp, else the kernel path";
    }
    out << "\n";
    if (r.source.family() != AF_UNSPEC) {
      out << "  backend source address: " << HostText(r.source) << "\n";
    }
    if (!r.more_backends.empty()) {
      out << "  backends (" << BalanceMethodName(r.balance) << "): " << ToString(r.backend)
          << " weight " << r.backend_weight;
      if (r.backend_admin != BackendAdmin::kReady)
        out << " (" << BackendAdminName(r.backend_admin) << ")";
      for (const RuleBackend& b : r.more_backends) {
        out << ", " << ToString(b.address) << " weight " << b.weight
            << (b.backup ? " (backup)" : "");
        if (b.admin != BackendAdmin::kReady) out << " (" << BackendAdminName(b.admin) << ")";
      }
      out << "\n";
    } else if (r.backend_admin != BackendAdmin::kReady) {
      out << "  backend state: " << BackendAdminName(r.backend_admin) << " (no new connections)\n";
    }
    if (r.check_ms != 0) {
      out << "  health checks: a TCP connect to each backend every " << r.check_ms
          << " ms; down after " << r.check_fall << " failed, up after " << r.check_rise
          << " passed\n";
    }
    if (r.proxy != ProxyVersion::kNone) {
      out << "  PROXY protocol " << ProxyVersionName(r.proxy)
          << " header first on every backend connection\n";
    }
    if (r.retry_empty_response) {
      out << "  a backend that ends before answering is retried on another backend, the client's "
             "first "
          << kRetryBytes / 1024 << " KiB sent again (retry-on=empty-response)\n";
    }
    if (r.accept_proxy.enabled) {
      out << "  PROXY protocol header (v1 or v2) read first from every client, within "
          << r.accept_proxy.timeout_ms << " ms, from";
      for (const AccessPattern& p : r.accept_proxy.from) out << " " << p.pattern;
      out << "\n";
    }
    access_lines(r.access, "  ");
  }
  out << "access log: "
      << (config.logfile.empty()
              ? std::string("none")
              : config.logfile + (config.log_common ? " (common log format)" : " (rinetd format)"))
      << "\n";
  out << "pid file: " << (config.pidfile.empty() ? std::string("none") : config.pidfile) << "\n";
  return out.str();
}

}  // namespace xdpfwd
