// The loss injector through BPF_PROG_TEST_RUN: drops only IPv4 TCP, at the configured rate.
// Needs root (loading BPF), not a topology.
#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <gtest/gtest.h>
#include <linux/bpf.h>
#include <unistd.h>

#include <memory>
#include <vector>

#include "lossy.skel.h"
#include "lossy_shared.h"
#include "tests/support/lossy_counters.h"
#include "tests/support/packet_builder.h"

namespace xdpfwd::test {
namespace {

struct SkelDeleter {
  void operator()(lossy* s) const { lossy__destroy(s); }
};
using LossySkel = std::unique_ptr<lossy, SkelDeleter>;

LossySkel Load(uint32_t drop_per_million) {
  LossySkel skel(lossy__open());
  if (!skel) return nullptr;
  skel->rodata->drop_per_million = drop_per_million;
  if (lossy__load(skel.get()) != 0) return nullptr;
  return skel;
}

int RunOnce(const LossySkel& skel, std::vector<uint8_t> frame) {
  bpf_test_run_opts opts{};
  opts.sz = sizeof(opts);
  opts.data_in = frame.data();
  opts.data_size_in = static_cast<__u32>(frame.size());
  opts.repeat = 1;
  const int rc = bpf_prog_test_run_opts(bpf_program__fd(skel->progs.lossy), &opts);
  EXPECT_EQ(rc, 0) << "BPF_PROG_TEST_RUN failed";
  return static_cast<int>(opts.retval);
}

std::optional<uint64_t> Counter(const LossySkel& skel, lossy_counter which) {
  return LossyCounter(skel.get(), which);
}

const std::vector<uint8_t> kTcp =
    Packet().Eth().IPv4("198.18.0.2", "198.19.0.2").Tcp(40000, 9000, kAck).Payload("x").Build();
const std::vector<uint8_t> kArp = Packet().Eth(0x0806).Raw(std::vector<uint8_t>(28, 0)).Build();

class LossyTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (geteuid() != 0) GTEST_SKIP() << "loading BPF needs root";
  }
};

TEST_F(LossyTest, RateZeroPassesEverything) {
  auto skel = Load(0);
  ASSERT_TRUE(skel) << "loading lossy.bpf.o failed";
  for (int i = 0; i < 100; ++i) ASSERT_EQ(RunOnce(skel, kTcp), XDP_PASS);
  EXPECT_EQ(Counter(skel, LOSSY_PASSED_TCP), 100u);
  EXPECT_EQ(Counter(skel, LOSSY_DROPPED), 0u);
  EXPECT_EQ(Counter(skel, LOSSY_DROPPED_BYTES), 0u);
}

TEST_F(LossyTest, RateOneDropsAllTcpButNeverArp) {
  auto skel = Load(1'000'000);
  ASSERT_TRUE(skel);
  for (int i = 0; i < 50; ++i) ASSERT_EQ(RunOnce(skel, kTcp), XDP_DROP);
  for (int i = 0; i < 50; ++i) ASSERT_EQ(RunOnce(skel, kArp), XDP_PASS);
  EXPECT_EQ(Counter(skel, LOSSY_DROPPED), 50u);
  // Bytes of the TCP frames only: the benchmark's burst rows read segments per drop from it.
  EXPECT_EQ(Counter(skel, LOSSY_DROPPED_BYTES), 50u * kTcp.size());
  EXPECT_EQ(Counter(skel, LOSSY_PASSED_OTHER), 50u);
}

TEST_F(LossyTest, HalfRateDropsAboutHalf) {
  auto skel = Load(500'000);
  ASSERT_TRUE(skel);
  int dropped = 0;
  constexpr int kRuns = 4000;
  for (int i = 0; i < kRuns; ++i) dropped += RunOnce(skel, kTcp) == XDP_DROP;
  // Binomial(4000, 0.5): sigma ~32, so +-300 is ~9 sigma: fails only if the rate is wrong.
  EXPECT_NEAR(dropped, kRuns / 2, 300);
  EXPECT_EQ(Counter(skel, LOSSY_DROPPED), static_cast<uint64_t>(dropped));
}

}  // namespace
}  // namespace xdpfwd::test
