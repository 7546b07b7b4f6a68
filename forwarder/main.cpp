// xdpfwd: the command. Reads the configuration, starts the service (forwarder/service.h), logs
// one "ready" line and then takes signals: SIGHUP reloads the configuration file and reopens the
// access log, SIGUSR1 prints counters (also every --stats-interval), SIGTERM/SIGINT drain and
// stop (connections finish or are reset, XDP detached, flow entries removed) with a summary.
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "forwarder/config.h"
#include "forwarder/options.h"
#include "forwarder/service.h"
#include "forwarder/service_notify.h"
#include "os/log.h"

namespace xdpfwd {
namespace {

// SIGHUP: the access log is reopened (logrotate) and, with -c, the file is read and served.
void Reload(Service& service, const Options& o) {
  service.ReopenLog();
  if (o.config_file.empty()) {
    Log("reload: the rule came from the command line: only the access log was reopened");
    return;
  }
  ServiceNotify::Reloading();
  auto next = LoadConfigFile(o.config_file);
  Result<ReloadSummary> done = next ? service.Reload(std::move(*next)) : next.error();
  if (!done) {
    Log("reload: " + done.error().message() + "; the running configuration stays in place");
    ServiceNotify::Ready("reload refused, running the previous configuration: " +
                         done.error().message());
    return;
  }
  Log("reload: " + o.config_file + ": " + done->Format());
  for (const std::string& note : done->notes) Log("reload: " + note);
  ServiceNotify::Ready(service.ReadyLine());
}

int Run(const Options& o) {
  // Signals are taken synchronously by this thread; every thread started below inherits the
  // mask. A relay must never die of SIGPIPE.
  sigset_t signals;
  sigemptyset(&signals);
  for (int s : {SIGINT, SIGTERM, SIGUSR1, SIGHUP}) sigaddset(&signals, s);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  signal(SIGPIPE, SIG_IGN);

  auto started = Service::Start(o, o.config);
  if (!started) {
    Log(started.error().message());
    return 1;
  }
  Service& service = **started;
  const std::string ready = service.ReadyLine();
  Log("ready: " + ready);
  ServiceNotify::Ready(ready);
  service.LogIsolation();

  const timespec tick{o.stats_interval_s > 0 ? o.stats_interval_s : 3600, 0};
  for (;;) {
    siginfo_t info{};
    const int sig = sigtimedwait(&signals, &info, &tick);
    if (sig == SIGINT || sig == SIGTERM) {
      const std::string name = sig == SIGINT ? "SIGINT" : "SIGTERM";
      if (o.drain_timeout.count() == 0) {
        Log("stopping on " + name + " (--drain-timeout 0: open connections are reset)");
        ServiceNotify::Stopping("stopping: open connections are reset");
      } else {
        Log("stopping on " + name + ": draining");
        service.Drain(o.drain_timeout, signals);
      }
      break;
    }
    if (sig == SIGHUP) {
      Reload(service, o);
    } else if (sig == SIGUSR1 || (sig < 0 && o.stats_interval_s > 0)) {
      service.PrintStats();
    }
  }
  service.Stop();
  return 0;
}

}  // namespace
}  // namespace xdpfwd

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  auto options = xdpfwd::ParseCommandLine(args);
  if (!options) {
    std::fprintf(stderr, "xdpfwd: %s\n(xdpfwd --help lists the options)\n",
                 options.error().message().c_str());
    return 2;
  }
  if (options->help) {
    std::fputs(xdpfwd::HelpText(*options).c_str(), stdout);
    return 0;
  }
  if (options->version) {
    std::printf("xdpfwd %s\n", XDPFWD_VERSION);
    return 0;
  }
  // Exit 2 and one line for a configuration error, no usage text: the file is what is wrong.
  if (!options->config_file.empty()) {
    auto config = xdpfwd::LoadConfigFile(options->config_file);
    if (!config) {
      std::fprintf(stderr, "xdpfwd: %s\n", config.error().message().c_str());
      return 2;
    }
    options->config = std::move(*config);
  }
  if (options->check_only) {
    std::fputs(xdpfwd::DescribeConfig(options->config).c_str(), stdout);
    std::printf("xdpfwd: %s: configuration OK\n", options->config_file.c_str());
    return 0;
  }
  xdpfwd::LogVerbosity() = options->verbosity;
  return xdpfwd::Run(*options);
}
