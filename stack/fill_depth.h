// How many frames the fill ring keeps posted for the kernel to receive into.
//
// The kernel takes fill-ring frames in the order they were posted, so a frame it writes was
// posted `depth` frames earlier: with the whole ring posted (4096 frames, 16 MiB) every frame
// it copies a packet into has left the caches (and its page the TLB) since the worker last
// touched it. Measured under bulk load in copy mode (docs/stack.md, "The fill ring's depth"): a
// fixed 256 posted frames instead of 4096 cut the kernel's copy into UMEM from 16% to 11% of
// its CPU, and a fixed depth dropped frames whenever one worker iteration took more than the
// ring held. So the depth adapts: deep after any sign of a burst, shallow while traffic flows
// steadily through a ring that never ran low (7-16% more bytes at iperf3 -P 1, MTU 1500; even
// at MTU 9000).
#pragma once

#include <algorithm>
#include <cstdint>

namespace xdpfwd {

class FillDepth {
 public:
  // Decisions are taken over this many iterations in which the kernel took frames.
  static constexpr uint32_t kPeriod = 1024;
  // Steady load takes at least this many frames an iteration on average: a bulk stream's
  // super-segments (17 frames each at MTU 1500), not requests and handshakes one by one.
  static constexpr uint32_t kSteadyPerIteration = 4;

  // `floor`..`ceiling` frames; starts at `ceiling` (no traffic seen: be ready for a burst).
  FillDepth(uint32_t floor, uint32_t ceiling)
      : floor_(std::min(floor, ceiling)), ceiling_(ceiling), target_(ceiling) {}

  // Once per top-up: `level` frames still posted (not yet taken by the kernel), `taken` frames
  // it took since the last call. Returns the depth to top the ring up to.
  // - The ring ran low (under half the depth left when the worker came back to it): it
  //   doubles at once. The kernel drops a packet when fewer frames are posted than the packet
  //   needs (a 64 KiB chain takes 17), so a ring seen half empty may have been near empty
  //   between two top-ups; the next burst finds twice the room.
  // - Over kPeriod iterations with traffic, if the kernel took at least the whole depth (the
  //   posted frames went round, so their warmth matters) and kSteadyPerIteration frames an
  //   iteration, without the ring running low: an eighth less, but never under twice the
  //   most one iteration of the period took (so that it does not run low next time).
  //   Otherwise traffic is light and warmth buys little: it doubles back towards the ceiling.
  uint32_t Update(uint32_t level, uint32_t taken) {
    if (taken == 0) return target_;
    if (level < target_ / 2) {
      Grow();
      return target_;
    }
    ++active_;
    taken_ += taken;
    peak_ = std::max(peak_, taken);
    if (active_ == kPeriod) {
      if (taken_ >= std::max<uint64_t>(target_, uint64_t{kPeriod} * kSteadyPerIteration)) {
        const uint32_t less =
            std::min(target_, std::max({floor_, target_ - target_ / 8, 2 * peak_}));
        if (less < target_) ++shrinks_;
        target_ = less;
      } else {
        Grow();
      }
      active_ = 0;
      taken_ = 0;
      peak_ = 0;
    }
    return target_;
  }

  uint32_t target() const { return target_; }
  uint64_t grows() const { return grows_; }
  uint64_t shrinks() const { return shrinks_; }

 private:
  void Grow() {
    if (target_ < ceiling_) ++grows_;
    target_ = std::min(ceiling_, target_ * 2);
    active_ = 0;
    taken_ = 0;
    peak_ = 0;
  }

  uint32_t floor_, ceiling_, target_;
  uint32_t active_ = 0;  // iterations with traffic in this period
  uint64_t taken_ = 0;   // frames the kernel took in them
  uint32_t peak_ = 0;    // the most it took in one of them
  uint64_t grows_ = 0, shrinks_ = 0;
};

}  // namespace xdpfwd
