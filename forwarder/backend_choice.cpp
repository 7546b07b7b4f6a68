// A rule's backends as one worker or thread chooses among them (see backend_choice.h).
#include "forwarder/backend_choice.h"

namespace xdpfwd {

BackendChoice::BackendChoice(uint32_t rule_id, BalanceMethod method,
                             std::vector<PickerBackend> backends, HealthBoard* board)
    : rule_id_(rule_id),
      picker_(method, std::move(backends)),
      health_(picker_.size()),
      entry_(board != nullptr ? board->Find(rule_id) : nullptr),
      all_(picker_.size() == 64 ? ~uint64_t{0} : (uint64_t{1} << picker_.size()) - 1) {}

void BackendChoice::FollowWeights() {
  if (entry_ == nullptr) return;
  // One load per pick, a word every reader shares and nobody writes but `set weight`.
  const uint32_t generation = entry_->weights_generation.load(std::memory_order_acquire);
  if (generation == weights_seen_) return;
  uint32_t weights[kMaxBackends];
  for (size_t i = 0; i < picker_.size(); ++i) {
    weights[i] = entry_->weights[i].load(std::memory_order_relaxed);
  }
  // Weights written after the load above come with a later generation: the next pick reads
  // them again.
  picker_.SetWeights({weights, picker_.size()});
  weights_seen_ = generation;
}

std::optional<size_t> BackendChoice::Pick(uint64_t now_ms, uint64_t tried,
                                          std::span<const uint8_t> client) {
  FollowWeights();
  const uint64_t ready = Ready();
  uint64_t up = health_.Up(now_ms) & ready;
  if (entry_ != nullptr) up &= entry_->up.load(std::memory_order_acquire);
  auto pick = picker_.Pick(up, tried, client);
  if (!pick) pick = picker_.Pick(ready, tried, client);
  if (!pick && tried == 0) pick = picker_.Pick(~uint64_t{0}, 0, client);
  return pick;
}

bool BackendChoice::Failed(size_t i, uint64_t now_ms, HealthAttempt& a) {
  if (HealthBoard::BackendCounters* n = Counters(i)) {
    n->connect_failures.fetch_add(1, std::memory_order_relaxed);
  }
  return health_.Failed(i, now_ms, a);
}

void BackendChoice::Connected(size_t i, HealthAttempt& a) {
  health_.Succeeded(i, a);
  if (HealthBoard::BackendCounters* n = Counters(i)) {
    n->sessions.fetch_add(1, std::memory_order_relaxed);
    n->current.fetch_add(1, std::memory_order_relaxed);
  }
}

void BackendChoice::Ended(size_t i, uint64_t to_backend, uint64_t from_backend) {
  if (HealthBoard::BackendCounters* n = Counters(i)) {
    n->current.fetch_sub(1, std::memory_order_relaxed);
    n->bytes_to_backend.fetch_add(to_backend, std::memory_order_relaxed);
    n->bytes_from_backend.fetch_add(from_backend, std::memory_order_relaxed);
  }
}

}  // namespace xdpfwd
