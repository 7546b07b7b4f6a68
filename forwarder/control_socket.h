// The sockets the control loop serves besides its signals: the control socket (a Unix stream
// socket, one command per line, as HAProxy's stats socket: socat works) and the metrics
// listener (HTTP, GET /metrics); and `xdpfwd ctl`, the control socket's client for people
// without socat.
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

#include "forwarder/rules.h"
#include "os/result.h"
#include "os/unique_fd.h"

namespace xdpfwd {

// Where the control socket is unless --control says otherwise; systemd's unit gives the
// directory (RuntimeDirectory=xdpfwd).
inline constexpr const char* kDefaultControlPath = "/run/xdpfwd/control";

// The control socket's listener and the file it is bound to.
struct ControlListener {
  UniqueFd fd;
  std::string path;
  dev_t dev = 0;  // the socket file's, to know at exit whether it is still ours
  ino_t ino = 0;
};

// Binds and listens on `path`, mode 0600 (root's, or the unit's dynamic user's, only): creates
// its directory if missing, replaces a socket file nobody listens on (left by a killed
// xdpfwd), and refuses one a running process listens on ("... is in use: another xdpfwd?
// give --control PATH").
Result<ControlListener> ListenControl(const std::string& path);

// Removes the socket file if it is still the one `listener` bound (not a successor's); the
// listener's descriptor may be closed already.
void RemoveControlSocket(const ControlListener& listener);

// --metrics ADDR:PORT: a TCP listener for Prometheus's scrapes.
Result<UniqueFd> ListenMetrics(const SocketAddress& address);

// `xdpfwd ctl [--control PATH] COMMAND...`: sends the command, copies the answer to stdout.
// Exit status 0; 1 when the answer is an error ("error: ..."); 2 when nothing answers.
int RunControlClient(const std::vector<std::string>& args);

}  // namespace xdpfwd
