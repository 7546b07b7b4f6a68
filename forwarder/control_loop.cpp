// The control process's loop (control_loop.h): signals, control socket, metrics, drain.
#include "forwarder/control_loop.h"

#include <signal.h>
#include <sys/epoll.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cstring>
#include <map>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>

#include "forwarder/config.h"
#include "forwarder/control_socket.h"
#include "forwarder/diagnosis.h"
#include "forwarder/exposition.h"
#include "forwarder/service_notify.h"
#include "forwarder/trace_trigger.h"
#include "os/clock.h"
#include "os/fork_gate.h"
#include "os/log.h"
#include "os/parse_number.h"

namespace xdpfwd {
namespace {

using Clock = std::chrono::steady_clock;

// A control command is one short line; a scrape's request is a few headers. Anything longer is
// not one of ours.
constexpr size_t kMaxControlLine = 4096;
constexpr size_t kMaxHttpRequest = 16384;
// A client that sends nothing for this long is closed (a stuck scraper must not hold a slot).
constexpr auto kClientTimeout = std::chrono::seconds(10);
constexpr size_t kMaxClients = 64;
// While draining: how often the open connections are counted (each count asks the workers).
constexpr auto kDrainPoll = std::chrono::milliseconds(100);
// How often the workers' counters are compared for host warnings (forwarder/diagnosis.h): each
// look asks the workers for their numbers once.
constexpr auto kDiagnosisInterval = std::chrono::seconds(2);
// While a trace trigger is armed: how often the recorders are read for it. A worker at full
// load fills its ring in about a second: a quarter of that keeps the moments before the event.
constexpr auto kTriggerInterval = std::chrono::milliseconds(250);

constexpr const char* kHelp =
    "commands (one per line):\n"
    "  show info      version, uptime, rules and the path serving each, workers, warnings\n"
    "  show stat      CSV, one row per path: rules, then every relay counter\n"
    "  show workers   each fast-path worker: CPU, busy time, faults, AF_XDP and lwIP counters\n"
    "  show steer     the steering program's decisions by reason (CSV)\n"
    "  show backends  each backend of rules with several backends, checks or states (CSV):\n"
    "                 ready/drain/maint, checks' verdict, weight, sessions open and in all,\n"
    "                 failed handshakes, bytes each way, checks, failures, last failure\n"
    "  set backend RULE ADDR:PORT ready|drain|maint  drain and maint take no new\n"
    "                 connections (open ones carry on); maint also stops its checks\n"
    "  set weight RULE ADDR:PORT N  the backend's weight (1-256) on both paths\n"
    "  show sess      every open connection (CSV): path, worker, peers, age, bytes, and\n"
    "                 each leg's TCP state, srtt, rto, cwnd, in flight, queue, window\n"
    "  shutdown session ID  reset that connection's legs (its id from show sess)\n"
    "  show counters  every counter as one JSON object\n"
    "  show metrics   what GET /metrics returns (Prometheus text format)\n"
    "  trace dump FILE  the fast-path workers' flight recorders as a Perfetto trace\n"
    "                 (FILE: an absolute path; open it at ui.perfetto.dev)\n"
    "  trace trigger gap DURATION FILE      dump by itself when a worker does not run\n"
    "  trace trigger connect DURATION FILE  ... when a backend takes that long to connect\n"
    "  trace trigger first-byte DURATION FILE  ... when a connection's first byte back\n"
    "                 takes that long from its handshake\n"
    "  trace trigger [off]  the armed trigger, or none\n"
    "  reload         read the configuration file again and serve it (as SIGHUP)\n"
    "  help           this list\n"
    "  quit           close this connection\n";

enum class ClientKind { kControl, kMetrics };

struct Client {
  UniqueFd fd;
  ClientKind kind;
  std::string in, out;
  bool read_done = false;  // the peer shut its side, or we stop reading (answered, or refused)
  Clock::time_point deadline;
};

}  // namespace

// The loop behind ControlLoop (control_loop.h).
class LoopState {
 public:
  LoopState(const Options& options, ControlSockets sockets)
      : options_(options), sockets_(std::move(sockets)) {}
  Result<void> Open();
  int Run(Service& service);

 private:
  Result<void> Add(int fd, uint32_t events);
  void Accept(int listener, ClientKind kind);
  void OnClient(int fd, uint32_t events);
  void Flush(Client& c);
  void CloseClient(int fd);
  // True when the loop should end (stopped, or drained).
  bool OnSignal();
  void Reload(const char* why, std::string* answer);
  std::string Answer(std::string_view line, bool& close);
  // The service's report with what the loop itself knows: reloads, the host's warnings.
  ServiceReport FullReport();
  void Diagnose();
  void CheckTrigger();
  void AnswerHttp(Client& c);
  void BeginDrain(const std::string& why);
  bool CheckDrain();  // true: drained, or the limit passed
  int WaitMs() const;

  Service* service_ = nullptr;  // Run's
  const Options& options_;
  ControlSockets sockets_;
  UniqueFd epoll_, signals_;
  std::map<int, std::unique_ptr<Client>> clients_;
  uint64_t reloads_ = 0, reloads_refused_ = 0;
  HostDiagnosis diagnosis_;
  std::optional<TraceTrigger> trigger_;
  Clock::time_point next_trigger_check_ = Clock::time_point::max();
  Clock::time_point next_diagnosis_;
  Clock::time_point next_stats_ = Clock::time_point::max();
  bool draining_ = false;
  Clock::time_point drain_started_, next_drain_poll_;
  bool done_ = false;
};

Result<void> LoopState::Add(int fd, uint32_t events) {
  epoll_event ev{};
  ev.events = events;
  ev.data.fd = fd;
  if (epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, fd, &ev) != 0) return SystemError("epoll_ctl");
  return {};
}

Result<void> LoopState::Open() {
  epoll_.reset(epoll_create1(EPOLL_CLOEXEC));
  if (!epoll_) return SystemError("control loop: epoll_create1");
  sigset_t mask;
  sigemptyset(&mask);
  for (int s : {SIGINT, SIGTERM, SIGUSR1, SIGHUP}) sigaddset(&mask, s);
  signals_.reset(signalfd(-1, &mask, SFD_NONBLOCK | SFD_CLOEXEC));
  if (!signals_) return SystemError("control loop: signalfd");
  for (int fd : {signals_.get(), sockets_.control.fd.get(), sockets_.metrics.get()}) {
    if (fd < 0) continue;
    if (auto added = Add(fd, EPOLLIN); !added) return added.error();
  }
  return {};
}

int LoopState::Run(Service& service) {
  service_ = &service;
  if (options_.stats_interval_s > 0) {
    next_stats_ = Clock::now() + std::chrono::seconds(options_.stats_interval_s);
  }
  next_diagnosis_ = Clock::now();  // the first look is the baseline
  epoll_event events[32];
  ForkGate& gate = ForkGate::OfProcess();
  while (!done_) {
    const int n = epoll_wait(epoll_.get(), events, 32, WaitMs());
    // Everything below allocates and logs: no worker is forked meanwhile (os/fork_gate.h).
    const ForkGate::Pass working = gate.Enter();
    if (n < 0 && errno != EINTR) {
      Log(std::string("control loop: epoll_wait: ") + std::strerror(errno));
      break;
    }
    for (int i = 0; i < n && !done_; ++i) {
      const int fd = events[i].data.fd;
      if (fd == signals_.get()) {
        done_ = OnSignal();
      } else if (fd == sockets_.control.fd.get()) {
        Accept(fd, ClientKind::kControl);
      } else if (fd == sockets_.metrics.get()) {
        Accept(fd, ClientKind::kMetrics);
      } else {
        OnClient(fd, events[i].events);
      }
    }
    const auto now = Clock::now();
    if (!done_ && draining_ && now >= next_drain_poll_) done_ = CheckDrain();
    if (!done_ && now >= next_diagnosis_) Diagnose();
    if (!done_ && now >= next_trigger_check_) CheckTrigger();
    if (now >= next_stats_) {
      service_->PrintStats();
      next_stats_ = now + std::chrono::seconds(options_.stats_interval_s);
    }
    for (auto it = clients_.begin(); it != clients_.end();) {
      const int fd = it->first;
      ++it;
      if (now >= clients_.at(fd)->deadline) CloseClient(fd);
    }
  }
  clients_.clear();
  RemoveControlSocket(sockets_.control);
  service_->Stop();
  return 0;
}

int LoopState::WaitMs() const {
  auto until = std::min({next_stats_, next_diagnosis_, next_trigger_check_});
  if (draining_) until = std::min(until, next_drain_poll_);
  for (const auto& [fd, c] : clients_) until = std::min(until, c->deadline);
  if (until == Clock::time_point::max()) return -1;
  const auto left =
      std::chrono::duration_cast<std::chrono::milliseconds>(until - Clock::now()).count();
  return static_cast<int>(std::clamp<int64_t>(left + 1, 0, 3'600'000));
}

bool LoopState::OnSignal() {
  signalfd_siginfo info{};
  while (read(signals_.get(), &info, sizeof info) == sizeof info) {
    const int sig = static_cast<int>(info.ssi_signo);
    if (sig == SIGINT || sig == SIGTERM) {
      const std::string name = sig == SIGINT ? "SIGINT" : "SIGTERM";
      if (draining_) {
        Log("drain: second signal: resetting " + std::to_string(service_->OpenConnections()) +
            " open connection(s)");
        return true;
      }
      if (options_.drain_timeout.count() == 0) {
        Log("stopping on " + name + " (--drain-timeout 0: open connections are reset)");
        ServiceNotify::Stopping("stopping: open connections are reset");
        return true;
      }
      Log("stopping on " + name + ": draining");
      BeginDrain(name);
      if (CheckDrain()) return true;
    } else if (sig == SIGHUP) {
      Reload("SIGHUP", nullptr);
    } else if (sig == SIGUSR1) {
      service_->PrintStats();
    }
  }
  return false;
}

// UDP associations have no end of their own to wait for: they end when the drain starts.
void LoopState::BeginDrain(const std::string& /*why*/) {
  draining_ = true;
  drain_started_ = Clock::now();
  next_drain_poll_ = drain_started_;
  const uint64_t open = service_->BeginDrain();
  const std::string seconds =
      std::to_string(options_.drain_timeout.count() / 1000.0).substr(0, 4) + " s";
  Log("drain: accepting no new connections; " + std::to_string(open) +
      " open, waiting for them at most " + seconds +
      " (a second SIGTERM or SIGINT resets them at once)");
  ServiceNotify::Stopping("draining: " + std::to_string(open) + " open connection(s)");
}

bool LoopState::CheckDrain() {
  const auto now = Clock::now();
  next_drain_poll_ = now + kDrainPoll;
  const uint64_t open = service_->OpenConnections();
  const auto took = std::chrono::duration_cast<std::chrono::milliseconds>(now - drain_started_);
  if (open == 0) {
    Log("drain: every connection ended (" + std::to_string(took.count()) + " ms)");
    return true;
  }
  if (took >= options_.drain_timeout) {
    const std::string seconds =
        std::to_string(options_.drain_timeout.count() / 1000.0).substr(0, 4) + " s";
    Log("drain: " + std::to_string(open) + " connection(s) still open after " + seconds +
        ": resetting them");
    return true;
  }
  return false;
}

// SIGHUP or `reload`: the access log is reopened (logrotate) and, with -c, the file is read
// and served.
void LoopState::Reload(const char* why, std::string* answer) {
  auto say = [&](const std::string& line) {
    Log(line);
    if (answer != nullptr) *answer += line.substr(line.find(':') + 2) + "\n";
  };
  service_->ReopenLog();
  if (draining_) {
    say("reload: draining: nothing reloaded");
    return;
  }
  if (options_.config_file.empty()) {
    say("reload: the rule came from the command line: only the access log was reopened");
    return;
  }
  ++reloads_;
  ServiceNotify::Reloading();
  auto next = LoadConfigFile(options_.config_file);
  Result<ReloadSummary> done = next ? service_->Reload(std::move(*next)) : next.error();
  if (!done) {
    ++reloads_refused_;
    say("reload: " + done.error().message() + "; the running configuration stays in place");
    if (answer != nullptr) *answer = "error: " + *answer;
    ServiceNotify::Ready("reload refused, running the previous configuration: " +
                         done.error().message());
    return;
  }
  LogDetail(std::string("reload: asked by ") + why);
  say("reload: " + options_.config_file + ": " + done->Format());
  for (const std::string& note : done->notes) say("reload: " + note);
  ServiceNotify::Ready(service_->ReadyLine());
}

std::string LoopState::Answer(std::string_view line, bool& close) {
  // Words separated by blanks; case matters, as in HAProxy's.
  std::string command;
  for (size_t i = 0; i < line.size();) {
    while (i < line.size() && (line[i] == ' ' || line[i] == '\t' || line[i] == '\r')) ++i;
    size_t j = i;
    while (j < line.size() && line[j] != ' ' && line[j] != '\t' && line[j] != '\r') ++j;
    if (j > i) command += (command.empty() ? "" : " ") + std::string(line.substr(i, j - i));
    i = j;
  }
  auto report = [&] { return FullReport(); };
  if (command.empty()) return "";
  if (command == "help") return kHelp;
  if (command == "quit") {
    close = true;
    return "";
  }
  if (command == "show info") return InfoText(report());
  if (command == "show stat") return StatCsv(report());
  if (command == "show workers") return WorkersText(report());
  if (command == "show steer") return SteerText(report());
  if (command == "show backends") return BackendsCsv(service_->CheckedBackends());
  if (command.rfind("set backend ", 0) == 0) {
    std::istringstream words(command.substr(12));
    std::string rule, backend, state, extra;
    words >> rule >> backend >> state >> extra;
    const std::optional<uint32_t> id = ParseDecimal<uint32_t>(rule);
    if (!id || backend.empty() || !extra.empty() ||
        (state != "ready" && state != "drain" && state != "maint")) {
      return "error: expected set backend RULE ADDR:PORT ready|drain|maint\n";
    }
    const auto admin = state == "ready"   ? HealthChecker::Admin::kReady
                       : state == "drain" ? HealthChecker::Admin::kDrain
                                          : HealthChecker::Admin::kMaint;
    if (auto r = service_->SetBackendAdmin(*id, backend, admin); !r) {
      return "error: " + r.error().message() + "\n";
    }
    return "backend " + backend + " of rule " + rule + ": " + state + "\n";
  }
  if (command.rfind("set weight ", 0) == 0) {
    std::istringstream words(command.substr(11));
    std::string rule, backend, weight, extra;
    words >> rule >> backend >> weight >> extra;
    const std::optional<uint32_t> id = ParseDecimal<uint32_t>(rule);
    const std::optional<uint32_t> w = ParseDecimal<uint32_t>(weight);
    if (!id || backend.empty() || !w || !extra.empty()) {
      return "error: expected set weight RULE ADDR:PORT WEIGHT\n";
    }
    if (auto r = service_->SetBackendWeight(*id, backend, *w); !r) {
      return "error: " + r.error().message() + "\n";
    }
    return "backend " + backend + " of rule " + rule + ": weight " + std::to_string(*w) + "\n";
  }
  if (command == "show counters") return ReportJson(report());
  if (command == "show metrics") return MetricsText(report());
  if (command == "show sess") {
    std::vector<std::string> notes;
    std::string out = FormatConnections(service_->Connections(notes));
    for (const std::string& note : notes) out += "# " + note + "\n";
    return out;
  }
  if (command.rfind("shutdown session ", 0) == 0) {
    const std::string id_text = command.substr(17);
    const std::optional<uint64_t> id = ParseDecimal<uint64_t>(id_text);
    if (!id) return "error: shutdown session: '" + id_text + "' is not a session id (show sess)\n";
    auto done = service_->ShutdownSession(*id);
    return done ? "session " + id_text + " reset\n" : "error: " + done.error().message() + "\n";
  }
  if (command == "trace trigger") {
    return trigger_ ? "armed: " + trigger_->Describe() + "\n" : "no trigger armed\n";
  }
  if (command == "trace trigger off") {
    const bool was = trigger_.has_value();
    trigger_.reset();
    next_trigger_check_ = Clock::time_point::max();
    return was ? "trigger off\n" : "no trigger armed\n";
  }
  if (command.rfind("trace trigger ", 0) == 0) {
    auto armed = ParseTraceTrigger(command.substr(14), MonotonicNs());
    if (!armed) return "error: " + armed.error().message() + "\n";
    if (service_->Recordings().empty()) {
      return "error: trace trigger: the flight recorder is off (--tune recorder=off)\n";
    }
    trigger_ = std::move(*armed);
    next_trigger_check_ = Clock::now() + kTriggerInterval;
    Log("trace trigger armed: " + trigger_->Describe());
    return "armed: " + trigger_->Describe() + "\n";
  }
  if (command.rfind("trace dump ", 0) == 0) {
    auto dumped = service_->DumpTrace(command.substr(11));
    return dumped ? "wrote " + *dumped + "\n" : "error: " + dumped.error().message() + "\n";
  }
  if (command == "reload") {
    std::string answer;
    Reload("control socket", &answer);
    return answer;
  }
  return "error: unknown command '" + command + "' (help lists them)\n";
}

ServiceReport LoopState::FullReport() {
  ServiceReport r = service_->Report();
  r.reloads = reloads_;
  r.reloads_refused = reloads_refused_;
  for (const HostWarning& w : diagnosis_.active(Clock::now())) r.warnings.push_back(w.text);
  r.warnings_raised = diagnosis_.raised();
  return r;
}

// The fast path's workers are watched (the kernel path's threads are the scheduler's), and
// both paths' peers (Nagle peers: the kernel path's from its TCP events).
void LoopState::Diagnose() {
  const auto now = Clock::now();
  next_diagnosis_ = now + kDiagnosisInterval;
  // Without the flow maps' walk: the diagnosis reads none of it, and at 200,000 idle
  // connections that walk every 2 s was ~32% of the control process's CPU while they closed
  // (docs/benchmarks.md).
  const ServiceReport r = service_->Report(FastPath::Flows::kNotCounted);
  if (!r.fast && !r.kernel) {
    next_diagnosis_ = Clock::time_point::max();
    return;
  }
  for (const HostWarning& w : diagnosis_.Check(r, now)) Log("warning: " + w.text);
}

void LoopState::CheckTrigger() {
  next_trigger_check_ = Clock::now() + kTriggerInterval;
  if (!trigger_) {
    next_trigger_check_ = Clock::time_point::max();
    return;
  }
  const std::vector<WorkerRecording> rings = service_->Recordings();
  const std::optional<std::string> fired = FindTraceTrigger(*trigger_, rings);
  if (!fired) return;
  auto dumped = service_->DumpTrace(trigger_->file);
  Log("trace trigger: " + *fired + ": " +
      (dumped ? "wrote " + *dumped : "no trace: " + dumped.error().message()));
  trigger_.reset();  // one trace per arming: the moment, not what follows
  next_trigger_check_ = Clock::time_point::max();
}

void LoopState::Accept(int listener, ClientKind kind) {
  for (;;) {
    UniqueFd fd(accept4(listener, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC));
    if (!fd) {
      if (errno != EAGAIN && errno != EINTR && errno != ECONNABORTED) {
        Log(std::string("control loop: accept: ") + std::strerror(errno));
      }
      return;
    }
    if (clients_.size() >= kMaxClients) continue;  // closed at once: the peer sees EOF
    const int raw = fd.get();
    if (auto added = Add(raw, EPOLLIN | EPOLLOUT | EPOLLET | EPOLLRDHUP); !added) {
      Log("control loop: " + added.error().message());
      continue;
    }
    auto c = std::make_unique<Client>();
    c->fd = std::move(fd);
    c->kind = kind;
    c->deadline = Clock::now() + kClientTimeout;
    clients_[raw] = std::move(c);
    OnClient(raw, EPOLLIN);
  }
}

void LoopState::OnClient(int fd, uint32_t events) {
  auto it = clients_.find(fd);
  if (it == clients_.end()) return;
  Client& c = *it->second;
  if (events & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR)) {
    char buffer[4096];
    while (!c.read_done) {
      const ssize_t n = read(fd, buffer, sizeof buffer);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && errno == EAGAIN) break;
      if (n <= 0) {
        c.read_done = true;
        break;
      }
      c.in.append(buffer, static_cast<size_t>(n));
      c.deadline = Clock::now() + kClientTimeout;
      if (c.kind == ClientKind::kMetrics) {
        if (c.in.find("\r\n\r\n") != std::string::npos || c.in.size() > kMaxHttpRequest) {
          AnswerHttp(c);
        }
        continue;
      }
      // Every whole line is a command; its answer ends with a blank line.
      size_t eol;
      while (!c.read_done && (eol = c.in.find('\n')) != std::string::npos) {
        bool close = false;
        const std::string answer = Answer(std::string_view(c.in).substr(0, eol), close);
        c.in.erase(0, eol + 1);
        if (!answer.empty()) c.out += answer + "\n";
        if (close) c.read_done = true;
      }
      if (c.in.size() > kMaxControlLine) {
        c.out += "error: a command is one line of at most " + std::to_string(kMaxControlLine) +
                 " bytes\n\n";
        c.read_done = true;
      }
    }
    // The peer's last line may come without its newline (printf 'show info' | socat ...).
    if (c.read_done && c.kind == ClientKind::kControl && !c.in.empty()) {
      bool close = false;
      const std::string answer = Answer(c.in, close);
      c.in.clear();
      if (!answer.empty()) c.out += answer + "\n";
    }
    if (c.read_done && c.kind == ClientKind::kMetrics && c.out.empty()) AnswerHttp(c);
  }
  Flush(c);
  if (c.fd && c.read_done && c.out.empty()) CloseClient(fd);
}

void LoopState::AnswerHttp(Client& c) {
  c.read_done = true;  // one request per connection: Connection: close
  const std::string_view request = c.in;
  const std::string_view first = request.substr(0, request.find("\r\n"));
  std::string status = "200 OK", type = "text/plain; version=0.0.4; charset=utf-8", body;
  if (first.rfind("GET ", 0) != 0 && first.rfind("HEAD ", 0) != 0) {
    status = "405 Method Not Allowed";
    type = "text/plain; charset=utf-8";
    body = "GET /metrics\n";
  } else {
    const size_t path_start = first.find(' ') + 1;
    const std::string_view path =
        first.substr(path_start, first.find(' ', path_start) - path_start);
    if (path == "/metrics" || path.rfind("/metrics?", 0) == 0) {
      body = MetricsText(FullReport());
    } else {
      status = "404 Not Found";
      type = "text/plain; charset=utf-8";
      body = "xdpfwd serves /metrics\n";
    }
  }
  c.out = "HTTP/1.1 " + status + "\r\nContent-Type: " + type +
          "\r\nContent-Length: " + std::to_string(body.size()) + "\r\nConnection: close\r\n\r\n";
  if (first.rfind("HEAD ", 0) != 0) c.out += body;
}

void LoopState::Flush(Client& c) {
  while (!c.out.empty()) {
    const ssize_t n = send(c.fd.get(), c.out.data(), c.out.size(), MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == EAGAIN) return;  // EPOLLOUT (edge-triggered) says when to go on
    if (n < 0) {
      c.out.clear();  // the peer is gone: nothing more to send
      c.read_done = true;
      return;
    }
    c.out.erase(0, static_cast<size_t>(n));
    c.deadline = Clock::now() + kClientTimeout;
  }
}

void LoopState::CloseClient(int fd) {
  epoll_ctl(epoll_.get(), EPOLL_CTL_DEL, fd, nullptr);
  clients_.erase(fd);
}

ControlLoop::ControlLoop(std::unique_ptr<LoopState> state) : state_(std::move(state)) {}
ControlLoop::~ControlLoop() = default;

Result<std::unique_ptr<ControlLoop>> ControlLoop::Open(const Options& options,
                                                       ControlSockets sockets) {
  auto state = std::make_unique<LoopState>(options, std::move(sockets));
  if (auto opened = state->Open(); !opened) return opened.error();
  return std::unique_ptr<ControlLoop>(new ControlLoop(std::move(state)));
}

int ControlLoop::Run(Service& service) { return state_->Run(service); }

}  // namespace xdpfwd
