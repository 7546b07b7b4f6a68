/* Shared between xdp/lossy.bpf.c and C++: the loss injector's counter indexes. */
#ifndef XDPFWD_LOSSY_SHARED_H
#define XDPFWD_LOSSY_SHARED_H

enum lossy_counter {
  LOSSY_PASSED_TCP = 0,
  LOSSY_DROPPED = 1,
  LOSSY_PASSED_OTHER = 2,
  // Bytes of the dropped frames: in generic mode a frame is a whole GSO packet (the benchmark's
  // burst-loss rows), so bytes over drops says how many segments one drop took.
  LOSSY_DROPPED_BYTES = 3,
  LOSSY_NR_COUNTERS = 4,
};

#endif
