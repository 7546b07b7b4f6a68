# lwIP core as a static library from Debian's source package (fetched by scripts/setup):
# core + IPv4 + IPv6 (its ND and MLD off in lwipopts.h) + netif/ethernet.c, NO_SYS=1,
# configured by stack/lwip/lwipopts.h. lwIP's own Filelists.cmake is not used: it writes into
# the source tree and pulls in Doxygen.
set(_lwip "${XDPFWD_LWIP_DIR}")
if(NOT EXISTS "${_lwip}/src/core/tcp_in.c")
  message(FATAL_ERROR
    "lwIP source not found in ${_lwip}. Run scripts/setup (it fetches Debian's lwip source "
    "package), or point -DXDPFWD_LWIP_DIR at an lwIP 2.1 tree.")
endif()

# scripts/lwip-series-check reads this list (from "set(_lwip_core" to the first ")") to build
# every prefix of our patch series: keep it one plain list of paths under src/.
set(_lwip_core
  core/init.c core/def.c core/inet_chksum.c core/ip.c core/mem.c core/memp.c core/netif.c
  core/pbuf.c core/stats.c core/sys.c core/timeouts.c core/tcp.c core/tcp_in.c core/tcp_out.c
  core/ipv4/ip4.c core/ipv4/ip4_addr.c core/ipv4/ip4_frag.c core/ipv4/icmp.c
  core/ipv6/ip6.c core/ipv6/ip6_addr.c core/ipv6/nd6.c core/ipv6/icmp6.c core/ipv6/inet6.c
  netif/ethernet.c)
list(TRANSFORM _lwip_core PREPEND "${_lwip}/src/")

add_library(lwip STATIC ${_lwip_core})
target_include_directories(lwip SYSTEM PUBLIC
  "${PROJECT_SOURCE_DIR}/stack/lwip"   # lwipopts.h, arch/cc.h
  "${_lwip}/src/include")
# lwIP compiles at its own warning level: warnings in third-party code are not ours to fix.
target_compile_options(lwip PRIVATE -w)
set_target_properties(lwip PROPERTIES POSITION_INDEPENDENT_CODE ON)
