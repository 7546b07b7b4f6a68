// What lwIP calls into xdpfwd: the millisecond clock behind its timers (sys_now) and the
// microsecond one behind BBR's round trips (stack/lwip/cc/bbr.c), the congestion-control choice,
// routing by source address, and the initial-sequence-number hook (RFC 6528: clock plus a keyed
// hash of the 4-tuple).
#include <sys/random.h>
#include <time.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "os/clock.h"
#include "stack/siphash.h"

extern "C" {
#include "lwip/netif.h"
#include "lwip/sys.h"
#include "lwip/tcp.h"
#include "xdpfwd_lwip_hooks.h"
}

namespace {

const uint64_t* IsnKey() {
  static const auto* key = [] {
    static uint64_t k[2];
    if (getrandom(k, sizeof(k), 0) != static_cast<ssize_t>(sizeof(k))) {
      std::perror("xdpfwd: getrandom for the TCP ISN key");
      std::abort();
    }
    return k;
  }();
  return key;
}

}  // namespace

extern "C" u32_t xdpfwd_random_u32(void) {
  u32_t r = 0;
  if (getrandom(&r, sizeof(r), 0) != static_cast<ssize_t>(sizeof(r))) {
    std::perror("xdpfwd: getrandom for lwIP");
    std::abort();
  }
  return r;
}

namespace {
// Only the thread that owns lwIP reads or writes it (lwIP is single-threaded here).
u32_t g_now_ms = 0;
u32_t g_now_us = 0;
}  // namespace

extern "C" void xdpfwd_lwip_set_now_ms(u32_t now_ms) { g_now_ms = now_ms; }
extern "C" void xdpfwd_lwip_set_now_us(u32_t now_us) { g_now_us = now_us; }

extern "C" u32_t xdpfwd_lwip_now_us(void) {
  if (g_now_us != 0) return g_now_us;
  return static_cast<u32_t>(xdpfwd::MonotonicNs() / 1000u);
}

// Declared extern "C" in stack/lwip/cc/tcp_cc.h. Only the thread that owns lwIP reads it, at
// tcp_alloc (tests set it between connections).
u8_t xdpfwd_tcp_cc = TCP_CC_LOSS_BASED;

extern "C" void xdpfwd_lwip_set_bbr(int on) { xdpfwd_tcp_cc = on ? TCP_CC_BBR : TCP_CC_LOSS_BASED; }

extern "C" const struct tcp_cc_ops* xdpfwd_tcp_cc_default(void) {
  return xdpfwd_tcp_cc == TCP_CC_BBR ? &tcp_cc_bbr : &tcp_cc_cubic;
}

namespace {
xdpfwd_tcp_trace_fn g_tcp_trace = nullptr;
}  // namespace

extern "C" void xdpfwd_lwip_set_tcp_trace(xdpfwd_tcp_trace_fn fn) { g_tcp_trace = fn; }

extern "C" void xdpfwd_tcp_trace(struct tcp_pcb* pcb, u8_t what, u32_t arg0, u32_t arg1) {
  if (g_tcp_trace != nullptr) g_tcp_trace(pcb, what, arg0, arg1);
}

extern "C" u32_t sys_now(void) {
  if (g_now_ms != 0) return g_now_ms;
  return static_cast<u32_t>(xdpfwd::MonotonicNs() / 1'000'000u);
}

extern "C" u32_t xdpfwd_tcp_isn(const ip_addr_t* local_ip, u16_t local_port,
                                const ip_addr_t* remote_ip, u16_t remote_port) {
  const uint64_t ports = (uint64_t{local_port} << 16) | remote_port;
  // RFC 6528's M: a timer ticking every 4 microseconds.
  const uint64_t ticks = xdpfwd::MonotonicNs() / 4000u;
  if (IP_IS_V6(local_ip)) {
    // 36 bytes of tuple through a 16-byte hash: chained, each step keyed, so that every bit
    // of both addresses counts (RFC 6528's F over the whole 4-tuple).
    uint64_t l[2], r[2];
    std::memcpy(l, ip_2_ip6(local_ip)->addr, sizeof(l));
    std::memcpy(r, ip_2_ip6(remote_ip)->addr, sizeof(r));
    uint64_t h = xdpfwd::SipHash24(IsnKey(), l[0], l[1]);
    h = xdpfwd::SipHash24(IsnKey(), h ^ r[0], r[1]);
    return static_cast<u32_t>(ticks + xdpfwd::SipHash24(IsnKey(), h, ports));
  }
  const uint64_t addrs = (uint64_t{ip4_addr_get_u32(ip_2_ip4(local_ip))} << 32) |
                         ip4_addr_get_u32(ip_2_ip4(remote_ip));
  return static_cast<u32_t>(ticks + xdpfwd::SipHash24(IsnKey(), addrs, ports));
}

extern "C" struct netif* xdpfwd_route_by_source(const ip4_addr_t* src, const ip4_addr_t*) {
  if (src == nullptr || ip4_addr_isany(src)) return nullptr;
  struct netif* nif;
  NETIF_FOREACH(nif) {
    if (netif_is_up(nif) && ip4_addr_cmp(netif_ip4_addr(nif), src)) return nif;
  }
  return nullptr;
}

extern "C" struct netif* xdpfwd_route6_by_source(const ip6_addr_t* src, const ip6_addr_t*) {
  if (src == nullptr || ip6_addr_isany(src)) return nullptr;
  struct netif* nif;
  NETIF_FOREACH(nif) {
    if (netif_is_up(nif) && ip6_addr_isvalid(netif_ip6_addr_state(nif, 0)) &&
        ip6_addr_cmp(netif_ip6_addr(nif, 0), src)) {
      return nif;
    }
  }
  return nullptr;
}
