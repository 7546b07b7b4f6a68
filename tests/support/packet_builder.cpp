// Packet builder for BPF_PROG_TEST_RUN fixtures and stack tests; see packet_builder.h.
#include "tests/support/packet_builder.h"
#include "os/inet_checksum.h"

#include <arpa/inet.h>

#include <stdexcept>

namespace xdpfwd::test {
namespace {

void Put16(std::vector<uint8_t>& v, uint16_t x) {
  v.push_back(static_cast<uint8_t>(x >> 8));
  v.push_back(static_cast<uint8_t>(x));
}
void Put32(std::vector<uint8_t>& v, uint32_t x) {
  Put16(v, static_cast<uint16_t>(x >> 16));
  Put16(v, static_cast<uint16_t>(x));
}
void Set16(std::vector<uint8_t>& v, size_t at, uint16_t x) {
  v[at] = static_cast<uint8_t>(x >> 8);
  v[at + 1] = static_cast<uint8_t>(x);
}

uint32_t ParseIp(const std::string& dotted) {
  in_addr a{};
  if (inet_pton(AF_INET, dotted.c_str(), &a) != 1)
    throw std::invalid_argument("bad IPv4 " + dotted);
  return ntohl(a.s_addr);
}

std::array<uint8_t, 16> ParseIp6(const std::string& text) {
  std::array<uint8_t, 16> a{};
  if (inet_pton(AF_INET6, text.c_str(), a.data()) != 1)
    throw std::invalid_argument("bad IPv6 " + text);
  return a;
}

}  // namespace

uint16_t InternetChecksum(const uint8_t* data, size_t len, uint32_t sum) {
  return InetChecksum(data, len, sum);
}

Packet& Packet::Eth(uint16_t ethertype, Mac src, Mac dst) {
  ethertype_ = ethertype;
  src_ = src;
  dst_ = dst;
  return *this;
}

Packet& Packet::IPv4(const std::string& src, const std::string& dst, uint8_t protocol) {
  ip_ = Ip{ParseIp(src), ParseIp(dst), protocol, {}, 0x4000};
  return *this;
}

Packet& Packet::IpOptions(std::vector<uint8_t> options) {
  while (options.size() % 4) options.push_back(0);  // end-of-options padding
  ip_.value().options = std::move(options);
  return *this;
}

Packet& Packet::Fragment(uint16_t offset_bytes, bool more_fragments) {
  ip_.value().frag_field =
      static_cast<uint16_t>((more_fragments ? 0x2000 : 0) | (offset_bytes / 8));
  return *this;
}

Packet& Packet::IPv6(const std::string& src, const std::string& dst, uint8_t next_header) {
  ethertype_ = 0x86dd;
  ip6_ = Ip6{ParseIp6(src), ParseIp6(dst), next_header, {}};
  return *this;
}

Packet& Packet::Ipv6Ext(uint8_t type, size_t len_bytes) {
  if (len_bytes < 8 || len_bytes % 8 != 0) throw std::invalid_argument("bad extension length");
  std::vector<uint8_t> body(len_bytes - 1, 0);
  body[0] = static_cast<uint8_t>(len_bytes / 8 - 1);  // Hdr Ext Len: 8-byte units past the first
  ip6_.value().exts.push_back(Ext6{type, std::move(body)});
  return *this;
}

Packet& Packet::Ipv6Fragment(uint16_t offset_bytes, bool more_fragments) {
  std::vector<uint8_t> body(7, 0);  // reserved, offset and M flag, identification
  Set16(body, 1, static_cast<uint16_t>((offset_bytes / 8) << 3 | (more_fragments ? 1 : 0)));
  body[6] = 0x42;
  ip6_.value().exts.push_back(Ext6{44, std::move(body)});
  return *this;
}

Packet& Packet::Tcp(uint16_t sport, uint16_t dport, uint8_t flags, uint32_t seq, uint32_t ack) {
  tcp_ = TcpHdr{sport, dport, flags, seq, ack, std::nullopt};
  return *this;
}

Packet& Packet::TcpDataOffsetWords(uint8_t words) {
  tcp_.value().doff_words = words;
  return *this;
}

Packet& Packet::Payload(std::vector<uint8_t> bytes) {
  payload_ = std::move(bytes);
  return *this;
}

Packet& Packet::Payload(const std::string& text) {
  return Payload(std::vector<uint8_t>(text.begin(), text.end()));
}

Packet& Packet::Raw(std::vector<uint8_t> bytes) {
  raw_ = std::move(bytes);
  return *this;
}

Packet& Packet::TruncateTo(size_t len) {
  truncate_ = len;
  return *this;
}

std::vector<uint8_t> Packet::Build() const {
  std::vector<uint8_t> f(dst_.begin(), dst_.end());
  f.insert(f.end(), src_.begin(), src_.end());
  Put16(f, ethertype_);
  f.insert(f.end(), raw_.begin(), raw_.end());

  if (ip6_) {
    const size_t ip_at = f.size();
    f.push_back(0x60);  // version 6, traffic class 0, flow label 0
    f.push_back(0);
    Put16(f, 0);
    Put16(f, 0);  // payload length, below
    f.push_back(ip6_->exts.empty() ? ip6_->next_header : ip6_->exts.front().type);
    f.push_back(64);  // hop limit
    f.insert(f.end(), ip6_->src.begin(), ip6_->src.end());
    f.insert(f.end(), ip6_->dst.begin(), ip6_->dst.end());
    for (size_t i = 0; i < ip6_->exts.size(); ++i) {
      const bool last = i + 1 == ip6_->exts.size();
      f.push_back(last ? ip6_->next_header : ip6_->exts[i + 1].type);
      f.insert(f.end(), ip6_->exts[i].body.begin(), ip6_->exts[i].body.end());
    }
    // The pseudo-header's addresses and next header (PutTransport adds the length).
    PutTransport(f, Ipv6PseudoHeaderSum(&f[ip_at], ip6_->next_header, 0));
    Set16(f, ip_at + 4, static_cast<uint16_t>(f.size() - ip_at - 40));
  } else if (ip_) {
    const size_t ip_at = f.size();
    const size_t ihl = 20 + ip_->options.size();
    const size_t l4_len = (tcp_ ? 20 : 0) + payload_.size();
    f.push_back(static_cast<uint8_t>(0x40 | (ihl / 4)));
    f.push_back(0);                                 // DSCP/ECN
    Put16(f, static_cast<uint16_t>(ihl + l4_len));  // total length
    Put16(f, 0x1234);                               // id
    Put16(f, ip_->frag_field);
    f.push_back(64);  // TTL
    f.push_back(ip_->protocol);
    Put16(f, 0);  // checksum, below
    Put32(f, ip_->src);
    Put32(f, ip_->dst);
    f.insert(f.end(), ip_->options.begin(), ip_->options.end());
    Set16(f, ip_at + 10, InternetChecksum(&f[ip_at], ihl));

    // Pseudo-header: addresses, protocol (and the TCP length, added by PutTransport).
    PutTransport(f, (ip_->src >> 16) + (ip_->src & 0xffff) + (ip_->dst >> 16) +
                        (ip_->dst & 0xffff) + ip_->protocol);
  } else {
    f.insert(f.end(), payload_.begin(), payload_.end());
  }
  if (truncate_ && *truncate_ < f.size()) f.resize(*truncate_);
  return f;
}

void Packet::PutTransport(std::vector<uint8_t>& f, uint32_t pseudo_sum) const {
  if (!tcp_) {
    f.insert(f.end(), payload_.begin(), payload_.end());
    return;
  }
  const size_t tcp_at = f.size();
  Put16(f, tcp_->sport);
  Put16(f, tcp_->dport);
  Put32(f, tcp_->seq);
  Put32(f, tcp_->ack);
  f.push_back(static_cast<uint8_t>(tcp_->doff_words.value_or(5) << 4));
  f.push_back(tcp_->flags);
  Put16(f, 65535);  // window
  Put16(f, 0);      // checksum, below
  Put16(f, 0);      // urgent pointer
  f.insert(f.end(), payload_.begin(), payload_.end());
  const uint32_t seg_len = static_cast<uint32_t>(f.size() - tcp_at);
  Set16(f, tcp_at + 16, InternetChecksum(&f[tcp_at], seg_len, pseudo_sum + seg_len));
}

}  // namespace xdpfwd::test
