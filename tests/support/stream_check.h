// Whole streams as bytes, for tests that must say where a relayed stream went wrong, not only
// that its hash differs: what SendPattern sends, everything a socket receives, and the first
// difference between the two.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace xdpfwd::test {

// What SendPattern(seed, total) sends, byte for byte (it fills in 64 KiB chunks).
std::vector<uint8_t> ExpectedPattern(uint64_t seed, uint64_t total);

// Everything until the stream ends; `ended` (if given) says how: "EOF" or the error.
std::vector<uint8_t> ReceiveAllBytes(int fd, std::string* ended = nullptr);

// "" if equal, else where and how the received stream first differs (and whether the wrong
// bytes are the stream's own from elsewhere: a stale or reused buffer).
std::string FirstDifference(const std::vector<uint8_t>& got, const std::vector<uint8_t>& want);

}  // namespace xdpfwd::test
