// A doubly linked list threaded through its elements: an element derives from one ListHook per
// list it can be on, told apart by a tag type. O(1) insert, remove and move-to-back with no
// allocation, so the relay keeps its deadline lists without touching the heap per event. A list
// of an incomplete type can be declared (a header's class member); it is used where T is known.
#pragma once

#include <cstddef>
#include <cstdint>

namespace xdpfwd {

template <typename T, typename Tag>
class IntrusiveList;

// Two words: the next element, and the previous one's address with bit 0 set while the element
// is on a list (a separate bool made it three words with the padding: 8 bytes of each of the
// relay's six hooks per connection, issue #32's memory per idle connection).
template <typename T, typename Tag>
struct ListHook {
  T* next = nullptr;

 private:
  friend class IntrusiveList<T, Tag>;
  bool linked() const { return (prev_and_linked & 1) != 0; }
  T* prev() const { return reinterpret_cast<T*>(prev_and_linked & ~uintptr_t{1}); }
  void set_prev(T* p) { prev_and_linked = reinterpret_cast<uintptr_t>(p) | 1; }
  uintptr_t prev_and_linked = 0;
};

// The list never owns its elements; an element must be removed before it is destroyed.
template <typename T, typename Tag>
class IntrusiveList {
 public:
  IntrusiveList() = default;
  IntrusiveList(const IntrusiveList&) = delete;
  IntrusiveList& operator=(const IntrusiveList&) = delete;

  bool empty() const { return head_ == nullptr; }
  size_t size() const { return size_; }
  T* front() const { return head_; }
  static bool Contains(const T& item) { return HookOf(item).linked(); }
  static T* Next(T& item) { return HookOf(item).next; }

  void PushBack(T& item) {
    ListHook<T, Tag>& h = HookOf(item);
    h.set_prev(tail_);
    h.next = nullptr;
    if (tail_ != nullptr) {
      HookOf(*tail_).next = &item;
    } else {
      head_ = &item;
    }
    tail_ = &item;
    ++size_;
  }

  // Inserts `item` behind the last element it does not come before (`before(a, b)`: a goes
  // ahead of b), searching from the back: O(1) where it belongs at the back, as deadlines of one
  // timeout do; a list of deadlines of several timeouts stays in deadline order.
  template <typename Before>
  void InsertOrdered(T& item, Before before) {
    T* after = tail_;
    while (after != nullptr && before(item, *after)) after = HookOf(*after).prev();
    ListHook<T, Tag>& h = HookOf(item);
    h.set_prev(after);
    h.next = after != nullptr ? HookOf(*after).next : head_;
    if (h.next != nullptr) {
      HookOf(*h.next).set_prev(&item);
    } else {
      tail_ = &item;
    }
    if (after != nullptr) {
      HookOf(*after).next = &item;
    } else {
      head_ = &item;
    }
    ++size_;
  }

  // Does nothing if `item` is on no list of this kind.
  void Remove(T& item) {
    ListHook<T, Tag>& h = HookOf(item);
    if (!h.linked()) return;
    T* const prev = h.prev();
    if (prev != nullptr) {
      HookOf(*prev).next = h.next;
    } else {
      head_ = h.next;
    }
    if (h.next != nullptr) {
      HookOf(*h.next).set_prev(prev);
    } else {
      tail_ = prev;
    }
    h.next = nullptr;
    h.prev_and_linked = 0;
    --size_;
  }

  void MoveToBack(T& item) {
    if (tail_ == &item) return;
    Remove(item);
    PushBack(item);
  }

 private:
  // Bit 0 of an element's address is free to mark the hook linked.
  static ListHook<T, Tag>& HookOf(T& item) {
    static_assert(alignof(T) >= 2);
    return item;
  }
  static const ListHook<T, Tag>& HookOf(const T& item) { return item; }

  T* head_ = nullptr;
  T* tail_ = nullptr;
  size_t size_ = 0;
};

}  // namespace xdpfwd
