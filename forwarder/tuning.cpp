// The measurement levers' table and what reads it (see tuning.h).
#include "forwarder/tuning.h"

#include <algorithm>
#include <charconv>
#include <vector>

#include "forwarder/fast_path.h"
#include "forwarder/kernel_path.h"
#include "os/parse_number.h"

namespace xdpfwd {
namespace {

// What each lever measured is a summary of the document named at its end, where the runs, the
// machine and the spread are. ASCII only: the same text goes to a terminal.
constexpr TuningKey kKeys[] = {
    {"fill-depth", "adaptive|full", 0, 0,
     "fast path: frames posted on each AF_XDP fill ring: few under steady load, so that the "
     "kernel writes into warm ones, all of them after a burst (adaptive), or always all (full)",
     "bulk -P 1 at MTU 1500: 10.21 Gbit/s adaptive, 8.82 full; even at 9000 (docs/stack.md)",
     [](const Tuning& t) -> uint64_t { return t.adaptive_fill ? 0 : 1; },
     [](Tuning& t, uint64_t i) { t.adaptive_fill = i == 0; }},
    {"tx", "auto|af-xdp|packet", 0, 0,
     "fast path: send through the AF_XDP socket, or through a packet socket that sends a flow's "
     "segments as one GSO packet; auto: the packet socket where AF_XDP runs in copy mode (veth), "
     "the AF_XDP socket where it is zero-copy",
     "veth, MTU 1500: bulk -P 1 / -P 8 8.54 / 6.75 Gbit/s through the packet socket, 4.25 / 3.50 "
     "with af-xdp (docs/stack.md)",
     [](const Tuning& t) -> uint64_t { return t.packet_tx ? (*t.packet_tx ? 2 : 1) : 0; },
     [](Tuning& t, uint64_t i) {
       t.packet_tx = i == 0 ? std::nullopt : std::optional<bool>(i == 2);
     }},
    {"tx-small", "af-xdp|acks|packet", 0, 0,
     "fast path, with the packet socket: where a batch of single segments goes: the AF_XDP "
     "socket; the packet socket for a receiver's runs of bare ACKs, AF_XDP for the rest (acks); "
     "or the packet socket always. A flow keeps to the packet socket 5 ms after using it",
     "veth peers with threaded NAPI, MTU 1500: bulk 9.43 / 9.35 Gbit/s with acks, 8.91 / 7.67 "
     "with af-xdp; packet adds latency (rr p50 +50.6 us against +21.8) (docs/stack.md)",
     [](const Tuning& t) -> uint64_t {
       switch (t.small_batches) {
         case SmallBatchTx::kAfXdp:
           return 0;
         case SmallBatchTx::kAcksThroughPacket:
           return 1;
         case SmallBatchTx::kPacket:
           return 2;
       }
       return 1;
     },
     [](Tuning& t, uint64_t i) {
       t.small_batches = i == 0   ? SmallBatchTx::kAfXdp
                         : i == 1 ? SmallBatchTx::kAcksThroughPacket
                                  : SmallBatchTx::kPacket;
     }},
    {"relay-copy", "always|when-queued", 0, 0,
     "fast path: copy every relayed byte into the other leg's send queue (always), or only bytes "
     "that must wait there and send the rest from the frame they arrived in (when-queued)",
     "bulk -P 8, where the worker is the limit: +10% at MTU 1500, +13% at 9000 with when-queued "
     "(docs/benchmarks.md)",
     [](const Tuning& t) -> uint64_t { return t.zero_copy_relay ? 1 : 0; },
     [](Tuning& t, uint64_t i) { t.zero_copy_relay = i == 1; }},
    {"ooseq-ack", "hold|now", 0, 0,
     "fast path: the ACK (with SACK) of out-of-order data waits one worker iteration, so that a "
     "segment that was only late is not resent (hold), or leaves at once, as lwIP sends it (now)",
     "veth: retransmissions -93% with hold, throughput +2-3% (within the spread); a real loss is "
     "reported microseconds later (docs/stack.md)",
     [](const Tuning& t) -> uint64_t { return t.ooseq_ack_hold ? 0 : 1; },
     [](Tuning& t, uint64_t i) { t.ooseq_ack_hold = i == 0; }},
    {"tx-budget", "ring|kernel", 0, 0,
     "fast path, AF_XDP TX: frames one TX kick sends, the TX ring's size where the kernel allows "
     "it (ring), or the kernel's fixed 32 (kernel)",
     "syscalls per MiB 24.8 with ring against 37.8; throughput within the spread (docs/stack.md)",
     [](const Tuning& t) -> uint64_t { return t.tx_budget ? 0 : 1; },
     [](Tuning& t, uint64_t i) { t.tx_budget = i == 0; }},
    {"multi-buffer", "on|off", 0, 0,
     "fast path: packets longer than an AF_XDP frame (TSO segments in generic mode, jumbo "
     "frames) as descriptor chains (on), or one packet per frame (off: an MTU that needs "
     "chains, as 9000 does, is refused at start)",
     "veth, MTU 1500: bulk -P 1 4.02 Gbit/s with on, 2.12 with off (2.1x), half the syscalls "
     "per MiB (docs/benchmarks.md)",
     [](const Tuning& t) -> uint64_t { return t.multi_buffer ? 0 : 1; },
     [](Tuning& t, uint64_t i) { t.multi_buffer = i == 0; }},
    {"tx-checksum", "offload|software", 0, 0,
     "fast path, AF_XDP TX: TCP checksums completed by the kernel or the device through TX "
     "metadata where it allows (offload), or computed by lwIP (software)",
     "checksumming took 0.8% of the worker with offload, 6.8% with software; throughput within "
     "the spread (docs/stack.md)",
     [](const Tuning& t) -> uint64_t { return t.tx_checksum_offload ? 0 : 1; },
     [](Tuning& t, uint64_t i) { t.tx_checksum_offload = i == 0; }},
    {"congestion-control", "cubic|bbr", 0, 0,
     "fast path: lwIP's congestion control, loss-based CUBIC or rate-based BBR, whose window a "
     "random loss does not shrink",
     "time of a bulk transfer under 1% / 3% random loss 1.38x / 1.16x the kernel path's with "
     "bbr, 2.62x / 2.81x with cubic; alike without loss (docs/stack.md)",
     [](const Tuning& t) -> uint64_t { return t.bbr ? 1 : 0; },
     [](Tuning& t, uint64_t i) { t.bbr = i == 1; }},
    {"recorder", "on|off", 0, 0,
     "both paths: every fast-path worker and kernel-path thread keeps its newest events "
     "(connection life; a worker's iterations and gaps too) in a ring for `xdpfwd ctl trace "
     "dump` (on), or records nothing (off)",
     "1.3 ns an event on this machine's core; the whole forwarder with it on and off: "
     "docs/flight_recorder.md",
     [](const Tuning& t) -> uint64_t { return t.flight_recorder ? 0 : 1; },
     [](Tuning& t, uint64_t i) { t.flight_recorder = i == 0; }},
    {"memory-lock", "on|off", 0, 0,
     "fast path: every worker locks all its memory once it is set up (mlockall), so that its "
     "loop never waits for the kernel to map a page (on), or only its AF_XDP frame areas, which "
     "are always locked (off). A worker whose lock is refused runs unlocked and says so",
     "a fresh worker's first 200 connections took 0 page faults with on, 1,300 with off; each "
     "worker locks 359 MiB at start with on (lwIP's pools in full for 131,072 connections; the "
     "pcbs of more as first used, a fault per 3.7 connections), 64 MiB with off "
     "(docs/observability.md)",
     [](const Tuning& t) -> uint64_t { return t.lock_memory ? 0 : 1; },
     [](Tuning& t, uint64_t i) { t.lock_memory = i == 0; }},
    {"copy", "off|on", 0, 0,
     "kernel path: relay through a buffer with recv and send (on) instead of splice through a "
     "pipe (off)",
     "32-byte ping-pong p50 54.8 us with on, 55.0 with off: alike (docs/kernel-path.md)",
     [](const Tuning& t) -> uint64_t { return t.kernel_copy ? 1 : 0; },
     [](Tuning& t, uint64_t i) { t.kernel_copy = i == 1; }},
    {"tcp-events", "on|off", 0, 0,
     "kernel path, with the recorder on: BPF programs on the kernel's TCP tracepoints record "
     "its sockets' retransmissions, RTOs, fast recovery, zero windows and Nagle peers (on), or "
     "nothing of TCP's own (off). One bpf syscall per socket of a connection that lasts 10 ms",
     "0.45% of the kernel path's CPU samples in the programs with on, under a connection-rate "
     "load and under 32-byte ping-pong (perf); no socket of a rate load tagged; rate, bulk and "
     "CPU per connection within this machine's noise; but 32-byte request/response on one "
     "connection +14 us mean, p99 236 against 166 us (quiet machine): off by default "
     "(docs/flight_recorder.md)",
     [](const Tuning& t) -> uint64_t { return t.kernel_tcp_events ? 0 : 1; },
     [](Tuning& t, uint64_t i) { t.kernel_tcp_events = i == 0; }},
    {"buffer-size", "", 4096, 64u << 20,
     "kernel path: bytes of the copy buffer per direction of a connection, with copy=on or where "
     "splice fails",
     "nothing yet: splice is the kernel path's way, this sizes its fallback",
     [](const Tuning& t) -> uint64_t { return t.kernel_buffer; },
     [](Tuning& t, uint64_t n) { t.kernel_buffer = static_cast<size_t>(n); }},
};

std::vector<std::string_view> Words(std::string_view words) {
  std::vector<std::string_view> out;
  for (size_t begin = 0;;) {
    const size_t bar = words.find('|', begin);
    out.push_back(words.substr(begin, bar == std::string_view::npos ? bar : bar - begin));
    if (bar == std::string_view::npos) return out;
    begin = bar + 1;
  }
}

// `text` in lines of at most `width` columns, each starting with `indent` spaces.
std::string Wrap(std::string_view text, size_t indent, size_t width) {
  std::string out, line;
  size_t begin = 0;
  while (begin < text.size()) {
    size_t end = text.find(' ', begin);
    if (end == std::string_view::npos) end = text.size();
    const std::string_view word = text.substr(begin, end - begin);
    if (!line.empty() && indent + line.size() + 1 + word.size() > width) {
      out += std::string(indent, ' ') + line + "\n";
      line.clear();
    }
    line += (line.empty() ? "" : " ") + std::string(word);
    begin = end + 1;
  }
  if (!line.empty()) out += std::string(indent, ' ') + line + "\n";
  return out;
}

std::string Padded(std::string text, size_t width) {
  text.resize(std::max(width, text.size() + 1), ' ');
  return text;
}

}  // namespace

void Tuning::ApplyTo(FastPathConfig& config) const {
  config.adaptive_fill = adaptive_fill;
  config.packet_tx = packet_tx;
  config.small_batches = small_batches;
  config.zero_copy_relay = zero_copy_relay;
  config.ooseq_ack_hold = ooseq_ack_hold;
  config.tx_budget = tx_budget;
  config.multi_buffer = multi_buffer;
  config.tx_checksum_offload = tx_checksum_offload;
  config.flight_recorder = flight_recorder;
  config.lock_memory = lock_memory;
}

void Tuning::ApplyTo(KernelPathConfig& config) const {
  config.use_splice = !kernel_copy;
  config.flight_recorder = flight_recorder;
  config.tcp_events = kernel_tcp_events;
  config.copy_buffer_bytes = kernel_buffer;
}

std::string TuningKey::Values() const {
  if (!words.empty()) return std::string(words);
  return std::to_string(min) + "-" + std::to_string(max);
}

std::string TuningKey::ValueOf(const Tuning& t) const {
  const uint64_t v = get(t);
  if (words.empty()) return std::to_string(v);
  const std::vector<std::string_view> list = Words(words);
  return v < list.size() ? std::string(list[v]) : "?";
}

Result<void> TuningKey::Set(Tuning& t, std::string_view value) const {
  const std::string what = "--tune " + std::string(key) + "=" + std::string(value) + ": ";
  if (words.empty()) {
    const std::optional<uint64_t> n = ParseDecimal<uint64_t>(value, min, max);
    if (!n) {
      return Error{
          {},
          what + "expected a number from " + std::to_string(min) + " to " + std::to_string(max)};
    }
    set(t, *n);
    return {};
  }
  const std::vector<std::string_view> list = Words(words);
  if (const auto it = std::find(list.begin(), list.end(), value); it != list.end()) {
    set(t, static_cast<uint64_t>(it - list.begin()));
    return {};
  }
  std::string expected;
  for (size_t i = 0; i < list.size(); ++i) {
    expected += (i == 0 ? "" : i + 1 == list.size() ? " or " : ", ") + std::string(list[i]);
  }
  return Error{{}, what + "expected " + expected};
}

std::span<const TuningKey> TuningKeys() { return kKeys; }

const TuningKey* FindTuningKey(std::string_view key) {
  for (const TuningKey& k : kKeys) {
    if (k.key == key) return &k;
  }
  return nullptr;
}

Result<void> ParseTune(Tuning& t, std::string_view key_value) {
  const size_t eq = key_value.find('=');
  if (eq == std::string_view::npos) {
    return Error{{},
                 "--tune " + std::string(key_value) +
                     ": expected KEY=VALUE (xdpfwd --help-tune lists the keys)"};
  }
  const std::string_view key = key_value.substr(0, eq);
  const TuningKey* k = FindTuningKey(key);
  if (k == nullptr) {
    std::string keys;
    for (const TuningKey& each : kKeys) keys += (keys.empty() ? "" : ", ") + std::string(each.key);
    return Error{{},
                 "--tune " + std::string(key_value) + ": no key " + std::string(key) +
                     "; the keys: " + keys + " (xdpfwd --help-tune says what each does)"};
  }
  return k->Set(t, key_value.substr(eq + 1));
}

std::string TuningHelp() {
  constexpr size_t kKeyWidth = 22, kValuesWidth = 22, kIndent = 6, kWidth = 92;
  std::string out =
      "usage: xdpfwd --tune KEY=VALUE ... (repeatable; the last value of a key wins)\n"
      "\n"
      "The measurement levers. Each default is what measured best (docs/tuning.md has this "
      "table\n"
      "and where the numbers come from); change one to compare two runs (bench/ab-bulk) or to "
      "get\n"
      "round a device, not to set xdpfwd up.\n"
      "\n" +
      Padded("  KEY", kKeyWidth) + Padded("VALUES", kValuesWidth) + "DEFAULT\n";
  for (const TuningKey& k : kKeys) {
    out += Padded("  " + std::string(k.key), kKeyWidth) + Padded(k.Values(), kValuesWidth) +
           k.Default() + "\n";
    out += Wrap(k.help, kIndent, kWidth);
    out += Wrap("measured: " + std::string(k.effect), kIndent, kWidth);
  }
  return out;
}

}  // namespace xdpfwd
