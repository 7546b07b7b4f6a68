// The access log's lines, byte for byte as rinetd 0.73 writes them (src/rinetd.c, logEvent):
// its timestamp keeps strftime's trailing blank, so the tab format's first field ends in a
// blank and the common format has two blanks before the zone.
#include "forwarder/session_log.h"

#include <fcntl.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>

#include "forwarder/access.h"
#include "os/fork_gate.h"
#include "os/log.h"

namespace xdpfwd {
namespace {

// rinetd writes the bind and connect hosts as the configuration wrote them; a command-line
// rule has no such text, so its address stands in.
std::string WrittenHost(const std::string& written, const SocketAddress& address) {
  return written.empty() ? HostText(address) : written;
}

}  // namespace

std::string_view SessionResultName(SessionResult result) {
  switch (result) {
    case SessionResult::kOpened:
      return "opened";
    case SessionResult::kLocalClosedFirst:
      return "done-local-closed";
    case SessionResult::kRemoteClosedFirst:
      return "done-remote-closed";
    case SessionResult::kNotAllowed:
      return "not-allowed";
    case SessionResult::kDenied:
      return "denied";
    case SessionResult::kAcceptFailed:
      return "accept-failed -";
    case SessionResult::kLocalSocketFailed:
      return "local-socket-failed -";
    case SessionResult::kLocalBindFailed:
      return "local-bind-failed -";
    case SessionResult::kLocalConnectFailed:
      return "local-connect-failed -";
    case SessionResult::kUnknownError:
      return "unknown-error";
    case SessionResult::kIdleTimeout:
      return "done-idle-timeout";
    case SessionResult::kStallTimeout:
      return "done-stall-timeout";
    case SessionResult::kShutdown:
      return "done-shutdown";
    case SessionResult::kProxyRefused:
      return "proxy-refused";
  }
  return "unknown-error";
}

std::string FormatSessionLine(const SessionEvent& event, const Rule& rule, bool common) {
  const time_t seconds = static_cast<time_t>(event.unix_ns / 1'000'000'000);
  tm local{};
  localtime_r(&seconds, &local);
  char when[64];
  strftime(when, sizeof(when), "%d/%b/%Y:%H:%M:%S ", &local);
  const std::string client =
      event.client.ss_family == AF_UNSPEC
          ? std::string("?")
          : ClientAddressText(reinterpret_cast<const sockaddr*>(&event.client));
  const std::string from = WrittenHost(rule.listen_host, rule.listen);
  const std::string to = WrittenHost(rule.backend_host, rule.backend);
  const std::string_view result = SessionResultName(event.result);
  const std::string from_port = std::to_string(rule.listen.port());
  const std::string to_port = std::to_string(rule.backend.port());
  std::string line;
  line.reserve(160 + from.size() + to.size());
  if (common) {
    const long offset_min = local.tm_gmtoff / 60;
    const long zone = offset_min < 0 ? -offset_min : offset_min;
    char zone_text[8];
    std::snprintf(zone_text, sizeof(zone_text), "%c%.2ld%.2ld", offset_min < 0 ? '-' : '+',
                  zone / 60 % 100, zone % 60);
    line.append(client).append(" - - [").append(when).append(" ").append(zone_text);
    line.append("] \"GET /rinetd-services/").append(from).append("/").append(from_port);
    line.append("/").append(to).append("/").append(to_port).append("/").append(result);
    line.append(" HTTP/1.0\" 200 ").append(std::to_string(event.bytes_out));
    line.append(" - - - ").append(std::to_string(event.bytes_in)).append("\n");
  } else {
    line.append(when).append("\t").append(client).append("\t").append(from).append("\t");
    line.append(from_port).append("\t").append(to).append("\t").append(to_port).append("\t");
    line.append(std::to_string(event.bytes_in)).append("\t");
    line.append(std::to_string(event.bytes_out)).append("\t").append(result).append("\n");
  }
  return line;
}

Result<std::unique_ptr<SessionLog>> SessionLog::Open(const std::string& path, bool common,
                                                     std::vector<Rule> rules) {
  UniqueFd fd(open(path.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644));
  if (!fd) return SystemError("logfile " + path + ": cannot open it for appending");
  return std::unique_ptr<SessionLog>(new SessionLog(path, common, std::move(rules), std::move(fd)));
}

SessionLog::SessionLog(std::string path, bool common, std::vector<Rule> rules, UniqueFd fd)
    : path_(std::move(path)), common_(common), fd_(std::move(fd)) {
  auto by_id = std::make_shared<RulesById>();
  for (const Rule& r : rules) {
    if (r.id >= by_id->size()) by_id->resize(r.id + 1);
    (*by_id)[r.id] = r;
  }
  rules_ = std::move(by_id);
  writer_ = std::thread([this] { Run(); });
}

void SessionLog::AddRules(const std::vector<Rule>& rules) {
  std::lock_guard lock(mu_);
  auto by_id = std::make_shared<RulesById>(*rules_);
  for (const Rule& r : rules) {
    if (r.id >= by_id->size()) by_id->resize(r.id + 1);
    (*by_id)[r.id] = r;
  }
  rules_ = std::move(by_id);
}

void SessionLog::Retarget(const std::string& path, bool common) {
  {
    std::lock_guard lock(mu_);
    path_ = path;
    common_ = common;
    reopen_ = true;
  }
  cv_.notify_one();
}

SessionLog::~SessionLog() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  cv_.notify_one();
  writer_.join();
}

void SessionLog::Record(const SessionEvent& event) noexcept {
  SessionEvent stamped = event;
  if (stamped.unix_ns == 0) {
    timespec now{};
    clock_gettime(CLOCK_REALTIME, &now);  // vDSO
    stamped.unix_ns = int64_t{now.tv_sec} * 1'000'000'000 + now.tv_nsec;
  }
  std::lock_guard lock(mu_);
  if (queue_.size() >= kQueueLimit) {
    dropped_.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  queue_.push_back(stamped);
}

void SessionLog::AddSource(Source source) {
  std::lock_guard lock(mu_);
  sources_.push_back(std::move(source));
}

void SessionLog::RemoveSources() {
  Flush();  // what the sources hold now is written first
  std::lock_guard lock(mu_);
  sources_.clear();
}

void SessionLog::Reopen() {
  {
    std::lock_guard lock(mu_);
    reopen_ = true;
  }
  cv_.notify_one();
}

void SessionLog::Flush() {
  std::unique_lock lock(mu_);
  const uint64_t ticket = ++flush_wanted_;
  cv_.notify_one();
  flushed_.wait(lock, [&] { return flush_done_ >= ticket || stop_; });
}

SessionLog::Stats SessionLog::stats() const {
  return Stats{lines_.load(), dropped_.load(), write_errors_.load(), reopens_.load()};
}

void SessionLog::Run() {
  // A round every 10 ms: at 35,000 connections/s that is ~700 lines per write(2).
  constexpr auto kRound = std::chrono::milliseconds(10);
  for (;;) {
    bool stopping = false;
    {
      std::unique_lock lock(mu_);
      cv_.wait_for(lock, kRound, [&] { return stop_ || reopen_ || flush_wanted_ > flush_done_; });
      stopping = stop_;
    }
    const ForkGate::Pass working = ForkGate::OfProcess().Enter();  // os/fork_gate.h
    WriteRound();
    if (stopping) return;
  }
}

void SessionLog::WriteRound() {
  std::vector<SessionEvent> events;
  std::vector<Source> sources;
  bool reopen = false;
  uint64_t flush_ticket = 0;
  std::shared_ptr<const RulesById> rules;
  std::string path;
  bool common = false;
  {
    std::lock_guard lock(mu_);
    events.swap(queue_);
    sources = sources_;
    reopen = std::exchange(reopen_, false);
    flush_ticket = flush_wanted_;
    rules = rules_;
    path = path_;
    common = common_;
  }
  for (const Source& source : sources) source(events);
  // Each source is in order; interleave them by time (a round holds ~10 ms of events).
  std::stable_sort(events.begin(), events.end(), [](const SessionEvent& a, const SessionEvent& b) {
    return a.unix_ns < b.unix_ns;
  });
  if (reopen) {
    UniqueFd fresh(open(path.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644));
    if (fresh) {
      fd_ = std::move(fresh);
      reopens_.fetch_add(1, std::memory_order_relaxed);
    } else {
      Log("logfile " + path + ": cannot open it (" + std::strerror(errno) +
          "); still writing to the file open before");
    }
  }
  std::string batch;
  uint64_t lines = 0;
  for (const SessionEvent& e : events) {
    if (e.rule_id >= rules->size()) continue;
    batch += FormatSessionLine(e, (*rules)[e.rule_id], common);
    ++lines;
  }
  size_t done = 0;
  while (done < batch.size()) {
    const ssize_t n = write(fd_.get(), batch.data() + done, batch.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      write_errors_.fetch_add(1, std::memory_order_relaxed);
      break;
    }
    done += static_cast<size_t>(n);
  }
  lines_.fetch_add(lines, std::memory_order_relaxed);
  {
    std::lock_guard lock(mu_);
    flush_done_ = std::max(flush_done_, flush_ticket);
  }
  flushed_.notify_all();
}

}  // namespace xdpfwd
