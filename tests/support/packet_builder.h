// Builds test frames layer by layer: Packet().Eth().IPv4(...).Tcp(...).Payload(...).Build(), or
// .IPv6(...) in place of .IPv4(...). Lengths and checksums are filled in at Build(); the knobs
// for malformed fixtures (IP options, fragments, IPv6 extension headers, a TCP data offset past
// the end, truncation) are explicit.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace xdpfwd::test {

using Mac = std::array<uint8_t, 6>;

inline constexpr uint8_t kFin = 0x01, kSyn = 0x02, kRst = 0x04, kPsh = 0x08, kAck = 0x10;

class Packet {
 public:
  Packet& Eth(uint16_t ethertype = 0x0800, Mac src = {2, 0, 0, 0, 0, 1},
              Mac dst = {2, 0, 0, 0, 0, 2});
  // Addresses as dotted quads.
  Packet& IPv4(const std::string& src, const std::string& dst, uint8_t protocol = 6);
  Packet& IpOptions(std::vector<uint8_t> options);  // padded to 4 bytes; sets IHL
  Packet& Fragment(uint16_t offset_bytes, bool more_fragments);
  // Addresses as text ("2001:db8::1"); sets the EtherType to IPv6. `next_header` is the
  // protocol after the extension headers, if any.
  Packet& IPv6(const std::string& src, const std::string& dst, uint8_t next_header = 6);
  // An IPv6 extension header of `type` (hop-by-hop 0, routing 43, destination options 60, ...)
  // with `len_bytes` of it in all (a multiple of 8, at least 8), zero past the first two bytes.
  Packet& Ipv6Ext(uint8_t type, size_t len_bytes = 8);
  // An IPv6 fragment header (type 44).
  Packet& Ipv6Fragment(uint16_t offset_bytes, bool more_fragments);
  Packet& Tcp(uint16_t sport, uint16_t dport, uint8_t flags, uint32_t seq = 1000, uint32_t ack = 0);
  Packet& TcpDataOffsetWords(uint8_t words);  // override the computed data offset
  Packet& Payload(std::vector<uint8_t> bytes);
  Packet& Payload(const std::string& text);
  Packet& Raw(std::vector<uint8_t> bytes);  // bytes after Ethernet (ARP, IPv6, ...)
  Packet& TruncateTo(size_t len);           // cut the finished frame

  std::vector<uint8_t> Build() const;

 private:
  // The TCP header and payload (or the payload alone without Tcp()) at the end of `f`, with
  // the checksum over the pseudo-header whose sum without the length is `pseudo_sum`.
  void PutTransport(std::vector<uint8_t>& f, uint32_t pseudo_sum) const;

  struct Ip {
    uint32_t src = 0, dst = 0;
    uint8_t protocol = 6;
    std::vector<uint8_t> options;
    uint16_t frag_field = 0x4000;  // DF, offset 0
  };
  struct Ext6 {
    uint8_t type = 0;
    std::vector<uint8_t> body;  // after the next-header byte
  };
  struct Ip6 {
    std::array<uint8_t, 16> src{}, dst{};
    uint8_t next_header = 6;
    std::vector<Ext6> exts;
  };
  struct TcpHdr {
    uint16_t sport = 0, dport = 0;
    uint8_t flags = 0;
    uint32_t seq = 0, ack = 0;
    std::optional<uint8_t> doff_words;
  };
  Mac src_{}, dst_{};
  uint16_t ethertype_ = 0x0800;
  std::optional<Ip> ip_;
  std::optional<Ip6> ip6_;
  std::optional<TcpHdr> tcp_;
  std::vector<uint8_t> payload_, raw_;
  std::optional<size_t> truncate_;
};

// Internet checksum (RFC 1071) over data, starting from a partial sum.
uint16_t InternetChecksum(const uint8_t* data, size_t len, uint32_t sum = 0);

}  // namespace xdpfwd::test
