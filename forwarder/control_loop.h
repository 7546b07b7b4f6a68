// The control process's one loop: a single epoll over the signals (signalfd), the control
// socket and its clients, and the metrics listener and its scrapes. It owns the service from
// "ready" to exit: SIGHUP and `reload` serve the configuration file again, SIGUSR1 and
// --stats-interval log counters, SIGTERM and SIGINT drain (while the control socket still
// answers) and stop. Everything it answers comes from what the paths publish
// (Service::Report): it adds nothing to a worker's loop.
#pragma once

#include <memory>
#include <string>

#include "forwarder/control_socket.h"
#include "forwarder/options.h"
#include "forwarder/service.h"
#include "os/result.h"
#include "os/unique_fd.h"

namespace xdpfwd {

struct ControlSockets {
  ControlListener control;  // its fd empty: no control socket
  UniqueFd metrics;         // listening; empty: no metrics endpoint
};

class LoopState;

class ControlLoop {
 public:
  // Its own descriptors (an epoll, a signalfd) and the sockets' registration, set up before the
  // service starts: a process that says "ready" holds every descriptor it keeps. SIGINT,
  // SIGTERM, SIGHUP and SIGUSR1 must be blocked in every thread (main does it first).
  static Result<std::unique_ptr<ControlLoop>> Open(const Options& options, ControlSockets sockets);
  ~ControlLoop();
  ControlLoop(const ControlLoop&) = delete;
  ControlLoop& operator=(const ControlLoop&) = delete;

  // Runs until the service has drained and stopped (and stops it); the exit status.
  int Run(Service& service);

 private:
  explicit ControlLoop(std::unique_ptr<LoopState> state);
  std::unique_ptr<LoopState> state_;
};

}  // namespace xdpfwd
