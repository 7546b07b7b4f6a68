// A minimal AF_XDP socket for tests (copy mode, one queue): something to put in the steering
// program's socket map, and a way to see which frames a real interface redirected to it. The
// product's own AF_XDP port lives in stack/; this stays deliberately small.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace xdpfwd::test {

class TestXsk {
 public:
  // Binds to ifname/queue in copy mode without loading libxdp's default program. Throws.
  static std::unique_ptr<TestXsk> Create(const std::string& ifname, uint32_t queue = 0);
  ~TestXsk();
  TestXsk(const TestXsk&) = delete;
  TestXsk& operator=(const TestXsk&) = delete;

  int fd() const;
  // Frames received within `timeout` (copies; the UMEM frames go back to the fill ring).
  std::vector<std::vector<uint8_t>> Receive(std::chrono::milliseconds timeout);

 private:
  struct Impl;
  explicit TestXsk(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace xdpfwd::test
