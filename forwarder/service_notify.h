// What xdpfwd tells its service manager (systemd's Type=notify protocol, sd_notify(3)):
// ready once every path serves, reloading and ready again around a reload, the reason of a
// failed reload, stopping. Without NOTIFY_SOCKET in the environment every call does nothing.
#pragma once

#include <string>

namespace xdpfwd {

class ServiceNotify {
 public:
  // READY=1 with STATUS=<status>.
  static void Ready(const std::string& status);
  // RELOADING=1 with MONOTONIC_USEC=<now> (systemd 253's reload protocol; older managers
  // ignore the field).
  static void Reloading();
  // STATUS=<text> alone: e.g. why the last reload was refused.
  static void Status(const std::string& text);
  // STOPPING=1 with STATUS=<status>.
  static void Stopping(const std::string& status);
};

}  // namespace xdpfwd
