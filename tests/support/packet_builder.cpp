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

  if (ip_) {
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

    if (tcp_) {
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
      // Pseudo-header: addresses, protocol, TCP length.
      const uint32_t seg_len = static_cast<uint32_t>(f.size() - tcp_at);
      uint32_t sum = (ip_->src >> 16) + (ip_->src & 0xffff) + (ip_->dst >> 16) +
                     (ip_->dst & 0xffff) + ip_->protocol + seg_len;
      Set16(f, tcp_at + 16, InternetChecksum(&f[tcp_at], seg_len, sum));
    } else {
      f.insert(f.end(), payload_.begin(), payload_.end());
    }
  } else {
    f.insert(f.end(), payload_.begin(), payload_.end());
  }
  if (truncate_ && *truncate_ < f.size()) f.resize(*truncate_);
  return f;
}

}  // namespace xdpfwd::test
