// A program under test run as a child process: its output captured line by line, signals sent
// to its PID only, and reaped in the destructor (SIGKILL if still running) so no test leaves a
// process behind.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <optional>
#include <string>
#include <vector>

namespace xdpfwd::test {

class ChildProcess {
 public:
  // What the child reads: /dev/null, or a pipe the test closes with CloseStdin.
  enum class Input { kNull, kPipe };

  // Starts argv[0] (a path) with stdout and stderr captured together. Throws on failure.
  explicit ChildProcess(std::vector<std::string> argv, Input input = Input::kNull);
  ~ChildProcess();
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;

  pid_t pid() const { return pid_; }
  // Reads output until a line containing `needle` appears; false on timeout or exit.
  bool WaitForLine(const std::string& needle, std::chrono::milliseconds timeout);
  void Signal(int sig);
  // The child's stdin (Input::kPipe) reaches EOF.
  void CloseStdin();
  // Waits for exit; the exit code (or 128 + signal), nullopt on timeout.
  std::optional<int> Wait(std::chrono::milliseconds timeout);
  // Reads whatever the child has written by now, without waiting (a child whose output pipe
  // fills up blocks in its next write).
  void ReadPending();
  // Everything read so far (after Wait, everything the child wrote).
  const std::string& output() const { return output_; }

 private:
  void ReadAvailable(int timeout_ms);

  pid_t pid_ = -1;
  int out_fd_ = -1;
  int in_fd_ = -1;
  bool reaped_ = false;
  int exit_code_ = -1;
  size_t scanned_ = 0;
  std::string output_;
};

// Runs argv to completion (bounded by `timeout`); returns exit code and output.
struct RunResult {
  int status = -1;
  std::string output;
};
RunResult RunProgram(std::vector<std::string> argv,
                     std::chrono::milliseconds timeout = std::chrono::seconds(30));

}  // namespace xdpfwd::test
