// systemd's notify protocol (sd_notify(3)) through libsystemd: one datagram per state change to
// the socket named by NOTIFY_SOCKET; sd_notify does nothing when that variable is unset.
#include "forwarder/service_notify.h"

#include <systemd/sd-daemon.h>

#include <algorithm>
#include <cinttypes>

#include "os/clock.h"

namespace xdpfwd {
namespace {

// A notify message is newline-separated KEY=VALUE pairs: a newline inside STATUS= would end it
// and start a bogus assignment, so it becomes a blank.
std::string OneLine(std::string text) {
  std::replace(text.begin(), text.end(), '\n', ' ');
  return text;
}

// The return value is ignored on purpose: a manager that went away or a full socket buffer is
// no reason to stop forwarding, and systemd's own timeouts report a READY=1 that never came.
void Send(const char* state, const std::string& status) {
  (void)sd_notifyf(/*unset_environment=*/0, "%s\nSTATUS=%s", state, OneLine(status).c_str());
}

}  // namespace

void ServiceNotify::Ready(const std::string& status) { Send("READY=1", status); }

void ServiceNotify::Reloading() {
  // systemd 253+ (Type=notify-reload) wants the CLOCK_MONOTONIC time of the reload request in
  // microseconds, to match it with the SIGHUP it sent; older managers ignore the field.
  (void)sd_notifyf(0, "RELOADING=1\nMONOTONIC_USEC=%" PRIu64, MonotonicNs() / 1000u);
}

void ServiceNotify::Status(const std::string& text) {
  (void)sd_notifyf(0, "STATUS=%s", OneLine(text).c_str());
}

void ServiceNotify::Stopping(const std::string& status) { Send("STOPPING=1", status); }

}  // namespace xdpfwd
