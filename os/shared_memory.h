// Memory two processes share after a fork: an anonymous memfd mapped MAP_SHARED, made by the
// parent before it forks, so every child sees the same pages at the same address. The
// handoff rings between fast-path workers live in one (stack/handoff_ring.h).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "os/result.h"
#include "os/unique_fd.h"

namespace xdpfwd {

class SharedMemory {
 public:
  // `bytes` of zeroed memory, page-rounded, pre-faulted (MAP_POPULATE) so that neither side
  // takes its first page faults on the data path. `name` shows in /proc/PID/maps.
  static Result<SharedMemory> Create(const std::string& name, size_t bytes);
  SharedMemory() = default;  // none yet
  SharedMemory(SharedMemory&& other) noexcept;
  SharedMemory& operator=(SharedMemory&& other) noexcept;
  SharedMemory(const SharedMemory&) = delete;
  SharedMemory& operator=(const SharedMemory&) = delete;
  ~SharedMemory();  // unmaps this process's view; the pages live while any view does

  uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  int fd() const { return fd_.get(); }

 private:
  SharedMemory(UniqueFd fd, uint8_t* data, size_t size)
      : fd_(std::move(fd)), data_(data), size_(size) {}

  UniqueFd fd_;
  uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace xdpfwd
