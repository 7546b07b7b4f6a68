// What the control process reads of its fast-path workers on request, beside their counters:
// their flight recorders, their connection tables (`show sess`), and `shutdown session`
// through the same shared tables (fast_path_impl.h's WorkerConnectionTable).
#include <chrono>
#include <functional>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "forwarder/fast_path.h"
#include "forwarder/fast_path_impl.h"
#include "os/log.h"

namespace xdpfwd {

std::vector<WorkerRecording> FastPath::ReadRecorders() const {
  std::vector<WorkerRecording> out;
  if (!impl_->recording()) return out;
  const std::vector<int> pids = worker_pids();
  for (uint32_t w = 0; w < impl_->workers; ++w) {
    auto snapshot = ReadRecorder(impl_->RecorderMemory(w), impl_->RecorderBytes());
    if (!snapshot) {
      Log("fast path: worker " + std::to_string(w) + "'s recorder: " + snapshot.error().message());
      continue;
    }
    WorkerRecording r;
    r.name = "worker " + std::to_string(w);
    r.pid = w < pids.size() && pids[w] > 0 ? pids[w] : 0;
    r.snapshot = std::move(*snapshot);
    out.push_back(std::move(r));
  }
  return out;
}

namespace {

// A worker's answer within this long, or it is left out (stopped, restarting, wedged).
constexpr auto kTableWait = std::chrono::seconds(1);

// The word once `answered` says so (acquire), or nothing after kTableWait.
std::optional<uint64_t> WaitFor(const std::atomic<uint64_t>& word,
                                const std::function<bool(uint64_t)>& answered) {
  const auto deadline = std::chrono::steady_clock::now() + kTableWait;
  for (;;) {
    const uint64_t value = word.load(std::memory_order_acquire);
    if (answered(value)) return value;
    if (std::chrono::steady_clock::now() >= deadline) return std::nullopt;
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
}

std::string FlowEnd(const IpAddress& addr, uint16_t port) {
  return ToString(IpEndpoint{addr, port});
}

void FillLeg(LegTcpInfo& leg, const lwip_pcb::PcbInfo& i) {
  leg.state = lwip_pcb::StateName(i.state);
  leg.srtt_us = i.srtt_us;
  leg.rto_ms = i.rto_ms;
  leg.cwnd_bytes = i.cwnd_bytes;
  leg.in_flight = i.in_flight;
  leg.send_queue = i.send_queue;
  leg.peer_window = i.peer_window;
  // lwIP keeps no count of a leg's retransmissions: retransmits stays 0 on the fast path.
}

}  // namespace

std::vector<ConnectionRow> FastPath::Connections(std::vector<std::string>* notes) {
  std::vector<ConnectionRow> rows;
  if (!impl_ || impl_->stopped) return rows;
  std::lock_guard lock(impl_->tables_mu);
  // Every worker asked first, then each waited for: they copy at the same time.
  std::vector<uint64_t> asked(impl_->workers);
  for (uint32_t w = 0; w < impl_->workers; ++w) {
    WorkerConnectionTable& t = impl_->Table(w);
    asked[w] = t.wanted.load(std::memory_order_relaxed) + 1;
    t.wanted.store(asked[w], std::memory_order_release);
  }
  for (uint32_t w = 0; w < impl_->workers; ++w) {
    const WorkerConnectionTable& t = impl_->Table(w);
    if (!WaitFor(t.published, [&](uint64_t v) { return v == asked[w]; })) {
      if (notes) notes->push_back("worker " + std::to_string(w) + " did not answer within 1 s");
      continue;
    }
    if (t.not_listed > 0 && notes) {
      notes->push_back("worker " + std::to_string(w) + ": " + std::to_string(t.not_listed) +
                       " more connection(s) not listed (a table holds " +
                       std::to_string(WorkerConnectionTable::kRows) + ")");
    }
    for (uint32_t i = 0; i < t.count; ++i) {
      const RelayConnectionInfo& c = t.rows[i];
      ConnectionRow r;
      r.id = uint64_t{w} << 48 | c.id;
      r.path = "fast";
      r.worker = static_cast<int>(w);
      r.rule = c.rule;
      r.client = FlowEnd(c.client_flow.saddr, c.client_flow.sport);
      r.backend = FlowEnd(c.backend_flow.saddr, c.backend_flow.sport);
      r.age_ms = t.now_ms > c.started_ms ? t.now_ms - c.started_ms : 0;
      r.bytes_to_backend = c.bytes_to_backend;
      r.bytes_to_client = c.bytes_to_client;
      FillLeg(r.client_leg, c.client);
      if (c.backend_started) FillLeg(r.backend_leg, c.backend);
      rows.push_back(std::move(r));
    }
  }
  return rows;
}

Result<void> FastPath::Shutdown(uint64_t id) {
  const uint64_t w = id >> 48;
  const auto local = static_cast<uint32_t>(id & 0xffff'ffffu);
  if (!impl_ || impl_->stopped || w >= impl_->workers || (id >> 32 & 0xffffu) != 0 || local == 0) {
    return Error{{}, "fast path: session " + std::to_string(id) + ": no such session"};
  }
  std::lock_guard lock(impl_->tables_mu);
  WorkerConnectionTable& t = impl_->Table(static_cast<uint32_t>(w));
  const uint32_t number = ShutdownNumber(t.shutdown_asked.load(std::memory_order_relaxed)) + 1;
  t.shutdown_asked.store(ShutdownWord(number, local), std::memory_order_release);
  const std::optional<uint64_t> answer =
      WaitFor(t.shutdown_answer, [&](uint64_t v) { return ShutdownNumber(v) == number; });
  if (!answer) {
    return Error{{}, "fast path: worker " + std::to_string(w) + " did not answer within 1 s"};
  }
  if (ShutdownValue(*answer) == 0) {
    return Error{
        {}, "fast path: session " + std::to_string(id) + ": no such session (it may have ended)"};
  }
  return {};
}

}  // namespace xdpfwd
