// What another thread may ask of a kernel-path loop about its connections: a copy of its table
// (`show sess`) or one connection ended (`shutdown session ID`). Asked through a mailbox and
// answered by the loop itself at the end of an iteration, so no other thread touches a
// connection or its sockets. Private to the kernel path.
#pragma once

#include <sys/socket.h>

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <optional>
#include <vector>

#include "forwarder/connection_table.h"
#include "forwarder/rules.h"

namespace xdpfwd::kernel_path {

// One connection as its loop copied it. The loop reads the sockets (TCP_INFO) and copies
// numbers; the asking thread turns them into text, so the loop's pause is the syscalls alone.
struct SessionRecord {
  uint64_t id = 0;
  const Rule* rule = nullptr;  // never freed while the path lives (KernelPath::rules_)
  sockaddr_storage client{};
  std::chrono::steady_clock::time_point accepted;
  uint64_t bytes_to_backend = 0, bytes_to_client = 0;
  LegTcpInfo client_leg, backend_leg;  // state names fit std::string's inline buffer
};

// The row `show sess` prints for a record; `now` gives its age.
ConnectionRow ToConnectionRow(const SessionRecord& record, int thread,
                              std::chrono::steady_clock::time_point now);

// getsockopt(TCP_INFO) and SIOCOUTQ of one socket; state "" and zeros if the kernel says
// nothing (a descriptor already closed).
LegTcpInfo ReadLegTcpInfo(int fd);

// The mailbox between one loop and whoever asks it. One asker at a time (KernelPath serialises
// them); the loop looks only when its eventfd woke it, so a loop nobody asks pays nothing.
class SessionDesk {
 public:
  using Clock = std::chrono::steady_clock;
  struct Request {
    uint64_t generation = 0;
    bool table = false;           // copy every open connection
    std::optional<uint64_t> end;  // reset this connection, both legs
  };
  struct Answer {
    uint64_t generation = 0;
    std::vector<SessionRecord> table;
    bool ended = false;  // the connection asked to end was found and reset
  };

  // The asker: posts a request (replacing one not yet taken), then calls Loop::Wake.
  void Ask(const Request& request);
  // Waits until the loop answered `generation` or later; false at the deadline.
  bool Await(uint64_t generation, Clock::time_point deadline, Answer& answer);

  // The loop: the request waiting, if any.
  std::optional<Request> Take();
  void Reply(Answer answer);

 private:
  std::mutex mu_;  // held to post, take and swap, never while the loop works on an answer
  std::condition_variable answered_;
  std::optional<Request> asked_;
  Answer answer_;
};

}  // namespace xdpfwd::kernel_path
