// rtnetlink message pieces shared by the one-shot lookups (neighbor.cpp) and the worker's
// non-blocking neighbour channel (neighbor_channel.cpp): a request builder and an attribute reader.
#pragma once

#include <linux/neighbour.h>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

namespace xdpfwd::rtnl {

using Bytes = std::span<const uint8_t>;

// Neighbour states whose link-layer address may be used to send.
constexpr uint16_t kUsableStates =
    NUD_REACHABLE | NUD_STALE | NUD_DELAY | NUD_PROBE | NUD_PERMANENT | NUD_NOARP;

// Copies a fixed-size struct out of reply bytes: memcpy, so no alignment or aliasing assumptions.
template <typename T>
std::optional<T> ReadStruct(Bytes data, size_t offset = 0) {
  if (offset > data.size() || data.size() - offset < sizeof(T)) return std::nullopt;
  T out;
  std::memcpy(&out, data.data() + offset, sizeof(T));
  return out;
}

// The attributes of one message; a malformed tail is ignored, as the kernel's own parser does.
class Attributes {
 public:
  // The attributes after `skip` bytes: the message's family header (rtmsg, ndmsg, ...).
  explicit Attributes(Bytes data, size_t skip = 0) {
    size_t offset = NLMSG_ALIGN(skip);
    while (const auto rta = ReadStruct<rtattr>(data, offset)) {  // advances >= 4 bytes a pass
      if (rta->rta_len < sizeof(rtattr) || rta->rta_len > data.size() - offset) break;
      entries_.emplace_back(rta->rta_type & NLA_TYPE_MASK,
                            data.subspan(offset + RTA_LENGTH(0), rta->rta_len - RTA_LENGTH(0)));
      offset += RTA_ALIGN(rta->rta_len);
    }
  }
  std::optional<Bytes> Get(uint16_t type) const {
    for (const auto& [t, value] : entries_) {
      if (t == type) return value;
    }
    return std::nullopt;
  }
  // A fixed-size attribute; nullopt if absent or of another size.
  template <typename T>
  std::optional<T> GetAs(uint16_t type) const {
    const auto value = Get(type);
    return value && value->size() == sizeof(T) ? ReadStruct<T>(*value) : std::nullopt;
  }
  std::optional<std::string> GetString(uint16_t type) const {
    const auto value = Get(type);
    if (!value) return std::nullopt;
    return std::string(value->begin(), std::find(value->begin(), value->end(), uint8_t{0}));
  }

 private:
  std::vector<std::pair<uint16_t, Bytes>> entries_;
};

// One request: an nlmsghdr (the sender fills it in: length, sequence), a family header and small
// attributes.
struct Request {
  template <typename Header>
  Request(uint16_t msg_type, uint16_t msg_flags, const Header& header)
      : type(msg_type), flags(static_cast<uint16_t>(NLM_F_REQUEST | msg_flags)) {
    Append(&header, sizeof(header));
  }
  void AddAttribute(uint16_t attr, const void* data, size_t size) {
    const rtattr rta{static_cast<uint16_t>(RTA_LENGTH(size)), attr};
    Append(&rta, sizeof(rta));
    Append(data, size);
  }
  void Append(const void* data, size_t size) {
    const auto* p = static_cast<const uint8_t*>(data);
    bytes.insert(bytes.end(), p, p + size);
    bytes.resize(NLMSG_ALIGN(bytes.size()));
  }

  uint16_t type, flags;
  std::vector<uint8_t> bytes = std::vector<uint8_t>(NLMSG_HDRLEN);
};

}  // namespace xdpfwd::rtnl
