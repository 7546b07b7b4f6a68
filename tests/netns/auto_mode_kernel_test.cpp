// --path auto through the real xdpfwd binary (tests/netns/auto_mode_fixture.h), next to the
// kernel: connections the kernel had before the program attached stay the kernel's (another
// port, the rule's own port, a TIME_WAIT 4-tuple reused), and everything goes to the kernel
// path when the fast path cannot start on either interface.
#include <gtest/gtest.h>

#include "tests/netns/auto_mode_fixture.h"

namespace xdpfwd::test {
namespace {

// A kernel connection on another port of the same address, made before xdpfwd attached its
// program, keeps working: its packets are passed, none taken.
TEST_F(AutoModeTest, KernelConnectionSurvivesTheProgramAttaching) {
  KernelConnection k = ConnectToRootListener(topo(), kOtherPort);
  ExpectPingPong(k.client.get(), k.served.get());
  EchoBackend echo(topo(), kPort);
  AutoForwarder fwd({listen(), backend()});
  ExpectFastPathRunning(fwd);

  ExpectRootEchoedMiB(k, 3);
  Counters c = fwd.Stats();
  // Not a bare SYN and no flow entry: passed, as were its 1 MiB each way.
  EXPECT_GT(Get(c, "steer.pass_unknown_flow"), kMinFramesPerMiB);
  EXPECT_EQ(Get(c, "steer.redirect_new_flow"), 0u);
  EXPECT_EQ(Get(c, "steer.redirect_flow"), 0u);
  EXPECT_EQ(Get(c, "fast.accepted") + Get(c, "kernel.accepted"), 0u);

  // The rule's own traffic still goes to the fast path.
  {
    UniqueFd client = Connect();
    ExpectEchoedMiB(client.get(), 4);
  }
  c = fwd.WaitForStats([](const Counters& s) { return Get(s, "fast.completed") == 1; });
  EXPECT_EQ(Get(c, "fast.accepted"), 1u) << fwd.output();
  EXPECT_EQ(Get(c, "kernel.accepted"), 0u);
  EXPECT_EQ(Get(c, "steer.redirect_new_flow"), 1u);
  EXPECT_EQ(fwd.Stop(), 0) << fwd.output();
}

// The same on the rule's own port: a connection established to a kernel listener on
// client_gw:9000 whose listener is then closed. xdpfwd's kernel listener joins the port, the
// old connection keeps going to the kernel, and a new connection goes to the fast path.
TEST_F(AutoModeTest, KernelConnectionOnTheRulePortSurvivesTheProgramAttaching) {
  KernelConnection k = ConnectToRootListener(topo(), kPort);
  ExpectPingPong(k.client.get(), k.served.get());
  EchoBackend echo(topo(), kPort);
  AutoForwarder fwd({listen(), backend()});
  ExpectFastPathRunning(fwd);

  ExpectRootEchoedMiB(k, 5);
  Counters c = fwd.Stats();
  // The program consults the kernel's sockets on bare SYNs only (pass_kernel_owns); every later
  // packet of a flow it has no entry for is pass_unknown_flow.
  EXPECT_GT(Get(c, "steer.pass_unknown_flow"), kMinFramesPerMiB);
  EXPECT_EQ(Get(c, "steer.redirect_new_flow"), 0u);
  EXPECT_EQ(Get(c, "steer.redirect_flow"), 0u);
  EXPECT_EQ(Get(c, "fast.accepted") + Get(c, "kernel.accepted"), 0u);

  {
    UniqueFd client = Connect();
    ExpectEchoedMiB(client.get(), 6);
  }
  c = fwd.WaitForStats([](const Counters& s) { return Get(s, "fast.completed") == 1; });
  EXPECT_EQ(Get(c, "fast.accepted"), 1u);
  EXPECT_EQ(Get(c, "kernel.accepted"), 0u) << "the listener trap: a LISTEN socket owns no flow";
  EXPECT_EQ(Get(c, "steer.redirect_new_flow"), 1u);
  EXPECT_EQ(Get(c, "steer.pass_kernel_owns"), 0u);
  EXPECT_EQ(fwd.Stop(), 0) << fwd.output();
}

// A SYN reusing a 4-tuple the root namespace holds in TIME_WAIT is the kernel's
// (pass_kernel_owns): the kernel reopens it to its listener on the port, xdpfwd's kernel path.
TEST_F(AutoModeTest, SynReusingAKernelTimeWaitTupleGoesToTheKernelPath) {
  KernelConnection k = ConnectToRootListener(topo(), kPort);
  ExpectPingPong(k.client.get(), k.served.get());
  sockaddr_in client_end{};
  socklen_t len = sizeof(client_end);
  ASSERT_EQ(getsockname(k.client.get(), reinterpret_cast<sockaddr*>(&client_end), &len), 0);
  const uint16_t client_port = ntohs(client_end.sin_port);
  EchoBackend echo(topo(), kPort);
  AutoForwarder fwd({listen(), backend()});
  ExpectFastPathRunning(fwd);

  // The root namespace closes first, so it is the side left in TIME_WAIT.
  k.served.reset();
  char byte;
  ASSERT_EQ(recv(k.client.get(), &byte, 1, 0), 0);
  k.client.reset();
  const std::string tuple = Addr(topo().client_gw(), kPort);
  const std::string peer = Addr(topo().client_addr(), client_port);
  bool time_wait = false;
  for (const auto deadline = Clock::now() + 5s; !time_wait && Clock::now() < deadline;) {
    std::istringstream lines(topo().Run("", "ss -Htan state time-wait").output);
    for (std::string line; std::getline(lines, line);) {
      time_wait = time_wait ||
                  (line.find(tuple) != std::string::npos && line.find(peer) != std::string::npos);
    }
    if (!time_wait) std::this_thread::sleep_for(10ms);
  }
  ASSERT_TRUE(time_wait) << tuple << " " << peer << " never reached TIME_WAIT";

  // Same source port again. Until the client's old socket has its last ACK the 4-tuple is
  // still in use there (EADDRNOTAVAIL): poll.
  UniqueFd client;
  RunInNamespace(topo().client_ns(), [&] {
    const auto deadline = Clock::now() + 5s;
    for (;;) {
      client.reset(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
      const int one = 1;
      setsockopt(client.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
      SetTimeouts(client.get());
      sockaddr_in from = client_end;
      sockaddr_in to{};
      to.sin_family = AF_INET;
      to.sin_addr = topo().client_gw();
      to.sin_port = htons(kPort);
      if (bind(client.get(), reinterpret_cast<sockaddr*>(&from), sizeof(from)) == 0 &&
          connect(client.get(), reinterpret_cast<sockaddr*>(&to), sizeof(to)) == 0) {
        return;
      }
      if ((errno != EADDRNOTAVAIL && errno != EADDRINUSE) || Clock::now() > deadline) {
        throw std::runtime_error("reconnect from port " + std::to_string(client_port) + ": " +
                                 strerror(errno));
      }
      std::this_thread::sleep_for(10ms);
    }
  });
  ExpectEchoedMiB(client.get(), 7);
  client.reset();
  const Counters c =
      fwd.WaitForStats([](const Counters& s) { return Get(s, "kernel.completed") == 1; });
  EXPECT_EQ(Get(c, "steer.pass_kernel_owns"), 1u);
  EXPECT_EQ(Get(c, "kernel.accepted"), 1u);
  EXPECT_EQ(Get(c, "kernel.completed"), 1u);
  EXPECT_EQ(Get(c, "fast.accepted"), 0u);
  EXPECT_EQ(Get(c, "steer.redirect_new_flow"), 0u);
  EXPECT_EQ(fwd.Stop(), 0) << fwd.output();
}

// The client side's interface is taken: the fast path fails before attaching anything.
TEST_F(AutoModeTest, AutoFallsBackWhenTheFastPathCannotStart) {
  ExpectFallbackBecauseOf(topo().client_side_if());
}

// The backend side's interface is taken: the fast path has already attached to the client side
// when it fails, and must detach from it again before the kernel path takes everything.
TEST_F(AutoModeTest, AutoFallsBackWhenTheBackendInterfaceIsTaken) {
  ExpectFallbackBecauseOf(topo().server_side_if());
}

}  // namespace
}  // namespace xdpfwd::test
