// The real xdpfwd binary under test: started as a child process with a rule from a topology,
// ready when it logs its "ready:" line, its counters read from its control socket as JSON
// (`show counters`), stopped with SIGTERM.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "tests/support/child_process.h"

namespace xdpfwd::test {

class ForwarderProcess {
 public:
  // Runs `xdpfwd --path <path> <extra...> <listen> <backend>`, inside network namespace `netns`
  // unless it is empty; throws if it is not ready in 10 s (the exception carries its output).
  ForwarderProcess(const std::string& path, const std::string& listen, const std::string& backend,
                   const std::vector<std::string>& extra = {}, const std::string& netns = "");
  // Runs `xdpfwd --path <path> -c <config_file> <extra...>` in the root namespace.
  static std::unique_ptr<ForwarderProcess> WithConfig(const std::string& path,
                                                      const std::string& config_file,
                                                      const std::vector<std::string>& extra = {});
  ~ForwarderProcess();

  // Counters, keyed "fast.accepted", "fast.flows", "kernel.accepted", "steer.redirect_flow",
  // "worker.0.rx_packets", "worker.0.locked_bytes", "datagram.bytes_in", "access_log.lines"... from
  // `show counters`. A counter the running paths do not have is absent (reads as 0 through Get).
  std::map<std::string, uint64_t> Stats();
  // One control command's answer (the forwarder's own socket, or the --control it was given).
  std::string Control(const std::string& command);
  const std::string& control_path() const { return control_path_; }
  // Polls Stats() until `done` holds or `timeout` passes; the last counters either way.
  std::map<std::string, uint64_t> WaitForStats(
      const std::function<bool(const std::map<std::string, uint64_t>&)>& done,
      std::chrono::milliseconds timeout = std::chrono::seconds(15));
  static uint64_t Get(const std::map<std::string, uint64_t>& stats, const std::string& key);
  // The relay counter of whichever path this forwarder runs ("accepted", "backend_reset"...),
  // summed over both paths in auto mode.
  uint64_t Relay(const std::map<std::string, uint64_t>& stats, const std::string& name) const;

  // SIGTERM and wait; the exit code.
  int Stop();
  // Waits for the process to exit by itself (no signal sent); its exit code, or nothing.
  std::optional<int> WaitExit(std::chrono::milliseconds timeout) { return child_->Wait(timeout); }
  pid_t pid() const { return child_->pid(); }
  const std::string& output() const { return child_->output(); }
  // Waits until the output holds `needle`; false after `timeout`.
  bool WaitForOutput(const std::string& needle, std::chrono::milliseconds timeout) {
    return child_->WaitForLine(needle, timeout);
  }
  // Resident memory of the process (VmRSS), in KiB.
  uint64_t RssKib() const;
  // Open file descriptors of the process.
  size_t OpenFds() const;

  static std::string BinaryPath();

 private:
  ForwarderProcess(const std::string& path, std::vector<std::string> argv);
  void Launch(std::vector<std::string> argv);  // throws if not ready in 10 s
  std::string path_;
  std::string control_path_;     // empty: --control none
  bool remove_control_ = false;  // ours to remove (a test-made path)
  std::unique_ptr<ChildProcess> child_;
};

}  // namespace xdpfwd::test
