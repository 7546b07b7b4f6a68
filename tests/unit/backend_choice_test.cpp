// A rule's backends as a worker or thread chooses among them with the shared board: drain and
// maint keep new connections off a backend whatever the checks and handshakes say, weights
// set on the board reach the picker without a new one, and the per-backend counters add up
// and stop at a rule's removal.
#include "forwarder/backend_choice.h"

#include <gtest/gtest.h>

#include <array>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace xdpfwd {
namespace {

constexpr uint32_t kRule = 5;

std::vector<PickerBackend> Three() {
  return {{"10.0.0.2:9001", 1, false}, {"10.0.0.3:9001", 1, false}, {"10.0.0.4:9001", 1, false}};
}

struct BoardFixture : ::testing::Test {
  BoardFixture() : board(std::make_unique<HealthBoard>()), entry(board->Claim(kRule)) {}
  // n picks of fresh connections, as a share per backend.
  std::map<size_t, int> Picks(BackendChoice& choice, int n) {
    std::map<size_t, int> count;
    const std::array<uint8_t, 4> client{10, 1, 0, 1};
    for (int i = 0; i < n; ++i) {
      const auto pick = choice.Pick(0, 0, client);
      EXPECT_TRUE(pick.has_value());
      if (pick) ++count[*pick];
    }
    return count;
  }
  std::unique_ptr<HealthBoard> board;
  HealthBoard::Entry* entry;
};

TEST_F(BoardFixture, ClaimStartsUpReadyWithWeightOneAndZeroCounters) {
  ASSERT_NE(entry, nullptr);
  EXPECT_EQ(board->Find(kRule), entry);
  EXPECT_EQ(board->Claim(kRule), entry);  // the same entry again
  EXPECT_EQ(entry->up.load(), ~uint64_t{0});
  EXPECT_EQ(entry->ready.load(), ~uint64_t{0});
  EXPECT_EQ(entry->weights[63].load(), 1u);
  EXPECT_NE(entry->weights_generation.load(), 0u);
  entry->counters[1].sessions = 9;
  board->Release(kRule);
  EXPECT_EQ(board->Find(kRule), nullptr);
  // Reused by another rule: zeroed.
  HealthBoard::Entry* again = board->Claim(kRule + 1);
  EXPECT_EQ(again, entry);
  EXPECT_EQ(again->counters[1].sessions.load(), 0u);
}

// A drained backend gets no new connection, even when every other backend is marked down by
// the checks (those marks are a guess; the operator's word is not).
TEST_F(BoardFixture, DrainAndMaintTakeNoNewConnections) {
  BackendChoice choice(kRule, BalanceMethod::kRoundRobin, Three(), board.get());
  entry->ready = 0b101;  // backend 1 drained
  EXPECT_EQ(choice.Ready(), 0b101u);
  auto picks = Picks(choice, 30);
  EXPECT_EQ(picks[1], 0);
  EXPECT_EQ(picks[0], 15);
  entry->up = 0b010;  // the checks say only the drained one is alive
  picks = Picks(choice, 30);
  EXPECT_EQ(picks[1], 0);
  // A retry never lands on it either: tried 0 and 2 leaves none.
  const std::array<uint8_t, 4> client{10, 1, 0, 1};
  EXPECT_FALSE(choice.Pick(0, 0b101, client).has_value());
  entry->ready = 0;
  EXPECT_EQ(choice.Ready(), 0u);  // the paths refuse the client
  // Should a drain land between Ready() and a first pick, the pick still finds one.
  EXPECT_TRUE(choice.Pick(0, 0, client).has_value());
}

// 1:1, then 3:1 on the board: the picker follows at its next pick.
TEST_F(BoardFixture, WeightsOnTheBoardReachThePicker) {
  std::vector<PickerBackend> two = {{"10.0.0.2:9001", 1, false}, {"10.0.0.3:9001", 1, false}};
  BackendChoice choice(kRule, BalanceMethod::kRoundRobin, two, board.get());
  auto picks = Picks(choice, 400);
  EXPECT_EQ(picks[0], 200);
  entry->weights[0] = 3;
  entry->weights_generation.fetch_add(1);
  picks = Picks(choice, 400);
  EXPECT_EQ(picks[0], 300);
  EXPECT_EQ(picks[1], 100);
}

TEST_F(BoardFixture, CountersAddUpAndStopWithTheRule) {
  BackendChoice choice(kRule, BalanceMethod::kRoundRobin, Three(), board.get());
  HealthAttempt first = choice.Began(2, 0), second = choice.Began(2, 0), third = choice.Began(0, 0);
  choice.Connected(2, first);
  choice.Connected(2, second);
  EXPECT_FALSE(choice.Failed(0, 0, third));
  choice.Ended(2, 100, 2000);
  const HealthBoard::BackendCounters& n = entry->counters[2];
  EXPECT_EQ(n.sessions.load(), 2u);
  EXPECT_EQ(n.current.load(), 1u);
  EXPECT_EQ(n.bytes_to_backend.load(), 100u);
  EXPECT_EQ(n.bytes_from_backend.load(), 2000u);
  EXPECT_EQ(entry->counters[0].connect_failures.load(), 1u);
  // The rule leaves the board and another takes the entry: a late end is not counted there.
  board->Release(kRule);
  ASSERT_EQ(board->Claim(kRule + 1), entry);
  choice.Ended(2, 5, 5);
  EXPECT_EQ(n.current.load(), 0u);
  EXPECT_EQ(n.bytes_to_backend.load(), 0u);
}

// Without a board (or a rule not on it): every backend ready, the file's weights.
TEST(BackendChoice, WithoutABoardEveryBackendIsReady) {
  BackendChoice choice(kRule, BalanceMethod::kRoundRobin, Three(), nullptr);
  EXPECT_EQ(choice.Ready(), 0b111u);
  const std::array<uint8_t, 4> client{10, 1, 0, 1};
  EXPECT_EQ(choice.Pick(0, 0b011, client), 2u);
  HealthAttempt a = choice.Began(0, 0);
  choice.Connected(0, a);  // nowhere to count: fine
  choice.Ended(0, 1, 1);
}

}  // namespace
}  // namespace xdpfwd
