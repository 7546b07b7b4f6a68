// The relay's deadline lists: an element on two lists at once, O(1) moves, removal from
// anywhere, and removal of what is on no list.
#include "forwarder/intrusive_list.h"

#include <gtest/gtest.h>

#include <vector>

namespace xdpfwd {
namespace {

struct ByAge;
struct Waiting;
struct Item : ListHook<Item, ByAge>, ListHook<Item, Waiting> {
  int id = 0;
};

template <typename Tag>
std::vector<int> Ids(const IntrusiveList<Item, Tag>& list) {
  std::vector<int> out;
  for (const Item* i = list.front(); i != nullptr;
       i = static_cast<const ListHook<Item, Tag>*>(i)->next) {
    out.push_back(i->id);
  }
  return out;
}

// Two words a hook: the relay's connection has six (issue #32's memory per idle connection;
// three words each with a separate `linked` flag).
static_assert(sizeof(ListHook<Item, ByAge>) == 2 * sizeof(void*));

// Linked or not is the hook's own business: at the front (no previous element), at the back,
// alone, and after removal.
TEST(IntrusiveList, ContainsFollowsEveryPosition) {
  std::vector<Item> items(3);
  IntrusiveList<Item, ByAge> by_age;
  EXPECT_FALSE(by_age.Contains(items[0]));
  by_age.PushBack(items[0]);
  EXPECT_TRUE(by_age.Contains(items[0]));  // alone: no previous, no next
  by_age.PushBack(items[1]);
  by_age.InsertOrdered(items[2], [&](const Item& a, const Item& b) {
    return &a == &items[2] && &b != &items[2];  // goes to the front
  });
  EXPECT_EQ(by_age.front(), &items[2]);
  for (const Item& i : items) EXPECT_TRUE(by_age.Contains(i));
  by_age.Remove(items[2]);
  EXPECT_FALSE(by_age.Contains(items[2]));
  EXPECT_EQ(by_age.front(), &items[0]);
  by_age.Remove(items[2]);  // again: nothing
  EXPECT_EQ(by_age.size(), 2u);
  by_age.Remove(items[0]);
  by_age.Remove(items[1]);
  EXPECT_TRUE(by_age.empty());
  for (const Item& i : items) EXPECT_FALSE(by_age.Contains(i));
}

TEST(IntrusiveList, KeepsOrderThroughMovesAndRemovals) {
  std::vector<Item> items(4);
  for (int k = 0; k < 4; ++k) items[k].id = k;
  IntrusiveList<Item, ByAge> by_age;
  EXPECT_TRUE(by_age.empty());
  for (Item& i : items) by_age.PushBack(i);
  EXPECT_EQ(Ids(by_age), (std::vector<int>{0, 1, 2, 3}));
  by_age.MoveToBack(items[0]);
  by_age.MoveToBack(items[2]);
  by_age.MoveToBack(items[2]);  // already at the back
  EXPECT_EQ(Ids(by_age), (std::vector<int>{1, 3, 0, 2}));
  by_age.Remove(items[3]);  // from the middle
  by_age.Remove(items[1]);  // the front
  by_age.Remove(items[2]);  // the back
  EXPECT_EQ(Ids(by_age), (std::vector<int>{0}));
  EXPECT_EQ(by_age.size(), 1u);
  by_age.Remove(items[2]);  // on no list: nothing happens
  EXPECT_EQ(by_age.size(), 1u);
  by_age.Remove(items[0]);
  EXPECT_TRUE(by_age.empty());
  EXPECT_EQ(by_age.front(), nullptr);
  by_age.PushBack(items[3]);
  EXPECT_EQ(Ids(by_age), (std::vector<int>{3}));
  by_age.Remove(items[3]);
}

// Deadlines of two timeouts: each element goes behind the last one due no later than it, so the
// front is always the earliest deadline; the backward walk from the tail also reaches the front.
TEST(IntrusiveList, InsertOrderedKeepsDeadlineOrder) {
  std::vector<Item> items(6);
  const int due[] = {30, 50, 10, 50, 60, 5};
  for (int k = 0; k < 6; ++k) items[k].id = due[k];
  IntrusiveList<Item, ByAge> by_due;
  auto before = [](const Item& a, const Item& b) { return a.id < b.id; };
  for (Item& i : items) by_due.InsertOrdered(i, before);
  EXPECT_EQ(Ids(by_due), (std::vector<int>{5, 10, 30, 50, 50, 60}));
  EXPECT_EQ(by_due.size(), 6u);
  by_due.Remove(items[4]);  // the back, which InsertOrdered set
  by_due.Remove(items[5]);  // the front, which InsertOrdered set
  EXPECT_EQ(Ids(by_due), (std::vector<int>{10, 30, 50, 50}));
  by_due.PushBack(items[4]);
  EXPECT_EQ(Ids(by_due), (std::vector<int>{10, 30, 50, 50, 60}));
  for (Item& i : items) by_due.Remove(i);
  EXPECT_TRUE(by_due.empty());
}

TEST(IntrusiveList, AnElementIsOnEachKindOfListIndependently) {
  std::vector<Item> items(3);
  for (int k = 0; k < 3; ++k) items[k].id = k;
  IntrusiveList<Item, ByAge> by_age;
  IntrusiveList<Item, Waiting> waiting;
  for (Item& i : items) by_age.PushBack(i);
  waiting.PushBack(items[2]);
  waiting.PushBack(items[0]);
  EXPECT_TRUE(waiting.Contains(items[0]));
  EXPECT_FALSE(waiting.Contains(items[1]));
  by_age.Remove(items[0]);
  EXPECT_EQ(Ids(by_age), (std::vector<int>{1, 2}));
  EXPECT_EQ(Ids(waiting), (std::vector<int>{2, 0}));
  waiting.Remove(items[2]);
  waiting.Remove(items[0]);
  by_age.Remove(items[1]);
  by_age.Remove(items[2]);
  EXPECT_TRUE(by_age.empty() && waiting.empty());
}

}  // namespace
}  // namespace xdpfwd
