// A directory of a test's own under /tmp (mode 0755: an unprivileged child may read it),
// removed with everything in it when the test ends, failed or not.
#pragma once

#include <string>

namespace xdpfwd::test {

class TempDir {
 public:
  TempDir();  // throws if /tmp refuses
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }
  // path() + "/" + name.
  std::string File(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

}  // namespace xdpfwd::test
