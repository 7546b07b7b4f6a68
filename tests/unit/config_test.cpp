// rinetd's configuration grammar: every form its man page and shipped rinetd.conf use, the
// access lists' scope, host and service names, and errors that point at line and column.
#include "forwarder/config.h"

#include <gtest/gtest.h>

#include <fstream>

namespace xdpfwd {
namespace {

Config Parsed(const std::string& text) {
  auto config = ParseConfig(text, "rinetd.conf");
  EXPECT_TRUE(config) << config.error().message();
  return config ? *config : Config{};
}

std::string ErrorOf(const std::string& text) {
  auto config = ParseConfig(text, "rinetd.conf");
  if (config) return "(parsed)";
  return config.error().message();
}

TEST(Config, ParsesRulesWithCommentsTabsAndBlankLines) {
  const Config c = Parsed(
      "# rinetd style\n"
      "\n"
      "10.0.1.1 9000 10.0.0.2 9001   # web\n"
      "  10.0.1.1\t9002  10.0.0.3 80\r\n"
      ":: 9003 2001:db8::2 9003\n"
      "[::1] 9004 [2001:db8::3] 9005\n");
  ASSERT_EQ(c.rules.size(), 4u);
  EXPECT_EQ(ToString(c.rules[0].listen), "10.0.1.1:9000");
  EXPECT_EQ(ToString(c.rules[0].backend), "10.0.0.2:9001");
  EXPECT_EQ(c.rules[0].line, 3);
  EXPECT_EQ(c.rules[1].id, 1u);
  EXPECT_EQ(ToString(c.rules[1].backend), "10.0.0.3:80");
  EXPECT_EQ(ToString(c.rules[2].listen), "[::]:9003");
  EXPECT_EQ(ToString(c.rules[3].listen), "[::1]:9004");
  EXPECT_EQ(ToString(c.rules[3].backend), "[2001:db8::3]:9005");
  EXPECT_EQ(c.rules[3].listen_host, "[::1]");
  for (const Rule& r : c.rules) {
    EXPECT_TRUE(r.is_stream());
    EXPECT_EQ(r.udp_timeout_s, kDefaultUdpTimeoutS);
    EXPECT_EQ(r.source.family(), AF_UNSPEC);
  }
  EXPECT_TRUE(c.logfile.empty());
  EXPECT_FALSE(c.log_common);
}

// rinetd's shipped rinetd.conf with every example uncommented (less the one rule that listens
// where another already does: rinetd itself cannot bind both), and the man page's examples.
TEST(Config, RunsRinetdsOwnExamples) {
  const Config c = Parsed(
      "allow 192.168.2.*\n"
      "deny 192.168.2.1?\n"
      "allow fe80:*\n"
      "deny 2001:618:*:e43f\n"
      "0.0.0.0     80        192.168.1.2     80\n"
      "::1         80        192.168.1.2     80\n"
      "127.0.0.1   4000      127.0.0.1       3000\n"
      "127.0.0.1   4000/udp  127.0.0.1       22           [timeout=1200]\n"
      "127.0.0.1   8000/udp  192.168.1.2     8000/udp     [src=192.168.1.2,timeout=1200]\n"
      "206.125.69.81 81  10.1.1.2 80\n"
      "0.0.0.0 23  10.1.1.2 23\n"
      "206.125.69.81 80/tcp  10.1.1.2 8000/udp\n"
      "0.0.0.0 8000/udp  10.1.1.2 80  [timeout=3600]\n"
      "192.168.1.1 80  10.1.1.127 80  [src=10.1.1.2]\n"
      "allow 206.125.69.*\n"
      "logfile /var/log/rinetd.log\n"
      "logcommon\n"
      "pidlogfile /var/run/rinetd.pid\n");
  ASSERT_EQ(c.rules.size(), 10u);
  ASSERT_EQ(c.access.size(), 4u);
  EXPECT_TRUE(c.access[0].allow);
  EXPECT_EQ(c.access[1].pattern, "192.168.2.1?");
  EXPECT_FALSE(c.access[1].allow);
  EXPECT_EQ(c.rules[3].listen_protocol, Protocol::kUdp);
  EXPECT_EQ(c.rules[3].backend_protocol, Protocol::kTcp);
  EXPECT_EQ(c.rules[3].udp_timeout_s, 1200u);
  EXPECT_FALSE(c.rules[3].is_stream());
  EXPECT_EQ(c.rules[4].backend_protocol, Protocol::kUdp);
  EXPECT_EQ(ToString(c.rules[4].source), "192.168.1.2:0");
  EXPECT_EQ(c.rules[7].listen_protocol, Protocol::kTcp);
  EXPECT_EQ(c.rules[7].backend_protocol, Protocol::kUdp);
  EXPECT_EQ(c.rules[8].udp_timeout_s, 3600u);
  EXPECT_EQ(ToString(c.rules[9].source), "10.1.1.2:0");
  // The allow line after the last rule is that rule's own, not a global one.
  ASSERT_EQ(c.rules[9].access.size(), 1u);
  EXPECT_EQ(c.rules[9].access[0].pattern, "206.125.69.*");
  EXPECT_TRUE(c.rules[0].access.empty());
  EXPECT_EQ(c.logfile, "/var/log/rinetd.log");
  EXPECT_TRUE(c.log_common);
  EXPECT_EQ(c.pidfile, "/var/run/rinetd.pid");
}

TEST(Config, ResolvesServiceAndHostNames) {
  const Config c = Parsed(
      "localhost http localhost ssh\n"
      "127.0.0.1 domain/udp 127.0.0.1 domain/udp\n"
      "127.0.0.1 https/tcp 127.0.0.1 443 [ src = 127.0.0.2 , timeout = 5 ]\n"
      "0 8080 127.0.0.1 22[timeout=7]\n");
  ASSERT_EQ(c.rules.size(), 4u);
  EXPECT_EQ(c.rules[0].listen.port(), 80);
  EXPECT_EQ(c.rules[0].backend.port(), 22);
  EXPECT_EQ(c.rules[0].listen_host, "localhost");
  EXPECT_EQ(c.rules[0].backend_host, "localhost");
  EXPECT_NE(c.rules[0].backend.family(), AF_UNSPEC);
  EXPECT_EQ(c.rules[1].listen.port(), 53);
  EXPECT_EQ(c.rules[1].listen_protocol, Protocol::kUdp);
  EXPECT_EQ(c.rules[2].listen.port(), 443);
  EXPECT_EQ(c.rules[2].udp_timeout_s, 5u);
  EXPECT_EQ(ToString(c.rules[2].source), "127.0.0.2:0");
  EXPECT_EQ(ToString(c.rules[3].listen), "0.0.0.0:8080");
  EXPECT_EQ(c.rules[3].udp_timeout_s, 7u);
}

TEST(Config, SameListenerIsAnErrorUnlessTheProtocolDiffers) {
  EXPECT_EQ(Parsed("10.0.1.1 53 10.0.0.2 53\n10.0.1.1 53/udp 10.0.0.2 53/udp\n").rules.size(), 2u);
  EXPECT_EQ(ErrorOf("10.0.1.1 9000 10.0.0.2 1\n\n10.0.1.1 9000/tcp 10.0.0.3 2\n"),
            "rinetd.conf:3:1: 10.0.1.1:9000/tcp is already the listen address of line 1");
}

// Each error says FILE:LINE:COLUMN, what was expected and what was found.
TEST(Config, ErrorsPointAtLineAndColumn) {
  struct Case {
    const char* text;
    const char* expected;
  } cases[] = {
      {"10.0.1.1 9000 10.0.0.2\n",
       "rinetd.conf:1:23: expected a connect port (a rule is: bindaddress bindport "
       "connectaddress connectport [options]), found the end of the line"},
      {"10.0.1.1 9000 10.0.0.2 9001 extra\n",
       "rinetd.conf:1:29: expected options in brackets (timeout=N, src=ADDRESS, proxy=v1|v2, "
       "accept-proxy, accept-proxy-timeout=DURATION, balance=METHOD, weight=N, state=STATE, "
       "check=DURATION, fall=N, rise=N, retry-on=empty-response) or the end of the line, found "
       "'extra'"},
      {"10.0.1.1 9000 10.0.0.2 9001 [timeout=5] x\n",
       "rinetd.conf:1:41: expected the end of the rule, found 'x'"},
      {"\n10.0.1.1 99999 10.0.0.2 9001\n",
       "rinetd.conf:2:10: expected a port number from 1 to 65535 or a service name, found "
       "'99999'"},
      {"10.0.1.1 nosuchservice 10.0.0.2 9001\n",
       "rinetd.conf:1:10: expected a port number or a service name from /etc/services, found "
       "'nosuchservice' (no such tcp service)"},
      {"10.0.1.1 9000/sctp 10.0.0.2 9001\n",
       "rinetd.conf:1:14: expected /tcp or /udp after the port, found '/sctp'"},
      {"10.0.1.1 9000 no-such-host.invalid 9001\n",
       "rinetd.conf:1:15: host name 'no-such-host.invalid' does not resolve: "},
      {"10.0.1.1 9000 0.0.0.0 9001\n",
       "rinetd.conf:1:15: expected an address to connect to, found '0.0.0.0'"},
      {"10.0.1.1 9000 [10.0.0.2 9001\n",
       "rinetd.conf:1:15: expected an IPv4 address, an IPv6 address or a host name, found "
       "'[10.0.0.2'"},
      {"10.0.1.1 9000 10.0.0.2 9001 [timeout=0]\n",
       "rinetd.conf:1:38: expected a number of seconds (1 or more) for timeout, found '0'"},
      {"10.0.1.1 9000 10.0.0.2 9001 [speed=5]\n",
       "rinetd.conf:1:30: expected an option name (timeout, src, proxy, accept-proxy, "
       "accept-proxy-timeout, balance, weight, state, check, fall, rise, retry-on), found "
       "'speed'"},
      {"10.0.1.1 9000 10.0.0.2 9001 [retry-on=conn-failure]\n",
       "rinetd.conf:1:39: expected empty-response for retry-on, found 'conn-failure'"},
      {"10.0.1.1 9000 10.0.0.2 9001 [state=off]\n",
       "rinetd.conf:1:36: expected ready, drain or maint for state, found 'off'"},
      {"10.0.1.1 53/udp 10.0.0.2 53/udp [state=drain]\n",
       "rinetd.conf:1:34: state= is for TCP rules (TCP on both sides)"},
      {"10.0.1.1 9000 10.0.0.2 9001\nbackend 10.0.0.3 9001 [state=sleep]\n",
       "rinetd.conf:2:30: expected ready, drain or maint for state, found 'sleep'"},
      {"10.0.1.1 9000 10.0.0.2 9001 [balance=random]\n",
       "rinetd.conf:1:38: expected roundrobin, leastconn or source for balance, found 'random'"},
      {"10.0.1.1 9000 10.0.0.2 9001 [check=5ms]\n",
       "rinetd.conf:1:36: expected a check interval from 10ms to 1h (e.g. 2s, 500ms) for check, "
       "found '5ms'"},
      {"10.0.1.1 9000 10.0.0.2 9001 [fall=0]\n",
       "rinetd.conf:1:35: expected a number of checks from 1 to 100 for fall, found '0'"},
      {"10.0.1.1 9000 10.0.0.2 9001 [weight=0]\n",
       "rinetd.conf:1:37: expected a weight from 1 to 256, found '0'"},
      {"backend 10.0.0.3 9001\n",
       "rinetd.conf:1:1: a backend line adds a backend to the rule above it, and no rule comes "
       "before this one"},
      {"10.0.1.1 9000 10.0.0.2 9001\nbackend 10.0.0.3\n",
       "rinetd.conf:2:17: expected a port (a backend line is: backend address port [weight=N, "
       "backup, state=STATE]), found the end of the line"},
      {"10.0.1.1 9000 10.0.0.2 9001\nbackend 10.0.0.2 9001\n",
       "rinetd.conf:2:9: 10.0.0.2:9001 is already a backend of the rule of line 1"},
      {"10.0.1.1 9000 10.0.0.2 9001\nbackend 10.0.0.3 9001 [weight=2, spare]\n",
       "rinetd.conf:2:34: expected an option name (weight, backup, state), found 'spare'"},
      {"10.0.1.1 9000 10.0.0.2 9001\nbackend 10.0.0.3 9001 [backup=yes]\n",
       "rinetd.conf:2:24: backup takes no value"},
      {"10.0.1.1 53/udp 10.0.0.2 53/udp\nbackend 10.0.0.3 53\n",
       "rinetd.conf:2:1: several backends are for TCP rules; the rule of line 1 has UDP on a "
       "side"},
      {"10.0.1.1 9000 10.0.0.2 9001\nbackend 10.0.0.3 9001/udp\n",
       "rinetd.conf:2:18: expected a TCP port for a backend, found '9001/udp'"},
      {"10.0.1.1 9000 10.0.0.2 9001 [proxy=v3]\n",
       "rinetd.conf:1:36: expected v1 or v2 (the PROXY protocol's version) for proxy, found "
       "'v3'"},
      {"10.0.1.1 53/udp 10.0.0.2 53/udp [proxy=v1]\n",
       "rinetd.conf:1:34: proxy= sends a PROXY protocol header on TCP rules (TCP on both sides); "
       "this rule has UDP on a side"},
      {"10.0.1.1 9000 10.0.0.2 9001 [timeout 5]\n",
       "rinetd.conf:1:38: expected '=' after timeout, found '5'"},
      {"10.0.1.1 9000 10.0.0.2 9001 [timeout=5,]\n",
       "rinetd.conf:1:40: expected another option after ',', found ']'"},
      {"10.0.1.1 9000 10.0.0.2 9001 [timeout=5\n",
       "rinetd.conf:1:39: expected ']' to close the options opened at column 29, found the end of "
       "the line"},
      {"10.0.1.1 9000 10.0.0.2 9001 [src=::1]\n",
       "rinetd.conf:1:29: src address [::1] is not of the backend's address family"},
      {"allow foo.example\n",
       "rinetd.conf:1:8: expected an address pattern (digits, hex digits, '.', ':', '*', '?'; "
       "host names are not matched), found 'foo.example'"},
      {"deny\n",
       "rinetd.conf:1:5: expected an address pattern after allow/deny, found the end "
       "of the line"},
      {"allow 10.* 11.*\n",
       "rinetd.conf:1:12: expected the end of the line after allow, found "
       "'11.*'"},
      {"logfile\n", "rinetd.conf:1:8: expected a file name, found the end of the line"},
      {"logcommon yes\n",
       "rinetd.conf:1:11: expected the end of the line after logcommon, found 'yes'"},
      {"logfile \"/var/log/x\n",
       "rinetd.conf:1:9: expected a closing '\"' for the quoted name, found the end of the line"},
      {"# nothing\n\n",
       "rinetd.conf:3:1: expected at least one rule (bindaddress bindport connectaddress "
       "connectport), found the end of the file"},
  };
  for (const Case& c : cases) {
    const std::string got = ErrorOf(c.text);
    EXPECT_EQ(got.rfind(c.expected, 0), 0u)
        << "text: " << c.text << "got:    " << got << "\nwanted: " << c.expected;
  }
}

// [proxy=v1|v2] beside the other options; a rule that differs only in it is another rule.
TEST(Config, ProxyOptionSendsTheHeaderVersionGiven) {
  const Config c = Parsed(
      "10.0.1.1 9000 10.0.0.2 9001 [proxy=v2]\n"
      "10.0.1.1 9001 10.0.0.2 9001 [ src = 10.0.0.1 , proxy = v1 ]\n"
      "10.0.1.1 9002 10.0.0.2 9001\n");
  ASSERT_EQ(c.rules.size(), 3u);
  EXPECT_EQ(c.rules[0].proxy, ProxyVersion::kV2);
  EXPECT_EQ(c.rules[1].proxy, ProxyVersion::kV1);
  EXPECT_EQ(HostText(c.rules[1].source), "10.0.0.1");
  EXPECT_EQ(c.rules[2].proxy, ProxyVersion::kNone);
  const std::string understood = DescribeConfig(c);
  EXPECT_NE(understood.find("PROXY protocol v2 header first on every backend connection"),
            std::string::npos)
      << understood;
}

// [accept-proxy] with the `proxy-from` lines after the rule that say who may send the header;
// without them the file is refused, and a proxy-from line needs such a rule above it.
TEST(Config, AcceptProxyReadsTheHeaderFromTheSourcesOfProxyFromLines) {
  const Config c = Parsed(
      "10.0.1.1 9000 10.0.0.2 9001 [accept-proxy, accept-proxy-timeout=500ms, proxy=v2]\n"
      "proxy-from 10.0.2.*\n"
      "allow 192.0.2.*\n"
      "proxy-from 10.0.3.1\n"
      "10.0.1.1 9001 10.0.0.2 9001\n");
  ASSERT_EQ(c.rules.size(), 2u);
  const Rule& r = c.rules[0];
  EXPECT_TRUE(r.accept_proxy.enabled);
  EXPECT_EQ(r.accept_proxy.timeout_ms, 500u);
  EXPECT_EQ(r.proxy, ProxyVersion::kV2);
  ASSERT_EQ(r.accept_proxy.from.size(), 2u);
  EXPECT_EQ(r.accept_proxy.from[0].pattern, "10.0.2.*");
  EXPECT_EQ(r.accept_proxy.from[1].line, 4);
  ASSERT_EQ(r.access.size(), 1u);  // allow lines stay the rule's access list
  EXPECT_FALSE(c.rules[1].accept_proxy.enabled);
  EXPECT_EQ(c.rules[1].accept_proxy.timeout_ms, 3000u);  // the default
  const std::string understood = DescribeConfig(c);
  EXPECT_NE(understood.find("read first from every client, within 500 ms, from 10.0.2.* 10.0.3.1"),
            std::string::npos)
      << understood;

  EXPECT_EQ(ErrorOf("10.0.1.1 9000 10.0.0.2 9001 [accept-proxy]\n"),
            "rinetd.conf:1:1: the rule takes [accept-proxy] but no `proxy-from PATTERN` line after "
            "it says who may send the header (`proxy-from *` trusts every client)");
  EXPECT_EQ(ErrorOf("10.0.1.1 9000 10.0.0.2 9001\nproxy-from 10.*\n"),
            "rinetd.conf:2:1: a proxy-from line names who may send PROXY headers to the rule above "
            "it, which needs [accept-proxy] (line 1 has none)");
  EXPECT_EQ(ErrorOf("proxy-from 10.*\n"),
            "rinetd.conf:1:1: a proxy-from line names who may send PROXY headers to the rule above "
            "it, which needs [accept-proxy]; no rule comes before this one");
  EXPECT_EQ(ErrorOf("10.0.1.1 9000 10.0.0.2 9001 [accept-proxy=yes]\nproxy-from *\n"),
            "rinetd.conf:1:43: accept-proxy takes no value (who may send the header is said by "
            "`proxy-from PATTERN` lines after the rule)");
  EXPECT_EQ(ErrorOf("10.0.1.1 9000 10.0.0.2 9001 [accept-proxy, accept-proxy-timeout=5ms]\n"
                    "proxy-from *\n"),
            "rinetd.conf:1:65: expected a time from 10ms to 1h (e.g. 3s, 500ms) for "
            "accept-proxy-timeout, found '5ms'");
  EXPECT_EQ(
      ErrorOf("10.0.1.1 9000/udp 10.0.0.2 9001/udp [accept-proxy]\n"),
      "rinetd.conf:1:38: accept-proxy reads a PROXY protocol header on TCP rules (TCP on both "
      "sides); this rule has UDP on a side");
  EXPECT_EQ(
      ErrorOf("10.0.1.1 9000 10.0.0.2 9001 [accept-proxy]\nproxy-from proxy.example\n"),
      "rinetd.conf:2:12: expected an address pattern (digits, hex digits, '.', ':', '*', '?'; "
      "host names are not matched), found 'proxy.example'");
}

// [retry-on=empty-response]: the rule's backend connections may be made again with the client's
// first bytes (relay's Retry); DescribeConfig says so.
TEST(Config, RetryOnEmptyResponse) {
  const Config c = Parsed(
      "10.0.1.1 9000 10.0.0.2 9001 [retry-on=empty-response]\n"
      "backend 10.0.0.3 9001\n"
      "10.0.1.1 9001 10.0.0.2 9001\n");
  EXPECT_TRUE(c.rules[0].retry_empty_response);
  EXPECT_FALSE(c.rules[1].retry_empty_response);
  EXPECT_NE(DescribeConfig(c).find("retried on another backend, the client's first 16 KiB"),
            std::string::npos)
      << DescribeConfig(c);
}

// `backend` lines add backends to the rule above them (weights, backups), and the rule's own
// options choose the balance and its connect address's weight; a rinetd rule has one backend.
TEST(Config, BackendLinesAddBackendsToTheRuleAbove) {
  const Config c = Parsed(
      "10.0.1.1 9000 10.0.0.2 9001 [balance=leastconn, weight=3, check=2s, fall=4, rise=1]\n"
      "backend 10.0.0.3 9001 [weight=2]\n"
      "allow 10.*\n"
      "backend 10.0.0.4 http [ backup ]\n"
      "10.0.1.1 9001 10.0.0.2 9001\n");
  ASSERT_EQ(c.rules.size(), 2u);
  const Rule& r = c.rules[0];
  EXPECT_EQ(r.balance, BalanceMethod::kLeastConnections);
  EXPECT_EQ(r.backend_weight, 3u);
  EXPECT_EQ(r.check_ms, 2000u);
  EXPECT_EQ(r.check_fall, 4u);
  EXPECT_EQ(r.check_rise, 1u);
  EXPECT_EQ(c.rules[1].check_ms, 0u);
  ASSERT_EQ(r.more_backends.size(), 2u);
  EXPECT_EQ(ToString(r.more_backends[0].address), "10.0.0.3:9001");
  EXPECT_EQ(r.more_backends[0].weight, 2u);
  EXPECT_FALSE(r.more_backends[0].backup);
  EXPECT_EQ(ToString(r.more_backends[1].address), "10.0.0.4:80");
  EXPECT_TRUE(r.more_backends[1].backup);
  EXPECT_EQ(r.more_backends[1].line, 4);
  ASSERT_EQ(r.access.size(), 1u);  // allow/deny lines between backend lines stay the rule's
  EXPECT_EQ(r.backend_count(), 3u);
  EXPECT_EQ(ToString(r.backend_address(2)), "10.0.0.4:80");
  EXPECT_TRUE(c.rules[1].more_backends.empty());
  EXPECT_EQ(c.rules[1].balance, BalanceMethod::kRoundRobin);
  const std::string understood = DescribeConfig(c);
  EXPECT_NE(understood.find("backends (leastconn): 10.0.0.2:9001 weight 3, 10.0.0.3:9001 weight "
                            "2, 10.0.0.4:80 weight 1 (backup)"),
            std::string::npos)
      << understood;
}

// [state=drain|maint] on a rule (its connect address) and on a `backend` line, beside the
// weight; ready is the default and may be written; a rule with one backend may be drained.
TEST(Config, BackendStatesFromTheFile) {
  const Config c = Parsed(
      "10.0.1.1 9000 10.0.0.2 9001 [state=drain, weight=2]\n"
      "backend 10.0.0.3 9001 [state=maint]\n"
      "backend 10.0.0.4 9001 [weight=3, state=ready]\n"
      "10.0.1.1 9001 10.0.0.2 9001 [state=maint]\n");
  const Rule& r = c.rules[0];
  EXPECT_EQ(r.backend_admin, BackendAdmin::kDrain);
  EXPECT_EQ(r.backend_weight, 2u);
  EXPECT_EQ(r.more_backends[0].admin, BackendAdmin::kMaint);
  EXPECT_EQ(r.more_backends[1].admin, BackendAdmin::kReady);
  EXPECT_EQ(r.more_backends[1].weight, 3u);
  const std::vector<RuleBackend> all = AllBackends(r);
  EXPECT_EQ(all[0].admin, BackendAdmin::kDrain);
  EXPECT_EQ(c.rules[1].backend_admin, BackendAdmin::kMaint);
  const std::string understood = DescribeConfig(c);
  EXPECT_NE(understood.find("10.0.0.2:9001 weight 2 (drain), 10.0.0.3:9001 weight 1 (maint), "
                            "10.0.0.4:9001 weight 3\n"),
            std::string::npos)
      << understood;
  EXPECT_NE(understood.find("backend state: maint (no new connections)"), std::string::npos)
      << understood;
}

// rinetd's "::" listener takes IPv4 clients too (Linux's bindv6only=0), unless an IPv4 rule
// has the port: then it must be IPv6-only to coexist.
TEST(Config, WildcardIpv6ListenersAreDualStackUnlessAnIpv4RuleHasThePort) {
  const Config c = Parsed(
      ":: 80 10.0.0.2 80\n"
      ":: 443 10.0.0.2 443\n"
      "0.0.0.0 443 10.0.0.3 443\n"
      "::1 8080 10.0.0.2 80\n"
      ":: 53/udp 10.0.0.53 53/udp\n"
      "0.0.0.0 53 10.0.0.53 53\n");
  EXPECT_FALSE(ListenIpv6Only(c.rules[0], c.rules));
  EXPECT_TRUE(ListenIpv6Only(c.rules[1], c.rules));
  EXPECT_TRUE(ListenIpv6Only(c.rules[3], c.rules));   // not a wildcard: nothing to share
  EXPECT_FALSE(ListenIpv6Only(c.rules[4], c.rules));  // the IPv4 rule on 53 is TCP
  std::vector<const Rule*> pointers{&c.rules[1], &c.rules[2]};
  EXPECT_TRUE(ListenIpv6Only(c.rules[1], pointers));
}

TEST(Config, QuotedFileNamesAndTheFileOnDisk) {
  const std::string path = ::testing::TempDir() + "xdpfwd-config-test.conf";
  {
    std::ofstream f(path);
    f << "logfile \"/var/log/with space.log\"\n10.0.1.1 9000 10.0.0.2 9001\n";
  }
  auto c = LoadConfigFile(path);
  ASSERT_TRUE(c) << c.error().message();
  EXPECT_EQ(c->logfile, "/var/log/with space.log");
  std::remove(path.c_str());
  auto missing = LoadConfigFile("/nonexistent/xdpfwd.conf");
  ASSERT_FALSE(missing);
  EXPECT_NE(missing.error().message().find("/nonexistent/xdpfwd.conf"), std::string::npos);
}

TEST(Config, DescribeSaysWhichPathServesEachRule) {
  const std::string text =
      DescribeConfig(Parsed("deny 10.9.*\n"
                            "10.0.1.1 9000 10.0.0.2 9001\n"
                            "allow 10.1.*\n"
                            "0.0.0.0 9001 10.0.0.2 9001\n"
                            "10.0.1.1 53/udp 10.0.0.2 53/udp [timeout=9]\n"
                            "logfile /tmp/x.log\n"));
  EXPECT_NE(text.find("global access (checked first, for every rule):\n  deny 10.9.*"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("rule 0 (line 2): 10.0.1.1:9000/tcp -> 10.0.0.2:9001/tcp\n  served by: "
                      "the fast path"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("  allow 10.1.*    (line 3)"), std::string::npos) << text;
  EXPECT_NE(text.find("rule 1 (line 4): 0.0.0.0:9001/tcp -> 10.0.0.2:9001/tcp\n  served by: "
                      "the kernel path"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("served by: the datagram relay (kernel sockets), idle timeout 9 s"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("access log: /tmp/x.log (rinetd format)"), std::string::npos) << text;
}

}  // namespace
}  // namespace xdpfwd
