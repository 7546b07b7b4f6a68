// A fast-path worker's memory lock through the real binary (--tune memory-lock): what it locks
// (show workers, /proc/PID/status), and that a fresh worker's first load faults in no page with
// it on, where with it off lwIP's pools grow a page fault at a time.
#include <gtest/gtest.h>
#include <sys/socket.h>

#include <cstdint>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "os/memory_lock.h"
#include "tests/netns/control_support.h"
#include "tests/support/forwarder_process.h"

namespace xdpfwd::test {
namespace {

class MemoryLockTest : public ControlTest {
 protected:
  // kOpen connections held open at once, kEach bytes echoed on each, then one bulk transfer of
  // kBulk: lwIP's pcbs, segments and pbufs in numbers a fresh worker has not touched yet.
  void Load() {
    constexpr int kOpen = 200;
    constexpr size_t kEach = 16 << 10, kBulk = 8 << 20;
    UniqueFd listener = TcpListen(topo_.server_ns(), topo_.server_addr(), kPort);
    std::vector<UniqueFd> clients, servers;
    const std::string data(kEach, 'x');
    for (int i = 0; i < kOpen; ++i) {
      clients.push_back(TcpConnect(topo_.client_ns(), topo_.client_gw(), kPort));
      servers.emplace_back(accept(listener.get(), nullptr, nullptr));
      ASSERT_TRUE(servers.back());
      ASSERT_EQ(send(clients.back().get(), data.data(), kEach, 0), static_cast<ssize_t>(kEach));
      std::string got(kEach, '\0');
      ASSERT_EQ(recv(servers.back().get(), got.data(), kEach, MSG_WAITALL),
                static_cast<ssize_t>(kEach));
      ASSERT_EQ(send(servers.back().get(), got.data(), kEach, 0), static_cast<ssize_t>(kEach));
      ASSERT_EQ(recv(clients.back().get(), got.data(), kEach, MSG_WAITALL),
                static_cast<ssize_t>(kEach));
    }
    std::thread drain([&] {
      std::string buffer(1 << 20, '\0');
      for (size_t got = 0; got < kBulk;) {
        const ssize_t n = recv(servers.front().get(), buffer.data(), buffer.size(), 0);
        if (n <= 0) break;
        got += static_cast<size_t>(n);
      }
    });
    const std::string chunk(1 << 20, 'y');
    for (size_t sent = 0; sent < kBulk; sent += chunk.size()) {
      ASSERT_EQ(send(clients.front().get(), chunk.data(), chunk.size(), MSG_NOSIGNAL),
                static_cast<ssize_t>(chunk.size()));
    }
    drain.join();
  }

  struct Worker {
    pid_t pid = 0;
    uint64_t locked = 0;      // show counters' locked_bytes
    uint64_t proc_vmlck = 0;  // /proc/PID/status, read here
    uint64_t faults = 0;
  };
  static Worker Read(ForwarderProcess& fwd) {
    const auto stats = fwd.Stats();
    Worker w;
    w.pid = static_cast<pid_t>(ForwarderProcess::Get(stats, "worker.0.pid"));
    w.locked = ForwarderProcess::Get(stats, "worker.0.locked_bytes");
    w.proc_vmlck = LockedBytes(w.pid).value_or(0);
    w.faults = ForwarderProcess::Get(stats, "worker.0.worker_minor_faults");
    return w;
  }

  // The faults a fresh worker took in its first load.
  uint64_t FirstLoadFaults(ForwarderProcess& fwd, Worker& before) {
    before = Read(fwd);
    Load();
    const Worker after = Read(fwd);
    EXPECT_EQ(after.pid, before.pid);
    return after.faults - before.faults;
  }
};

TEST_F(MemoryLockTest, AWorkerLocksItsMemoryAndTakesNoFaultUnderLoad) {
#if defined(__SANITIZE_ADDRESS__)
  GTEST_SKIP() << "ASan's mlockall does nothing (its shadow memory could never be locked): "
                  "nothing is locked to look at";
#endif
  ForwarderProcess fwd("xdp", Addr(topo_.client_gw(), kPort), Addr(topo_.server_addr(), kPort));
  Worker w;
  const uint64_t faults = FirstLoadFaults(fwd, w);
  const std::string workers = fwd.Control("show workers");
  std::cerr << "memory-lock=on: VmLck " << w.proc_vmlck << " bytes, first load's faults " << faults
            << "\n"
            << workers;
  ASSERT_GT(w.pid, 0);
  EXPECT_GT(w.proc_vmlck, 0u);
  EXPECT_EQ(w.locked, w.proc_vmlck);  // read by the control process from the same file
  EXPECT_NE(workers.find(", locked "), std::string::npos) << workers;
  EXPECT_EQ(workers.find("mlockall refused"), std::string::npos) << workers;
  // Everything was faulted in by the lock. (A page the kernel migrates meanwhile, compaction
  // moving a locked page where vm.compact_unevictable_allowed=1, faults again: a handful at
  // most, never the thousands of an unlocked worker below.)
  EXPECT_LE(faults, 8u);
  const std::string info = fwd.Control("show info");
  EXPECT_EQ(info.find("memory unlocked"), std::string::npos) << info;
}

TEST_F(MemoryLockTest, OffLocksOnlyTheFrameAreas) {
#if defined(__SANITIZE_ADDRESS__)
  GTEST_SKIP() << "ASan's mlock and mlockall do nothing: VmLck reads 0 either way";
#endif
  uint64_t locked_on = 0;
  {
    ForwarderProcess fwd("xdp", Addr(topo_.client_gw(), kPort), Addr(topo_.server_addr(), kPort));
    locked_on = Read(fwd).proc_vmlck;
  }
  ForwarderProcess fwd("xdp", Addr(topo_.client_gw(), kPort), Addr(topo_.server_addr(), kPort),
                       {"--tune", "memory-lock=off"});
  Worker w;
  const uint64_t faults = FirstLoadFaults(fwd, w);
  std::cerr << "memory-lock=off: VmLck " << w.proc_vmlck << " bytes (on: " << locked_on
            << "), first load's faults " << faults << "\n";
  // The AF_XDP frame areas are locked either way (stack/xsk_port.cpp): 32 MiB each.
  EXPECT_GT(w.proc_vmlck, 0u);
  EXPECT_EQ(w.proc_vmlck % (32u << 20), 0u) << w.proc_vmlck;
  EXPECT_EQ(w.locked, w.proc_vmlck);
  EXPECT_LT(w.proc_vmlck, locked_on);
  // lwIP's pools grow into pages never touched before, a fault each.
  EXPECT_GT(faults, 100u);
}

}  // namespace
}  // namespace xdpfwd::test
