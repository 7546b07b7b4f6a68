// The xdpfwd binary as a test subject; see forwarder_process.h.
#include "tests/support/forwarder_process.h"

#include <signal.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string_view>
#include <thread>

namespace xdpfwd::test {

using namespace std::chrono_literals;

std::string ForwarderProcess::BinaryPath() {
#ifdef XDPFWD_BINARY
  return XDPFWD_BINARY;
#else
#error "XDPFWD_BINARY must name the xdpfwd binary under test"
#endif
}

ForwarderProcess::ForwarderProcess(const std::string& path, const std::string& listen,
                                   const std::string& backend,
                                   const std::vector<std::string>& extra, const std::string& netns)
    : path_(path) {
  std::vector<std::string> argv;
  // `ip netns exec` execs the program: the child's PID is xdpfwd's.
  if (!netns.empty()) argv = {"/usr/sbin/ip", "netns", "exec", netns};
  argv.insert(argv.end(), {BinaryPath(), "--path", path});
  argv.insert(argv.end(), extra.begin(), extra.end());
  argv.push_back(listen);
  argv.push_back(backend);
  Launch(argv);
}

std::unique_ptr<ForwarderProcess> ForwarderProcess::WithConfig(
    const std::string& path, const std::string& config_file,
    const std::vector<std::string>& extra) {
  std::vector<std::string> argv{BinaryPath(), "--path", path, "-c", config_file};
  argv.insert(argv.end(), extra.begin(), extra.end());
  return std::unique_ptr<ForwarderProcess>(new ForwarderProcess(path, std::move(argv)));
}

ForwarderProcess::ForwarderProcess(const std::string& path, std::vector<std::string> argv)
    : path_(path) {
  Launch(argv);
}

void ForwarderProcess::Launch(std::vector<std::string> argv) {
  // Tests stop the forwarder with SIGTERM and expect it gone at once, its connections reset,
  // unless they test the drain itself (and give --drain-timeout).
  if (std::find(argv.begin(), argv.end(), "--drain-timeout") == argv.end()) {
    const auto binary = std::find(argv.begin(), argv.end(), BinaryPath());
    argv.insert(binary + 1, {"--drain-timeout", "0"});
  }
  child_ = std::make_unique<ChildProcess>(argv);
  if (!child_->WaitForLine("xdpfwd: ready:", 10s)) {
    child_->Signal(SIGTERM);
    child_->Wait(5s);
    throw std::runtime_error("xdpfwd did not get ready:\n" + child_->output());
  }
}

ForwarderProcess::~ForwarderProcess() {
  if (child_) {
    child_->Signal(SIGTERM);
    child_->Wait(10s);
  }
}

namespace {

// The counter lines SIGUSR1 prints, each "<prefix><first relay counter>=...". The first
// counter is part of the match because the kernel path logs other lines starting
// "xdpfwd: kernel path: " (a port range running out, the open-file limit) at any time.
constexpr const char* kFastLine = "xdpfwd: fast path: accepted=";
constexpr const char* kKernelLine = "xdpfwd: kernel path: accepted=";
constexpr const char* kSteerLine = "xdpfwd: steering: ";
// With N workers, one more line per worker: "xdpfwd: fast path worker 1: accepted=...".
constexpr std::string_view kWorkerLine = "xdpfwd: fast path worker ";

}  // namespace

std::map<std::string, uint64_t> ForwarderProcess::Stats() {
  const size_t from = child_->output().size();
  child_->Signal(SIGUSR1);
  // The kernel path's line comes last when it runs, the steering line last otherwise.
  const std::string last = path_ == "xdp" ? kSteerLine : kKernelLine;
  if (!child_->WaitForLine(last, 10s)) {
    throw std::runtime_error("no counters from xdpfwd after SIGUSR1:\n" + child_->output());
  }
  child_->WaitForLine("\n", 2s);  // the rest of that line
  std::map<std::string, uint64_t> stats;
  std::istringstream lines(child_->output().substr(from));
  for (std::string line; std::getline(lines, line);) {
    std::string prefix;
    if (line.rfind(kFastLine, 0) == 0) prefix = "fast.";
    if (line.rfind(kKernelLine, 0) == 0) prefix = "kernel.";
    if (line.rfind(kSteerLine, 0) == 0) prefix = "steer.";
    if (line.rfind(kWorkerLine, 0) == 0) {
      const size_t colon = line.find(':', kWorkerLine.size());
      if (colon == std::string::npos) continue;
      prefix = "worker." + line.substr(kWorkerLine.size(), colon - kWorkerLine.size()) + ".";
    }
    if (prefix.empty()) continue;
    std::istringstream words(line);
    for (std::string w; words >> w;) {
      const size_t eq = w.find('=');
      if (eq == std::string::npos) continue;
      stats[prefix + w.substr(0, eq)] = std::stoull(w.substr(eq + 1));
    }
  }
  return stats;
}

std::map<std::string, uint64_t> ForwarderProcess::WaitForStats(
    const std::function<bool(const std::map<std::string, uint64_t>&)>& done,
    std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  auto stats = Stats();
  while (!done(stats) && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    stats = Stats();
  }
  return stats;
}

uint64_t ForwarderProcess::Get(const std::map<std::string, uint64_t>& stats,
                               const std::string& key) {
  const auto it = stats.find(key);
  return it == stats.end() ? 0 : it->second;
}

uint64_t ForwarderProcess::Relay(const std::map<std::string, uint64_t>& stats,
                                 const std::string& name) const {
  return Get(stats, "fast." + name) + Get(stats, "kernel." + name);
}

int ForwarderProcess::Stop() {
  child_->Signal(SIGTERM);
  const auto code = child_->Wait(20s);
  if (!code) {
    child_->Signal(SIGKILL);
    child_->Wait(5s);
    return -1;
  }
  return *code;
}

uint64_t ForwarderProcess::RssKib() const {
  std::ifstream status("/proc/" + std::to_string(child_->pid()) + "/status");
  for (std::string line; std::getline(status, line);) {
    if (line.rfind("VmRSS:", 0) == 0) return std::stoull(line.substr(6));
  }
  return 0;
}

size_t ForwarderProcess::OpenFds() const {
  size_t n = 0;
  std::error_code ec;
  for (auto it = std::filesystem::directory_iterator(
           "/proc/" + std::to_string(child_->pid()) + "/fd", ec);
       !ec && it != std::filesystem::directory_iterator(); it.increment(ec)) {
    ++n;
  }
  return n;
}

}  // namespace xdpfwd::test
