// Shared memory for processes forked after it is made (see shared_memory.h).
#include "os/shared_memory.h"

#include <sys/mman.h>
#include <unistd.h>

#include <utility>

namespace xdpfwd {

Result<SharedMemory> SharedMemory::Create(const std::string& name, size_t bytes) {
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  const size_t size = (bytes + page - 1) / page * page;
  if (size == 0) return Error{{}, name + ": shared memory of 0 bytes"};
  UniqueFd fd(memfd_create(name.c_str(), MFD_CLOEXEC));
  if (!fd) return SystemError("memfd_create " + name);
  if (ftruncate(fd.get(), static_cast<off_t>(size)) != 0) {
    return SystemError(name + ": sizing shared memory to " + std::to_string(size) + " bytes");
  }
  void* data = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd.get(), 0);
  if (data == MAP_FAILED) return SystemError(name + ": mapping shared memory");
  return SharedMemory(std::move(fd), static_cast<uint8_t*>(data), size);
}

SharedMemory::SharedMemory(SharedMemory&& other) noexcept
    : fd_(std::move(other.fd_)),
      data_(std::exchange(other.data_, nullptr)),
      size_(std::exchange(other.size_, 0)) {}

SharedMemory& SharedMemory::operator=(SharedMemory&& other) noexcept {
  if (this != &other) {
    if (data_ != nullptr) munmap(data_, size_);
    fd_ = std::move(other.fd_);
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
  }
  return *this;
}

SharedMemory::~SharedMemory() {
  if (data_ != nullptr) munmap(data_, size_);
}

}  // namespace xdpfwd
