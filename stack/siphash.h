// SipHash-2-4 for the TCP initial sequence numbers (RFC 6528's keyed hash of the 4-tuple).
#pragma once

#include <cstdint>
#include <initializer_list>

namespace xdpfwd {

inline uint64_t SipRotl(uint64_t x, int b) { return (x << b) | (x >> (64 - b)); }

// SipHash-2-4 (Aumasson and Bernstein) of a 16-byte message given as two little-endian 64-bit
// words, under a 128-bit key given the same way: a keyed PRF, so peers cannot predict our ISNs
// (stack/lwip_hooks.cpp). Checked against the authors' reference vector in
// tests/unit/lwip_config_test.cpp.
inline uint64_t SipHash24(const uint64_t key[2], uint64_t m0, uint64_t m1) {
  uint64_t v0 = 0x736f6d6570736575ULL ^ key[0];
  uint64_t v1 = 0x646f72616e646f6dULL ^ key[1];
  uint64_t v2 = 0x6c7967656e657261ULL ^ key[0];
  uint64_t v3 = 0x7465646279746573ULL ^ key[1];
  // clang-format off: the SipHash round reads best in its customary four-line layout.
  auto round = [&] {
    v0 += v1;
    v1 = SipRotl(v1, 13);
    v1 ^= v0;
    v0 = SipRotl(v0, 32);
    v2 += v3;
    v3 = SipRotl(v3, 16);
    v3 ^= v2;
    v0 += v3;
    v3 = SipRotl(v3, 21);
    v3 ^= v0;
    v2 += v1;
    v1 = SipRotl(v1, 17);
    v1 ^= v2;
    v2 = SipRotl(v2, 32);
  };
  // clang-format on
  const uint64_t last = uint64_t{16} << 56;  // message length in the top byte
  for (uint64_t m : {m0, m1, last}) {
    v3 ^= m;
    round();
    round();
    v0 ^= m;
  }
  v2 ^= 0xff;
  for (int i = 0; i < 4; ++i) round();
  return v0 ^ v1 ^ v2 ^ v3;
}

}  // namespace xdpfwd
