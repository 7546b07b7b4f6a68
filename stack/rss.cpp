// Toeplitz hashing and the device's RSS table (see rss.h).
#include "stack/rss.h"

#include <linux/ethtool.h>
#include <linux/sockios.h>
#include <net/if.h>
#include <sys/ioctl.h>
#include <sys/socket.h>

#include <cstring>

#include "os/unique_fd.h"

namespace xdpfwd {

namespace {

// ETHTOOL_GRSSH's hfunc is a bit mask of the kernel's ETH_RSS_HASH_* (not in the uapi header
// this builds against): bit 0 is Toeplitz.
constexpr uint8_t kHashToeplitz = 1u << 0;

}  // namespace

uint32_t ToeplitzHash(std::span<const uint8_t> key, std::span<const uint8_t> input) {
  if (key.size() < input.size() + 4) return 0;  // not a hash any device computes
  // `window` holds the 32 key bits starting at the current input bit; shifting it left by
  // one per input bit brings the next key bit in at the bottom.
  uint32_t window = static_cast<uint32_t>(key[0]) << 24 | static_cast<uint32_t>(key[1]) << 16 |
                    static_cast<uint32_t>(key[2]) << 8 | key[3];
  uint32_t hash = 0;
  for (size_t i = 0; i < input.size(); ++i) {
    const uint8_t next = key[i + 4];
    for (int bit = 7; bit >= 0; --bit) {
      if ((input[i] >> bit) & 1) hash ^= window;
      window = window << 1 | ((next >> bit) & 1);
    }
  }
  return hash;
}

uint32_t ToeplitzIpv4Tcp(std::span<const uint8_t> key, in_addr saddr, in_addr daddr, uint16_t sport,
                         uint16_t dport) {
  uint8_t input[12];
  std::memcpy(input, &saddr.s_addr, 4);  // s_addr is already in network order
  std::memcpy(input + 4, &daddr.s_addr, 4);
  input[8] = static_cast<uint8_t>(sport >> 8);
  input[9] = static_cast<uint8_t>(sport);
  input[10] = static_cast<uint8_t>(dport >> 8);
  input[11] = static_cast<uint8_t>(dport);
  return ToeplitzHash(key, input);
}

uint32_t ToeplitzIpv6Tcp(std::span<const uint8_t> key, const in6_addr& saddr, const in6_addr& daddr,
                         uint16_t sport, uint16_t dport) {
  uint8_t input[36];
  std::memcpy(input, &saddr, 16);  // network order, as on the wire
  std::memcpy(input + 16, &daddr, 16);
  input[32] = static_cast<uint8_t>(sport >> 8);
  input[33] = static_cast<uint8_t>(sport);
  input[34] = static_cast<uint8_t>(dport >> 8);
  input[35] = static_cast<uint8_t>(dport);
  return ToeplitzHash(key, input);
}

Result<RssTable> ReadRssTable(const std::string& ifname) {
  UniqueFd fd(socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0));
  if (!fd) return SystemError("socket for ethtool");
  const std::string what = ifname + ": reading the RSS key and indirection table (ethtool -x)";
  // First call with both sizes 0: the device says how large its table and key are.
  std::vector<uint32_t> buf(sizeof(ethtool_rxfh) / sizeof(uint32_t) + 1, 0);
  auto call = [&](std::vector<uint32_t>& b) {
    ifreq ifr{};
    std::strncpy(ifr.ifr_name, ifname.c_str(), IFNAMSIZ - 1);
    ifr.ifr_data = reinterpret_cast<char*>(b.data());
    return ioctl(fd.get(), SIOCETHTOOL, &ifr) == 0 ? 0 : errno;
  };
  auto* rxfh = reinterpret_cast<ethtool_rxfh*>(buf.data());
  rxfh->cmd = ETHTOOL_GRSSH;
  if (int err = call(buf); err != 0) {
    if (err == EOPNOTSUPP) {
      return Error{std::make_error_code(std::errc::operation_not_supported),
                   ifname + ": the RSS key and indirection table are not available (ethtool -x)"};
    }
    return SystemError(what, err);
  }
  const uint32_t indir_size = rxfh->indir_size;
  const uint32_t key_size = rxfh->key_size;
  if (indir_size == 0 || key_size == 0) {
    return Error{std::make_error_code(std::errc::operation_not_supported),
                 ifname +
                     ": the RSS key and indirection table are not available (ethtool -x "
                     "reports " +
                     std::to_string(indir_size) + " table entries and a " +
                     std::to_string(key_size) + "-byte key)"};
  }
  // The answer: the header, then the table (u32 each), then the key bytes.
  buf.assign(sizeof(ethtool_rxfh) / sizeof(uint32_t) + indir_size + (key_size + 3) / 4, 0);
  rxfh = reinterpret_cast<ethtool_rxfh*>(buf.data());
  rxfh->cmd = ETHTOOL_GRSSH;
  rxfh->indir_size = indir_size;
  rxfh->key_size = key_size;
  if (int err = call(buf); err != 0) return SystemError(what, err);
  if (rxfh->hfunc != kHashToeplitz) {
    return Error{{},
                 ifname + ": RSS hash function " + std::to_string(rxfh->hfunc) +
                     " is not Toeplitz (ethtool -X " + ifname + " hfunc toeplitz)"};
  }
  // rsvd8[0] is input_xfrm on newer kernels: a symmetric transform hashes other bytes.
  if (rxfh->rsvd8[0] != 0) {
    return Error{{},
                 ifname +
                     ": an RSS input transform is on (ethtool -x shows it); the plain "
                     "Toeplitz hash of the 4-tuple would not predict the queue"};
  }
  RssTable table;
  table.indirection.assign(rxfh->rss_config, rxfh->rss_config + indir_size);
  const auto* key = reinterpret_cast<const uint8_t*>(rxfh->rss_config + indir_size);
  table.key.assign(key, key + key_size);
  return table;
}

bool RssUnavailable(const Error& error) {
  return error.code == std::make_error_code(std::errc::operation_not_supported);
}

}  // namespace xdpfwd
