// Per-queue ownership in the steering program (N workers, docs/stack.md "Next step"): which
// worker a queue belongs to, the owner a SYN is stamped with, redirect_handoff for a packet of
// a flow owned by another worker than its queue's, and the owner written in front of every
// redirected frame. Through BPF_PROG_TEST_RUN with xdp_md.rx_queue_index set, which the kernel
// accepts only for a real queue of a real device: the root-side end of a 4-queue test
// topology's veth (nothing is attached to it, so no traffic meets the program).
#include <arpa/inet.h>
#include <bpf/bpf.h>
#include <gtest/gtest.h>
#include <linux/bpf.h>
#include <net/if.h>
#include <unistd.h>

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "stack/xsk_port.h"
#include "tests/support/netns_topology.h"
#include "tests/support/packet_builder.h"
#include "tests/support/steer_run.h"
#include "xdp/steer.h"

namespace xdpfwd::test {
namespace {

constexpr uint32_t kQueues = 4;

struct Outcome {
  int action = -1;
  std::optional<steer_rx_meta> meta;  // what the program wrote in front of the frame
};

class SteerOwnershipTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (geteuid() != 0) GTEST_SKIP() << "loading BPF and making a topology need root";
    TopologyOptions options;
    options.queues = static_cast<int>(kQueues);
    topology_ = std::make_unique<Topology>(options);
    ifindex_ = if_nametoindex(topology_->client_side_if().c_str());
    ASSERT_NE(ifindex_, 0u);
    auto prog = SteerProgram::Load({});
    ASSERT_TRUE(prog) << prog.error().message();
    prog_ = std::move(*prog);
    ASSERT_TRUE(prog_->AddListener(Ip(kListen), kListenPort, 7));
    // Redirects resolve when the queue's slot holds a socket; which device it is bound to
    // matters only for live traffic, so one small socket on lo fills every slot.
    auto port = XskPort::Open(SmallPortOnLo());
    ASSERT_TRUE(port) << port.error().message();
    xsk_ = std::move(*port);
    for (uint32_t q = 0; q < kQueues; ++q) ASSERT_TRUE(prog_->BindQueue(q, xsk_->fd()));
  }

  // Runs one frame as if it arrived on `queue`; checks that exactly `reason` counted it.
  Outcome RunOn(uint32_t queue, const std::vector<uint8_t>& frame, SteerReason reason) {
    const SteerCounters before = prog_->ReadCounters();
    std::vector<uint8_t> in = frame;
    std::vector<uint8_t> out(frame.size() + 64);
    xdp_md ctx_in{};
    ctx_in.data_end = static_cast<__u32>(in.size());
    ctx_in.ingress_ifindex = ifindex_;
    ctx_in.rx_queue_index = queue;
    xdp_md ctx_out{};
    bpf_test_run_opts opts{};
    opts.sz = sizeof(opts);
    opts.data_in = in.data();
    opts.data_size_in = static_cast<__u32>(in.size());
    opts.data_out = out.data();
    opts.data_size_out = static_cast<__u32>(out.size());
    opts.ctx_in = &ctx_in;
    opts.ctx_size_in = sizeof(ctx_in);
    opts.ctx_out = &ctx_out;
    opts.ctx_size_out = sizeof(ctx_out);
    opts.repeat = 1;
    Outcome run;
    EXPECT_EQ(bpf_prog_test_run_opts(prog_->prog_fd(), &opts), 0) << strerror(errno);
    run.action = static_cast<int>(opts.retval);
    // data_out starts at the metadata; ctx_out.data is its length.
    if (ctx_out.data == sizeof(steer_rx_meta)) {
      steer_rx_meta meta{};
      std::memcpy(&meta, out.data(), sizeof(meta));
      run.meta = meta;
      EXPECT_EQ(0, std::memcmp(out.data() + sizeof(meta), frame.data(), frame.size()));
    } else {
      EXPECT_EQ(ctx_out.data, 0u) << "metadata of an unexpected size";
    }
    const SteerCounters after = prog_->ReadCounters();
    for (size_t r = 0; r < kSteerReasonCount; ++r) {
      const uint64_t moved = after[r].packets - before[r].packets;
      EXPECT_EQ(moved, r == static_cast<size_t>(reason) ? 1u : 0u)
          << ReasonName(static_cast<SteerReason>(r));
    }
    return run;
  }

  static void ExpectStamped(const Outcome& run, uint32_t owner) {
    EXPECT_EQ(run.action, XDP_REDIRECT);
    ASSERT_TRUE(run.meta.has_value()) << "no metadata in front of a redirected frame";
    EXPECT_EQ(run.meta->owner, owner);
    EXPECT_EQ(run.meta->magic, STEER_RX_META_MAGIC);
  }

  static std::vector<uint8_t> Syn(uint16_t sport) {
    return Packet().Eth().IPv4(kClient, kListen).Tcp(sport, kListenPort, kSyn).Build();
  }
  static std::vector<uint8_t> Data(uint16_t sport) {
    return Packet()
        .Eth()
        .IPv4(kClient, kListen)
        .Tcp(sport, kListenPort, kAck | kPsh)
        .Payload("GET / HTTP/1.0\r\n\r\n")
        .Build();
  }

  std::unique_ptr<Topology> topology_;
  uint32_t ifindex_ = 0;
  std::unique_ptr<SteerProgram> prog_;
  std::unique_ptr<XskPort> xsk_;
};

// Today's single worker: the map is all zeros, so every flow is worker 0's on every queue and
// nothing is ever a handoff; frames carry owner 0.
TEST_F(SteerOwnershipTest, WithoutAssignmentsEveryQueueIsTheSoleWorkers) {
  for (uint32_t q = 0; q < kQueues; ++q) {
    const auto sport = static_cast<uint16_t>(42000 + q);
    ExpectStamped(RunOn(q, Syn(sport), SteerReason::kRedirectNewFlow), STEER_SOLE_WORKER);
    const auto flow = prog_->LookupFlow({Ip(kClient), Ip(kListen), sport, kListenPort});
    ASSERT_TRUE(flow.has_value());
    EXPECT_EQ(flow->owner, static_cast<uint32_t>(STEER_SOLE_WORKER));
    // The flow's later packets on any queue stay with the sole worker.
    for (uint32_t other = 0; other < kQueues; ++other) {
      ExpectStamped(RunOn(other, Data(sport), SteerReason::kRedirectFlow), STEER_SOLE_WORKER);
    }
  }
}

TEST_F(SteerOwnershipTest, ASynIsStampedWithItsQueuesWorker) {
  ASSERT_TRUE(prog_->SetQueueWorker(1, 1));
  ASSERT_TRUE(prog_->SetQueueWorker(3, 1));
  ExpectStamped(RunOn(3, Syn(43000), SteerReason::kRedirectNewFlow), 1);
  ExpectStamped(RunOn(2, Syn(43001), SteerReason::kRedirectNewFlow), 0);
  EXPECT_EQ(prog_->LookupFlow({Ip(kClient), Ip(kListen), 43000, kListenPort})->owner, 1u);
  EXPECT_EQ(prog_->LookupFlow({Ip(kClient), Ip(kListen), 43001, kListenPort})->owner, 0u);
}

TEST_F(SteerOwnershipTest, AKnownFlowOnAnotherWorkersQueueIsRedirectedThereAndHandedOff) {
  for (uint32_t q = 0; q < kQueues; ++q) ASSERT_TRUE(prog_->SetQueueWorker(q, q % 2));
  ExpectStamped(RunOn(1, Syn(44000), SteerReason::kRedirectNewFlow), 1);
  ExpectStamped(RunOn(3, Data(44000), SteerReason::kRedirectFlow), 1);  // worker 1's too
  // Queue 0 and 2 are worker 0's: the frame still goes to that queue's socket (the only one
  // that can receive it), marked with its owner for worker 0 to hand over.
  ExpectStamped(RunOn(0, Data(44000), SteerReason::kRedirectHandoff), 1);
  ExpectStamped(RunOn(2, Data(44000), SteerReason::kRedirectHandoff), 1);
  // A retransmitted SYN of the flow is a packet of a known flow like any other.
  ExpectStamped(RunOn(2, Syn(44000), SteerReason::kRedirectHandoff), 1);
}

// The backend leg's entry is the worker's (the flow ledger writes its owner); the backend's
// packets land wherever the backend-side device puts them.
TEST_F(SteerOwnershipTest, BackendReturnTrafficOnAnotherWorkersQueueIsHandedOff) {
  ASSERT_TRUE(prog_->SetQueueWorker(2, 2));
  const FlowTuple leg{Ip(kBackend), Ip(kLocal), 9001, 61000};
  ASSERT_TRUE(prog_->AddFlow(leg, 2, 7));
  const auto syn_ack = Packet().Eth().IPv4(kBackend, kLocal).Tcp(9001, 61000, kSyn | kAck).Build();
  ExpectStamped(RunOn(2, syn_ack, SteerReason::kRedirectFlow), 2);
  ExpectStamped(RunOn(0, syn_ack, SteerReason::kRedirectHandoff), 2);
}

// A queue whose worker died has no socket until the worker is restarted. A known flow's packet
// there is dropped (the peer resends it), never passed: the kernel has no socket for it and
// would reset a connection another worker serves. A new SYN still passes to the kernel (auto
// mode's kernel path may take it).
TEST_F(SteerOwnershipTest, AKnownFlowWithoutASocketOnTheQueueIsDroppedNotPassed) {
  ASSERT_TRUE(prog_->SetQueueWorker(1, 1));
  ExpectStamped(RunOn(1, Syn(45000), SteerReason::kRedirectNewFlow), 1);
  ASSERT_TRUE(prog_->UnbindQueue(0));
  const Outcome run = RunOn(0, Data(45000), SteerReason::kDropNoSocket);
  EXPECT_EQ(run.action, XDP_DROP);
  EXPECT_FALSE(run.meta.has_value());
  const Outcome syn = RunOn(0, Syn(45001), SteerReason::kPassNoSocket);
  EXPECT_EQ(syn.action, XDP_PASS);
}

TEST_F(SteerOwnershipTest, QueuesBeyondTheMapAreRefused) {
  EXPECT_FALSE(prog_->SetQueueWorker(STEER_MAX_QUEUES, 1));
  EXPECT_TRUE(prog_->SetQueueWorker(STEER_MAX_QUEUES - 1, 1));
}

}  // namespace
}  // namespace xdpfwd::test
