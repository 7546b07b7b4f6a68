// The kernel-socket path: one event loop per thread (kernel_path_loop.cpp), started together
// and stopped together, and the totals summed over them.
#include "forwarder/kernel_path.h"

#include <sched.h>
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <system_error>
#include <thread>

#include "forwarder/kernel_path_backend.h"
#include "forwarder/kernel_path_loop.h"
#include "forwarder/kernel_path_pump.h"
#include "forwarder/kernel_path_sessions.h"
#include "os/log.h"
#include "xdp/tcp_events.h"

namespace xdpfwd {
namespace {

// 2^16 records of 32 bytes, 2 MiB a thread: a kernel-path thread records connection events only
// (about eight a connection), so that is the last 8,000 connections.
constexpr uint32_t kRecorderRecords = 1u << 16;

int CpusWeMayUse() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) != 0) return 1;
  return std::max(1, CPU_COUNT(&set));
}

// A connection holds two sockets, and two pipes (four descriptors) while bytes are in flight
// both ways. Like HAProxy does for its maxconn, raise the soft limit towards what
// max_connections may need, as far as the hard limit allows. Warn only if not even the sockets
// fit: without descriptors for a pipe, a direction falls back to copying.
void RaiseOpenFileLimit(const KernelPathConfig& config, int threads) {
  const rlim_t fixed = 64 + static_cast<rlim_t>(threads) * (config.rules.size() + 3);
  const rlim_t connections = config.limits.max_connections;
  const rlim_t want = fixed + 6 * connections;
  rlimit limit{};
  if (getrlimit(RLIMIT_NOFILE, &limit) != 0 || limit.rlim_cur >= want) return;
  const rlim_t before = limit.rlim_cur;
  limit.rlim_cur = std::min(want, limit.rlim_max);
  if (limit.rlim_cur > before && setrlimit(RLIMIT_NOFILE, &limit) != 0) limit.rlim_cur = before;
  if (limit.rlim_cur > before) {
    LogDetail("kernel path: open-file limit raised from " + std::to_string(before) + " to " +
              std::to_string(limit.rlim_cur));
  }
  if (limit.rlim_cur < fixed + 2 * connections) {
    const rlim_t fit = limit.rlim_cur > fixed ? (limit.rlim_cur - fixed) / 2 : 0;
    Log("kernel path: the open-file limit (" + std::to_string(limit.rlim_cur) +
        ") leaves room for about " + std::to_string(fit) + " connections, fewer than " +
        "max_connections=" + std::to_string(connections) +
        "; raise the hard limit (ulimit -Hn, LimitNOFILE=) or lower max_connections");
  }
}

int ReadSysctl(const char* path, int fallback) {
  std::ifstream in(path);
  int value = fallback;
  if (!(in >> value)) return fallback;
  return value;
}

// The kernel path takes over its own TIME_WAIT 4-tuples once many of a backend's are taken,
// which the kernel allows only when the backend sent TCP timestamps
// (tcp_twsk_unique). Say so at start when this host turned them off; users never need to
// change a sysctl otherwise.
void NoteTimeWaitSettings(const kernel_path::LocalPorts& ports) {
  const int timestamps = ReadSysctl("/proc/sys/net/ipv4/tcp_timestamps", 1);
  const int tw_reuse = ReadSysctl("/proc/sys/net/ipv4/tcp_tw_reuse", 2);
  const std::string range = std::to_string(ports.low) + "-" + std::to_string(ports.high) + " (" +
                            std::to_string(ports.size()) + " ports)";
  if (timestamps == 0) {
    Log("kernel path: net.ipv4.tcp_timestamps=0: backend legs cannot take over their own "
        "TIME_WAIT 4-tuples, so when the client closes first each (source, backend) pair allows "
        "about " +
        std::to_string(ports.size()) + " new connections per minute (local ports " + range +
        "); more --backend-source addresses raise it");
    return;
  }
  LogDetail("kernel path: backend local ports " + range + ", chosen by the kernel while few are " +
            "taken towards a backend, then here, taking over TIME_WAIT 4-tuples (tcp_timestamps=" +
            std::to_string(timestamps) + ", tcp_tw_reuse=" + std::to_string(tw_reuse) + ")");
}

}  // namespace

KernelPathTotals& KernelPathTotals::operator+=(const KernelPathTotals& o) {
  relay += o.relay;
#define XDPFWD_FIELD(name, kind, what) name += o.name;
  XDPFWD_KERNEL_PATH_COUNTERS(XDPFWD_FIELD)
#undef XDPFWD_FIELD
  for (const RuleTotals& r : o.rules) AddRuleTotals(rules, r.rule_id, r.totals);
  return *this;
}

std::string KernelPathTotals::Format() const {
  std::string out = relay.Format();
#define XDPFWD_FIELD(name, kind, what) out += " " #name "=" + std::to_string(name);
  XDPFWD_KERNEL_PATH_COUNTERS(XDPFWD_FIELD)
#undef XDPFWD_FIELD
  return out;
}

KernelPath::KernelPath(const KernelPathConfig& config)
    : config_(config),
      rules_(config.rules.begin(), config.rules.end()),
      board_(std::make_unique<kernel_path::PlanBoard>()) {
  std::vector<const Rule*> rules;
  for (const Rule& r : rules_) rules.push_back(&r);
  Publish(std::move(rules), config.global_access, true);
}

void KernelPath::Publish(std::vector<const Rule*> rules, std::vector<AccessPattern> global_access,
                         bool accepting) {
  auto plan = std::make_shared<kernel_path::ListenPlan>();
  plan->generation = ++generation_;
  plan->accepting = accepting;
  plan->rules = std::move(rules);
  plan->global_access = std::move(global_access);
  board_->Publish(std::move(plan));
  for (auto& loop : loops_) loop->Wake();
}

KernelPath::~KernelPath() { Stop(); }

Result<std::unique_ptr<KernelPath>> KernelPath::Start(const KernelPathConfig& config) {
  if (config.rules.empty()) return Error{{}, "kernel path: no rules"};
  if (config.threads < 0) {
    return Error{
        {}, "kernel path: " + std::to_string(config.threads) + " threads (0 means one per CPU)"};
  }
  if (config.copy_buffer_bytes == 0) {
    return Error{{}, "kernel path: the copy buffer must hold at least one byte"};
  }
  const int cpus = CpusWeMayUse();
  const int threads = config.threads == 0 ? cpus : config.threads;
  RaiseOpenFileLimit(config, threads);
  if (config.busy_poll && threads > cpus) {
    // Spinning threads never yield, so they take turns by the scheduler's time slice: with two
    // on one CPU, measured p99 1.6 ms instead of 30-34 us (docs/kernel-path.md).
    Log("kernel path: busy-polling with " + std::to_string(threads) + " threads on " +
        std::to_string(cpus) + " CPU(s): threads will take turns by milliseconds; use at most " +
        "one thread per CPU");
  }

  if (auto checked = kernel_path::CheckBackendSources(config.backend_sources); !checked) {
    return Error{checked.error().code, "kernel path: " + checked.error().context};
  }
  for (const Rule& rule : config.rules) {
    if (rule.source.family() == AF_UNSPEC) continue;
    if (auto checked = kernel_path::CheckSourceAddress(rule.source); !checked) {
      return Error{{},
                   "rule " + ToString(rule.listen) + " -> " + ToString(rule.backend) +
                       ": [src=]: " + checked.error().message()};
    }
  }

  auto ports = kernel_path::ReadLocalPorts();
  if (!ports) {
    // Only the fallback needs the range: the kernel's own choice still works.
    Log("kernel path: " + ports.error().message() +
        "; backend legs will fail once the kernel has no local port left");
    ports = kernel_path::LocalPorts{};
  }
  NoteTimeWaitSettings(*ports);

  std::unique_ptr<KernelPath> path(new KernelPath(config));
  if (config.flight_recorder && config.tcp_events) {
    // Never a reason not to start: without them the path relays as before, and says so once.
    auto events = TcpEvents::Load(threads);
    if (!events) {
      Log("kernel path: " + events.error().message() + "; TCP events are not recorded");
    } else {
      for (const std::string& missing : (*events)->missing()) {
        Log("kernel path: TCP events: " + missing + "; left out");
      }
      path->tcp_events_ = std::move(*events);
    }
  }
  // Every listener is bound before any thread runs, so a bad rule fails Start as a whole.
  for (int i = 0; i < threads; ++i) {
    path->counters_.push_back(std::make_unique<kernel_path::PathCounters>());
    auto loop = kernel_path::Loop::Create(
        path->config_, *path->board_, path->open_connections_, *path->counters_.back(),
        kernel_path::BackendConnector(path->config_, *ports, i, threads), i);
    if (!loop) return loop.error();
    if (config.flight_recorder) {
      auto ring = std::make_unique<RecorderRing>();
      ring->bytes = FlightRecorder::MemoryBytes(kRecorderRecords);
      ring->memory = std::aligned_alloc(64, ring->bytes);
      if (ring->memory == nullptr) return Error{{}, "kernel path: no memory for its recorder"};
      std::memset(ring->memory, 0, ring->bytes);  // Format wants zeroed memory
      FlightRecorder::Format(ring->memory, kRecorderRecords);
      ring->writer = FlightRecorder::Attach(ring->memory);
      (*loop)->SetRecorder(&ring->writer);
      if (path->tcp_events_) {
        auto tcp_ring = path->tcp_events_->OpenRing(i, &kernel_path::Loop::OnTcpEvent, loop->get());
        if (!tcp_ring) return tcp_ring.error();
        (*loop)->SetTcpEvents(path->tcp_events_.get(), std::move(*tcp_ring));
      }
      path->recorders_.push_back(std::move(ring));
    }
    path->loops_.push_back(std::move(*loop));
  }
  for (auto& loop : path->loops_) {
    try {
      path->threads_.emplace_back([l = loop.get()] { l->Run(); });
    } catch (const std::system_error& e) {
      path->Stop();
      return Error{e.code(), "kernel path: start a thread"};
    }
  }
  return path;
}

void KernelPath::StopAccepting() {
  std::lock_guard<std::mutex> lock(stop_mutex_);
  const auto plan = board_->Current();
  Publish(plan->rules, plan->global_access, false);
  // Returns with every listener closed, so that "accepting no new connections" is true when
  // the caller says it.
  if (auto r = WaitApplied(); !r) Log(r.error().message());
}

Result<void> KernelPath::Reload(const std::vector<Rule>& rules,
                                const std::vector<AccessPattern>& global_access) {
  std::lock_guard<std::mutex> lock(stop_mutex_);
  if (loops_.empty()) return Error{{}, "kernel path: stopped"};
  const auto current = board_->Current();
  // Checked first, so that a reload that cannot be served changes nothing.
  for (const Rule& rule : rules) {
    const bool served = std::any_of(current->rules.begin(), current->rules.end(),
                                    [&](const Rule* r) { return r->id == rule.id; });
    if (served) continue;
    const std::string what = "rule " + ToString(rule.listen) + " -> " + ToString(rule.backend);
    if (rule.source.family() != AF_UNSPEC) {
      if (auto checked = kernel_path::CheckSourceAddress(rule.source); !checked) {
        return Error{{}, what + ": [src=]: " + checked.error().message()};
      }
    }
    const bool listening =
        current->accepting && std::any_of(current->rules.begin(), current->rules.end(),
                                          [&](const Rule* r) { return r->listen == rule.listen; });
    if (!listening) {
      if (auto bindable = kernel_path::CheckListenAddress(rule.listen, ListenIpv6Only(rule, rules));
          !bindable) {
        return Error{{}, what + ": " + bindable.error().message()};
      }
    }
  }
  std::vector<const Rule*> next;
  for (const Rule& rule : rules) {
    auto kept = std::find_if(current->rules.begin(), current->rules.end(),
                             [&](const Rule* r) { return r->id == rule.id; });
    if (kept != current->rules.end()) {
      next.push_back(*kept);
    } else {
      next.push_back(&rules_.emplace_back(rule));
    }
  }
  Publish(std::move(next), global_access, current->accepting);
  return WaitApplied();
}

Result<void> KernelPath::WaitApplied() {
  // Every thread takes the plan up within one loop iteration (a wake-up is on its way).
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  for (const auto& loop : loops_) {
    while (loop->applied_generation() < generation_) {
      if (std::chrono::steady_clock::now() > deadline) {
        return Error{{}, "kernel path: a loop thread did not take the new rules up within 5 s"};
      }
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
  }
  return {};
}

void KernelPath::Stop() {
  std::lock_guard<std::mutex> lock(stop_mutex_);
  for (auto& loop : loops_) loop->RequestStop();
  for (std::thread& t : threads_) t.join();
  threads_.clear();
  loops_.clear();  // closes every listener, socket, pipe, epoll and eventfd
}

KernelPathTotals KernelPath::Totals() const {
  KernelPathTotals sum;
  for (const auto& c : counters_) sum += c->Snapshot();
  if (tcp_events_) sum.tcp_events_dropped = tcp_events_->dropped();
  return sum;
}

namespace {
// How long a question waits for a loop. A loop answers within one iteration (a batch of 64
// events, each turn bounded by a 1 MiB budget), so only a stuck thread takes this long.
constexpr auto kDeskWait = std::chrono::seconds(1);
}  // namespace

std::vector<ConnectionRow> KernelPath::Connections(std::vector<int>* silent_threads) {
  std::lock_guard<std::mutex> lock(stop_mutex_);
  const uint64_t generation = ++desk_generation_;
  // Every loop is asked before any is waited for: they copy their tables at the same time.
  for (auto& loop : loops_) {
    loop->desk().Ask({.generation = generation, .table = true, .end = std::nullopt});
    loop->Wake();
  }
  const auto deadline = std::chrono::steady_clock::now() + kDeskWait;
  std::vector<kernel_path::SessionDesk::Answer> answers(loops_.size());
  std::vector<int> silent;
  for (size_t i = 0; i < loops_.size(); ++i) {
    if (!loops_[i]->desk().Await(generation, deadline, answers[i])) {
      silent.push_back(static_cast<int>(i));
    }
  }
  // Formatted here, on the asking thread, not by the loops.
  const auto now = std::chrono::steady_clock::now();
  std::vector<ConnectionRow> rows;
  for (size_t i = 0; i < answers.size(); ++i) {
    for (const auto& record : answers[i].table) {
      rows.push_back(kernel_path::ToConnectionRow(record, static_cast<int>(i), now));
    }
  }
  for (int thread : silent) {
    Log("kernel path: thread " + std::to_string(thread) +
        " did not list its connections within 1 s; they are missing from the table");
  }
  if (silent_threads != nullptr) *silent_threads = std::move(silent);
  return rows;
}

Result<void> KernelPath::Shutdown(uint64_t id) {
  std::lock_guard<std::mutex> lock(stop_mutex_);
  const std::string what = "kernel path: session " + std::to_string(id);
  const uint64_t thread = id >> kernel_path::Loop::kIdThreadShift;
  if (thread >= loops_.size()) return Error{{}, what + ": no such session"};
  const uint64_t generation = ++desk_generation_;
  kernel_path::Loop& loop = *loops_[thread];
  loop.desk().Ask({.generation = generation, .table = false, .end = id});
  loop.Wake();
  kernel_path::SessionDesk::Answer answer;
  if (!loop.desk().Await(generation, std::chrono::steady_clock::now() + kDeskWait, answer)) {
    return Error{{},
                 what + ": thread " + std::to_string(thread) +
                     " did not answer within 1 s (it may still end it)"};
  }
  if (!answer.ended) return Error{{}, what + ": no such session (ended, or never was)"};
  return {};
}

KernelPath::RecorderRing::~RecorderRing() { std::free(memory); }

std::vector<WorkerRecording> KernelPath::ReadRecorders() const {
  std::vector<WorkerRecording> out;
  for (size_t i = 0; i < recorders_.size(); ++i) {
    auto snapshot = ReadRecorder(recorders_[i]->memory, recorders_[i]->bytes);
    if (!snapshot) continue;  // our own layout: cannot fail
    WorkerRecording r;
    r.name = "kernel thread " + std::to_string(i);
    r.snapshot = std::move(*snapshot);
    out.push_back(std::move(r));
  }
  return out;
}

int KernelPath::threads() const { return static_cast<int>(counters_.size()); }

}  // namespace xdpfwd
