// The measurement levers: settings whose defaults are what measured best, changed to compare
// two runs or to get round a device. One table drives --tune KEY=VALUE, --help-tune and the
// table in docs/tuning.md (a unit test keeps the two in step); the levers travel as one Tuning.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "os/result.h"
#include "stack/packet_tx.h"

namespace xdpfwd {

struct FastPathConfig;
struct KernelPathConfig;

// Each field's key in the comment; FastPathConfig and KernelPathConfig say what each does.
struct Tuning {
  bool adaptive_fill = true;  // fill-depth
  // tx; unset (auto): the packet socket where the AF_XDP sockets run in copy mode.
  std::optional<bool> packet_tx;
  SmallBatchTx small_batches = SmallBatchTx::kAcksThroughPacket;  // tx-small
  bool zero_copy_relay = true;                                    // relay-copy
  bool ooseq_ack_hold = true;                                     // ooseq-ack
  bool tx_budget = true;                                          // tx-budget
  bool multi_buffer = true;                                       // multi-buffer
  bool tx_checksum_offload = true;                                // tx-checksum
  // congestion-control. lwIP reads it from a process-wide setting (xdpfwd_lwip_set_bbr), so
  // the service sets that, not FastPathConfig.
  bool bbr = true;
  bool flight_recorder = true;  // recorder
  bool lock_memory = true;      // memory-lock
  bool kernel_copy = false;     // copy: buffered copy instead of splice
  // tcp-events: ~0.5% of the kernel path's CPU, but +14 µs mean, +70 µs p99 per exchange on
  // one connection's request/response (docs/flight_recorder.md): off until that is understood.
  bool kernel_tcp_events = false;
  size_t kernel_buffer = 64 * 1024;  // buffer-size

  // The levers into a path's configuration: here, beside the table, so that a new lever is
  // added in one file.
  void ApplyTo(FastPathConfig& config) const;
  void ApplyTo(KernelPathConfig& config) const;
};

// One key of --tune. Its value is one of the words of `words` ("af-xdp|acks|packet"), or,
// where `words` is empty, a number from min to max.
struct TuningKey {
  std::string_view key;  // "tx-small" in --tune tx-small=acks (the option --tx-small before)
  std::string_view words;
  uint64_t min = 0, max = 0;
  std::string_view help;           // what it chooses, naming the path it acts on
  std::string_view effect;         // what it was measured to do, and the document with the numbers
  uint64_t (*get)(const Tuning&);  // the word's index in `words`, or the number
  void (*set)(Tuning&, uint64_t);

  std::string Values() const;                  // "af-xdp|acks|packet", "4096-67108864"
  std::string ValueOf(const Tuning& t) const;  // "acks"
  std::string Default() const { return ValueOf(Tuning{}); }
  // `value` into `t`; the error names the key and what it takes.
  Result<void> Set(Tuning& t, std::string_view value) const;
};

std::span<const TuningKey> TuningKeys();
const TuningKey* FindTuningKey(std::string_view key);

// --tune's argument, "KEY=VALUE", into `t`. Errors name the key and list what it takes:
// "--tune tx-small=x: expected af-xdp, acks or packet".
Result<void> ParseTune(Tuning& t, std::string_view key_value);

// --help-tune's text: every key, its values, its default, what it does and what it measured.
std::string TuningHelp();

}  // namespace xdpfwd
