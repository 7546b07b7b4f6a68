// What the control-process tests share (control_test.cpp, trace_test.cpp, diagnosis_test.cpp):
// their ports, the fixtures that start a topology or a control socket path, and readers of what
// xdpfwd answers (HTTP, metrics samples, promtool, decoded traces).
#pragma once

#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "tests/support/child_process.h"
#include "tests/support/netns_topology.h"
#include "tests/support/tcp.h"

namespace xdpfwd::test {

inline constexpr uint16_t kPort = 9000;         // inside a test's own topology only
inline constexpr uint16_t kMetricsPort = 9102;  // on the topology's root-namespace address
inline constexpr int kConnections = 5;
inline constexpr size_t kBytes = 1000;  // each connection's, each way

std::string Addr(in_addr a, uint16_t port);

// The whole HTTP response to `request` from addr:port (the server closes after one).
std::string Http(in_addr addr, uint16_t port, const std::string& request);

std::string Body(const std::string& response);

// promtool's verdict on a metrics text: its exit status and what it said.
CommandResult Promtool(const std::string& text);

// The value of the sample `series` (name and labels exactly as printed) in a metrics text.
std::optional<std::string> Sample(const std::string& text, const std::string& series);

// `path` decoded by protoc with our .proto: the trace as text.
std::string DecodeTrace(const std::string& path);

// Where each of `names` first appears in `text` as an event name, in order; a missing name
// fails.
void ExpectInOrder(const std::string& text, const std::vector<std::string>& names);

// The names of the tracks that hold an event named `event` in a decoded trace: each packet is
// either a track's descriptor (uuid, name) or an event (track_uuid, name).
std::set<std::string> TracksWith(const std::string& text, const std::string& event);

// A loopback port nobody listens on now, for a rule that no client uses.
std::string LoopbackAddress();

class ControlTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    if (geteuid() != 0) GTEST_SKIP() << "namespace tests need root";
  }
  // kConnections connections through the forwarder, kBytes each way, all closed.
  void Traffic() {
    UniqueFd listener = TcpListen(topo_.server_ns(), topo_.server_addr(), kPort);
    std::thread server([&] {
      for (int i = 0; i < kConnections; ++i) {
        UniqueFd c(accept(listener.get(), nullptr, nullptr));
        EchoUntilEof(c.get());
      }
    });
    for (int i = 0; i < kConnections; ++i) {
      UniqueFd client = TcpConnect(topo_.client_ns(), topo_.client_gw(), kPort);
      const std::string data(kBytes, 'x');
      ASSERT_EQ(send(client.get(), data.data(), data.size(), 0), static_cast<ssize_t>(kBytes));
      std::string back(kBytes, '\0');
      ASSERT_EQ(recv(client.get(), back.data(), back.size(), MSG_WAITALL),
                static_cast<ssize_t>(kBytes));
      shutdown(client.get(), SHUT_WR);
      char end;
      ASSERT_EQ(recv(client.get(), &end, 1, 0), 0);
    }
    server.join();
  }
  Topology topo_;
};

class TraceTest : public ControlTest {
 protected:
  void SetUp() override {
    ControlTest::SetUp();
    trace_ = "/tmp/xdpfwd-trace-test-" + std::to_string(getpid()) + ".pftrace";
  }
  void TearDown() override { unlink(trace_.c_str()); }
  std::string trace_;
};

class ControlSocketTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (geteuid() != 0) GTEST_SKIP() << "namespace tests need root";
    path_ = "/tmp/xdpfwd-control-test-" + std::to_string(getpid()) + "/control.sock";
    listen_ = LoopbackAddress();
  }
  void TearDown() override {
    unlink(path_.c_str());
    rmdir(path_.substr(0, path_.rfind('/')).c_str());
  }
  std::string path_;
  std::string listen_;  // a rule's listen address: 127.0.0.1:PORT
};

}  // namespace xdpfwd::test
