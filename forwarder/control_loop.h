// The control process's one loop: a single epoll over the signals (signalfd), the control
// socket and its clients, and the metrics listener and its scrapes. It owns the service from
// "ready" to exit: SIGHUP and `reload` serve the configuration file again, SIGUSR1 and
// --stats-interval log counters, SIGTERM and SIGINT drain (while the control socket still
// answers) and stop. Everything it answers comes from what the paths publish
// (Service::Report): it adds nothing to a worker's loop.
#pragma once

#include <string>

#include "forwarder/control_socket.h"
#include "forwarder/options.h"
#include "forwarder/service.h"
#include "os/unique_fd.h"

namespace xdpfwd {

struct ControlSockets {
  ControlListener control;  // its fd empty: no control socket
  UniqueFd metrics;         // listening; empty: no metrics endpoint
};

// Runs until the service has drained and stopped. SIGINT, SIGTERM, SIGHUP and SIGUSR1 must be
// blocked in every thread (main does it before starting the service). Returns the exit status.
int RunControlLoop(Service& service, const Options& options, ControlSockets sockets);

}  // namespace xdpfwd
