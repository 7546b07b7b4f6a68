// Whole decimal numbers as people write them (command lines, the configuration file, control
// commands): one parser, so that what counts as a number is the same everywhere. Each caller
// words its own error: it knows what the number was for.
#pragma once

#include <charconv>
#include <concepts>
#include <cstdint>
#include <limits>
#include <optional>
#include <string_view>

namespace xdpfwd {

// `text`, all of it, as a decimal number from `low` to `high`: digits only (no sign, space or
// base prefix) and at least one; std::nullopt otherwise, and where it does not fit in T.
template <std::integral T>
std::optional<T> ParseDecimal(std::string_view text, T low = std::numeric_limits<T>::min(),
                              T high = std::numeric_limits<T>::max()) {
  if (text.empty() || text.front() < '0' || text.front() > '9') return std::nullopt;
  T value{};
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || end != text.data() + text.size() || value < low || value > high) {
    return std::nullopt;
  }
  return value;
}

// A TCP or UDP port: 1-65535, or 0-65535 where 0 means "any" to the caller.
inline std::optional<uint16_t> ParsePortNumber(std::string_view text, bool allow_zero = false) {
  return ParseDecimal<uint16_t>(text, allow_zero ? 0 : 1, 65535);
}

}  // namespace xdpfwd
