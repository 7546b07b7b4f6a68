/* Shared between xdp/lossy.bpf.c and C++: the loss injector's counter indexes. */
#ifndef XDPFWD_LOSSY_SHARED_H
#define XDPFWD_LOSSY_SHARED_H

enum lossy_counter {
  LOSSY_PASSED_TCP = 0,
  LOSSY_DROPPED = 1,
  LOSSY_PASSED_OTHER = 2,
  LOSSY_NR_COUNTERS = 3,
};

#endif
