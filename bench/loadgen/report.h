// What the load generator prints: one-line JSON objects, failure counts by kind and latency
// percentiles.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>

#include "bench/loadgen/histogram.h"

namespace xdpfwd::loadgen {

// A flat JSON object built key by key; values are numbers, strings or nested objects.
class JsonObject {
 public:
  JsonObject& Count(std::string_view key, uint64_t value);
  JsonObject& Number(std::string_view key, double value, int decimals);
  JsonObject& String(std::string_view key, std::string_view value);  // no escaping: plain text
  JsonObject& Object(std::string_view key, const JsonObject& value);
  std::string str() const { return "{" + body_ + "}"; }

 private:
  void Key(std::string_view key);
  std::string body_;
};

// Progress and errors for people: "xdpfwd-loadgen: <line>" on stderr.
void Log(std::string_view line);

// Prints `object` as one line on stdout and flushes, so a reader waiting for it sees it now.
void PrintLine(const JsonObject& object);

// Every way a client connection can fail; none is dropped silently.
enum class Failure {
  kConnect,  // socket/bind/connect failed or the handshake was refused, reset or unreachable
  kReset,    // an established connection failed with an error (RST, EPIPE...)
  kTimeout,  // no progress within --timeout (connect or exchange)
  kShort,    // the peer closed before the whole response arrived
  kExcess,   // more bytes than the response, or data where EOF was expected
};

class Failures {
 public:
  void Add(Failure kind, int err);
  uint64_t total() const;
  // {"connect":0,"reset":0,"timeout":0,"short":0,"excess":0}
  JsonObject Json() const;
  // {"ECONNREFUSED":3,...}: the errno behind each connect and reset failure.
  JsonObject ErrnoJson() const;

 private:
  uint64_t counts_[5] = {};
  std::map<int, uint64_t> errnos_;
};

// {"p50":..,"p90":..,"p99":..,"p999":..,"max":..,"mean":..} in microseconds from nanoseconds.
JsonObject LatencyJson(const Histogram& ns);

}  // namespace xdpfwd::loadgen
