// The xdpfwd binary as a test subject; see forwarder_process.h.
#include "tests/support/forwarder_process.h"

#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string_view>
#include <thread>

#include <nlohmann/json.hpp>

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
  // A control socket of its own (Stats() asks it), unless the test gives one.
  if (const auto given = std::find(argv.begin(), argv.end(), "--control"); given != argv.end()) {
    if (given + 1 != argv.end() && given[1] != "none") control_path_ = given[1];
  } else {
    static std::atomic<int> started{0};
    control_path_ =
        "/tmp/xdpfwd-test-" + std::to_string(getpid()) + "-" + std::to_string(started++) + ".sock";
    remove_control_ = true;
    const auto binary = std::find(argv.begin(), argv.end(), BinaryPath());
    argv.insert(binary + 1, {"--control", control_path_});
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
  // A forwarder killed with SIGKILL leaves its socket file behind.
  if (remove_control_) unlink(control_path_.c_str());
}

namespace {

// Sends one command to the control socket at `path` and returns the whole answer; `waiting`
// runs while the answer is not there yet (at least every 50 ms).
std::string AskControl(const std::string& path, const std::string& command,
                       const std::function<void()>& waiting) {
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  if (path.size() >= sizeof a.sun_path) throw std::runtime_error("control path too long: " + path);
  std::memcpy(a.sun_path, path.data(), path.size());
  const int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0 || connect(fd, reinterpret_cast<const sockaddr*>(&a), sizeof a) != 0) {
    const std::string why = std::strerror(errno);
    if (fd >= 0) close(fd);
    throw std::runtime_error("control socket " + path + ": " + why);
  }
  const std::string line = command + "\n";
  const bool sent =
      send(fd, line.data(), line.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(line.size());
  shutdown(fd, SHUT_WR);
  // A forwarder that does not answer in 10 s fails the test, never hangs it.
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  std::string answer;
  char buffer[65536];
  bool done = false;
  while (sent && !done && std::chrono::steady_clock::now() < deadline) {
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, 50) <= 0) {
      waiting();
      continue;
    }
    const ssize_t n = read(fd, buffer, sizeof buffer);
    if (n > 0) answer.append(buffer, static_cast<size_t>(n));
    done = n <= 0;
  }
  close(fd);
  if (!done) throw std::runtime_error("control socket " + path + ": no answer to " + command);
  return answer;
}

// Adds every number under `j` to `out` as "<prefix><key>".
void Flatten(const nlohmann::json& j, const std::string& prefix,
             std::map<std::string, uint64_t>& out) {
  for (const auto& [key, value] : j.items()) {
    if (value.is_number_unsigned()) out[prefix + key] = value.get<uint64_t>();
  }
}

}  // namespace

std::string ForwarderProcess::Control(const std::string& command) {
  if (control_path_.empty()) throw std::runtime_error("this forwarder has no control socket");
  // Its log is read meanwhile: the answer may wait on a log line the forwarder writes into a
  // full pipe, and what it logged before answering is in output() after.
  child_->ReadPending();
  std::string answer = AskControl(control_path_, command, [this] { child_->ReadPending(); });
  child_->ReadPending();
  return answer;
}

// The counters as `show counters` gives them (JSON), under the keys the tests use.
std::map<std::string, uint64_t> ForwarderProcess::Stats() {
  const std::string answer = Control("show counters");
  const nlohmann::json j = nlohmann::json::parse(answer, nullptr, false);
  if (j.is_discarded() || !j.is_object()) {
    throw std::runtime_error("show counters: not JSON:\n" + answer);
  }
  std::map<std::string, uint64_t> stats;
  if (j.contains("fast_path")) {
    const nlohmann::json& fast = j["fast_path"];
    Flatten(fast["total"], "fast.", stats);
    for (const auto& [reason, counts] : fast["steer"].items()) {
      stats["steer." + reason] = counts["packets"].get<uint64_t>();
    }
    for (const nlohmann::json& w : fast["workers"]) {
      const std::string prefix = "worker." + std::to_string(w["index"].get<uint64_t>()) + ".";
      Flatten(w["counters"], prefix, stats);
      if (w["pid"].is_number_integer()) stats[prefix + "pid"] = w["pid"].get<int64_t>();
      if (w.contains("locked_bytes")) stats[prefix + "locked_bytes"] = w["locked_bytes"];
      for (const nlohmann::json& q : w["rx_by_queue"]) {
        const std::string key = "rx_packets." + q["interface"].get<std::string>() + ".q" +
                                std::to_string(q["queue"].get<uint64_t>());
        stats[prefix + key] = q["packets"].get<uint64_t>();
        stats["fast." + key] += q["packets"].get<uint64_t>();
      }
    }
  }
  if (j.contains("kernel_path")) Flatten(j["kernel_path"]["total"], "kernel.", stats);
  if (j.contains("datagram_path")) Flatten(j["datagram_path"], "datagram.", stats);
  if (j.contains("access_log")) Flatten(j["access_log"], "access_log.", stats);
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
