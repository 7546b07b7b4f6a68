// The load generator's command line; see args.h.
#include "bench/loadgen/args.h"
#include "os/parse_number.h"

#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <set>
#include <string_view>

namespace xdpfwd::loadgen {
namespace {

struct ModeSpec {
  Mode mode;
  const char* name;
  std::vector<std::string_view> required;
  std::vector<std::string_view> optional;
};

const std::vector<ModeSpec>& Modes() {
  static const std::vector<ModeSpec> modes = {
      {Mode::kServe,
       "serve",
       {"--listen", "--request", "--response"},
       {"--close-after-response", "--reuseport", "--accept-proxy", "--report-every", "--cpu"}},
      {Mode::kRequestResponse,
       "rr",
       {"--connect", "--connections", "--request", "--response", "--seconds"},
       {"--warmup", "--timeout", "--source", "--cpu"}},
      {Mode::kRate,
       "rate",
       {"--connect", "--concurrency", "--request", "--response", "--seconds"},
       {"--close", "--warmup", "--timeout", "--source", "--cpu"}},
      {Mode::kHold,
       "hold",
       {"--connect", "--connections", "--request", "--response"},
       {"--concurrency", "--max-failures", "--timeout", "--source", "--cpu"}},
  };
  return modes;
}

template <typename T>
Result<T> ParseInteger(const std::string& option, const std::string& text, T min, T max) {
  const std::optional<T> value = ParseDecimal<T>(text, min, max);
  if (!value) {
    return Error{{},
                 option + ": '" + text + "' is not a whole number from " + std::to_string(min) +
                     " to " + std::to_string(max)};
  }
  return *value;
}

Result<double> ParseSeconds(const std::string& option, const std::string& text, bool allow_zero) {
  double value = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  constexpr double kWeek = 7 * 24 * 3600.0;
  if (text.empty() || ec != std::errc() || end != text.data() + text.size() || !(value >= 0) ||
      (value == 0 && !allow_zero) || value > kWeek) {
    return Error{{},
                 option + ": '" + text + "' is not a number of seconds " +
                     (allow_zero ? "from 0" : "above 0") + " up to a week"};
  }
  return value;
}

Result<std::vector<SockAddr>> ParseSources(const std::string& text) {
  std::vector<SockAddr> sources;
  size_t start = 0;
  for (;;) {
    const size_t comma = text.find(',', start);
    auto a = ParseAddr(text.substr(start, comma - start));
    if (!a) return Error{{}, "--source: " + a.error().message()};
    sources.push_back(*a);
    if (comma == std::string::npos) return sources;
    start = comma + 1;
  }
}

}  // namespace

const char* Usage() {
  return "usage: xdpfwd-loadgen MODE [options]          (results: one JSON line on stdout)\n"
         "\n"
         "  serve --listen ADDR:PORT --request B --response B [--close-after-response]\n"
         "        [--reuseport] [--accept-proxy] backend: reads B request bytes, writes B\n"
         "        response bytes, repeats; port 0 picks a free port (logged on stderr);\n"
         "        --reuseport lets several servers share the port (SO_REUSEPORT);\n"
         "        --accept-proxy reads and checks a PROXY protocol header (v1 or v2) first on\n"
         "        each connection and closes one without a valid header (errors.proxy);\n"
         "        [--report-every S] prints {\"event\":\"progress\",...} (connections and\n"
         "        exchanges so far) every S seconds, for a server that will be killed;\n"
         "        summary on SIGINT/SIGTERM\n"
         "  rr    --connect ADDR:PORT --connections N --request B --response B --seconds S\n"
         "        [--warmup S] closed-loop request/response on N connections\n"
         "  rate  --connect ADDR:PORT --concurrency N --request B --response B --seconds S\n"
         "        [--warmup S] [--close server|client] new connection per exchange; server\n"
         "        (default): waits for the server's EOF (serve --close-after-response), client:\n"
         "        closes as soon as the response is in (serve without it)\n"
         "  hold  --connect ADDR:PORT --connections N --request B --response B [--concurrency C]\n"
         "        [--max-failures F] one exchange on each of N connections (C connecting at\n"
         "        once, default 256; stops opening after F failures), prints\n"
         "        {\"event\":\"established\",...}, holds them until stdin ends, then proves each\n"
         "        still works with one more exchange before closing it (SIGTERM: no proof)\n"
         "\n"
         "  ADDR:PORT is 127.0.0.1:9000 or [::1]:9000. Common options:\n"
         "  --source ADDR[,ADDR...]  client source addresses, used in turn (more ephemeral ports)\n"
         "  --timeout S              per connect and per exchange (default 5), counted as timeout\n"
         "  --warmup S               excluded from statistics (default 1)\n"
         "  --cpu N                  pin the process to CPU N\n";
}

const char* ModeName(Mode mode) {
  for (const ModeSpec& m : Modes()) {
    if (m.mode == mode) return m.name;
  }
  return "?";
}

Result<Options> ParseArgs(const std::vector<std::string>& args) {
  Options o;
  if (args.empty()) return Error{{}, "no mode given (serve, rr, rate or hold)"};
  if (args[0] == "-h" || args[0] == "--help") {
    o.help = true;
    return o;
  }
  const auto spec = std::find_if(Modes().begin(), Modes().end(),
                                 [&](const ModeSpec& m) { return args[0] == m.name; });
  if (spec == Modes().end()) {
    return Error{{}, "'" + args[0] + "' is not a mode (serve, rr, rate or hold)"};
  }
  o.mode = spec->mode;
  const std::string mode = spec->name;
  auto takes = [&](const std::vector<std::string_view>& list, const std::string& a) {
    return std::find(list.begin(), list.end(), a) != list.end();
  };
  std::set<std::string> seen;
  for (size_t i = 1; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "-h" || a == "--help") {
      o.help = true;
      return o;
    }
    if (!takes(spec->required, a) && !takes(spec->optional, a)) {
      return Error{{}, mode + " does not take '" + a + "'"};
    }
    if (!seen.insert(a).second) return Error{{}, a + " is given twice"};
    bool* flag = a == "--close-after-response" ? &o.close_after_response
                 : a == "--reuseport"          ? &o.reuse_port
                 : a == "--accept-proxy"       ? &o.accept_proxy
                                               : nullptr;
    if (flag != nullptr) {  // options without a value
      *flag = true;
      continue;
    }
    if (i + 1 >= args.size()) return Error{{}, a + " needs a value"};
    const std::string& v = args[++i];
    Result<void> ok;
    auto integer = [&](auto& field, auto min, auto max) {
      auto n = ParseInteger<std::remove_reference_t<decltype(field)>>(a, v, min, max);
      if (n) field = *n;
      return n ? Result<void>() : Result<void>(n.error());
    };
    auto seconds = [&](double& field, bool allow_zero) {
      auto s = ParseSeconds(a, v, allow_zero);
      if (s) field = *s;
      return s ? Result<void>() : Result<void>(s.error());
    };
    if (a == "--listen" || a == "--connect") {
      auto addr = ParseAddrPort(v, a == "--listen");
      if (!addr) return Error{{}, a + ": " + addr.error().message()};
      (a == "--listen" ? o.listen : o.connect) = *addr;
    } else if (a == "--source") {
      auto s = ParseSources(v);
      if (!s) return s.error();
      o.sources = *s;
    } else if (a == "--connections") {
      ok = integer(o.connections, 1u, 1'000'000u);
    } else if (a == "--close") {
      if (v != "server" && v != "client") {
        return Error{{}, "--close: '" + v + "' is not server or client"};
      }
      o.close = v == "client" ? CloseOrder::kClient : CloseOrder::kServer;
    } else if (a == "--max-failures") {
      ok = integer(o.max_failures, uint64_t{1}, uint64_t{1'000'000});
    } else if (a == "--concurrency") {
      ok = integer(o.concurrency, 1u, 1'000'000u);
    } else if (a == "--request") {
      ok = integer(o.request, uint64_t{1}, uint64_t{1} << 30);
    } else if (a == "--response") {
      ok = integer(o.response, uint64_t{1}, uint64_t{1} << 30);
    } else if (a == "--seconds") {
      ok = seconds(o.seconds, false);
    } else if (a == "--warmup") {
      ok = seconds(o.warmup, true);
    } else if (a == "--timeout") {
      ok = seconds(o.timeout, false);
    } else if (a == "--report-every") {
      ok = seconds(o.report_every, false);
    } else if (a == "--cpu") {
      const long cpus = sysconf(_SC_NPROCESSORS_CONF);
      ok = integer(o.cpu, 0, static_cast<int>(cpus > 0 ? cpus - 1 : 0));
    }
    if (!ok) return ok.error();
  }
  for (std::string_view r : spec->required) {
    if (!seen.count(std::string(r))) return Error{{}, mode + " needs " + std::string(r)};
  }
  if (o.mode == Mode::kHold && o.concurrency == 0) o.concurrency = 256;
  for (const SockAddr& s : o.sources) {
    if (s.family() != o.connect.family()) {
      return Error{{},
                   "--source " + ToString(s).substr(0, ToString(s).rfind(':')) +
                       " is not the same address family as --connect " + ToString(o.connect)};
    }
  }
  return o;
}

}  // namespace xdpfwd::loadgen
