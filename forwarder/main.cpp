// xdpfwd: the command. Reads the configuration, binds the control socket and the metrics
// listener, starts the service (forwarder/service.h), logs one "ready" line and hands the
// process to the control loop (forwarder/control_loop.h): signals, `xdpfwd ctl` commands,
// scrapes, drain and stop. `xdpfwd ctl COMMAND` is the control socket's client.
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "forwarder/config.h"
#include "forwarder/control_loop.h"
#include "forwarder/control_socket.h"
#include "forwarder/options.h"
#include "forwarder/service.h"
#include "forwarder/service_notify.h"
#include "os/log.h"

namespace xdpfwd {
namespace {

// The control socket and the metrics listener, bound before the service starts so a bad
// --metrics address or a socket in use fails before any XDP program is attached.
Result<ControlSockets> OpenControlSockets(const Options& o) {
  ControlSockets sockets;
  if (!o.control_path.empty()) {
    auto control = ListenControl(o.control_path);
    if (control) {
      sockets.control = std::move(*control);
    } else if (o.control_given) {
      return Error{{}, "--control: " + control.error().message()};
    } else {
      Log(control.error().message() + "; running without a control socket");
    }
  }
  if (o.metrics) {
    auto metrics = ListenMetrics(*o.metrics);
    if (!metrics) return metrics.error();
    sockets.metrics = std::move(*metrics);
  }
  return sockets;
}

int Run(const Options& o) {
  // Signals are taken by the control loop's signalfd; every thread started below inherits the
  // mask. A relay must never die of SIGPIPE.
  sigset_t signals;
  sigemptyset(&signals);
  for (int s : {SIGINT, SIGTERM, SIGUSR1, SIGHUP}) sigaddset(&signals, s);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  signal(SIGPIPE, SIG_IGN);

  auto sockets = OpenControlSockets(o);
  if (!sockets) {
    Log(sockets.error().message());
    return 1;
  }
  // The loop keeps the socket; should the service not start, its file is removed here.
  const ControlListener control_file{UniqueFd(), sockets->control.path, sockets->control.dev,
                                     sockets->control.ino};
  auto loop = ControlLoop::Open(o, std::move(*sockets));
  if (!loop) {
    Log(loop.error().message());
    return 1;
  }
  auto started = Service::Start(o, o.config);
  if (!started) {
    loop->reset();  // closes the control socket; its file goes with it below
    RemoveControlSocket(control_file);
    Log(started.error().message());
    return 1;
  }
  Service& service = **started;
  const std::string ready = service.ReadyLine();
  Log("ready: " + ready);
  ServiceNotify::Ready(ready);
  service.LogIsolation();
  return (*loop)->Run(service);
}

}  // namespace
}  // namespace xdpfwd

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  if (!args.empty() && args[0] == "ctl") {
    return xdpfwd::RunControlClient(std::vector<std::string>(args.begin() + 1, args.end()));
  }
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
