/* lwIP port definitions for xdpfwd on Linux/x86-64 and other little- or big-endian glibc
 * targets: byte order from the compiler, diagnostics to stderr, assertions abort. */
#ifndef XDPFWD_LWIP_ARCH_CC_H
#define XDPFWD_LWIP_ARCH_CC_H

#include <stdio.h>
#include <stdlib.h>

/* glibc's <endian.h> defines BYTE_ORDER, LITTLE_ENDIAN and BIG_ENDIAN the way lwIP expects. */
#include <endian.h>

#define LWIP_PLATFORM_BYTESWAP 1
#define LWIP_PLATFORM_HTONS(x) __builtin_bswap16(x)
#define LWIP_PLATFORM_HTONL(x) __builtin_bswap32(x)

/* <sys/time.h> defines struct timeval; lwIP must not define its own. */
#define LWIP_TIMEVAL_PRIVATE 0
#include <sys/time.h>

#define LWIP_PLATFORM_DIAG(x) \
  do {                        \
    printf x;                 \
  } while (0)
#define LWIP_PLATFORM_ASSERT(x)                                                   \
  do {                                                                            \
    fprintf(stderr, "lwIP assertion \"%s\" failed at %s:%d\n", x, __FILE__, __LINE__); \
    abort();                                                                      \
  } while (0)

#endif /* XDPFWD_LWIP_ARCH_CC_H */
