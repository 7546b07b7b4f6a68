// The process's owner (see service.h): start, reload, drain, stop of every path.
#include "forwarder/service.h"

#include <sched.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <set>
#include <string_view>

#include "forwarder/perfetto_trace.h"
#include "forwarder/service_notify.h"
#include "os/cpu_list.h"
#include "os/isolation.h"
#include "os/log.h"
#include "os/memory_lock.h"
#include "xdp/steer.h"
#include "xdpfwd_lwip_hooks.h"

namespace xdpfwd {

// pidlogfile: the process id, for `kill -HUP $(cat FILE)`; removed at exit if still ours.
class PidFile {
 public:
  explicit PidFile(std::string path) : path_(std::move(path)) {
    if (path_.empty()) return;
    FILE* f = std::fopen(path_.c_str(), "w");
    if (f == nullptr || std::fprintf(f, "%d\n", static_cast<int>(getpid())) < 0 ||
        std::fclose(f) != 0) {
      // rinetd goes on without it; so do we, saying so.
      Log("pidlogfile " + path_ + ": cannot write it: " + std::strerror(errno));
      path_.clear();
    }
  }
  ~PidFile() {
    if (path_.empty()) return;
    FILE* f = std::fopen(path_.c_str(), "r");
    if (f == nullptr) return;
    int pid = 0;
    const bool ours = std::fscanf(f, "%d", &pid) == 1 && pid == static_cast<int>(getpid());
    std::fclose(f);
    if (ours) std::remove(path_.c_str());
  }
  PidFile(const PidFile&) = delete;
  PidFile& operator=(const PidFile&) = delete;

 private:
  std::string path_;
};

namespace {

std::string RulesLine(const std::vector<Rule>& rules) {
  std::string out;
  for (const Rule& r : rules) {
    if (!out.empty()) out += ", ";
    out += ToString(r.listen) + " -> " + ToString(r.backend);
    if (!r.is_stream()) {
      out += std::string(" (") + std::string(ProtocolName(r.listen_protocol)) + " -> " +
             std::string(ProtocolName(r.backend_protocol)) + ")";
    }
  }
  return out;
}

// Whether two rules are the same rule: everything a connection would see alike (the lines the
// file has them on may differ). Weights and states are not in it: a reload that changes only
// those keeps the rule (its listeners, connections and per-backend counters) and hands them to
// the pickers through the board (HealthChecker::ApplyFile). Being on the board at all is.
bool SameRule(const Rule& a, const Rule& b) {
  if (!(a.listen == b.listen) || !(a.backend == b.backend) || !(a.source == b.source) ||
      a.listen_protocol != b.listen_protocol || a.backend_protocol != b.backend_protocol ||
      a.listen_host != b.listen_host || a.backend_host != b.backend_host ||
      a.udp_timeout_s != b.udp_timeout_s || a.proxy != b.proxy || a.balance != b.balance ||
      HealthChecker::Covers(a) != HealthChecker::Covers(b) ||
      a.more_backends.size() != b.more_backends.size() || a.check_ms != b.check_ms ||
      a.check_fall != b.check_fall || a.check_rise != b.check_rise ||
      a.access.size() != b.access.size() || a.retry_empty_response != b.retry_empty_response ||
      a.accept_proxy.enabled != b.accept_proxy.enabled ||
      a.accept_proxy.timeout_ms != b.accept_proxy.timeout_ms ||
      a.accept_proxy.from.size() != b.accept_proxy.from.size()) {
    return false;
  }
  for (size_t i = 0; i < a.accept_proxy.from.size(); ++i) {
    if (a.accept_proxy.from[i].pattern != b.accept_proxy.from[i].pattern) return false;
  }
  for (size_t i = 0; i < a.more_backends.size(); ++i) {
    const RuleBackend &x = a.more_backends[i], &y = b.more_backends[i];
    if (!(x.address == y.address) || x.host != y.host || x.backup != y.backup) {
      return false;
    }
  }
  for (size_t i = 0; i < a.access.size(); ++i) {
    if (a.access[i].allow != b.access[i].allow || a.access[i].pattern != b.access[i].pattern) {
      return false;
    }
  }
  return true;
}

bool SameAccess(const std::vector<AccessPattern>& a, const std::vector<AccessPattern>& b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](auto& x, auto& y) {
           return x.allow == y.allow && x.pattern == y.pattern;
         });
}

// Why the fast path cannot take a TCP rule whatever the kernel says of its addresses and routes
// (PlaceRule), or "" if it can: a concrete listen address of either family (its backends may be
// of either family, or both).
std::string WhyNotFast(const Rule& r) {
  if (r.listen.is_any()) return "the fast path needs a concrete listen address";
  return "";
}

bool FastEligible(const Rule& r) { return r.is_stream() && WhyNotFast(r).empty(); }

bool HasId(const std::vector<Rule>& rules, uint32_t id) {
  return std::any_of(rules.begin(), rules.end(), [&](const Rule& r) { return r.id == id; });
}

std::vector<Rule> StreamRules(const std::vector<Rule>& rules) {
  std::vector<Rule> out;
  std::copy_if(rules.begin(), rules.end(), std::back_inserter(out),
               [](const Rule& r) { return r.is_stream(); });
  return out;
}

std::vector<Rule> DatagramRules(const std::vector<Rule>& rules) {
  std::vector<Rule> out;
  std::copy_if(rules.begin(), rules.end(), std::back_inserter(out),
               [](const Rule& r) { return !r.is_stream(); });
  return out;
}

}  // namespace

std::string ReloadSummary::Format() const {
  return "kept " + std::to_string(kept) + ", changed " + std::to_string(changed) + ", added " +
         std::to_string(added) + ", removed " + std::to_string(removed);
}

Service::Service(const Options& options)
    : options_(options),
      start_time_unix_ms_(std::chrono::duration_cast<std::chrono::milliseconds>(
                              std::chrono::system_clock::now().time_since_epoch())
                              .count()),
      started_(std::chrono::steady_clock::now()) {}

Service::~Service() { Stop(); }

Result<std::unique_ptr<Service>> Service::Start(const Options& o, Config config) {
  std::unique_ptr<Service> s(new Service(o));
  s->next_rule_id_ = static_cast<uint32_t>(config.rules.size());  // the parser's ids: 0..n-1
  s->running_ = std::move(config);
  const Config& c = s->running_;
  const std::vector<Rule> stream_rules = StreamRules(c.rules);
  std::vector<Rule> fast_rules;
  std::copy_if(stream_rules.begin(), stream_rules.end(), std::back_inserter(fast_rules),
               FastEligible);

  // The access log first: every path hands it events from its first connection on.
  if (!c.logfile.empty()) {
    auto opened = SessionLog::Open(c.logfile, c.log_common, c.rules);
    if (!opened) return opened.error();
    s->log_ = std::move(*opened);
  }

  // The health checks' board before any path: the fast path's workers inherit it at their fork.
  auto board = SharedMemory::Create("xdpfwd-health", sizeof(HealthBoard));
  if (!board) return board.error();
  s->health_memory_ = std::move(*board);
  s->health_ = new (s->health_memory_.data()) HealthBoard{};
  auto checker = HealthChecker::Start(*s->health_, o.backend_sources);
  if (!checker) return checker.error();
  s->checker_ = std::move(*checker);
  s->checker_->SetRules(c.rules);  // entries claimed before any picker looks for them

  // The fast path first: it forks its workers, best before the kernel path starts threads.
  if (o.path != PathChoice::kKernel && !stream_rules.empty()) {
    FastPathConfig fc;
    fc.rules = fast_rules;
    fc.global_access = c.access;
    fc.health = s->health_;
    fc.log_sessions = s->log_ != nullptr;
    fc.limits = o.limits;
    fc.max_connections = o.max_connections;
    fc.cpus = o.cpus;
    fc.watchdog = o.watchdog;
    fc.listen_iface = o.listen_iface;
    fc.backend_iface = o.backend_iface;
    fc.backend_ports = o.backend_ports;
    fc.backend_sources = o.backend_sources;
    if (o.flow_capacity) fc.steer.flow_capacity = o.flow_capacity;
    fc.steer.force_generic = o.force_generic;
    fc.steer.allow_generic = !o.force_native;
    fc.choose_xdp_mode = !o.force_generic && !o.force_native;
    o.tuning.ApplyTo(fc);
    xdpfwd_lwip_set_bbr(o.tuning.bbr);  // read by each lwIP pcb as it is created, on the worker
    if (o.path == PathChoice::kXdp && fast_rules.size() != stream_rules.size()) {
      return Error{{},
                   "--path xdp: the fast path takes TCP rules with a concrete listen address "
                   "only; use --path auto or kernel for the others"};
    }
    auto f = fast_rules.empty() ? Result<std::unique_ptr<FastPath>>(
                                      Error{{}, "no TCP rule with a concrete listen address"})
                                : FastPath::Start(fc);
    if (f) {
      s->fast_ = std::move(*f);
      s->fast_rules_ = fast_rules;
      s->fast_access_ = c.access;
      s->KeepOffWorkerCpus();
      // Each rule it leaves to the kernel path, with why: one who expected the fast path for it
      // (an IPv6 rule now, say) reads it here.
      for (const Rule& r : stream_rules) {
        const std::string why = WhyNotFast(r);
        if (why.empty()) continue;
        Log("rule " + ToString(r.listen) + " -> " + ToString(r.backend) + ": on the kernel path (" +
            why + ")");
      }
    } else if (o.path == PathChoice::kXdp) {
      return Error{{}, "fast path cannot start: " + f.error().message()};
    } else {
      // Auto mode: one line on why, then everything on the kernel path.
      Log("fast path unavailable, serving everything on the kernel path: " + f.error().message());
    }
  }
  if (o.path != PathChoice::kXdp && !stream_rules.empty()) {
    if (auto k = s->StartKernelPath(stream_rules); !k) return k.error();
  }
  if (s->fast_ && s->log_) {
    FastPath* f = s->fast_.get();
    s->log_->AddSource([f](std::vector<SessionEvent>& out) { f->DrainSessions(out); });
  }
  if (auto d = s->StartDatagramPath(DatagramRules(c.rules)); !d) return d.error();
  // Before "ready", so that whoever waits for that line finds the file.
  s->pid_file_ = std::make_unique<PidFile>(c.pidfile);
  if (!o.cpus.empty() && !s->fast_) {
    Log("--cpus: no fast-path worker runs, so nothing is pinned (the kernel path's threads are "
        "not pinned)");
  }
  return s;
}

// A busy-polling worker's CPU is its own: the control process's threads (the access log's
// writer, the kernel path's loops started after this, the control loop) move to the other CPUs
// the process may use. Every thread now in the process is moved; threads started later
// inherit the calling thread's set.
void Service::KeepOffWorkerCpus() {
  std::vector<int> workers;
  for (int cpu : fast_->worker_cpus()) {
    if (cpu >= 0) workers.push_back(cpu);
  }
  if (workers.empty()) return;
  cpu_set_t allowed;
  CPU_ZERO(&allowed);
  if (sched_getaffinity(0, sizeof allowed, &allowed) != 0) return;
  for (int cpu : workers) CPU_CLR(cpu, &allowed);
  std::vector<int> rest;
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
    if (CPU_ISSET(cpu, &allowed)) rest.push_back(cpu);
  }
  if (rest.empty()) {
    control_cpus_note_ = "the control process shares CPU(s) " + FormatCpuList(workers) +
                         " with the fast-path workers: it may use no other (taskset, cgroup)";
    Log(control_cpus_note_);
    return;
  }
  std::error_code ec;
  for (const auto& task : std::filesystem::directory_iterator("/proc/self/task", ec)) {
    const pid_t tid = static_cast<pid_t>(std::atoi(task.path().filename().c_str()));
    if (tid > 0) sched_setaffinity(tid, sizeof allowed, &allowed);
  }
  control_cpus_note_ = "control process on CPU(s) " + FormatCpuList(rest) +
                       ", off the fast-path workers' " + FormatCpuList(workers);
  LogDetail(control_cpus_note_);
}

Result<void> Service::StartKernelPath(const std::vector<Rule>& stream_rules) {
  const Options& o = options_;
  KernelPathConfig kc;
  kc.rules = stream_rules;
  kc.global_access = running_.access;
  kc.health = health_;
  kc.sessions = log_.get();
  kc.limits = o.limits;
  if (o.max_connections) kc.limits.max_connections = *o.max_connections;
  kc.threads = o.kernel_threads;
  kc.busy_poll = o.kernel_busy_poll;
  o.tuning.ApplyTo(kc);
  kc.backend_sources = o.backend_sources;
  auto k = KernelPath::Start(kc);
  if (!k) return Error{{}, "kernel path cannot start: " + k.error().message()};
  kernel_ = std::move(*k);
  return {};
}

Result<void> Service::StartDatagramPath(const std::vector<Rule>& rules) {
  if (rules.empty()) return {};
  DatagramPathConfig dc;
  dc.rules = rules;
  dc.global_access = running_.access;
  if (log_) {
    SessionLog* sink = log_.get();
    dc.on_session = [sink](const SessionEvent& e) { sink->Record(e); };
  }
  auto d = DatagramPath::Start(std::move(dc));
  if (!d) return Error{{}, "datagram relay cannot start: " + d.error().message()};
  datagram_ = std::move(*d);
  return {};
}

std::string Service::ReadyLine() const {
  std::string ready =
      "path=" + std::string(PathName(options_.path)) + " rules: " + RulesLine(running_.rules);
  if (fast_) ready += "; fast path on " + fast_->description();
  if (kernel_) {
    ready += "; kernel path on " + std::to_string(kernel_->threads()) + " thread(s)";
    if (kernel_->busy_poll()) ready += ", busy-polling";
  }
  if (datagram_) {
    ready +=
        "; datagram relay for " + std::to_string(DatagramRules(running_.rules).size()) + " rule(s)";
  }
  if (log_) ready += "; access log " + running_.logfile;
  if (!control_cpus_note_.empty()) ready += "; " + control_cpus_note_;
  return ready;
}

void Service::ReopenLog() {
  if (log_) log_->Reopen();
}

Result<ReloadSummary> Service::Reload(Config next) {
  if (stopped_) return Error{{}, "stopped"};
  ReloadSummary summary;
  // Ids: a rule the running configuration has word for word keeps its id (and so its
  // listeners and connections everywhere); any other gets a new one.
  for (Rule& rule : next.rules) {
    auto same = std::find_if(running_.rules.begin(), running_.rules.end(),
                             [&](const Rule& r) { return SameRule(r, rule); });
    if (same != running_.rules.end()) {
      rule.id = same->id;
      ++summary.kept;
      continue;
    }
    rule.id = next_rule_id_++;
    const bool listened = std::any_of(running_.rules.begin(), running_.rules.end(), [&](auto& r) {
      return r.listen == rule.listen && r.listen_protocol == rule.listen_protocol;
    });
    ++(listened ? summary.changed : summary.added);
  }
  for (const Rule& r : running_.rules) {
    const bool listened = std::any_of(next.rules.begin(), next.rules.end(), [&](auto& n) {
      return r.listen == n.listen && r.listen_protocol == n.listen_protocol;
    });
    if (!listened) ++summary.removed;
  }
  const bool access_changed = !SameAccess(next.access, running_.access);
  const std::vector<Rule> stream_rules = StreamRules(next.rules);
  // Known to the access log before any path can report a connection of a new id.
  if (log_) log_->AddRules(next.rules);

  // The fast path takes every rule it can serve (FastEligible) that its running workers can
  // (FastPath::CheckRules: the interfaces and addresses it attached at start); the others go to
  // the kernel path until a restart, or with --path xdp refuse the reload.
  std::vector<Rule> fast_next;
  std::vector<std::string> fast_refused;
  std::vector<Rule> eligible;
  std::copy_if(stream_rules.begin(), stream_rules.end(), std::back_inserter(eligible),
               FastEligible);
  if (fast_) {
    const std::vector<std::string> why_not = fast_->CheckRules(eligible);
    for (size_t k = 0; k < eligible.size(); ++k) {
      if (why_not[k].empty()) {
        fast_next.push_back(eligible[k]);
      } else {
        fast_refused.push_back(why_not[k]);
      }
    }
  }
  if (options_.path == PathChoice::kXdp && fast_next.size() != stream_rules.size()) {
    std::string why = !fast_refused.empty() ? fast_refused.front()
                      : fast_ ? "the fast path takes TCP rules with a concrete listen address "
                                "only; use --path auto or kernel for the others"
                              : "the fast path did not start (no TCP rule it could serve): a "
                                "restart starts it";
    return Error{{}, "--path xdp: " + why};
  }
  // The checks' entries for new rules before any path serves them; given back if the kernel
  // path refuses the reload.
  checker_->SetRules(next.rules);
  // The kernel path: every stream rule (auto and kernel modes).
  if (options_.path != PathChoice::kXdp) {
    Result<void> r;
    if (kernel_) {
      r = kernel_->Reload(stream_rules, next.access);
    } else if (!stream_rules.empty()) {
      running_.access = next.access;
      r = StartKernelPath(stream_rules);
    }
    if (!r) {
      checker_->SetRules(running_.rules);
      return r.error();
    }
  }
  if (fast_) {
    if (auto r = fast_->SetRules(fast_next, next.access); !r) {
      summary.notes.push_back("fast path: " + r.error().message());
    }
    fast_rules_ = fast_next;
    fast_access_ = next.access;
    for (const std::string& why : fast_refused) {
      summary.notes.push_back(why + ": served by the kernel path until a restart");
    }
  }
  // The datagram relay: restarted when its rules changed (its associations end).
  const std::vector<Rule> datagram_rules = DatagramRules(next.rules);
  const std::vector<Rule> running_datagram = DatagramRules(running_.rules);
  const bool datagram_same =
      !access_changed && datagram_rules.size() == running_datagram.size() &&
      std::all_of(datagram_rules.begin(), datagram_rules.end(),
                  [&](const Rule& r) { return HasId(running_datagram, r.id); });
  checker_->ApplyFile(next.rules);  // the file's weights and states, kept rules' too
  const Config previous = running_;
  running_.rules = next.rules;
  running_.access = next.access;
  if (!datagram_same) {
    if (datagram_) {
      datagram_->Stop();
      datagram_.reset();
      if (!running_datagram.empty()) {
        summary.notes.push_back("the UDP rules changed: the datagram relay restarted");
      }
    }
    if (auto d = StartDatagramPath(datagram_rules); !d) {
      summary.notes.push_back(d.error().message());
    }
  }
  // Log and pid files.
  if (next.logfile != previous.logfile || next.log_common != previous.log_common) {
    if (log_ && !next.logfile.empty()) {
      log_->Retarget(next.logfile, next.log_common);
      running_.logfile = next.logfile;
      running_.log_common = next.log_common;
    } else {
      summary.notes.push_back(
          std::string("the access log is ") +
          (log_ ? "still written to " + previous.logfile : std::string("still off")) +
          ": turning it on or off takes a restart");
    }
  }
  if (next.pidfile != previous.pidfile) {
    pid_file_ = std::make_unique<PidFile>(next.pidfile);
    running_.pidfile = next.pidfile;
  }
  return summary;
}

std::vector<HealthChecker::BackendView> Service::CheckedBackends() const {
  return checker_ ? checker_->View() : std::vector<HealthChecker::BackendView>{};
}

Result<void> Service::SetBackendAdmin(uint32_t rule_id, const std::string& backend,
                                      HealthChecker::Admin admin) {
  if (!checker_) return Error{{}, "stopped"};
  return checker_->SetAdmin(rule_id, backend, admin);
}

Result<void> Service::SetBackendWeight(uint32_t rule_id, const std::string& backend,
                                       uint32_t weight) {
  if (!checker_) return Error{{}, "stopped"};
  return checker_->SetWeight(rule_id, backend, weight);
}

uint64_t Service::OpenConnections() const {
  uint64_t n = 0;
  if (fast_) n += fast_->Snapshot(nullptr, FastPath::Flows::kNotCounted).connections;
  if (kernel_) n += kernel_->Totals().relay.active;
  return n;
}

// UDP associations have no end of their own to wait for: they end when the drain starts.
uint64_t Service::BeginDrain() {
  draining_ = true;
  if (fast_) fast_->StopAccepting();
  if (kernel_) kernel_->StopAccepting();
  if (datagram_) datagram_->Stop();
  return OpenConnections();
}

void Service::Stop() {
  if (stopped_) return;
  stopped_ = true;
  checker_.reset();
  if (fast_) fast_->Stop();
  if (kernel_) kernel_->Stop();
  if (datagram_) datagram_->Stop();
  // The workers' last records are in their rings: written before the fast path goes.
  if (log_) log_->RemoveSources();
  PrintStats();
  pid_file_.reset();
}

// Whether each spinning thread has its core to itself (docs/tuning.md). Kernel-path threads are
// never pinned; they spin only with --busy-poll.
void Service::LogIsolation() {
  const FastPath* fast = fast_.get();
  const KernelPath* kernel = kernel_.get();
  std::vector<SpinningThread> spinning;
  if (fast != nullptr) {
    const std::vector<int> cpus = fast->worker_cpus();
    for (size_t w = 0; w < cpus.size(); ++w) {
      spinning.push_back({"fast-path worker " + std::to_string(w), cpus[w]});
    }
  }
  if (kernel != nullptr && kernel->busy_poll()) {
    spinning.push_back(
        {std::to_string(kernel->threads()) + " busy-polling kernel-path thread(s)", -1});
  }
  if (spinning.empty()) return;
  std::vector<int> own{static_cast<int>(getpid())};
  if (fast != nullptr) {
    for (int pid : fast->worker_pids()) own.push_back(pid);
  }
  const IsolationReport r = ReportIsolation(ReadIsolationFacts(own), spinning);
  for (const std::string& line : r.lines) Log("isolation: " + line);
  for (const std::string& warning : r.warnings) Log("isolation warning: " + warning);
  isolation_warnings_ = r.warnings;
}

void Service::PrintStats() const {
  FastPath* fast = fast_.get();
  KernelPath* kernel = kernel_.get();
  DatagramPath* datagram = datagram_.get();
  SessionLog* log = log_.get();
  if (fast != nullptr) {
    // One round of requests to the workers: the sum and each worker's from the same numbers.
    std::vector<FastPathSnapshot> each;
    Log("fast path: " + fast->Snapshot(&each).Format());
    const std::vector<int> pids = fast->worker_pids();
    if (each.size() > 1) {
      for (size_t w = 0; w < each.size(); ++w) {
        const FastPathSnapshot& s = each[w];
        Log("fast path worker " + std::to_string(w) +
            ": accepted=" + std::to_string(s.relay.accepted) +
            " pid=" + std::to_string(w < pids.size() ? pids[w] : -1) + " connections=" +
            std::to_string(s.connections) + " rx_packets=" + std::to_string(s.rx_packets) +
            " tx_packets=" + std::to_string(s.tx_packets) + " handoffs_out=" +
            std::to_string(s.handoffs_out) + " handoffs_in=" + std::to_string(s.handoffs_in) +
            " handoffs_dropped=" + std::to_string(s.handoffs_dropped) +
            " worker_busy_ns=" + std::to_string(s.worker_busy_ns) + s.RxByQueue());
      }
    }
    Log("steering: " + fast->SteerCountersLine());
  }
  if (kernel != nullptr) Log("kernel path: " + kernel->Totals().Format());
  if (datagram != nullptr) Log("datagram relay: " + datagram->Totals().Format());
  if (log != nullptr) {
    const SessionLog::Stats s = log->stats();
    const uint64_t ring_dropped = fast != nullptr ? fast->SessionRecordsDropped() : 0;
    Log("access log: lines=" + std::to_string(s.lines) +
        " dropped=" + std::to_string(s.dropped + ring_dropped) + " write_errors=" +
        std::to_string(s.write_errors) + " reopens=" + std::to_string(s.reopens));
  }
}

ServiceReport Service::Report(FastPath::Flows flows) const {
  ServiceReport r;
  r.version = XDPFWD_VERSION;
  r.pid = static_cast<int>(getpid());
  r.start_time_unix_ms = start_time_unix_ms_;
  r.uptime_ms = static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                          std::chrono::steady_clock::now() - started_)
                                          .count());
  r.path_choice = PathName(options_.path);
  r.config_file = options_.config_file;
  r.draining = draining_;
  r.warnings = isolation_warnings_;
  for (const Rule& rule : running_.rules) {
    RuleReport rr;
    rr.id = rule.id;
    rr.listen = ToString(rule.listen);
    rr.backend = ToString(rule.backend);
    rr.protocol = rule.is_stream() ? "tcp"
                                   : std::string(ProtocolName(rule.listen_protocol)) + " -> " +
                                         std::string(ProtocolName(rule.backend_protocol));
    const bool fast = std::any_of(fast_rules_.begin(), fast_rules_.end(),
                                  [&](const Rule& f) { return f.id == rule.id; });
    rr.path = !rule.is_stream() ? "datagram" : fast && fast_ ? "fast" : "kernel";
    r.rules.push_back(std::move(rr));
  }
  r.backends = CheckedBackends();
  if (fast_) {
    std::vector<FastPathSnapshot> each;
    r.fast = fast_->Snapshot(&each, flows);
    r.fast_description = fast_->description();
    const std::vector<int> pids = fast_->worker_pids();
    const std::vector<int> cpus = fast_->worker_cpus();
    const std::vector<int> lock_errors = fast_->worker_lock_errors();
    for (size_t w = 0; w < each.size(); ++w) {
      WorkerReport wr;
      wr.index = static_cast<uint32_t>(w);
      wr.pid = w < pids.size() ? pids[w] : -1;
      wr.cpu = w < cpus.size() ? cpus[w] : -1;
      if (wr.pid > 0) wr.locked_bytes = LockedBytes(wr.pid).value_or(0);
      wr.lock_error = w < lock_errors.size() ? lock_errors[w] : 0;
      wr.counters = std::move(each[w]);
      r.workers.push_back(std::move(wr));
    }
    const SteerCounters steer = fast_->SteerDecisions();
    for (size_t i = 0; i < kSteerReasonCount; ++i) {
      r.steer.push_back(
          {std::string(ReasonName(static_cast<SteerReason>(i))), steer[i].packets, steer[i].bytes});
    }
  }
  if (kernel_) {
    r.kernel = kernel_->Totals();
    r.kernel_threads = kernel_->threads();
    r.kernel_busy_poll = kernel_->busy_poll();
  }
  if (datagram_) r.datagram = datagram_->Totals();
  if (log_) {
    SessionLog::Stats s = log_->stats();
    if (fast_) s.dropped += fast_->SessionRecordsDropped();
    r.access_log = s;
    r.access_log_file = running_.logfile;
  }
  return r;
}

Result<std::string> Service::DumpTrace(const std::string& path) const {
  if (path.empty() || path[0] != '/') {
    return Error{{},
                 "trace dump: give an absolute path for the trace file (it is written by "
                 "the xdpfwd process, whose working directory is not yours)"};
  }
  const std::vector<WorkerRecording> rings = Recordings();
  if (rings.empty()) {
    return Error{{}, "trace dump: the flight recorder is off (--tune recorder=off)"};
  }
  // Both clocks read together: the trace's events (MONOTONIC) line up with other traces of
  // this boot (BOOTTIME).
  timespec mono{}, boot{};
  clock_gettime(CLOCK_MONOTONIC, &mono);
  clock_gettime(CLOCK_BOOTTIME, &boot);
  TraceClockReading clocks;
  clocks.monotonic_ns =
      static_cast<uint64_t>(mono.tv_sec) * 1'000'000'000u + static_cast<uint64_t>(mono.tv_nsec);
  clocks.boottime_ns =
      static_cast<uint64_t>(boot.tv_sec) * 1'000'000'000u + static_cast<uint64_t>(boot.tv_nsec);
  const std::string bytes = RecorderTrace(rings, clocks);
  if (auto written = WriteTraceFile(path, bytes); !written) return written.error();
  uint64_t events = 0, lost = 0;
  for (const WorkerRecording& r : rings) {
    events += r.snapshot.records.size();
    lost += r.snapshot.lost;
  }
  return path + ": " + std::to_string(events) + " events from " + std::to_string(rings.size()) +
         " worker(s), " + std::to_string(bytes.size()) + " bytes; " + std::to_string(lost) +
         " older events were overwritten (open it at https://ui.perfetto.dev)";
}

std::vector<ConnectionRow> Service::Connections(std::vector<std::string>& notes) const {
  std::vector<ConnectionRow> rows;
  if (fast_) rows = fast_->Connections(&notes);
  if (kernel_) {
    std::vector<int> silent;
    for (ConnectionRow& r : kernel_->Connections(&silent)) {
      r.id |= kKernelSessionBit;
      rows.push_back(std::move(r));
    }
    for (int t : silent) {
      notes.push_back("kernel path thread " + std::to_string(t) + " did not answer within 1 s");
    }
  }
  return rows;
}

Result<void> Service::ShutdownSession(uint64_t id) const {
  if ((id & kKernelSessionBit) != 0) {
    if (!kernel_) return Error{{}, "session " + std::to_string(id) + ": no kernel path runs"};
    return kernel_->Shutdown(id & ~kKernelSessionBit);
  }
  if (!fast_) return Error{{}, "session " + std::to_string(id) + ": no fast path runs"};
  return fast_->Shutdown(id);
}

std::vector<WorkerRecording> Service::Recordings() const {
  std::vector<WorkerRecording> rings;
  if (fast_) rings = fast_->ReadRecorders();
  if (kernel_) {
    for (WorkerRecording& r : kernel_->ReadRecorders()) rings.push_back(std::move(r));
  }
  return rings;
}

}  // namespace xdpfwd
