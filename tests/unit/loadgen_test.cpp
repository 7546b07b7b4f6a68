// The xdpfwd-loadgen binary end to end on loopback: serve answers, rr/rate/hold report what they
// did as JSON with no errors and ordered percentiles, failures are counted, bad arguments exit 2,
// serve --accept-proxy reads the forwarder's PROXY headers; its argument parser and its PROXY
// header reader on their own.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>

#include <chrono>
#include <cstdlib>
#include <initializer_list>
#include <memory>
#include <span>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "bench/loadgen/args.h"
#include "bench/loadgen/proxy_header.h"
#include "forwarder/proxy_protocol.h"
#include "tests/support/child_process.h"
#include "tests/support/tcp.h"

namespace xdpfwd::test {
namespace {

using namespace std::chrono_literals;

std::string Binary() { return XDPFWD_LOADGEN_BINARY; }

// The line of `output` that starts with `prefix` (a JSON object's first key).
std::string JsonLine(const std::string& output, const std::string& prefix) {
  size_t at = output.find("\n" + prefix);
  at = output.rfind(prefix, 0) == 0 ? 0 : (at == std::string::npos ? at : at + 1);
  if (at == std::string::npos) throw std::runtime_error("no '" + prefix + "' line in:\n" + output);
  return output.substr(at, output.find('\n', at) - at);
}

// The number under "key" in a one-line JSON object, inside the object under "within" if given.
// Keys in our output are unique enough for that ("connect" vs "connections" differ by the quote).
double Field(const std::string& json, const std::string& key, const std::string& within = "") {
  const size_t from = within.empty() ? 0 : json.find("\"" + within + "\":{");
  const size_t at = from == std::string::npos ? from : json.find("\"" + key + "\":", from);
  if (at == std::string::npos) {
    throw std::runtime_error("no " + within + "." + key + " in " + json);
  }
  return std::strtod(json.c_str() + at + key.size() + 3, nullptr);
}

void ExpectNoErrors(const std::string& json) {
  for (const char* kind : {"connect", "reset", "timeout", "short", "excess"}) {
    EXPECT_EQ(Field(json, kind, "errors"), 0) << kind << " in " << json;
  }
}

void ExpectOrderedLatency(const std::string& json) {
  const char* order[] = {"p50", "p90", "p99", "p999", "max"};
  EXPECT_GT(Field(json, "p50", "latency_us"), 0) << json;
  for (int i = 1; i < 5; ++i) {
    EXPECT_LE(Field(json, order[i - 1], "latency_us"), Field(json, order[i], "latency_us"))
        << order[i - 1] << " > " << order[i] << " in " << json;
  }
}

// `xdpfwd-loadgen serve` on 127.0.0.1 with a port the kernel picks; stopped (SIGTERM, then
// SIGKILL by ChildProcess) in the destructor, so a failing test leaves nothing behind.
class Server {
 public:
  explicit Server(std::vector<std::string> extra = {}, const std::string& listen = "127.0.0.1:0") {
    std::vector<std::string> argv{Binary(),    "serve", "--listen",   listen,
                                  "--request", "32",    "--response", "32"};
    argv.insert(argv.end(), extra.begin(), extra.end());
    child_ = std::make_unique<ChildProcess>(argv);
    const std::string ready = "listening on ";
    if (!child_->WaitForLine(ready, 10s) || !child_->WaitForLine("\n", 2s)) {
      throw std::runtime_error("serve did not start:\n" + child_->output());
    }
    const std::string& out = child_->output();
    const size_t at = out.find(ready) + ready.size();
    address_ = out.substr(at, out.find('\n', at) - at);
  }
  ~Server() {
    child_->Signal(SIGTERM);
    child_->Wait(5s);
  }

  const std::string& address() const { return address_; }
  ChildProcess& process() { return *child_; }
  // SIGTERM; its summary line.
  std::string Stop() {
    child_->Signal(SIGTERM);
    EXPECT_EQ(child_->Wait(5s), 0) << child_->output();
    return JsonLine(child_->output(), "{\"mode\":\"serve\"");
  }

 private:
  std::unique_ptr<ChildProcess> child_;
  std::string address_;
};

RunResult Loadgen(std::vector<std::string> args) {
  args.insert(args.begin(), Binary());
  return RunProgram(args, 60s);
}

TEST(Loadgen, RequestResponseWithoutErrors) {
  Server server;
  const RunResult rr =
      Loadgen({"rr", "--connect", server.address(), "--connections", "4", "--request", "32",
               "--response", "32", "--seconds", "1", "--warmup", "0.2"});
  ASSERT_EQ(rr.status, 0) << rr.output;
  const std::string json = JsonLine(rr.output, "{\"mode\":\"rr\"");
  const double exchanges = Field(json, "exchanges");
  EXPECT_GT(exchanges, 0) << json;
  EXPECT_EQ(Field(json, "connections"), 4);
  EXPECT_NEAR(Field(json, "seconds"), 1.0, 0.01);
  EXPECT_NEAR(Field(json, "bytes_per_sec"), Field(json, "exchanges_per_sec") * 64, 1);
  ExpectNoErrors(json);
  ExpectOrderedLatency(json);
  // The server answered at least those (plus the warm-up's); the client's closing after its
  // last exchange is clean, so the server saw no reset or short request.
  const std::string summary = server.Stop();
  EXPECT_GE(Field(summary, "exchanges"), exchanges);
  EXPECT_EQ(Field(summary, "connections"), 4);
  for (const char* kind : {"accept", "reset", "short"}) {
    EXPECT_EQ(Field(summary, kind, "errors"), 0) << kind << " in " << summary;
  }
}

TEST(Loadgen, ConnectionRateWithoutErrors) {
  Server server({"--close-after-response"});
  const RunResult rate =
      Loadgen({"rate", "--connect", server.address(), "--concurrency", "4", "--request", "32",
               "--response", "32", "--seconds", "1", "--warmup", "0.2"});
  ASSERT_EQ(rate.status, 0) << rate.output;
  const std::string json = JsonLine(rate.output, "{\"mode\":\"rate\"");
  const double connections = Field(json, "connections");
  EXPECT_GT(connections, 0) << json;
  EXPECT_GT(Field(json, "connections_per_sec"), 0);
  ExpectNoErrors(json);
  ExpectOrderedLatency(json);
  // The time in connect() itself, which bench/run's collapse verdict quotes: on loopback with
  // a nearly empty TIME_WAIT table a call takes microseconds, none a millisecond or more
  // (a loaded machine may preempt one: a few are allowed).
  const double mean = Field(json, "connect_call_us_mean");
  EXPECT_GT(mean, 0) << json;
  EXPECT_GE(Field(json, "connect_call_us_max"), mean) << json;
  EXPECT_LE(Field(json, "slow_connect_calls"), Field(json, "connections_total") / 100) << json;
  const std::string summary = server.Stop();
  EXPECT_GE(Field(summary, "connections"), connections);
  EXPECT_EQ(Field(summary, "connections"), Field(summary, "exchanges"));
}

// serve --report-every: progress lines count what it served, so a server killed with SIGKILL
// (bench/run's churn rows kill a backend) has told what it did before it died.
TEST(Loadgen, ServeReportsProgressBeforeItIsKilled) {
  Server server({"--close-after-response", "--report-every", "0.05"});
  const RunResult rate =
      Loadgen({"rate", "--connect", server.address(), "--concurrency", "4", "--request", "32",
               "--response", "32", "--seconds", "0.5", "--warmup", "0"});
  ASSERT_EQ(rate.status, 0) << rate.output;
  const auto total = static_cast<uint64_t>(
      Field(JsonLine(rate.output, "{\"mode\":\"rate\""), "connections_total"));
  ASSERT_GT(total, 0u);
  // Every connection the client completed, in a progress line within a few reports.
  const std::string line = "{\"event\":\"progress\",\"connections\":" + std::to_string(total) +
                           ",\"exchanges\":" + std::to_string(total) + "}";
  EXPECT_TRUE(server.process().WaitForLine(line, 5s)) << server.process().output();
  server.process().Signal(SIGKILL);
  server.process().Wait(5s);
  EXPECT_EQ(server.process().output().find("{\"mode\":\"serve\""), std::string::npos)
      << "a summary from a killed server";
}

TEST(Loadgen, HoldKeepsConnectionsUntilStdinEnds) {
  Server server;
  ChildProcess hold({Binary(), "hold", "--connect", server.address(), "--connections", "100",
                     "--concurrency", "16", "--request", "32", "--response", "32"},
                    ChildProcess::Input::kPipe);
  ASSERT_TRUE(hold.WaitForLine("{\"event\":\"established\"", 20s)) << hold.output();
  ASSERT_TRUE(hold.WaitForLine("\n", 2s));
  const std::string established = JsonLine(hold.output(), "{\"event\":\"established\"");
  EXPECT_EQ(Field(established, "connections"), 100) << established;
  ExpectNoErrors(established);
  // Still holding: it must not exit before stdin ends.
  EXPECT_FALSE(hold.Wait(300ms).has_value()) << hold.output();
  hold.CloseStdin();
  ASSERT_EQ(hold.Wait(10s), 0) << hold.output();
  const std::string final_line = JsonLine(hold.output(), "{\"mode\":\"hold\"");
  // Each connection proven twice: when opened and again just before it closed.
  for (const char* count :
       {"requested", "opened", "verified_open", "verified_close", "connections"}) {
    EXPECT_EQ(Field(final_line, count), 100) << count << " in " << final_line;
  }
  EXPECT_EQ(Field(final_line, "dropped"), 0);
  EXPECT_EQ(Field(final_line, "not_attempted"), 0);
  ExpectNoErrors(final_line);
  for (const char* kind : {"connect", "reset", "timeout", "short", "excess"}) {
    EXPECT_EQ(Field(final_line, kind, "errors_at_close"), 0) << kind << " in " << final_line;
  }
  const std::string summary = server.Stop();
  EXPECT_EQ(Field(summary, "connections"), 100) << summary;
  EXPECT_EQ(Field(summary, "exchanges"), 200);
}

// A server that closes after the first response: every connection is opened and proven once,
// then lost while held. None counts as held, and the run exits 1.
TEST(Loadgen, HoldCountsConnectionsLostWhileHeld) {
  Server server({"--close-after-response"});
  ChildProcess hold({Binary(), "hold", "--connect", server.address(), "--connections", "20",
                     "--request", "32", "--response", "32"},
                    ChildProcess::Input::kPipe);
  ASSERT_TRUE(hold.WaitForLine("{\"event\":\"established\"", 20s)) << hold.output();
  // The server's FINs arrive while held.
  std::this_thread::sleep_for(200ms);
  hold.CloseStdin();
  ASSERT_EQ(hold.Wait(10s), 1) << hold.output();
  const std::string final_line = JsonLine(hold.output(), "{\"mode\":\"hold\"");
  EXPECT_EQ(Field(final_line, "opened"), 20) << final_line;
  EXPECT_EQ(Field(final_line, "verified_open"), 20) << final_line;
  EXPECT_EQ(Field(final_line, "dropped"), 20) << final_line;
  EXPECT_EQ(Field(final_line, "verified_close"), 0) << final_line;
  EXPECT_EQ(Field(final_line, "connections"), 0) << final_line;
}

// Nothing listens: with --max-failures the run stops opening connections early, reports the
// rest as not attempted, and exits 1.
TEST(Loadgen, HoldGivesUpAfterMaxFailures) {
  std::string address;
  {
    Server gone;
    address = gone.address();
  }
  const RunResult hold =
      Loadgen({"hold", "--connect", address, "--connections", "1000", "--concurrency", "4",
               "--max-failures", "10", "--request", "32", "--response", "32"});
  EXPECT_EQ(hold.status, 1) << hold.output;
  const std::string json = JsonLine(hold.output, "{\"mode\":\"hold\"");
  EXPECT_EQ(Field(json, "connections"), 0) << json;
  EXPECT_GE(Field(json, "connect", "errors"), 10) << json;
  EXPECT_GT(Field(json, "not_attempted"), 900) << json;
}

// Two servers share one port with --reuseport; the client closes first and nothing fails.
TEST(Loadgen, ConnectionRateClientClosesFirstOverReusedPort) {
  Server first({"--reuseport"});
  Server second({"--reuseport"}, first.address());
  const RunResult rate =
      Loadgen({"rate", "--connect", first.address(), "--close", "client", "--concurrency", "4",
               "--request", "32", "--response", "32", "--seconds", "1", "--warmup", "0.2",
               // Each connection leaves a TIME_WAIT socket in this (shared) namespace for 60 s:
               // four source addresses give four times the loopback's ephemeral ports, so runs
               // close together (the release and sanitizer builds) do not run out of them.
               "--source", "127.0.0.1,127.0.0.2,127.0.0.3,127.0.0.4"});
  ASSERT_EQ(rate.status, 0) << rate.output;
  const std::string json = JsonLine(rate.output, "{\"mode\":\"rate\"");
  EXPECT_NE(json.find("\"close\":\"client\""), std::string::npos) << json;
  const double connections = Field(json, "connections");
  EXPECT_GT(connections, 0) << json;
  EXPECT_GE(Field(json, "connections_total"), connections) << json;
  ExpectNoErrors(json);
  // The client's FIN arrives between requests: a normal close for each server, never a short
  // request or a reset; together they served every connection.
  double served = 0;
  for (Server* s : {&first, &second}) {
    const std::string summary = s->Stop();
    for (const char* kind : {"accept", "reset", "short"}) {
      EXPECT_EQ(Field(summary, kind, "errors"), 0) << kind << " in " << summary;
    }
    EXPECT_EQ(Field(summary, "connections"), Field(summary, "exchanges")) << summary;
    served += Field(summary, "connections");
  }
  EXPECT_GE(served, Field(json, "connections_total"));
}

// Nothing listens: every attempt is counted as a connect error with its errno, and a run in
// which nothing succeeded exits 1.
TEST(Loadgen, RefusedConnectionsAreCounted) {
  std::string address;
  {
    Server gone;
    address = gone.address();
  }
  const RunResult rate = Loadgen({"rate", "--connect", address, "--concurrency", "2", "--request",
                                  "32", "--response", "32", "--seconds", "0.3", "--warmup", "0"});
  EXPECT_EQ(rate.status, 1) << rate.output;
  const std::string json = JsonLine(rate.output, "{\"mode\":\"rate\"");
  EXPECT_EQ(Field(json, "connections"), 0) << json;
  EXPECT_GT(Field(json, "connect", "errors"), 0) << json;
  EXPECT_GT(Field(json, "ECONNREFUSED", "errnos"), 0) << json;
}

sockaddr_in V4(const char* addr, uint16_t port) {
  sockaddr_in a{};
  a.sin_family = AF_INET;
  EXPECT_EQ(inet_pton(AF_INET, addr, &a.sin_addr), 1);
  a.sin_port = htons(port);
  return a;
}

// The header xdpfwd's writer sends for a client 192.0.2.1:40000 that connected to
// 198.51.100.1:9000.
std::string ForwarderHeader(ProxyVersion version) {
  const sockaddr_in client = V4("192.0.2.1", 40000), listen = V4("198.51.100.1", 9000);
  const ProxyHeader h = MakeProxyHeader(version, reinterpret_cast<const sockaddr*>(&client),
                                        reinterpret_cast<const sockaddr*>(&listen));
  return {reinterpret_cast<const char*>(h.bytes), h.size};
}

// One connection to a serve on 127.0.0.1: `writes` sent one send() each, then the response
// read; how many of its bytes came before EOF (or a reset), at most `response`.
size_t Exchange(const std::string& address, const std::vector<std::string>& writes,
                size_t response = 32) {
  in_addr loopback{};
  inet_pton(AF_INET, "127.0.0.1", &loopback);
  const auto port = static_cast<uint16_t>(std::stoi(address.substr(address.rfind(':') + 1)));
  UniqueFd fd = TcpConnect("", loopback, port);
  for (const std::string& w : writes) {
    EXPECT_EQ(send(fd.get(), w.data(), w.size(), MSG_NOSIGNAL), static_cast<ssize_t>(w.size()));
  }
  size_t got = 0;
  char buf[64];
  while (got < response) {
    const ssize_t n = recv(fd.get(), buf, sizeof buf, 0);
    if (n <= 0) break;
    got += static_cast<size_t>(n);
  }
  return got;
}

// serve --accept-proxy answers a request after the forwarder's header, v2 in the same write as
// the request and v1 in one of its own; a connection that starts with anything else is closed
// unanswered and counted as a proxy error.
TEST(Loadgen, ServeAcceptsProxyHeadersBeforeRequests) {
  Server server({"--accept-proxy"});
  const std::string request(32, 'q');
  EXPECT_EQ(Exchange(server.address(), {ForwarderHeader(ProxyVersion::kV2) + request}), 32u);
  EXPECT_EQ(Exchange(server.address(), {ForwarderHeader(ProxyVersion::kV1), request}), 32u);
  EXPECT_EQ(Exchange(server.address(), {"GET / HTTP/1.0\r\n\r\n" + request}), 0u);
  const std::string summary = server.Stop();
  EXPECT_EQ(Field(summary, "connections"), 3) << summary;
  EXPECT_EQ(Field(summary, "proxy_headers"), 2) << summary;
  EXPECT_EQ(Field(summary, "exchanges"), 2) << summary;
  EXPECT_EQ(Field(summary, "bytes_received"), 64) << summary;  // the headers not counted
  EXPECT_EQ(Field(summary, "proxy", "errors"), 1) << summary;
  for (const char* kind : {"accept", "reset", "short", "excess"}) {
    EXPECT_EQ(Field(summary, kind, "errors"), 0) << kind << " in " << summary;
  }
}

// Clients that send no header (rate straight at the server, no forwarder): every connection
// fails, on both sides' reports.
TEST(Loadgen, ServeAcceptProxyFailsConnectionsWithoutAHeader) {
  Server server({"--accept-proxy", "--close-after-response"});
  const RunResult rate =
      Loadgen({"rate", "--connect", server.address(), "--concurrency", "2", "--request", "32",
               "--response", "32", "--seconds", "0.3", "--warmup", "0"});
  EXPECT_EQ(rate.status, 1) << rate.output;
  const std::string json = JsonLine(rate.output, "{\"mode\":\"rate\"");
  EXPECT_EQ(Field(json, "connections"), 0) << json;
  EXPECT_GT(Field(json, "short", "errors"), 0) << json;
  const std::string summary = server.Stop();
  EXPECT_GT(Field(summary, "proxy", "errors"), 0) << summary;
  EXPECT_EQ(Field(summary, "proxy_headers"), 0) << summary;
  EXPECT_EQ(Field(summary, "exchanges"), 0) << summary;
}

TEST(Loadgen, BadArgumentsExitTwoNamingTheOption) {
  const RunResult bad = Loadgen({"rr", "--connect", "127.0.0.1:9", "--connections", "many"});
  EXPECT_EQ(bad.status, 2);
  EXPECT_NE(bad.output.find("--connections"), std::string::npos) << bad.output;
  const RunResult missing = Loadgen({"rate", "--connect", "127.0.0.1:9", "--concurrency", "1",
                                     "--request", "1", "--response", "1"});
  EXPECT_EQ(missing.status, 2);
  EXPECT_NE(missing.output.find("--seconds"), std::string::npos) << missing.output;
  EXPECT_EQ(Loadgen({"serve", "--listen", "[::1]:80", "--request", "1"}).status, 2);
}

}  // namespace
}  // namespace xdpfwd::test

namespace xdpfwd::loadgen {
namespace {

Result<Options> Parse(std::vector<std::string> args) { return ParseArgs(args); }

using Status = ProxyScan::Status;

ProxyScan Scan(const std::string& bytes) {
  return ScanProxyHeader(std::span(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()));
}

std::string Bytes(std::initializer_list<uint8_t> b) { return {b.begin(), b.end()}; }

const std::string kV2Signature =
    Bytes({0x0d, 0x0a, 0x0d, 0x0a, 0x00, 0x0d, 0x0a, 0x51, 0x55, 0x49, 0x54, 0x0a});
// v2, PROXY, TCP over IPv4, 12 bytes: 192.0.2.1:40000 -> 198.51.100.1:9000.
const std::string kV2Tcp4 = kV2Signature + Bytes({0x21, 0x11, 0x00, 0x0c, 192, 0, 2, 1, 198, 51,
                                                  100, 1, 0x9c, 0x40, 0x23, 0x28});

void ExpectComplete(const std::string& bytes, size_t length, int version) {
  const ProxyScan scan = Scan(bytes);
  EXPECT_EQ(scan.status, Status::kComplete) << bytes;
  EXPECT_EQ(scan.length, length) << bytes;
  EXPECT_EQ(scan.version, version) << bytes;
}

TEST(LoadgenProxyHeader, V1Tcp4) {
  const std::string line = "PROXY TCP4 192.0.2.1 198.51.100.1 40000 9000\r\n";
  ExpectComplete(line, line.size(), 1);
  // The request's bytes after it are not the header's.
  ExpectComplete(line + "GET / HTTP/1.0\r\n\r\n", line.size(), 1);
  ExpectComplete("PROXY TCP6 2001:db8::1 2001:db8::2 40000 80\r\nxyz", 45, 1);
  // UNKNOWN: whatever follows it up to the CRLF is ignored.
  ExpectComplete("PROXY UNKNOWN\r\n", 15, 1);
  ExpectComplete("PROXY UNKNOWN ffff::1 ffff::2 1 2\r\n", 35, 1);
  // The longest line v1 allows, CRLF included.
  ExpectComplete("PROXY UNKNOWN " + std::string(91, 'x') + "\r\n", 107, 1);
}

TEST(LoadgenProxyHeader, V2Ipv4) {
  ExpectComplete(kV2Tcp4, 28, 2);
  ExpectComplete(kV2Tcp4 + "request", 28, 2);
  // LOCAL (a sender's own connection): no addresses.
  ExpectComplete(kV2Signature + Bytes({0x20, 0x00, 0x00, 0x00}), 16, 2);
  // TLVs after the addresses belong to the header: 4 more bytes here.
  std::string tlv = kV2Tcp4 + Bytes({0x04, 0x00, 0x01, 0x00}) + "request";
  tlv[15] = 0x10;
  ExpectComplete(tlv, 32, 2);
}

// What xdpfwd's own writer sends reads back whole, both versions, both families.
TEST(LoadgenProxyHeader, ReadsTheForwardersHeaders) {
  EXPECT_EQ(test::ForwarderHeader(ProxyVersion::kV2), kV2Tcp4);
  for (ProxyVersion v : {ProxyVersion::kV1, ProxyVersion::kV2}) {
    const std::string v4 = test::ForwarderHeader(v);
    ExpectComplete(v4 + "request", v4.size(), v == ProxyVersion::kV1 ? 1 : 2);
    sockaddr_in6 from{}, to{};
    from.sin6_family = to.sin6_family = AF_INET6;
    inet_pton(AF_INET6, "2001:db8::1", &from.sin6_addr);
    inet_pton(AF_INET6, "2001:db8::2", &to.sin6_addr);
    from.sin6_port = htons(1);
    to.sin6_port = htons(65535);
    const ProxyHeader h = MakeProxyHeader(v, reinterpret_cast<const sockaddr*>(&from),
                                          reinterpret_cast<const sockaddr*>(&to));
    const std::string v6(reinterpret_cast<const char*>(h.bytes), h.size);
    ExpectComplete(v6 + "request", v6.size(), v == ProxyVersion::kV1 ? 1 : 2);
  }
  const ProxyHeader local = MakeProxyLocalHeader();
  ExpectComplete(std::string(reinterpret_cast<const char*>(local.bytes), local.size), 16, 2);
}

// A header that arrives a few bytes at a time: every prefix of it is incomplete, never invalid,
// and the version is known from the first byte.
TEST(LoadgenProxyHeader, SplitAcrossReads) {
  for (const std::string& header :
       {std::string("PROXY TCP4 192.0.2.1 198.51.100.1 40000 9000\r\n"), kV2Tcp4}) {
    for (size_t n = 1; n < header.size(); ++n) {
      const ProxyScan scan = Scan(header.substr(0, n));
      EXPECT_EQ(scan.status, Status::kIncomplete) << n << " bytes of " << header;
      EXPECT_EQ(scan.version, header[0] == 'P' ? 1 : 2);
    }
    ExpectComplete(header, header.size(), header[0] == 'P' ? 1 : 2);
  }
  EXPECT_EQ(Scan("").status, Status::kIncomplete);
}

TEST(LoadgenProxyHeader, Malformed) {
  const std::string long_line = "PROXY UNKNOWN " + std::string(93, 'x') + "\r\n";  // 109 bytes
  std::string v2_short_block = kV2Tcp4;
  v2_short_block[15] = 11;  // TCP4 needs 12 bytes of addresses and ports
  for (const std::string& bad : {
           std::string("GET / HTTP/1.0\r\n\r\n"),                         // no header at all
           std::string("proxy TCP4 192.0.2.1 198.51.100.1 1 2\r\n"),      // keywords are upper case
           std::string("PROXY TCP4 192.0.2.1 198.51.100.1 1 2\n"),        // LF without CR
           std::string("PROXY TCP4 192.0.2.1 198.51.100.1 1 2\rX"),       // CR not before LF
           std::string("PROXY TCP5 192.0.2.1 198.51.100.1 1 2\r\n"),      // no such protocol
           std::string("PROXY TCP4 192.0.2.1  198.51.100.1 1 2\r\n"),     // two spaces
           std::string("PROXY TCP4 192.0.2.1 198.51.100.1 1\r\n"),        // a port missing
           std::string("PROXY TCP4 192.0.2.1 198.51.100.1 1 2 3\r\n"),    // a field too many
           std::string("PROXY TCP4 192.0.2.1 198.51.100.1 65536 2\r\n"),  // port too large
           std::string("PROXY TCP4 192.0.2.1 198.51.100.1 01 2\r\n"),     // leading zero
           std::string("PROXY TCP4 2001:db8::1 198.51.100.1 1 2\r\n"),    // IPv6 under TCP4
           std::string("PROXY TCP6 192.0.2.1 2001:db8::2 1 2\r\n"),       // IPv4 under TCP6
           std::string("PROXY TCP4 192.0.2.1 198.51.100.1 1 2\t\r\n"),    // not printable
           long_line,
           std::string(long_line, 0, 107),  // no CRLF within 107 bytes, without waiting for more
           kV2Signature.substr(0, 11) + "X" + kV2Tcp4.substr(12),  // signature's last byte
           kV2Signature + Bytes({0x11, 0x11, 0x00, 0x0c}),         // version 1 in v2's byte
           kV2Signature + Bytes({0x22, 0x11, 0x00, 0x0c}),         // command 2
           kV2Signature + Bytes({0x21, 0x41, 0x00, 0x0c}),         // family 4
           kV2Signature + Bytes({0x21, 0x13, 0x00, 0x0c}),         // transport 3
           v2_short_block,
       }) {
    EXPECT_EQ(Scan(bad).status, Status::kInvalid) << bad;
  }
  // Decided from the first byte that cannot start a header, not after a whole line.
  EXPECT_EQ(Scan("G").status, Status::kInvalid);
  EXPECT_EQ(Scan("PROXX").status, Status::kInvalid);
  EXPECT_EQ(Scan(kV2Signature.substr(0, 4) + "X").status, Status::kInvalid);
}

TEST(LoadgenArgs, RateCloseOrder) {
  const std::vector<std::string> base = {
      "rate", "--connect",  "127.0.0.1:9", "--concurrency", "2", "--request",
      "1",    "--response", "1",           "--seconds",     "1"};
  auto server = Parse(base);
  ASSERT_TRUE(server) << server.error().message();
  EXPECT_EQ(server->close, CloseOrder::kServer);  // the default, as before the option existed
  auto with = [&](const std::string& order) {
    auto args = base;
    args.insert(args.end(), {"--close", order});
    return Parse(args);
  };
  auto client = with("client");
  ASSERT_TRUE(client) << client.error().message();
  EXPECT_EQ(client->close, CloseOrder::kClient);
  ASSERT_TRUE(with("server"));
  EXPECT_EQ(with("server")->close, CloseOrder::kServer);
  auto bad = with("both");
  ASSERT_FALSE(bad);
  EXPECT_NE(bad.error().message().find("--close"), std::string::npos) << bad.error().message();
  // Only rate takes it; serve's --close-after-response is a different option.
  EXPECT_FALSE(Parse({"hold", "--connect", "127.0.0.1:9", "--connections", "1", "--request", "1",
                      "--response", "1", "--close", "client"}));
  EXPECT_FALSE(Parse({"serve", "--listen", "127.0.0.1:0", "--request", "1", "--response", "1",
                      "--close", "client"}));
}

TEST(LoadgenArgs, ServeReusePort) {
  auto plain = Parse({"serve", "--listen", "127.0.0.1:0", "--request", "1", "--response", "1"});
  ASSERT_TRUE(plain) << plain.error().message();
  EXPECT_FALSE(plain->reuse_port);
  auto shared = Parse({"serve", "--listen", "127.0.0.1:0", "--request", "1", "--response", "1",
                       "--reuseport", "--close-after-response"});
  ASSERT_TRUE(shared) << shared.error().message();
  EXPECT_TRUE(shared->reuse_port);
  EXPECT_TRUE(shared->close_after_response);
  EXPECT_FALSE(Parse({"rate", "--connect", "127.0.0.1:9", "--concurrency", "1", "--request", "1",
                      "--response", "1", "--seconds", "1", "--reuseport"}));
}

TEST(LoadgenArgs, ServeAcceptProxy) {
  auto plain = Parse({"serve", "--listen", "127.0.0.1:0", "--request", "1", "--response", "1"});
  ASSERT_TRUE(plain) << plain.error().message();
  EXPECT_FALSE(plain->accept_proxy);
  auto proxied = Parse({"serve", "--listen", "127.0.0.1:0", "--request", "1", "--response", "1",
                        "--accept-proxy", "--close-after-response"});
  ASSERT_TRUE(proxied) << proxied.error().message();
  EXPECT_TRUE(proxied->accept_proxy);
  EXPECT_TRUE(proxied->close_after_response);
  EXPECT_FALSE(proxied->reuse_port);
  // A client sends no header of its own: only serve takes it.
  EXPECT_FALSE(Parse({"rr", "--connect", "127.0.0.1:9", "--connections", "1", "--request", "1",
                      "--response", "1", "--seconds", "1", "--accept-proxy"}));
}

TEST(LoadgenArgs, HoldMaxFailures) {
  const std::vector<std::string> base = {"hold", "--connect", "127.0.0.1:9", "--connections",
                                         "10",   "--request", "1",           "--response",
                                         "1"};
  auto unlimited = Parse(base);
  ASSERT_TRUE(unlimited) << unlimited.error().message();
  EXPECT_EQ(unlimited->max_failures, 0u);
  EXPECT_EQ(unlimited->concurrency, 256u);
  auto args = base;
  args.insert(args.end(), {"--max-failures", "100"});
  auto limited = Parse(args);
  ASSERT_TRUE(limited) << limited.error().message();
  EXPECT_EQ(limited->max_failures, 100u);
  args.back() = "0";
  auto zero = Parse(args);
  ASSERT_FALSE(zero);
  EXPECT_NE(zero.error().message().find("--max-failures"), std::string::npos);
}

}  // namespace
}  // namespace xdpfwd::loadgen
