// Backend selection: weighted round robin's shares and order, which backends are usable (down,
// tried, backups), least connections by weight, Maglev's agreement between processes and its
// small churn when a backend leaves, and a retry after a failure for every method.
#include "forwarder/balance.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "os/clock.h"

namespace xdpfwd {
namespace {

constexpr uint64_t kAllUp = ~uint64_t{0};
constexpr BalanceMethod kMethods[] = {BalanceMethod::kRoundRobin, BalanceMethod::kLeastConnections,
                                      BalanceMethod::kSourceHash};

uint64_t Bit(size_t i) { return uint64_t{1} << i; }

// Backends 10.0.0.2:9001, 10.0.0.3:9001, ... with these weights; `backups` marks backups.
std::vector<PickerBackend> Backends(const std::vector<uint32_t>& weights, uint64_t backups = 0) {
  std::vector<PickerBackend> out;
  for (size_t i = 0; i < weights.size(); ++i) {
    out.push_back(
        {"10.0.0." + std::to_string(i + 2) + ":9001", weights[i], (backups & Bit(i)) != 0});
  }
  return out;
}

std::array<uint8_t, 4> Ipv4(uint32_t a) {
  return {static_cast<uint8_t>(a >> 24), static_cast<uint8_t>(a >> 16),
          static_cast<uint8_t>(a >> 8), static_cast<uint8_t>(a)};
}

// Random clients, fixed seed: IPv4, or IPv6 for every other one when `mixed`.
std::vector<std::vector<uint8_t>> RandomClients(size_t n, bool mixed) {
  std::mt19937_64 random(30);
  std::vector<std::vector<uint8_t>> clients(n);
  for (size_t c = 0; c < n; ++c) {
    clients[c].resize(mixed && c % 2 == 1 ? 16 : 4);
    for (uint8_t& byte : clients[c]) byte = static_cast<uint8_t>(random());
  }
  return clients;
}

size_t PickOrDie(BackendPicker& picker, uint64_t up, uint64_t tried,
                 std::span<const uint8_t> client) {
  const std::optional<size_t> pick = picker.Pick(up, tried, client);
  EXPECT_TRUE(pick.has_value());
  return pick.value_or(0);
}

TEST(BalanceMethodName, NamesTheConfigurationsWords) {
  EXPECT_EQ(BalanceMethodName(BalanceMethod::kRoundRobin), "roundrobin");
  EXPECT_EQ(BalanceMethodName(BalanceMethod::kLeastConnections), "leastconn");
  EXPECT_EQ(BalanceMethodName(BalanceMethod::kSourceHash), "source");
}

TEST(RoundRobin, SharesFollowTheWeights) {
  const std::vector<uint32_t> weights = {5, 3, 1, 1};
  BackendPicker picker(BalanceMethod::kRoundRobin, Backends(weights));
  constexpr int kPicks = 10'000;
  std::vector<int> count(weights.size());
  for (int n = 0; n < kPicks; ++n) ++count[PickOrDie(picker, kAllUp, 0, {})];
  for (size_t i = 0; i < weights.size(); ++i) {
    const double expected = kPicks * weights[i] / 10.0;
    EXPECT_NEAR(count[i], expected, 0.05 * expected) << "backend " << i;
  }
}

TEST(RoundRobin, EqualWeightsCycleInOrder) {
  BackendPicker picker(BalanceMethod::kRoundRobin, Backends({1, 1, 1}));
  for (size_t n = 0; n < 30; ++n) EXPECT_EQ(PickOrDie(picker, kAllUp, 0, {}), n % 3) << n;
}

// nginx's own example of smoothness: weights 5,1,1 give a,a,b,a,c,a,a, not five a's in a row.
TEST(RoundRobin, SpreadsAHeavyBackendsTurns) {
  BackendPicker picker(BalanceMethod::kRoundRobin, Backends({5, 1, 1}));
  const size_t expected[] = {0, 0, 1, 0, 2, 0, 0};
  for (int cycle = 0; cycle < 3; ++cycle) {
    for (size_t want : expected) EXPECT_EQ(PickOrDie(picker, kAllUp, 0, {}), want);
  }
}

TEST(RoundRobin, WeightZeroCountsAsOne) {
  BackendPicker picker(BalanceMethod::kRoundRobin, Backends({0, 1}));
  for (size_t n = 0; n < 10; ++n) EXPECT_EQ(PickOrDie(picker, kAllUp, 0, {}), n % 2);
}

// Backends 0 and 1 primaries, 2 and 3 backups: every health and tried combination, every method.
TEST(Usable, NeverDownNorTriedBackupsOnlyWithoutAPrimary) {
  constexpr uint64_t kPrimaries = 0b0011;
  const std::vector<std::vector<uint8_t>> clients = RandomClients(16, true);
  for (BalanceMethod method : kMethods) {
    BackendPicker picker(method, Backends({1, 2, 1, 3}, 0b1100));
    for (uint64_t up = 0; up < 16; ++up) {
      for (uint64_t tried = 0; tried < 16; ++tried) {
        const uint64_t allowed = up & ~tried;
        const uint64_t usable = (allowed & kPrimaries) != 0 ? allowed & kPrimaries : allowed;
        for (const std::vector<uint8_t>& client : clients) {
          const std::optional<size_t> pick = picker.Pick(up | ~uint64_t{0b1111}, tried, client);
          if (usable == 0) {
            EXPECT_FALSE(pick.has_value()) << BalanceMethodName(method) << " up " << up;
          } else {
            ASSERT_TRUE(pick.has_value()) << BalanceMethodName(method) << " up " << up;
            EXPECT_NE(usable & Bit(*pick), 0u) << BalanceMethodName(method) << " up " << up
                                               << " tried " << tried << " picked " << *pick;
          }
        }
      }
    }
  }
}

TEST(LeastConnections, PicksTheLeastLoaded) {
  BackendPicker picker(BalanceMethod::kLeastConnections, Backends({1, 1, 1}));
  picker.Opened(0);
  picker.Opened(0);
  picker.Opened(1);
  EXPECT_EQ(PickOrDie(picker, kAllUp, 0, {}), 2u);  // loads 2,1,0
  picker.Opened(2);
  picker.Opened(2);
  EXPECT_EQ(PickOrDie(picker, kAllUp, 0, {}), 1u);  // 2,1,2
  picker.Opened(1);
  picker.Closed(0);
  EXPECT_EQ(PickOrDie(picker, kAllUp, 0, {}), 0u);  // 1,2,2
}

// Weights 3 and 1: backend 0 takes three connections for each of backend 1's; loads of 3 and 1
// are equal by weight, so the next picks alternate.
TEST(LeastConnections, LoadIsRelativeToWeight) {
  BackendPicker picker(BalanceMethod::kLeastConnections, Backends({3, 1}));
  std::vector<int> count(2);
  for (int n = 0; n < 400; ++n) {
    const size_t pick = PickOrDie(picker, kAllUp, 0, {});
    ++count[pick];
    picker.Opened(pick);
  }
  EXPECT_EQ(count[0], 300);
  EXPECT_EQ(count[1], 100);
}

TEST(LeastConnections, EqualLoadsAlternate) {
  BackendPicker picker(BalanceMethod::kLeastConnections, Backends({1, 1, 1}));
  // Short connections: each ends before the next begins, so every pick sees equal loads.
  for (size_t n = 0; n < 12; ++n) {
    const size_t pick = PickOrDie(picker, kAllUp, 0, {});
    EXPECT_EQ(pick, n % 3) << n;
    picker.Opened(pick);
    picker.Closed(pick);
  }
  // Backend 1 down: the other two still alternate.
  for (size_t n = 0; n < 6; ++n) {
    EXPECT_EQ(PickOrDie(picker, kAllUp & ~Bit(1), 0, {}), n % 2 == 0 ? 0u : 2u) << n;
  }
}

TEST(SourceHash, AClientKeepsItsBackend) {
  BackendPicker picker(BalanceMethod::kSourceHash, Backends({1, 1, 1, 1, 1}));
  const std::vector<std::vector<uint8_t>> clients = RandomClients(1000, true);
  std::vector<size_t> first;
  for (const std::vector<uint8_t>& c : clients) first.push_back(PickOrDie(picker, kAllUp, 0, c));
  for (int round = 0; round < 3; ++round) {
    for (size_t c = 0; c < clients.size(); ++c) {
      EXPECT_EQ(PickOrDie(picker, kAllUp, 0, clients[c]), first[c]) << c;
    }
  }
}

// Two processes with the same backends: the same choice for every client, whether or not their
// configurations list the backends in the same order.
TEST(SourceHash, TwoPickersAgree) {
  const std::vector<PickerBackend> backends = Backends({1, 2, 1, 1, 3, 1, 1});
  std::vector<PickerBackend> reversed(backends.rbegin(), backends.rend());
  BackendPicker one(BalanceMethod::kSourceHash, backends);
  BackendPicker other(BalanceMethod::kSourceHash, backends);
  BackendPicker listed_backwards(BalanceMethod::kSourceHash, reversed);
  for (const std::vector<uint8_t>& c : RandomClients(10'000, true)) {
    const size_t pick = PickOrDie(one, kAllUp, 0, c);
    EXPECT_EQ(PickOrDie(other, kAllUp, 0, c), pick);
    EXPECT_EQ(reversed[PickOrDie(listed_backwards, kAllUp, 0, c)].key, backends[pick].key);
  }
}

TEST(SourceHash, Ipv4AndItsMappedFormAgree) {
  BackendPicker picker(BalanceMethod::kSourceHash, Backends({1, 1, 1, 1, 1}));
  for (uint32_t a = 0x0a000001; a < 0x0a000001 + 1000; ++a) {
    const std::array<uint8_t, 4> v4 = Ipv4(a);
    std::array<uint8_t, 16> mapped = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
    std::copy(v4.begin(), v4.end(), mapped.begin() + 12);
    EXPECT_EQ(PickOrDie(picker, kAllUp, 0, v4), PickOrDie(picker, kAllUp, 0, mapped)) << a;
  }
}

std::vector<int> Shares(const std::vector<size_t>& picks, size_t backends) {
  std::vector<int> count(backends);
  for (size_t p : picks) ++count[p];
  return count;
}

// Maglev's promise: an even split, and a backend that leaves takes only (about) its own clients
// with it; when it comes back they return.
TEST(SourceHash, EvenSplitAndLittleChurn) {
  constexpr size_t kBackends = 5;
  constexpr size_t kClients = 100'000;
  BackendPicker picker(BalanceMethod::kSourceHash, Backends(std::vector<uint32_t>(kBackends, 1)));
  const std::vector<std::vector<uint8_t>> clients = RandomClients(kClients, false);
  auto pick_all = [&](uint64_t up) {
    std::vector<size_t> picks;
    for (const std::vector<uint8_t>& c : clients) picks.push_back(PickOrDie(picker, up, 0, c));
    return picks;
  };
  const std::vector<size_t> before = pick_all(kAllUp);
  for (int count : Shares(before, kBackends)) {
    EXPECT_NEAR(count, kClients / kBackends, 0.05 * kClients / kBackends);
  }

  constexpr size_t kLeaving = 2;
  const std::vector<size_t> without = pick_all(kAllUp & ~Bit(kLeaving));
  size_t moved = 0;
  size_t moved_from_others = 0;
  for (size_t c = 0; c < kClients; ++c) {
    EXPECT_NE(without[c], kLeaving);
    if (without[c] != before[c]) ++moved;
    if (without[c] != before[c] && before[c] != kLeaving) ++moved_from_others;
  }
  EXPECT_LE(moved, kClients * (1.0 / kBackends + 0.05));
  printf("backend %zu down: %zu of %zu clients moved, %zu of them from the other backends\n",
         kLeaving, moved, kClients, moved_from_others);
  const std::vector<int> remaining = Shares(without, kBackends);
  for (size_t i = 0; i < kBackends; ++i) {
    if (i == kLeaving) continue;
    EXPECT_NEAR(remaining[i], kClients / (kBackends - 1), 0.05 * kClients / (kBackends - 1));
  }

  EXPECT_EQ(pick_all(kAllUp), before);
}

TEST(SourceHash, SharesFollowTheWeights) {
  BackendPicker picker(BalanceMethod::kSourceHash, Backends({3, 1, 2}));
  constexpr size_t kClients = 60'000;
  std::vector<size_t> picks;
  for (const std::vector<uint8_t>& c : RandomClients(kClients, true)) {
    picks.push_back(PickOrDie(picker, kAllUp, 0, c));
  }
  const std::vector<int> count = Shares(picks, 3);
  EXPECT_NEAR(count[0], 30'000, 0.05 * 30'000);
  EXPECT_NEAR(count[1], 10'000, 0.05 * 10'000);
  EXPECT_NEAR(count[2], 20'000, 0.05 * 20'000);
}

// New weights (`set weight`) on a picker in use: the source hash's table is built again for
// them, round robin's shares follow from the next pick, least connections keeps its counts.
TEST(SetWeights, TakeEffectAtTheNextPick) {
  BackendPicker hash(BalanceMethod::kSourceHash, Backends({1, 1}));
  const auto clients = RandomClients(20'000, false);
  std::vector<size_t> picks;
  for (const auto& c : clients) picks.push_back(PickOrDie(hash, kAllUp, 0, c));
  EXPECT_NEAR(Shares(picks, 2)[0], 10'000, 500);
  const uint32_t three_to_one[] = {3, 1};
  hash.SetWeights(three_to_one);
  picks.clear();
  for (const auto& c : clients) picks.push_back(PickOrDie(hash, kAllUp, 0, c));
  EXPECT_NEAR(Shares(picks, 2)[0], 15'000, 750);

  BackendPicker rr(BalanceMethod::kRoundRobin, Backends({1, 1}));
  for (int i = 0; i < 3; ++i) PickOrDie(rr, kAllUp, 0, {});
  rr.SetWeights(three_to_one);
  picks.clear();
  for (int i = 0; i < 400; ++i) picks.push_back(PickOrDie(rr, kAllUp, 0, {}));
  EXPECT_EQ(Shares(picks, 2)[0], 300);

  BackendPicker least(BalanceMethod::kLeastConnections, Backends({1, 1}));
  least.Opened(0);
  least.Opened(0);
  least.SetWeights(three_to_one);  // its two stay counted: 0 open on 1 is still lighter
  EXPECT_EQ(PickOrDie(least, kAllUp, 0, {}), 1u);
}

// A connection that failed on its backend retries with that backend in `tried`: another usable
// one, for every method, and nothing once every backend has failed.
TEST(Retry, PicksAnotherBackend) {
  constexpr size_t kBackends = 4;
  for (BalanceMethod method : kMethods) {
    BackendPicker picker(method, Backends({2, 1, 1, 1}));
    for (const std::vector<uint8_t>& c : RandomClients(200, true)) {
      uint64_t tried = 0;
      for (size_t attempt = 0; attempt < kBackends; ++attempt) {
        const size_t pick = PickOrDie(picker, kAllUp, tried, c);
        EXPECT_EQ(tried & Bit(pick), 0u) << BalanceMethodName(method) << " attempt " << attempt;
        tried |= Bit(pick);
      }
      EXPECT_FALSE(picker.Pick(kAllUp, tried, c).has_value()) << BalanceMethodName(method);
    }
  }
}

// The source hash's retry is the next usable backend after the client's own, in index order:
// no table rebuilt for it, and the same in every process.
TEST(Retry, SourceHashTakesTheNextBackendInOrder) {
  BackendPicker picker(BalanceMethod::kSourceHash, Backends({1, 1, 1, 1, 1}));
  const uint64_t up = kAllUp & ~Bit(3);
  for (const std::vector<uint8_t>& c : RandomClients(1000, true)) {
    const size_t first = PickOrDie(picker, up, 0, c);
    size_t expected = (first + 1) % 5;
    if (expected == 3) expected = 4;
    EXPECT_EQ(PickOrDie(picker, up, Bit(first), c), expected);
  }
}

// Pick's cost on the data path, for each method, with all backends up and no retry. Disabled: a
// timing, not a check. Run: forwarder_unit_tests --gtest_also_run_disabled_tests
//                             --gtest_filter='BackendPicker.*PickCost*'
TEST(BackendPicker, DISABLED_PickCost) {
  constexpr uint32_t kPicks = 5'000'000;
  for (size_t backends : {2, 8, 64}) {
    for (BalanceMethod method : kMethods) {
      BackendPicker picker(method, Backends(std::vector<uint32_t>(backends, 1)));
      picker.Pick(kAllUp, 0, Ipv4(0));  // the source hash builds its table here
      uint64_t sum = 0;
      const uint64_t start = MonotonicNs();
      for (uint32_t n = 0; n < kPicks; ++n) {
        sum += picker.Pick(kAllUp, 0, Ipv4(n)).value_or(0);
      }
      const uint64_t ns = MonotonicNs() - start;
      printf("%-10s %2zu backends: %.2f ns per pick\n",
             std::string(BalanceMethodName(method)).c_str(), backends,
             static_cast<double>(ns) / kPicks);
      EXPECT_GT(sum, 0u);
    }
  }
  // A health change: the source hash's next pick rebuilds its table.
  BackendPicker picker(BalanceMethod::kSourceHash, Backends(std::vector<uint32_t>(64, 1)));
  constexpr int kRebuilds = 200;
  const uint64_t start = MonotonicNs();
  for (int n = 0; n < kRebuilds; ++n) picker.Pick(kAllUp & ~Bit(n % 2), 0, Ipv4(1));
  printf("source table rebuild, 64 backends: %.1f us\n",
         static_cast<double>(MonotonicNs() - start) / kRebuilds / 1000);
}

}  // namespace
}  // namespace xdpfwd
