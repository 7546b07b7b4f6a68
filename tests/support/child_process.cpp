// Child processes for tests; see child_process.h.
#include "tests/support/child_process.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>

extern char** environ;

namespace xdpfwd::test {

ChildProcess::ChildProcess(std::vector<std::string> argv, Input input) {
  int pipefd[2];
  int infd[2] = {-1, -1};
  if (pipe2(pipefd, O_CLOEXEC) != 0 || (input == Input::kPipe && pipe2(infd, O_CLOEXEC) != 0))
    throw std::runtime_error("pipe2: " + std::string(strerror(errno)));
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, pipefd[1], STDOUT_FILENO);
  posix_spawn_file_actions_adddup2(&actions, pipefd[1], STDERR_FILENO);
  if (input == Input::kPipe) {
    posix_spawn_file_actions_adddup2(&actions, infd[0], STDIN_FILENO);
  } else {
    posix_spawn_file_actions_addopen(&actions, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
  }
  std::vector<char*> args;
  for (std::string& a : argv) args.push_back(a.data());
  args.push_back(nullptr);
  const int err = posix_spawn(&pid_, args[0], &actions, nullptr, args.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  close(pipefd[1]);
  if (infd[0] >= 0) close(infd[0]);
  in_fd_ = infd[1];
  if (err != 0) {
    close(pipefd[0]);
    CloseStdin();
    throw std::runtime_error("spawn " + argv[0] + ": " + strerror(err));
  }
  out_fd_ = pipefd[0];
}

ChildProcess::~ChildProcess() {
  if (!reaped_ && pid_ > 0) {
    kill(pid_, SIGKILL);
    int status = 0;
    while (waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
    }
  }
  if (out_fd_ >= 0) close(out_fd_);
  CloseStdin();
}

void ChildProcess::CloseStdin() {
  if (in_fd_ >= 0) close(in_fd_);
  in_fd_ = -1;
}

void ChildProcess::ReadAvailable(int timeout_ms) {
  if (out_fd_ < 0) return;
  pollfd p{out_fd_, POLLIN, 0};
  if (poll(&p, 1, timeout_ms) <= 0) return;
  char buf[4096];
  const ssize_t n = read(out_fd_, buf, sizeof(buf));
  if (n > 0) {
    output_.append(buf, static_cast<size_t>(n));
  } else if (n == 0) {
    close(out_fd_);
    out_fd_ = -1;
  }
}

void ChildProcess::ReadPending() {
  for (size_t before = output_.size() + 1; out_fd_ >= 0 && output_.size() != before;) {
    before = output_.size();
    ReadAvailable(0);
  }
}

bool ChildProcess::WaitForLine(const std::string& needle, std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    if (output_.find(needle, scanned_) != std::string::npos) {
      scanned_ = output_.find(needle, scanned_) + needle.size();
      return true;
    }
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0 || out_fd_ < 0) return false;
    ReadAvailable(static_cast<int>(std::min<int64_t>(left.count(), 50)));
  }
}

void ChildProcess::Signal(int sig) {
  if (!reaped_ && pid_ > 0) kill(pid_, sig);
}

std::optional<int> ChildProcess::Wait(std::chrono::milliseconds timeout) {
  // Once reaped, waitpid would fail with ECHILD until the deadline: answer at once.
  if (reaped_) return exit_code_;
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    int status = 0;
    const pid_t r = waitpid(pid_, &status, WNOHANG);
    if (r == pid_) {
      reaped_ = true;
      while (out_fd_ >= 0) ReadAvailable(100);
      exit_code_ = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      return exit_code_;
    }
    if (std::chrono::steady_clock::now() >= deadline) return std::nullopt;
    ReadAvailable(10);
  }
}

RunResult RunProgram(std::vector<std::string> argv, std::chrono::milliseconds timeout) {
  ChildProcess child(std::move(argv));
  RunResult result;
  auto status = child.Wait(timeout);
  result.status = status.value_or(-1);
  result.output = child.output();
  return result;
}

}  // namespace xdpfwd::test
