// rinetd's configuration grammar (see config.h). A hand-written line parser rather than
// rinetd's PEG: every error names the line and column where the text stopped making sense.
#include "forwarder/config.h"

#include <arpa/inet.h>
#include <netdb.h>

#include <charconv>
#include <cstring>
#include <fstream>
#include <optional>
#include <sstream>
#include <string_view>
#include <vector>

#include "forwarder/access.h"

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
  size_t i = 0;
  while (i < line.size()) {
    if (IsBlank(line[i])) {
      ++i;
      continue;
    }
    if (line[i] == '#') break;
    const size_t start = i;
    if (line[i] == '[' && !words.empty() && words.size() >= 4) {
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
        if (line[i] == '[' && i > start && words.size() == 3) break;
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
    unsigned port = 0;
    const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), port);
    if (ec != std::errc() || end != text.data() + text.size() || port == 0 || port > 65535) {
      return where.At(
          column, "expected a port number from 1 to 65535 or a service name, found " + Quote(text));
    }
    return static_cast<uint16_t>(port);
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

// "[timeout=1200]", "[src=192.168.1.2,timeout=1200]", "[ src = 10.0.0.1 ]", "[proxy=v2]".
Result<void> ParseOptions(const Word& w, Rule& rule, const Where& where) {
  const std::string& text = w.text;
  if (text.size() < 2 || text.front() != '[' || text.back() != ']') {
    return where.At(w.column,
                    "expected options in brackets ([timeout=N], [src=ADDRESS], [proxy=v1|v2]) "
                    "or the "
                    "end of the rule, found " +
                        Quote(text));
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
      if (!any)
        return where.At(column(i),
                        "expected an option (timeout=N, src=ADDRESS, proxy=v1|v2), found ']'");
      return where.At(column(i), "expected another option after ',', found ']'");
    }
    const size_t key_start = i;
    while (i < end && text[i] != '=' && text[i] != ',' && !IsBlank(text[i])) ++i;
    const std::string key = text.substr(key_start, i - key_start);
    if (key != "timeout" && key != "src" && key != "proxy") {
      return where.At(column(key_start),
                      "expected an option name (timeout, src, proxy), found " + Quote(key));
    }
    skip_blanks();
    if (i == end || text[i] != '=') {
      return where.At(column(i), "expected '=' after " + key + ", found " +
                                     (i == end ? std::string("']'") : Quote(text.substr(i, 1))));
    }
    ++i;
    skip_blanks();
    const size_t value_start = i;
    while (i < end && text[i] != ',' && !IsBlank(text[i])) ++i;
    const std::string value = text.substr(value_start, i - value_start);
    if (value.empty()) return where.At(column(value_start), "expected a value for " + key);
    if (key == "timeout") {
      unsigned seconds = 0;
      const auto [p, ec] = std::from_chars(value.data(), value.data() + value.size(), seconds);
      if (ec != std::errc() || p != value.data() + value.size() || seconds == 0) {
        return where.At(
            column(value_start),
            "expected a number of seconds (1 or more) for timeout, found " + Quote(value));
      }
      rule.udp_timeout_s = seconds;
    } else if (key == "proxy") {
      if (value != "v1" && value != "v2") {
        return where.At(
            column(value_start),
            "expected v1 or v2 (the PROXY protocol's version) for proxy, found " + Quote(value));
      }
      if (!rule.is_stream()) {
        return where.At(column(key_start),
                        "proxy= sends a PROXY protocol header on TCP rules (TCP on both "
                        "sides); this rule has UDP on a side");
      }
      rule.proxy = value == "v1" ? ProxyVersion::kV1 : ProxyVersion::kV2;
    } else {
      auto src = ResolveAddress(value, 0, rule.backend_protocol, true, column(value_start), where);
      if (!src) return src.error();
      rule.source = *src;
    }
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
    } else if (key == "logfile" || key == "pidlogfile") {
      if (auto c = expect_count(2, "a file name"); !c) return c.error();
      (key == "logfile" ? config.logfile : config.pidfile) = Unquote(words[1].text);
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
    } else if (r.listen.is_ipv4() && r.backend.is_ipv4() && !r.listen.is_any()) {
      out << "the fast path (XDP/AF_XDP) with --path auto or xdp, else the kernel path";
    } else {
      out << "the kernel path (the fast path takes IPv4 rules with a concrete listen address)";
    }
    out << "\n";
    if (r.source.family() != AF_UNSPEC) {
      out << "  backend source address: " << HostText(r.source) << "\n";
    }
    if (r.proxy != ProxyVersion::kNone) {
      out << "  PROXY protocol " << ProxyVersionName(r.proxy)
          << " header first on every backend connection\n";
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
