// CPU lists: what --cpus accepts and refuses, and the kernel's own files read the same way.
#include "os/cpu_list.h"

#include <gtest/gtest.h>

namespace xdpfwd {
namespace {

std::vector<int> Parse(std::string_view text) {
  auto cpus = ParseCpuList(text, 63);
  EXPECT_TRUE(cpus) << text << ": " << cpus.error().message();
  return cpus ? *cpus : std::vector<int>{};
}

TEST(CpuListTest, ReadsSinglesRangesAndTheKernelsForm) {
  EXPECT_EQ(Parse("3"), (std::vector<int>{3}));
  EXPECT_EQ(Parse("2-5,7"), (std::vector<int>{2, 3, 4, 5, 7}));
  EXPECT_EQ(Parse("7,0-1"), (std::vector<int>{0, 1, 7})) << "sorted on return";
  EXPECT_EQ(Parse("0-1\n"), (std::vector<int>{0, 1})) << "a sysfs file's trailing newline";
  EXPECT_EQ(Parse("\n"), std::vector<int>{}) << "an empty kernel list";
  EXPECT_EQ(Parse("4-4"), (std::vector<int>{4}));
}

TEST(CpuListTest, RefusesWhatIsNotAListAndSaysWhy) {
  struct Case {
    const char* text;
    const char* says;
  };
  for (const Case& c :
       {Case{"a", "'a' is not a CPU number"}, Case{"1,,2", "'' is not a CPU number"},
        Case{"5-2", "'5-2' is a reversed range"}, Case{"1-", "'' is not a CPU number"},
        Case{"-1", "'' is not a CPU number"}, Case{"2-4,3", "CPU 3 is given twice"},
        Case{"64", "CPU 64 does not exist (the highest is 63)"},
        Case{"1 2", "'1 2' is not a CPU number"}}) {
    auto cpus = ParseCpuList(c.text, 63);
    ASSERT_FALSE(cpus) << c.text;
    EXPECT_NE(cpus.error().message().find(c.says), std::string::npos)
        << c.text << ": " << cpus.error().message();
  }
}

TEST(CpuListTest, FormatsTheShortestForm) {
  EXPECT_EQ(FormatCpuList({0, 1, 2, 3, 8}), "0-3,8");
  EXPECT_EQ(FormatCpuList({5, 1, 2}), "1-2,5");
  EXPECT_EQ(FormatCpuList({4}), "4");
  EXPECT_EQ(FormatCpuList({}), "none");
  EXPECT_EQ(Parse(FormatCpuList({1, 3, 4, 5, 9})), (std::vector<int>{1, 3, 4, 5, 9}));
}

}  // namespace
}  // namespace xdpfwd

namespace xdpfwd {
namespace {

// /proc/stat as the kernel writes it: the aggregate "cpu" line is not a CPU; idle (4th) and
// iowait (5th) are not busy.
TEST(CpuTimesTest, BusyIsEverythingButIdleAndIowait) {
  const auto t = ParseCpuTimes(
      "cpu  10 0 10 100 5 0 0 0 0 0\n"
      "cpu0 1 2 3 40 5 6 7 8 0 0\n"
      "cpu1 0 0 0 70 0 0 0 0 0 0\n"
      "intr 12345\n");
  ASSERT_EQ(t.size(), 2u);
  EXPECT_EQ(t.at(0).busy, 1u + 2 + 3 + 6 + 7 + 8);
  EXPECT_EQ(t.at(0).total, 1u + 2 + 3 + 40 + 5 + 6 + 7 + 8);
  EXPECT_EQ(t.at(1).busy, 0u);
}

TEST(CpuTimesTest, LeastBusyAmongTheAllowedAscending) {
  const std::map<int, CpuTimes> before{{0, {0, 0}}, {1, {0, 0}}, {2, {0, 0}}, {3, {0, 0}}};
  const std::map<int, CpuTimes> after{
      {0, {90, 100}}, {1, {10, 100}}, {2, {50, 100}}, {3, {5, 100}}};
  EXPECT_EQ(LeastBusyCpus({0, 1, 2, 3}, 2, before, after), (std::vector<int>{1, 3}));
  EXPECT_EQ(LeastBusyCpus({0, 2}, 1, before, after), std::vector<int>{2}) << "only the allowed";
  // Unknown to a reading: counted as fully busy, so it comes last; ties: the lower number.
  EXPECT_EQ(LeastBusyCpus({0, 7}, 1, before, after), std::vector<int>{0});
  EXPECT_EQ(LeastBusyCpus({5, 7}, 1, before, after), std::vector<int>{5});
  EXPECT_EQ(LeastBusyCpus({1, 3}, 5, before, after), (std::vector<int>{1, 3})) << "n > allowed";
}

}  // namespace
}  // namespace xdpfwd
