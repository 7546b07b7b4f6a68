// PROXY protocol headers read back (see proxy_header.h), checked as doc/proxy-protocol.txt
// lays them out: v1 one line of printable text ending in CRLF, v2 a 16-byte preamble and the
// address block (and any TLVs) its length names.
#include "bench/loadgen/proxy_header.h"

#include <arpa/inet.h>

#include <algorithm>
#include <cstring>
#include <string_view>

namespace xdpfwd::loadgen {
namespace {

using Status = ProxyScan::Status;

constexpr uint8_t kV2Signature[12] = {0x0d, 0x0a, 0x0d, 0x0a, 0x00, 0x0d,
                                      0x0a, 0x51, 0x55, 0x49, 0x54, 0x0a};
constexpr std::string_view kV1Prefix = "PROXY ";

// Whether the first min(bytes, expected) bytes agree with `expected`.
bool StartsAs(std::span<const uint8_t> bytes, std::span<const uint8_t> expected) {
  const size_t n = std::min(bytes.size(), expected.size());
  return std::memcmp(bytes.data(), expected.data(), n) == 0;
}

// "0" to "65535", no sign, no leading zero.
bool IsPort(std::string_view s) {
  if (s.empty() || s.size() > 5 || (s.size() > 1 && s[0] == '0')) return false;
  unsigned value = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return false;
    value = value * 10 + static_cast<unsigned>(c - '0');
  }
  return value <= 65535;
}

bool IsAddress(int family, std::string_view s) {
  char text[INET6_ADDRSTRLEN];
  if (s.empty() || s.size() >= sizeof text) return false;
  std::memcpy(text, s.data(), s.size());
  text[s.size()] = '\0';
  uint8_t out[16];
  return inet_pton(family, text, out) == 1;
}

// v1's line without its CRLF: "PROXY TCP4 src dst sport dport", TCP6 alike, or "PROXY UNKNOWN"
// and anything after it (which a receiver ignores). Fields are separated by one space.
bool IsV1Line(std::string_view line) {
  constexpr std::string_view kUnknown = "PROXY UNKNOWN";
  if (line.starts_with(kUnknown)) {
    return line.size() == kUnknown.size() || line[kUnknown.size()] == ' ';
  }
  std::string_view fields[6];
  size_t count = 0;
  for (size_t start = 0;;) {
    const size_t space = line.find(' ', start);
    if (count == std::size(fields)) return false;
    fields[count++] = line.substr(start, space - start);
    if (space == std::string_view::npos) break;
    start = space + 1;
  }
  if (count != 6 || fields[0] != "PROXY") return false;
  const int family = fields[1] == "TCP4" ? AF_INET : fields[1] == "TCP6" ? AF_INET6 : 0;
  return family != 0 && IsAddress(family, fields[2]) && IsAddress(family, fields[3]) &&
         IsPort(fields[4]) && IsPort(fields[5]);
}

ProxyScan ScanV1(std::span<const uint8_t> bytes) {
  const auto prefix =
      std::span(reinterpret_cast<const uint8_t*>(kV1Prefix.data()), kV1Prefix.size());
  if (!StartsAs(bytes, prefix)) return {Status::kInvalid, 0, 1};
  const size_t limit = std::min(bytes.size(), kProxyV1MaxBytes);
  for (size_t i = 0; i < limit; ++i) {
    const uint8_t c = bytes[i];
    if (c == '\n') {
      if (i == 0 || bytes[i - 1] != '\r') return {Status::kInvalid, 0, 1};
      const std::string_view line(reinterpret_cast<const char*>(bytes.data()), i - 1);
      if (!IsV1Line(line)) return {Status::kInvalid, 0, 1};
      return {Status::kComplete, i + 1, 1};
    }
    // '\r' only just before the '\n'; nothing else outside printable ASCII.
    const bool cr_alone = c == '\r' && i + 1 < bytes.size() && bytes[i + 1] != '\n';
    if (cr_alone || (c != '\r' && (c < 0x20 || c > 0x7e))) return {Status::kInvalid, 0, 1};
  }
  // No line end within the longest line v1 allows.
  if (bytes.size() >= kProxyV1MaxBytes) return {Status::kInvalid, 0, 1};
  return {Status::kIncomplete, 0, 1};
}

ProxyScan ScanV2(std::span<const uint8_t> bytes) {
  if (!StartsAs(bytes, kV2Signature)) return {Status::kInvalid, 0, 2};
  // Version 2, command LOCAL (0x20: the sender's own connection) or PROXY (0x21).
  if (bytes.size() > 12 && bytes[12] != 0x20 && bytes[12] != 0x21) return {Status::kInvalid, 0, 2};
  // Family UNSPEC, INET, INET6 or UNIX (high nibble); transport UNSPEC, STREAM or DGRAM (low).
  if (bytes.size() > 13 && ((bytes[13] >> 4) > 3 || (bytes[13] & 0x0f) > 2)) {
    return {Status::kInvalid, 0, 2};
  }
  if (bytes.size() < kProxyV2PreambleBytes) return {Status::kIncomplete, 0, 2};
  const size_t length = static_cast<size_t>(bytes[14]) << 8 | bytes[15];
  // A PROXY command's address block holds at least its family's addresses and ports (TLVs may
  // follow them); LOCAL's is ignored whatever it holds.
  static constexpr size_t kAddressBytes[4] = {0, 12, 36, 216};  // UNSPEC, INET, INET6, UNIX
  if (bytes[12] == 0x21 && length < kAddressBytes[bytes[13] >> 4]) return {Status::kInvalid, 0, 2};
  if (bytes.size() < kProxyV2PreambleBytes + length) return {Status::kIncomplete, 0, 2};
  return {Status::kComplete, kProxyV2PreambleBytes + length, 2};
}

}  // namespace

ProxyScan ScanProxyHeader(std::span<const uint8_t> bytes) {
  if (bytes.empty()) return {};
  // The first byte tells the versions apart: 'P' for v1's text, CR for v2's signature.
  if (bytes[0] == kV1Prefix[0]) return ScanV1(bytes);
  if (bytes[0] == kV2Signature[0]) return ScanV2(bytes);
  return {Status::kInvalid, 0, 0};
}

}  // namespace xdpfwd::loadgen
