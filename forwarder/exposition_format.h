// The writers behind forwarder/exposition.h: Prometheus's text format and a minimal JSON
// writer, shared by its translation units (exposition.cpp, exposition_backends.cpp). Private to
// forwarder/.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace xdpfwd {
struct ServiceReport;
}

namespace xdpfwd::exposition {

// One counter of a list, as the X-macros give it.
struct Field {
  std::string_view name;  // the field's (and the stats line's) name
  bool gauge = false;
  std::string_view what;  // empty where the list has none
  uint64_t value = 0;
};

inline  // A number without the zeros a fixed format adds: 0.000001, 2, 33.554432.
    std::string
    Decimal(double v) {
  char text[64];
  std::snprintf(text, sizeof text, "%.9f", v);
  std::string out = text;
  out.erase(out.find_last_not_of('0') + 1);
  if (out.back() == '.') out.pop_back();
  return out;
}

// Prometheus's text format: a family's HELP and TYPE once, then its samples.
class Prometheus {
 public:
  using Labels = std::vector<std::pair<std::string_view, std::string>>;

  void Family(const std::string& name, bool gauge, std::string_view help) {
    Family(name, gauge ? "gauge" : "counter", help);
  }
  void Family(const std::string& name, const char* type, std::string_view help) {
    out_ += "# HELP " + name + ' ';
    for (char c : help) {  // HELP escapes backslash and newline
      if (c == '\\') {
        out_ += "\\\\";
      } else if (c == '\n') {
        out_ += "\\n";
      } else {
        out_ += c;
      }
    }
    out_ += "\n# TYPE " + name + " " + type + "\n";
  }
  void Sample(const std::string& name, const Labels& labels, uint64_t value) {
    Start(name, labels);
    out_ += std::to_string(value) + '\n';
  }
  void Sample(const std::string& name, const Labels& labels, double value) {
    Start(name, labels);
    out_ += Decimal(value) + '\n';  // seconds to the nanosecond
  }
  std::string Take() { return std::move(out_); }

 private:
  void Start(const std::string& name, const Labels& labels) {
    out_ += name;
    if (labels.empty()) {
      out_ += ' ';
      return;
    }
    out_ += '{';
    for (size_t i = 0; i < labels.size(); ++i) {
      if (i > 0) out_ += ',';
      out_ += std::string(labels[i].first) + "=\"";
      for (char c : labels[i].second) {  // label values escape backslash, quote, newline
        if (c == '\\' || c == '"') {
          out_ += '\\';
          out_ += c;
        } else if (c == '\n') {
          out_ += "\\n";
        } else {
          out_ += c;
        }
      }
      out_ += '"';
    }
    out_ += "} ";
  }
  std::string out_;
};

// A minimal JSON writer: objects and arrays opened and closed in order, commas kept.
class Json {
 public:
  Json& Open(std::string_view key, char bracket) {
    Key(key);
    out_ += bracket;
    first_ = true;
    return *this;
  }
  Json& Close(char bracket) {
    out_ += bracket;
    first_ = false;
    return *this;
  }
  Json& Number(std::string_view key, uint64_t v) {
    Key(key);
    out_ += std::to_string(v);
    return *this;
  }
  Json& Signed(std::string_view key, int64_t v) {
    Key(key);
    out_ += std::to_string(v);
    return *this;
  }
  Json& Bool(std::string_view key, bool v) {
    Key(key);
    out_ += v ? "true" : "false";
    return *this;
  }
  Json& String(std::string_view key, std::string_view v) {
    Key(key);
    Quote(v);
    return *this;
  }
  Json& Fields(const std::vector<Field>& fields) {
    for (const Field& f : fields) Number(f.name, f.value);
    return *this;
  }
  std::string Take() { return std::move(out_); }

 private:
  // An empty key: an array element.
  void Key(std::string_view key) {
    if (!first_) out_ += ',';
    first_ = false;
    if (!key.empty()) {
      Quote(key);
      out_ += ':';
    }
  }
  void Quote(std::string_view v) {
    out_ += '"';
    for (char c : v) {
      const auto u = static_cast<unsigned char>(c);
      if (c == '"' || c == '\\') {
        out_ += '\\';
        out_ += c;
      } else if (u < 0x20) {
        char esc[8];
        std::snprintf(esc, sizeof esc, "\\u%04x", u);
        out_ += esc;
      } else {
        out_ += c;
      }
    }
    out_ += '"';
  }
  std::string out_;
  bool first_ = true;
};

// exposition_backends.cpp's: the backends' families, and their "backends" array.
void BackendMetrics(Prometheus& p, const ServiceReport& r);
void BackendsJson(Json& j, const ServiceReport& r);

}  // namespace xdpfwd::exposition
