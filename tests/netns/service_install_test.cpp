// Installing: what `cmake --install` and `cpack -G DEB` produce from this build tree.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "tests/netns/service_support.h"
#include "tests/support/child_process.h"

namespace xdpfwd::test {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

const std::string kBuildDir = XDPFWD_BUILD_DIR;

// What `cmake --install` and the .deb put in place, as absolute paths under the prefix this
// build was configured with (the top-level CMakeLists.txt passes them).
std::vector<std::string> InstalledFiles() {
  const std::string sbin = XDPFWD_INSTALL_SBINDIR, man = XDPFWD_INSTALL_MANDIR;
  return {sbin + "/xdpfwd",    sbin + "/xdpfwd-xdp",      XDPFWD_INSTALL_UNIT,
          XDPFWD_INSTALL_CONF, man + "/man8/xdpfwd.8.gz", man + "/man5/xdpfwd.conf.5.gz"};
}

TEST(InstallTest, CmakeInstallPutsEveryFileInPlace) {
  TempDir root;
  const RunResult r =
      Shell("DESTDIR=\"$1\" \"$2\" --install \"$3\" 2>&1", {root.path(), XDPFWD_CMAKE, kBuildDir});
  ASSERT_EQ(r.status, 0) << r.output;
  const std::string sbin = root.path() + XDPFWD_INSTALL_SBINDIR;
  for (const std::string& file : InstalledFiles()) {
    EXPECT_TRUE(fs::exists(root.path() + file)) << file << "\n" << r.output;
  }
  // The installed unit names the installed binary and configuration file.
  const Unit unit = Unit::Read(root.path() + XDPFWD_INSTALL_UNIT);
  EXPECT_EQ(unit.Get("ExecStart"),
            std::string(XDPFWD_INSTALL_SBINDIR) + "/xdpfwd -c " + XDPFWD_INSTALL_CONF);
  const RunResult version = RunProgram({sbin + "/xdpfwd", "--version"});
  EXPECT_EQ(version.status, 0) << version.output;
}

TEST(InstallTest, DebDeclaresItsDependenciesAndHoldsTheFiles) {
  const std::string dpkg_deb = FindProgram("dpkg-deb");
  if (dpkg_deb.empty() || FindProgram("dpkg-shlibdeps").empty())
    GTEST_SKIP() << "dpkg-deb or dpkg-shlibdeps (dpkg-dev) is not installed";
  TempDir out;
  const RunResult r = Shell("\"$1\" -G DEB --config \"$2/CPackConfig.cmake\" -B \"$3\" 2>&1",
                            {XDPFWD_CPACK, kBuildDir, out.path()}, 180s);
  ASSERT_EQ(r.status, 0) << r.output;
  std::string deb;
  for (const auto& e : fs::directory_iterator(out.path()))
    if (e.path().extension() == ".deb") deb = e.path();
  ASSERT_FALSE(deb.empty()) << r.output;

  const RunResult depends = RunProgram({dpkg_deb, "-f", deb, "Depends"});
  for (const char* lib : {"libbpf1", "libsystemd0", "libc6", "libstdc++6"})
    EXPECT_NE(depends.output.find(lib), std::string::npos) << lib << " in " << depends.output;
  const RunResult info = RunProgram({dpkg_deb, "-I", deb});
  for (const char* field :
       {"Package: xdpfwd", "Section: net", "Maintainer:", "conffiles", "postinst", "postrm"})
    EXPECT_NE(info.output.find(field), std::string::npos) << field << "\n" << info.output;
  const RunResult files = RunProgram({dpkg_deb, "-c", deb});
  for (const std::string& path : InstalledFiles()) {
    EXPECT_NE(files.output.find(" ." + path + "\n"), std::string::npos) << path << "\n"
                                                                        << files.output;
  }
}

}  // namespace
}  // namespace xdpfwd::test
