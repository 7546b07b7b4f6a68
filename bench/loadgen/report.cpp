// What the load generator prints; see report.h.
#include "bench/loadgen/report.h"

#include <cstdio>
#include <cstring>

namespace xdpfwd::loadgen {

void JsonObject::Key(std::string_view key) {
  if (!body_.empty()) body_ += ',';
  body_ += '"';
  body_ += key;
  body_ += "\":";
}

JsonObject& JsonObject::Count(std::string_view key, uint64_t value) {
  Key(key);
  body_ += std::to_string(value);
  return *this;
}

JsonObject& JsonObject::Number(std::string_view key, double value, int decimals) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.*f", decimals, value);
  Key(key);
  body_ += buf;
  return *this;
}

JsonObject& JsonObject::String(std::string_view key, std::string_view value) {
  Key(key);
  body_ += '"';
  body_ += value;
  body_ += '"';
  return *this;
}

JsonObject& JsonObject::Object(std::string_view key, const JsonObject& value) {
  Key(key);
  body_ += value.str();
  return *this;
}

void Log(std::string_view line) {
  std::fprintf(stderr, "xdpfwd-loadgen: %.*s\n", static_cast<int>(line.size()), line.data());
}

void PrintLine(const JsonObject& object) {
  const std::string line = object.str() + "\n";
  std::fwrite(line.data(), 1, line.size(), stdout);
  std::fflush(stdout);
}

void Failures::Add(Failure kind, int err) {
  ++counts_[static_cast<int>(kind)];
  if (err != 0) ++errnos_[err];
}

uint64_t Failures::total() const {
  uint64_t sum = 0;
  for (uint64_t c : counts_) sum += c;
  return sum;
}

JsonObject Failures::Json() const {
  JsonObject j;
  const char* names[] = {"connect", "reset", "timeout", "short", "excess"};
  for (int i = 0; i < 5; ++i) j.Count(names[i], counts_[i]);
  return j;
}

JsonObject Failures::ErrnoJson() const {
  JsonObject j;
  for (const auto& [err, n] : errnos_) {
    const char* name = strerrorname_np(err);
    j.Count(name != nullptr ? name : std::to_string(err), n);
  }
  return j;
}

JsonObject LatencyJson(const Histogram& ns) {
  auto us = [](double v) { return v / 1000.0; };
  JsonObject j;
  j.Number("p50", us(static_cast<double>(ns.ValueAtQuantile(0.50))), 3)
      .Number("p90", us(static_cast<double>(ns.ValueAtQuantile(0.90))), 3)
      .Number("p99", us(static_cast<double>(ns.ValueAtQuantile(0.99))), 3)
      .Number("p999", us(static_cast<double>(ns.ValueAtQuantile(0.999))), 3)
      .Number("max", us(static_cast<double>(ns.max())), 3)
      .Number("mean", us(ns.mean()), 3);
  return j;
}

}  // namespace xdpfwd::loadgen
