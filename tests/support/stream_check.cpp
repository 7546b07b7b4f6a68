// See stream_check.h.
#include "tests/support/stream_check.h"

#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "tests/support/tcp.h"

namespace xdpfwd::test {

std::vector<uint8_t> ExpectedPattern(uint64_t seed, uint64_t total) {
  std::vector<uint8_t> out(total);
  PatternStream pattern(seed);
  for (uint64_t off = 0; off < total; off += 65536) {
    pattern.Fill(out.data() + off, static_cast<size_t>(std::min<uint64_t>(65536, total - off)));
  }
  return out;
}

std::vector<uint8_t> ReceiveAllBytes(int fd, std::string* ended) {
  std::vector<uint8_t> out;
  std::vector<uint8_t> buf(65536);
  for (;;) {
    const ssize_t n = recv(fd, buf.data(), buf.size(), 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      if (ended != nullptr) *ended = n == 0 ? "EOF" : strerror(errno);
      break;
    }
    out.insert(out.end(), buf.begin(), buf.begin() + n);
  }
  return out;
}

std::string FirstDifference(const std::vector<uint8_t>& got, const std::vector<uint8_t>& want) {
  if (got == want) return "";
  const size_t n = std::min(got.size(), want.size());
  size_t i = 0;
  while (i < n && got[i] == want[i]) ++i;
  size_t j = i;
  while (j < n && got[j] != want[j]) ++j;
  std::string out = "received " + std::to_string(got.size()) + " of " +
                    std::to_string(want.size()) + " bytes; first difference at offset " +
                    std::to_string(i) + ", differing run " + std::to_string(j - i) + " bytes";
  // Is the wrong run a copy of data from elsewhere in the stream (a stale or reused buffer)?
  if (i < n && j - i >= 16) {
    const auto it = std::search(want.begin(), want.end(), got.begin() + static_cast<long>(i),
                                got.begin() + static_cast<long>(i + 16));
    out += it == want.end() ? "; the wrong bytes appear nowhere in the stream"
                            : "; the wrong bytes are the stream's bytes at offset " +
                                  std::to_string(it - want.begin());
  }
  return out;
}

}  // namespace xdpfwd::test
