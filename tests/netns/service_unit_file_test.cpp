// What xdpfwd ships beside the binary: the systemd unit (as systemd reads it, and accepted by
// systemd-analyze verify), the man pages (rendered without a warning, every --help option in
// xdpfwd(8)) and the example configuration.
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <set>
#include <sstream>
#include <string>
#include <utility>

#include "tests/netns/service_support.h"
#include "tests/support/child_process.h"
#include "tests/support/forwarder_process.h"

namespace xdpfwd::test {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

const std::string kExampleConfig = XDPFWD_EXAMPLE_CONFIG;
const std::string kManDir = XDPFWD_MAN_DIR;

// `text` with every `from` replaced by `to`. (No std::regex: GCC 12's, under the sanitizer
// build's flags, trips -Wmaybe-uninitialized inside libstdc++.)
std::string ReplaceAll(std::string text, const std::string& from, const std::string& to) {
  for (size_t at = text.find(from); at != std::string::npos; at = text.find(from, at + to.size()))
    text.replace(at, from.size(), to);
  return text;
}

// ---- The unit file itself ----

TEST(UnitFileTest, NotifyReloadThatChecksFirstAndLimits) {
  const Unit unit = Unit::Read(kUnitFile);
  EXPECT_EQ(unit.Get("Type"), "notify");
  const std::string start = unit.Get("ExecStart");
  EXPECT_EQ(start, "/usr/sbin/xdpfwd -c /etc/xdpfwd.conf");
  // The file is checked first; systemd runs the next ExecReload= only if that exits 0.
  const auto reload = unit.All("ExecReload");
  ASSERT_EQ(reload.size(), 2u);
  EXPECT_EQ(reload[0], "/usr/sbin/xdpfwd -t -c /etc/xdpfwd.conf");
  EXPECT_EQ(reload[1], "/bin/kill -HUP $MAINPID");
  EXPECT_EQ(unit.Get("NoNewPrivileges"), "yes");
  EXPECT_EQ(unit.Get("LimitMEMLOCK"), "infinity");
  EXPECT_FALSE(unit.Get("LimitNOFILE").empty());
  // SIGTERM to the control process alone: it drains and stops its workers itself.
  EXPECT_EQ(unit.Get("KillMode"), "mixed");
}

TEST(UnitFileTest, SystemdAnalyzeVerifyAcceptsIt) {
  const std::string analyze = FindProgram("systemd-analyze");
  if (analyze.empty()) GTEST_SKIP() << "systemd-analyze is not installed";
  // The unit as the package installs it, with its two paths pointing at this build and a
  // configuration file; Documentation= found through MANPATH in a man tree of the pages.
  TempDir dir;
  std::string text = ReadFile(kUnitFile);
  text = ReplaceAll(text, "/usr/sbin/xdpfwd", ForwarderProcess::BinaryPath());
  text = ReplaceAll(text, "/etc/xdpfwd.conf", dir.path() + "/xdpfwd.conf");
  WriteFile(dir.path() + "/xdpfwd.service", text, fs::perms(0644));
  WriteFile(dir.path() + "/xdpfwd.conf", "127.0.0.1 9000 127.0.0.1 9001\n", fs::perms(0644));
  for (const auto& [section, page] :
       {std::pair<std::string, std::string>{"8", "xdpfwd.8"}, {"5", "xdpfwd.conf.5"}}) {
    fs::create_directories(dir.path() + "/man/man" + section);
    fs::copy_file(kManDir + "/" + page, dir.path() + "/man/man" + section + "/" + page);
  }
  // Without man-db there is nothing to look the pages up with: that check is left out.
  const std::string man = FindProgram("man").empty() ? "--man=no" : "--man=yes";
  const RunResult r = Shell("MANPATH=\"$1\" \"$2\" verify \"$3\" \"$4\" 2>&1",
                            {dir.path() + "/man", analyze, man, dir.path() + "/xdpfwd.service"});
  EXPECT_EQ(r.status, 0) << r.output;
  EXPECT_EQ(r.output, "") << "systemd-analyze has remarks";
}

// ---- Man pages ----

class ManPageTest : public ::testing::TestWithParam<const char*> {};

TEST_P(ManPageTest, RendersWithoutWarnings) {
  if (FindProgram("man").empty()) GTEST_SKIP() << "man (man-db) is not installed";
  const std::string page = kManDir + "/" + GetParam();
  // Only what man and groff write to stderr comes back.
  const RunResult r = Shell("MANWIDTH=80 man --warnings -l \"$1\" 2>&1 >/dev/null", {page});
  EXPECT_EQ(r.status, 0) << r.output;
  EXPECT_EQ(r.output, "") << page << " has warnings";
  const RunResult text = Shell("MANWIDTH=80 man -l \"$1\" 2>/dev/null", {page});
  for (const char* section : {"NAME", "SYNOPSIS", "DESCRIPTION", "FILES", "EXAMPLES", "SEE ALSO"})
    EXPECT_NE(text.output.find(std::string("\n") + section + "\n"), std::string::npos) << section;
}

INSTANTIATE_TEST_SUITE_P(Pages, ManPageTest, ::testing::Values("xdpfwd.8", "xdpfwd.conf.5"),
                         [](const auto& p) {
                           std::string name = p.param;
                           std::replace(name.begin(), name.end(), '.', '_');
                           return name;
                         });

TEST(ManPageContentTest, Xdpfwd8HasEveryOptionOfHelpAndTheSections) {
  const RunResult help = RunProgram({ForwarderProcess::BinaryPath(), "--help"});
  ASSERT_EQ(help.status, 0);
  // The roff source with its escaped hyphens plain: "\-\-path" reads "--path".
  const std::string page = ReplaceAll(ReadFile(kManDir + "/xdpfwd.8"), "\\-", "-");
  // Options: words of the help text that start with "-" and a letter ("--path", "-t,"), up to
  // the first character that cannot be part of an option name.
  std::set<std::string> options;
  std::istringstream words(help.output);
  for (std::string w; words >> w;) {
    if (w.size() < 2 || w[0] != '-' ||
        !std::isalpha(static_cast<unsigned char>(w[w[1] == '-' ? 2 : 1])))
      continue;
    const size_t end = w.find_first_not_of("-abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ");
    options.insert(w.substr(0, end));
  }
  ASSERT_GT(options.size(), 20u) << help.output;
  for (const std::string& o : options)
    EXPECT_NE(page.find(o), std::string::npos) << o << " from --help is not in xdpfwd(8)";
  for (const char* section : {"OPTIONS", "PATHS", "SIGNALS", "EXIT STATUS", "SEE ALSO"})
    EXPECT_NE(page.find(std::string(".SH ") + section), std::string::npos) << section;
  for (const char* signal : {"SIGHUP", "SIGUSR1", "SIGTERM", "SIGINT"})
    EXPECT_NE(page.find(signal), std::string::npos) << signal;
}

// ---- The example configuration ----

TEST(ExampleConfigTest, ChecksOnceItsExamplesAreUncommented) {
  // As shipped every rule is an example: xdpfwd refuses to start until one is written.
  const RunResult shipped =
      RunProgram({ForwarderProcess::BinaryPath(), "-t", "-c", kExampleConfig});
  EXPECT_EQ(shipped.status, 2) << shipped.output;
  EXPECT_NE(shipped.output.find("expected at least one rule"), std::string::npos) << shipped.output;
  // Its examples ("#word", not "# prose") form a valid file.
  TempDir dir;
  std::string text;
  std::istringstream lines(ReadFile(kExampleConfig));
  for (std::string line; std::getline(lines, line);)
    text += (line.size() > 1 && line[0] == '#' && line[1] != ' ' ? line.substr(1) : line) + "\n";
  WriteFile(dir.path() + "/xdpfwd.conf", text, fs::perms(0644));
  const RunResult r =
      RunProgram({ForwarderProcess::BinaryPath(), "-t", "-c", dir.path() + "/xdpfwd.conf"});
  EXPECT_EQ(r.status, 0) << text << r.output;
}

}  // namespace
}  // namespace xdpfwd::test
