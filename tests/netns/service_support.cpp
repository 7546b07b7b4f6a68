// The service tests' shared helpers (see service_support.h).
#include "tests/netns/service_support.h"

#include <sys/socket.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <stdexcept>
#include <system_error>

#include "os/endpoint.h"
#include "os/unique_fd.h"
#include "tests/support/tcp.h"

namespace xdpfwd::test {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

std::string ReadFile(const std::string& path) {
  std::ifstream f(path);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

void WriteFile(const std::string& path, const std::string& text, fs::perms mode) {
  std::ofstream(path) << text;
  fs::permissions(path, mode);
}

std::string FindProgram(const std::string& name) {
  std::string path = std::getenv("PATH") ? std::getenv("PATH") : "";
  path += ":/usr/sbin:/sbin:/usr/bin:/bin";
  std::istringstream dirs(path);
  for (std::string dir; std::getline(dirs, dir, ':');) {
    const std::string candidate = dir + "/" + name;
    if (!dir.empty() && access(candidate.c_str(), X_OK) == 0) return candidate;
  }
  return "";
}

RunResult Shell(const std::string& script, const std::vector<std::string>& args,
                std::chrono::milliseconds timeout) {
  std::vector<std::string> argv{"/bin/sh", "-c", script, "sh"};
  argv.insert(argv.end(), args.begin(), args.end());
  return RunProgram(argv, timeout);
}

std::string OutputSoFar(ChildProcess& child) {
  child.WaitForLine("\x01(no such line)", 300ms);
  return child.output();
}

::testing::AssertionResult Echoes(const Topology& topo, uint16_t port) {
  try {
    UniqueFd c = TcpConnect(topo.client_ns(), topo.client_gw(), port);
    if (send(c.get(), "hello", 5, MSG_NOSIGNAL) != 5)
      return ::testing::AssertionFailure() << "send";
    shutdown(c.get(), SHUT_WR);
    const StreamStats got = ReceiveAll(c.get());
    Fnv1a want;
    want.Update("hello", 5);
    if (got.bytes != 5 || got.hash != want.value())
      return ::testing::AssertionFailure() << "port " << port << ": " << got.bytes << " bytes back";
    return ::testing::AssertionSuccess();
  } catch (const std::exception& e) {
    return ::testing::AssertionFailure() << "port " << port << ": " << e.what();
  }
}

std::string Rule(const Topology& topo, uint16_t port) {
  return ToString(topo.client_gw()) + " " + std::to_string(port) + " " +
         ToString(topo.server_addr()) + " " + std::to_string(kBackendPort) + "\n";
}

}  // namespace xdpfwd::test
