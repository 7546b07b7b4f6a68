// Which of the two TX paths a flow's next packets take (LwipNetif::FlushTx): a flow whose
// packets lately left through the packet socket keeps to it, or its next ones could overtake
// them; and a flow that sends nothing but ACKs moves to it.
//
// A veth peer with GRO fraglist and threaded NAPI takes the packet socket's skbs in its own NAPI
// thread, later, and AF_XDP's at once, in the sender's softirq (docs/stack.md, "Small batches").
// With a batch's path chosen by its contents alone, a flow that sent a bare ACK through the
// packet socket and then a segment through AF_XDP had the segment processed first, or both at
// once on two CPUs. Seen in the client-first connection-rate test: the handshake's ACK and the
// request raced in the backend's TCP, which has a moment in which neither its request socket nor
// the new socket is found, and it answered with a reset (a few connections per million failed);
// a late bare ACK reached a backend socket that had closed and drew a reset
// (docs/stack.md, "One path per flow").
#pragma once

#include <array>
#include <cstdint>

namespace xdpfwd {

class PacketPathFlows {
 public:
  // How long a flow stays on the packet socket after its last packet went that way: longer than
  // the peer's NAPI thread takes to come round (a flow's packets arrived up to 2 ms out of order
  // in the benchmark's rate test, that thread sharing its CPU with the load generators).
  static constexpr uint64_t kHoldNs = 5'000'000;
  // Bare ACKs in a row from which a flow's ACKs take the packet socket: a bulk receiver's,
  // whose ACKs the peer should process in its own thread, not the handshake's ACK or the odd ACK
  // of a request/response flow, whose next packet is data.
  static constexpr uint8_t kAckRun = 4;

  // `flow`: TxBatch's key of the 4-tuple (0: not a flow, ignored).
  // A packet of `flow` left: a bare ACK or not, through the packet socket or the AF_XDP port.
  void Sent(uint32_t flow, bool bare_ack, bool through_packet, uint64_t now_ns);
  // Whether the flow's packets must keep to the packet socket.
  bool Held(uint32_t flow, uint64_t now_ns) const;
  // Whether the flow's last kAckRun packets or more were bare ACKs.
  bool InAckRun(uint32_t flow) const;

 private:
  struct Slot {
    uint32_t flow = 0;
    uint8_t acks_in_row = 0;     // saturates at kAckRun
    uint64_t held_until_ns = 0;  // on the packet socket's path until then
    uint64_t last_ns = 0;
  };
  // Two slots per set. A new flow takes a slot whose flow is not held, the one used longest ago;
  // only if both are held does it replace one (the one held longest), which may then overtake:
  // that takes thousands of flows sending through the packet socket within kHoldNs.
  static constexpr uint32_t kSets = 4096;
  const Slot* Find(uint32_t flow) const;
  std::array<Slot, 2 * kSets> slots_{};
};

}  // namespace xdpfwd
