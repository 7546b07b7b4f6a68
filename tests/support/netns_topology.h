// Test topology from DESIGN.md: client namespace --veth-- root namespace --veth-- server
// namespace, uniquely named, removed in the destructor (also when a test fails or throws).
#pragma once

#include <netinet/in.h>

#include <chrono>
#include <functional>
#include <string>

#include "os/endpoint.h"

namespace xdpfwd::test {

struct CommandResult {
  int status = -1;     // exit code, or -1 if the command did not exit normally
  std::string output;  // stdout and stderr together
};

// Runs `sh -c command` (in namespace `ns` unless it is empty) and waits for it.
CommandResult RunCommand(const std::string& ns, const std::string& command);

// Runs fn on a new thread that has joined network namespace `ns`; rethrows what fn throws.
void RunInNamespace(const std::string& ns, const std::function<void()>& fn);

// Polls until a TCP connect from `ns` to addr:port succeeds or `timeout` passes.
bool WaitForTcpPort(const std::string& ns, const in_addr& addr, uint16_t port,
                    std::chrono::milliseconds timeout);

using xdpfwd::ToString;  // os/endpoint.h: dotted quad

struct TopologyOptions {
  int mtu = 1500;
  // RX and TX queues on all four veth ends. The RX queue a packet lands on is its sender's TX
  // queue, picked by the sender's transmit hash per flow.
  int queues = 1;
};

class Topology {
 public:
  explicit Topology(TopologyOptions options = {});  // throws std::runtime_error
  ~Topology();
  Topology(const Topology&) = delete;
  Topology& operator=(const Topology&) = delete;

  // Namespaces, and the root-namespace ends of the two veth pairs.
  const std::string& client_ns() const { return client_ns_; }
  const std::string& server_ns() const { return server_ns_; }
  const std::string& client_side_if() const { return client_side_if_; }
  const std::string& server_side_if() const { return server_side_if_; }
  // The interface inside each namespace.
  static constexpr const char* kNsIf = "eth0";

  in_addr client_addr() const { return client_addr_; }  // inside the client namespace
  in_addr client_gw() const { return client_gw_; }      // root ns, on client_side_if
  in_addr server_addr() const { return server_addr_; }  // inside the server namespace
  in_addr server_gw() const { return server_gw_; }      // root ns, on server_side_if

  CommandResult Run(const std::string& ns, const std::string& command) const {
    return RunCommand(ns, command);
  }

 private:
  void Build(const TopologyOptions& options);
  void Teardown() noexcept;

  std::string client_ns_, server_ns_, client_side_if_, server_side_if_;
  in_addr client_addr_{}, client_gw_{}, server_addr_{}, server_gw_{};
  bool client_ns_created_ = false, server_ns_created_ = false;
};

// Removes namespaces left by earlier test processes that were killed before their destructors
// ran (names carry the creating PID). Called by every Topology constructor.
void ReapStaleTopologies();

}  // namespace xdpfwd::test
