// The loss injector's (xdp/lossy.bpf.c) per-CPU counters, summed: one reader for the BPF
// fixtures and the namespace tests that attach the program.
#pragma once

#include <cstdint>
#include <optional>

#include "lossy.skel.h"
#include "lossy_shared.h"

namespace xdpfwd::test {

// Sum over CPUs of counter `which`; nullopt if the map cannot be read.
std::optional<uint64_t> LossyCounter(const lossy* skel, lossy_counter which);

}  // namespace xdpfwd::test
