/* Shared between xdp/tcp_events.bpf.c and C++ (xdp/tcp_events.h): what the kernel
 * path tells the TCP event programs about each of its sockets, and the events they
 * send back. The C++ side static_asserts both sizes. */
#ifndef XDPFWD_TCP_EVENTS_SHARED_H
#define XDPFWD_TCP_EVENTS_SHARED_H

#ifdef __cplusplus
#include <cstdint>
typedef uint8_t tcp_events_u8;
typedef uint16_t tcp_events_u16;
typedef uint32_t tcp_events_u32;
typedef uint64_t tcp_events_u64;
#else
typedef __u8 tcp_events_u8;
typedef __u16 tcp_events_u16;
typedef __u32 tcp_events_u32;
typedef __u64 tcp_events_u64;
#endif

/* Kernel-path threads with a ring of their own; a socket of a thread beyond is
 * not watched. */
#define TCP_EVENTS_MAX_THREADS 64

/* Each ring's size: 256 KiB is 6,500 events; a full ring drops and counts. */
#define TCP_EVENTS_RING_BYTES (256 * 1024)

enum tcp_event_kind {
  TCP_EVENT_RETRANSMIT = 1,      /* args: segments, bytes */
  TCP_EVENT_RTO = 2,             /* args: rto_ms, backoff */
  TCP_EVENT_RECOVERY = 3,        /* args: cwnd, ssthresh */
  TCP_EVENT_ZERO_WINDOW_IN = 4,  /* no args */
  TCP_EVENT_NAGLE_PEER = 5,      /* args: stall_us */
  TCP_EVENT_ZERO_WINDOW_OUT = 6, /* no args */
};

/* Per socket (BPF_MAP_TYPE_SK_STORAGE): the kernel path writes the first four
 * fields when a connection has lived 10 ms (its socket fd as the key); the
 * programs keep the rest. The storage goes with the socket. */
struct tcp_socket_tag {
  tcp_events_u64 connection; /* the kernel path's id */
  tcp_events_u32 rule;
  tcp_events_u8 leg;    /* RecorderLeg: 1 client, 2 backend */
  tcp_events_u8 thread; /* whose ring */
  /* The Nagle rule (xdp/tcp_events.bpf.c), the programs' own. */
  tcp_events_u8 nagle_run;
  tcp_events_u8 last_data_small;
  tcp_events_u64 last_data_ns;
  tcp_events_u8 nagle_found;
  tcp_events_u8 window_closed; /* the window we announced is 0 */
  tcp_events_u8 peer_window_closed;
  tcp_events_u8 reserved[5];
};

/* One event in a thread's ring. */
struct tcp_event {
  tcp_events_u64 monotonic_ns; /* bpf_ktime_get_ns: CLOCK_MONOTONIC */
  tcp_events_u64 connection;
  tcp_events_u32 rule;
  tcp_events_u16 kind; /* enum tcp_event_kind */
  tcp_events_u8 leg;
  tcp_events_u8 reserved;
  tcp_events_u32 args[2];
};

#endif
