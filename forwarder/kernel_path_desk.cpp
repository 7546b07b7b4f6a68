// A kernel-path loop's desk (see kernel_path_sessions.h): the other threads' `show sess` and
// `shutdown session` requests, answered between two batches of events.
#include "forwarder/kernel_path_connection.h"
#include "forwarder/kernel_path_sessions.h"

namespace xdpfwd::kernel_path {

// A question from another thread (KernelPath::Connections, KernelPath::Shutdown), between two
// batches. A copy of the table walks every connection and reads two TCP_INFOs each: O(open
// connections) syscalls, paid only when someone asks.
void Loop::AnswerDesk() {
  desk_waiting_ = false;
  std::optional<SessionDesk::Request> request = desk_.Take();
  if (!request) return;  // the wake-up was a plan or a stop
  SessionDesk::Answer answer;
  answer.generation = request->generation;
  if (request->end) answer.ended = EndById(*request->end);
  if (request->table) CopyTable(answer.table);
  desk_.Reply(std::move(answer));
}

void Loop::CopyTable(std::vector<SessionRecord>& table) const {
  table.reserve(connecting_.size() + trying_.size() + relaying_.size());
  auto copy = [&](const ConnectionList& list) {
    for (const Connection& c : list) {
      SessionRecord& r = table.emplace_back();
      r.id = c.id;
      r.rule = c.rule;
      r.client = c.peer;
      r.accepted = c.accepted;
      r.bytes_to_backend = c.bytes_in;
      r.bytes_to_client = c.bytes_out;
      r.client_leg = ReadLegTcpInfo(c.client.fd.get());
      r.backend_leg = ReadLegTcpInfo(c.backend.fd.get());
    }
  };
  for (const ConnectionList* list : {&connecting_, &trying_, &relaying_}) copy(*list);
  for (const auto& [timeout_ms, list] : header_waits_) copy(list);
}

// A walk of the lists rather than an index by id: an index would cost every connection an
// insert and an erase (an allocation each) for a command an operator types.
bool Loop::EndById(uint64_t id) {
  auto end = [&](ConnectionList& list) {
    for (Connection& c : list) {
      if (c.id != id) continue;
      Finish(c, End::kAdminShutdown);  // both legs reset: not a complete stream to either peer
      return true;
    }
    return false;
  };
  if (end(connecting_) || end(trying_) || end(relaying_)) return true;
  for (auto& [timeout_ms, list] : header_waits_) {
    if (end(list)) return true;
  }
  return false;
}

}  // namespace xdpfwd::kernel_path
