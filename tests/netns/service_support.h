// What the service tests share (service_notify_test.cpp, service_capabilities_test.cpp,
// service_unit_file_test.cpp, service_install_test.cpp): their ports, the unit file as systemd
// reads the lines they care about, files and programs, a private directory, a rule and an echo
// through the topology.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <map>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "tests/support/child_process.h"
#include "tests/support/netns_topology.h"
#include "tests/support/temp_dir.h"

namespace xdpfwd::test {

// Ports inside a test's own topology only.
inline constexpr uint16_t kPort = 9000;
inline constexpr uint16_t kBackendPort = 9100;

inline const std::string kUnitFile = XDPFWD_UNIT_FILE;

std::string ReadFile(const std::string& path);
void WriteFile(const std::string& path, const std::string& text, std::filesystem::perms mode);

// A program on PATH (or in the sbin directories a root PATH has), as a full path; empty if none.
std::string FindProgram(const std::string& name);

// `sh -c script` with the arguments as $1...; what it wrote and its exit code.
RunResult Shell(const std::string& script, const std::vector<std::string>& args = {},
                std::chrono::milliseconds timeout = std::chrono::seconds(60));

// The unit file, as systemd reads the lines these tests care about.
struct Unit {
  // [Section] -> its Key=Value lines in order (a key may repeat: ExecReload).
  std::map<std::string, std::vector<std::pair<std::string, std::string>>> sections;

  static Unit Read(const std::string& path) {
    Unit unit;
    std::istringstream in(ReadFile(path));
    std::string section;
    for (std::string line; std::getline(in, line);) {
      if (line.empty() || line[0] == '#' || line[0] == ';') continue;
      if (line[0] == '[') {
        section = line.substr(1, line.find(']') - 1);
        continue;
      }
      const size_t eq = line.find('=');
      if (eq != std::string::npos)
        unit.sections[section].emplace_back(line.substr(0, eq), line.substr(eq + 1));
    }
    return unit;
  }
  std::vector<std::string> All(const std::string& key) const {
    std::vector<std::string> values;
    auto it = sections.find("Service");
    if (it == sections.end()) return values;
    for (const auto& [k, v] : it->second)
      if (k == key) values.push_back(v);
    return values;
  }
  std::string Get(const std::string& key) const {
    const auto values = All(key);
    return values.empty() ? "" : values.back();
  }
  std::vector<std::string> Words(const std::string& key) const {
    std::vector<std::string> words;
    std::istringstream in(Get(key));
    for (std::string w; in >> w;) words.push_back(w);
    return words;
  }
};

// What the child has written so far, read for a moment longer: for failure messages.
std::string OutputSoFar(ChildProcess& child);

// A client in the topology's client namespace gets its bytes back through listen port `port`.
::testing::AssertionResult Echoes(const Topology& topo, uint16_t port);

// A rinetd rule from the topology's client-side gateway, port `port`, to the server's
// kBackendPort.
std::string Rule(const Topology& topo, uint16_t port);

}  // namespace xdpfwd::test
