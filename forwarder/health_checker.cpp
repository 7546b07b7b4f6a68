// Active health checks (see health_checker.h): one epoll over the checks under way; the loop
// wakes for the next due check or deadline, 100 ms at the longest (a stop is seen that soon).
#include "forwarder/health_checker.h"

#include <netinet/in.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "forwarder/proxy_protocol.h"
#include "os/endpoint.h"
#include "os/fork_gate.h"
#include "os/log.h"

namespace xdpfwd {

// A check fails when its handshake takes longer than the interval or a second, whichever is
// longer: a loaded host must not mark every backend of a 100 ms check down at once.
std::chrono::milliseconds HealthChecker::CheckTimeout(const Rule& rule) {
  return std::max(std::chrono::milliseconds(rule.check_ms), std::chrono::milliseconds(1000));
}

Result<std::unique_ptr<HealthChecker>> HealthChecker::Start(
    HealthBoard& board, std::vector<IpAddress> backend_sources) {
  std::unique_ptr<HealthChecker> c(new HealthChecker(board, std::move(backend_sources)));
  c->epoll_.reset(epoll_create1(EPOLL_CLOEXEC));
  if (!c->epoll_) return SystemError("health checks: epoll_create1");
  HealthChecker* self = c.get();
  c->thread_ = std::thread([self] { self->Run(); });
  return c;
}

HealthChecker::~HealthChecker() {
  stop_ = true;
  if (thread_.joinable()) thread_.join();
}

bool HealthChecker::Covers(const Rule& rule) {
  if (!rule.is_stream()) return false;
  if (rule.check_ms != 0 || rule.backend_count() > 1) return true;
  return rule.backend_admin != BackendAdmin::kReady;  // one backend: more_backends is empty
}

void HealthChecker::SetRules(const std::vector<Rule>& rules) {
  std::lock_guard lock(mu_);
  std::vector<std::unique_ptr<Checked>> next;
  for (const Rule& rule : rules) {
    if (!Covers(rule)) continue;
    auto kept = std::find_if(rules_.begin(), rules_.end(),
                             [&](const auto& c) { return c && c->rule.id == rule.id; });
    if (kept != rules_.end()) {
      next.push_back(std::move(*kept));
      continue;
    }
    auto checked = std::make_unique<Checked>();
    checked->rule = rule;
    checked->entry = board_.Claim(rule.id);
    if (checked->entry == nullptr) {
      Log("backends: more than " + std::to_string(HealthBoard::kRules) +
          " rules with several backends, checks or states; rule " + ToString(rule.listen) +
          " is served without checks, states or per-backend counters");
      continue;
    }
    const std::vector<RuleBackend> all = AllBackends(rule);
    checked->backends.resize(all.size());
    const Clock::time_point now = Clock::now();
    for (size_t i = 0; i < all.size(); ++i) {
      Check& c = checked->backends[i];
      c.owner = checked.get();
      c.index = i;
      c.address = all[i].address;
      c.next = now;  // the first check at once
      c.view.rule_id = rule.id;
      c.view.backend = ToString(c.address);
      c.view.checked = rule.check_ms != 0;
      c.view.admin = all[i].admin;
      c.view.weight = all[i].weight;
      c.view.backup = all[i].backup;
    }
    Publish(*checked);
    PublishWeights(*checked);
    next.push_back(std::move(checked));
  }
  // What no rule covers any more: its checks under way end, its board entry goes.
  for (auto& gone : rules_) {
    if (!gone) continue;
    for (Check& c : gone->backends) {
      if (c.fd) in_flight_.erase(c.token);
    }
    board_.Release(gone->rule.id);
  }
  rules_ = std::move(next);
}

void HealthChecker::ApplyFile(const std::vector<Rule>& rules) {
  std::lock_guard lock(mu_);
  for (const Rule& rule : rules) {
    auto it = std::find_if(rules_.begin(), rules_.end(),
                           [&](const auto& c) { return c->rule.id == rule.id; });
    if (it == rules_.end()) continue;
    Checked& checked = **it;
    checked.rule = rule;  // the same rule but for weights and states (SameRule)
    const std::vector<RuleBackend> all = AllBackends(rule);
    bool weights_moved = false;
    for (size_t i = 0; i < all.size() && i < checked.backends.size(); ++i) {
      Check& c = checked.backends[i];
      if (c.view.admin != all[i].admin) SetAdminLocked(c, all[i].admin, " by the reload");
      weights_moved |= c.view.weight != all[i].weight;
      c.view.weight = all[i].weight;
      c.view.backup = all[i].backup;
    }
    Publish(checked);
    if (weights_moved) PublishWeights(checked);
  }
}

std::vector<HealthChecker::BackendView> HealthChecker::View() const {
  std::lock_guard lock(mu_);
  std::vector<BackendView> out;
  for (const auto& r : rules_) {
    for (const Check& c : r->backends) {
      BackendView v = c.view;
      if (const HealthBoard::BackendCounters* n = r->entry->CountersFor(r->rule.id, c.index)) {
        v.current = n->current.load(std::memory_order_relaxed);
        v.sessions = n->sessions.load(std::memory_order_relaxed);
        v.connect_failures = n->connect_failures.load(std::memory_order_relaxed);
        v.bytes_to_backend = n->bytes_to_backend.load(std::memory_order_relaxed);
        v.bytes_from_backend = n->bytes_from_backend.load(std::memory_order_relaxed);
      }
      out.push_back(std::move(v));
    }
  }
  return out;
}

void HealthChecker::Begin(Check& c, Clock::time_point now) {
  c.started = now;
  UniqueFd fd(socket(c.address.family(), SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  if (!fd) return End(c, false, std::string("socket: ") + std::strerror(errno), now);
  if (auto r = BindSource(fd.get(), c); !r) return End(c, false, r.error().message(), now);
  if (connect(fd.get(), c.address.get(), c.address.length) != 0 && errno != EINPROGRESS) {
    return End(c, false, std::strerror(errno), now);
  }
  c.token = next_token_++;
  epoll_event ev{};
  ev.events = EPOLLOUT;
  ev.data.u64 = c.token;
  if (epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, fd.get(), &ev) != 0) {
    return End(c, false, std::string("epoll_ctl: ") + std::strerror(errno), now);
  }
  c.fd = std::move(fd);
  in_flight_[c.token] = &c;
}

Result<void> HealthChecker::BindSource(int fd, const Check& c) {
  const Rule& rule = c.owner->rule;
  if (rule.source.family() == c.address.family()) {
    if (bind(fd, rule.source.get(), rule.source.length) != 0) {
      return Error{{}, std::string("bind to the rule's src: ") + std::strerror(errno)};
    }
    return {};
  }
  const std::vector<IpAddress> sources =
      OfFamily(backend_sources_, static_cast<sa_family_t>(c.address.family()));
  if (sources.empty()) return {};
  const IpAddress& chosen = sources[next_source_++ % sources.size()];
  const SocketAddress source = FromIpEndpoint(IpEndpoint{chosen, 0});
  const int on = 1;  // the port is chosen at connect, per 4-tuple, as for the backend legs
  setsockopt(fd, IPPROTO_IP, IP_BIND_ADDRESS_NO_PORT, &on, sizeof on);
  if (bind(fd, source.get(), source.length) != 0) {
    return Error{{}, "bind to --backend-source " + ToString(chosen) + ": " + std::strerror(errno)};
  }
  return {};
}

void HealthChecker::End(Check& c, bool passed, const std::string& why, Clock::time_point now) {
  if (c.fd) {
    if (passed && c.owner->rule.proxy != ProxyVersion::kNone) {
      // The check is the forwarder's own connection: v2's LOCAL command, v1's UNKNOWN line.
      const ProxyHeader h = c.owner->rule.proxy == ProxyVersion::kV2
                                ? MakeProxyLocalHeader()
                                : MakeProxyHeader(ProxyVersion::kV1, nullptr, nullptr);
      (void)send(c.fd.get(), h.bytes, h.size, MSG_NOSIGNAL);
    }
    in_flight_.erase(c.token);
    c.fd.reset();  // leaves the epoll set
  }
  const Rule& rule = c.owner->rule;
  ++c.view.checks;
  c.next = c.started + std::chrono::milliseconds(rule.check_ms);
  if (c.next < now) c.next = now;
  if (passed) {
    c.failed_in_a_row = 0;
    if (++c.passed_in_a_row >= rule.check_rise && !c.view.up) {
      c.view.up = true;
      Log("health checks: rule " + ToString(rule.listen) + ": backend " + c.view.backend +
          " is up (" + std::to_string(c.passed_in_a_row) + " checks passed)");
      Publish(*c.owner);
    }
    return;
  }
  ++c.view.failures;
  c.view.last_error = why;
  c.passed_in_a_row = 0;
  if (++c.failed_in_a_row >= rule.check_fall && c.view.up) {
    c.view.up = false;
    Log("health checks: rule " + ToString(rule.listen) + ": backend " + c.view.backend +
        " is down (" + std::to_string(c.failed_in_a_row) + " checks failed; " + why + ")");
    Publish(*c.owner);
  }
}

Result<HealthChecker::Check*> HealthChecker::Find(uint32_t rule_id, const std::string& backend) {
  for (auto& r : rules_) {
    if (r->rule.id != rule_id) continue;
    for (Check& c : r->backends) {
      if (c.view.backend == backend) return &c;
    }
    return Error{{}, "rule " + std::to_string(rule_id) + " has no backend " + backend};
  }
  return Error{{},
               "no rule " + std::to_string(rule_id) +
                   " with several backends, health checks or states (show backends lists "
                   "them)"};
}

void HealthChecker::SetAdminLocked(Check& c, Admin admin, const char* by) {
  c.view.admin = admin;
  if (admin == Admin::kMaint) {  // no checks while in maintenance; fresh ones after
    if (c.fd) in_flight_.erase(c.token);
    c.fd.reset();
    c.failed_in_a_row = c.passed_in_a_row = 0;
  }
  Log("backends: rule " + std::to_string(c.view.rule_id) + ": " + c.view.backend + " set to " +
      AdminName(admin) + by);
}

Result<void> HealthChecker::SetAdmin(uint32_t rule_id, const std::string& backend, Admin admin) {
  std::lock_guard lock(mu_);
  auto c = Find(rule_id, backend);
  if (!c) return c.error();
  SetAdminLocked(**c, admin, "");
  Publish(*(*c)->owner);
  return {};
}

Result<void> HealthChecker::SetWeight(uint32_t rule_id, const std::string& backend,
                                      uint32_t weight) {
  if (weight < 1 || weight > kMaxWeight) {
    return Error{{},
                 "a weight is from 1 to " + std::to_string(kMaxWeight) +
                     " (set backend ... drain takes a backend out of new connections)"};
  }
  std::lock_guard lock(mu_);
  auto c = Find(rule_id, backend);
  if (!c) return c.error();
  (*c)->view.weight = weight;
  Log("backends: rule " + std::to_string(rule_id) + ": " + backend + " weight set to " +
      std::to_string(weight));
  PublishWeights(*(*c)->owner);
  return {};
}

void HealthChecker::Publish(Checked& checked) {
  uint64_t up = 0, ready = 0;
  for (const Check& c : checked.backends) {
    if (c.view.up) up |= uint64_t{1} << c.index;
    if (c.view.admin == Admin::kReady) ready |= uint64_t{1} << c.index;
  }
  checked.entry->up.store(up, std::memory_order_release);
  checked.entry->ready.store(ready, std::memory_order_release);
}

void HealthChecker::PublishWeights(Checked& checked) {
  for (const Check& c : checked.backends) {
    checked.entry->weights[c.index].store(c.view.weight, std::memory_order_relaxed);
  }
  // After the weights (release): a picker that reads the new generation finds them. Never 0,
  // the value a picker starts from.
  uint32_t next = checked.entry->weights_generation.load(std::memory_order_relaxed) + 1;
  if (next == 0) next = 1;
  checked.entry->weights_generation.store(next, std::memory_order_release);
}

void HealthChecker::Run() {
  epoll_event events[64];
  ForkGate& gate = ForkGate::OfProcess();
  while (!stop_) {
    int wait_ms = 100;
    // Each round's work is a stretch of the fork gate's (os/fork_gate.h); the wait is not.
    ForkGate::Pass working = gate.Enter();
    {
      std::lock_guard lock(mu_);
      const Clock::time_point now = Clock::now();
      for (auto& r : rules_) {
        if (r->rule.check_ms == 0) continue;  // several backends, no checks: the admin states only
        const auto timeout = CheckTimeout(r->rule);
        for (Check& c : r->backends) {
          if (c.fd && now - c.started >= timeout) {
            End(c, false, "no answer in " + std::to_string(timeout.count()) + " ms", now);
          }
          if (!c.fd && now >= c.next && c.view.admin != Admin::kMaint) Begin(c, now);
          const Clock::time_point due = c.fd ? c.started + timeout : c.next;
          const auto ms = std::chrono::ceil<std::chrono::milliseconds>(due - now).count();
          wait_ms = static_cast<int>(std::clamp<int64_t>(ms, 0, wait_ms));
        }
      }
    }
    working.Release();
    const int n = epoll_wait(epoll_.get(), events, 64, wait_ms);
    if (n <= 0) continue;
    working = gate.Enter();
    std::lock_guard lock(mu_);
    const Clock::time_point now = Clock::now();
    for (int i = 0; i < n; ++i) {
      auto it = in_flight_.find(events[i].data.u64);
      if (it == in_flight_.end()) continue;  // ended since, or its rule went
      Check& c = *it->second;
      int err = 0;
      socklen_t len = sizeof err;
      if (getsockopt(c.fd.get(), SOL_SOCKET, SO_ERROR, &err, &len) != 0) err = errno;
      End(c, err == 0, err == 0 ? "" : std::strerror(err), now);
    }
  }
}

}  // namespace xdpfwd
