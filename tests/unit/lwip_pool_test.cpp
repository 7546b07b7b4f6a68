// What lwIP patch 0002 promises: the pcb pool holds more than 65535 pcbs, reuses freed ones
// first, and costs resident memory only once used; and a worker's memory lock keeps that for
// the pool beyond the default cap (stack/lwip_pools.h). Same binary as lwip_pcb_test.cpp (lwIP's
// state is global to a process); the resident figures are taken before any test runs.
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <set>
#include <vector>

#include "os/memory_lock.h"
#include "stack/lwip_pools.h"
#include "stack/worker.h"

extern "C" {
#include "lwip/memp.h"
#include "lwip/stats.h"
#include "lwip/tcp.h"
}

namespace xdpfwd::test {
namespace {

mem_size_t PcbsInUse() { return lwip_stats.memp[MEMP_TCP_PCB]->used; }

size_t PageSize() { return static_cast<size_t>(sysconf(_SC_PAGESIZE)); }

size_t ResidentBytesOfProcess() {
  FILE* f = std::fopen("/proc/self/statm", "r");
  if (f == nullptr) return 0;
  unsigned long size = 0, resident = 0;
  const int n = std::fscanf(f, "%lu %lu", &size, &resident);
  std::fclose(f);
  return n == 2 ? resident * PageSize() : 0;
}

// The pcb pool's memory: [begin, begin + bytes).
struct PoolSpan {
  const uint8_t* begin;
  size_t bytes;
  size_t element;
};

PoolSpan PcbPool() {
  const memp_desc* desc = memp_pools[MEMP_TCP_PCB];
  // The array is MEMP_NUM_TCP_PCB elements whatever desc->num says (unpatched, a u16 that
  // truncates it). MEMP_SIZE (the per-element header) is 0 without MEMP_OVERFLOW_CHECK.
  return {static_cast<const uint8_t*>(LWIP_MEM_ALIGN(desc->base)),
          size_t{MEMP_NUM_TCP_PCB} * desc->size, desc->size};
}

// Bytes of [span] the kernel has in memory (mincore: exact, unlike the process-wide RSS).
size_t ResidentBytesOf(const PoolSpan& span) {
  const size_t page = PageSize();
  const uintptr_t first = reinterpret_cast<uintptr_t>(span.begin) / page * page;
  const uintptr_t end = reinterpret_cast<uintptr_t>(span.begin) + span.bytes;
  const size_t pages = (end - first + page - 1) / page;
  std::vector<unsigned char> vec(pages);
  if (mincore(reinterpret_cast<void*>(first), pages * page, vec.data()) != 0) {
    ADD_FAILURE() << "mincore failed";
    return 0;
  }
  size_t resident = 0;
  for (unsigned char v : vec) resident += v & 1u;
  return resident * page;
}

// pcbs from tcp_new, returned to the pool however the test ends.
struct PcbBatch {
  std::vector<tcp_pcb*> pcbs;
  ~PcbBatch() { Free(); }
  void Free() {
    for (tcp_pcb* p : pcbs) tcp_abort(p);  // CLOSED and on no list: freed, nothing sent
    pcbs.clear();
  }
};

class LwipPoolTest : public ::testing::Test {
 protected:
  void SetUp() override { InitLwipOnce(); }
};

TEST_F(LwipPoolTest, PcbPoolHoldsMoreThan65535) {
  static_assert(MEMP_NUM_TCP_PCB > 65535, "the pool this test exists for");
  EXPECT_EQ(memp_pools[MEMP_TCP_PCB]->num, static_cast<uint32_t>(MEMP_NUM_TCP_PCB))
      << "memp_desc.num truncated the pool size";
  EXPECT_EQ(lwip_stats.memp[MEMP_TCP_PCB]->avail, static_cast<mem_size_t>(MEMP_NUM_TCP_PCB));

  const mem_size_t before = PcbsInUse();
  const uint32_t errors_before = lwip_stats.memp[MEMP_TCP_PCB]->err;
  // Past 65,535, within the sanitizer tree's pool (66,560 pcbs: lwipopts.h).
  constexpr size_t kMany = std::min<size_t>(65536 + 4096, MEMP_NUM_TCP_PCB - 256);
  static_assert(kMany > 65536);
  PcbBatch batch;
  batch.pcbs.reserve(kMany);
  for (size_t i = 0; i < kMany; ++i) {
    tcp_pcb* pcb = tcp_new();
    ASSERT_NE(pcb, nullptr) << "tcp_new failed after " << i << " pcbs";
    batch.pcbs.push_back(pcb);
  }
  EXPECT_EQ(std::set<tcp_pcb*>(batch.pcbs.begin(), batch.pcbs.end()).size(), kMany);
  EXPECT_EQ(PcbsInUse(), before + kMany);
  batch.Free();
  EXPECT_EQ(PcbsInUse(), before);
  EXPECT_EQ(lwip_stats.memp[MEMP_TCP_PCB]->err, errors_before);
}

// Freed pcbs come back before any never-used element is carved, most recently freed first
// (the hot ones, still in cache).
TEST_F(LwipPoolTest, FreedPcbsAreReusedFirstLastInFirstOut) {
  PcbBatch first, second;
  for (int i = 0; i < 100; ++i) {
    first.pcbs.push_back(tcp_new());
    ASSERT_NE(first.pcbs.back(), nullptr);
  }
  const std::vector<tcp_pcb*> freed = first.pcbs;
  first.Free();  // in allocation order
  for (int i = 0; i < 100; ++i) {
    second.pcbs.push_back(tcp_new());
    ASSERT_NE(second.pcbs.back(), nullptr);
  }
  const std::vector<tcp_pcb*> want(freed.rbegin(), freed.rend());
  EXPECT_EQ(second.pcbs, want);
}

// Resident memory right after lwip_init, taken before any test of this process runs (a
// global test environment), so that it does not depend on which tests ran first.
struct AtInit {
  bool taken = false;
  size_t process_rss = 0, pool_resident = 0;
};
AtInit g_at_init;

class LwipInitEnvironment : public ::testing::Environment {
 public:
  void SetUp() override {
    InitLwipOnce();
    g_at_init = {true, ResidentBytesOfProcess(), ResidentBytesOf(PcbPool())};
  }
};
[[maybe_unused]] ::testing::Environment* const g_lwip_init_environment =
    ::testing::AddGlobalTestEnvironment(new LwipInitEnvironment);

// The pool is 28 MB (sanitizer tree) to ~1 GB (release) of .bss with our lwipopts. Right after
// lwip_init none of it is resident; later only elements handed out at least once are; and
// allocating 50,000 pcbs beyond the high-water mark grows the process by about their size.
TEST_F(LwipPoolTest, PoolMemoryIsResidentOnlyOnceUsed) {
  const PoolSpan pool = PcbPool();
  ASSERT_GT(pool.bytes, size_t{25} << 20) << "expected the pool of lwipopts.h";
  const size_t page = PageSize();
  // A pool's span can share its first and last pages with other variables, and the elements
  // in use straddle one more page boundary.
  const size_t slack = 3 * page;

  ASSERT_TRUE(g_at_init.taken);
  EXPECT_LE(g_at_init.pool_resident, slack)
      << "pcb pool resident right after lwip_init: memp_init touched every element";
  // (Not the process's whole RSS against the pool's size: the sanitizer tree's pool, 28 MB, is
  // smaller than what ASan's runtime holds at start, 37 MB. The pool's own pages are what count.)

  // Elements ever handed out: the pool's high-water mark (every carve raises it).
  const size_t used_ever = lwip_stats.memp[MEMP_TCP_PCB]->max;
  EXPECT_LE(ResidentBytesOf(pool), used_ever * pool.element + slack)
      << "pool pages resident that no pcb ever used";

  constexpr size_t kFresh = 50000;
  const size_t target = used_ever + kFresh;  // so that kFresh elements are carved anew
  const size_t rss_before = ResidentBytesOfProcess();
  PcbBatch batch;
  while (PcbsInUse() < target) {
    tcp_pcb* pcb = tcp_new();
    ASSERT_NE(pcb, nullptr) << "tcp_new failed at " << PcbsInUse() << " pcbs in use";
    batch.pcbs.push_back(pcb);
  }
  const size_t fresh_bytes = kFresh * pool.element;
  const size_t grew = ResidentBytesOfProcess() - rss_before;
  EXPECT_GE(grew, fresh_bytes * 9 / 10)
      << "RSS grew by " << grew << " bytes for " << fresh_bytes << " bytes of new pcbs";
  const size_t resident = ResidentBytesOf(pool);
  EXPECT_GE(resident + slack, target * pool.element);
  EXPECT_LE(resident, target * pool.element + slack);
  std::printf(
      "pcb %zu bytes, pool %zu bytes; at lwip_init: process %zu, pool %zu resident; "
      "%zu pcbs carved: pool %zu resident, process grew %zu\n",
      pool.element, pool.bytes, g_at_init.process_rss, g_at_init.pool_resident, target, resident,
      grew);
}

#if !defined(__SANITIZE_ADDRESS__)
// The kB of `field` ("Rss", "Locked") in /proc/self/smaps for the mapping that starts at
// `begin`; -1 when there is none.
long SmapsKib(uintptr_t begin, const char* field) {
  FILE* f = std::fopen("/proc/self/smaps", "r");
  if (f == nullptr) return -1;
  char line[512];
  bool in = false;
  long kib = -1;
  const size_t n = std::strlen(field);
  while (std::fgets(line, sizeof(line), f) != nullptr) {
    unsigned long from = 0, to = 0;
    if (std::sscanf(line, "%lx-%lx ", &from, &to) == 2 && std::strchr(line, ':') != line + 4) {
      in = from == begin;
    } else if (in && std::strncmp(line, field, n) == 0 && line[n] == ':') {
      kib = std::atol(line + n + 1);
      break;
    }
  }
  std::fclose(f);
  return kib;
}

// A worker's lock (LockWorkerMemory) locks the process but maps the pcb pool beyond the first
// XDPFWD_TCP_PCB_PRELOCKED pcbs anew, locked only as pages are first used, and the whole unused
// pool of BBR's state (one element per pcb) likewise. Run in a child process (the lock is the
// whole process's): exits 0 if so, and says what it saw on stderr. Fails without the
// remapping: mlockall alone makes the whole tail resident at once. Not in the sanitizer tree,
// whose pool has no tail (lwipopts.h) and whose mlockall does nothing.
[[noreturn]] void LockThenCarveIntoTheTail() {
  const LwipPoolTail bbr = UnusedBbrPoolTail();
  if (bbr.bytes < size_t{MEMP_NUM_TCP_PCB - 64} * sizeof(tcp_bbr)) {
    std::fprintf(stderr, "BBR pool's tail %zu bytes: too short\n", bbr.bytes);
    _exit(5);
  }
  const LwipPoolTail tail = UnusedPcbPoolTail();
  const size_t element = PcbPool().element;
  if (tail.bytes < size_t{MEMP_NUM_TCP_PCB - XDPFWD_TCP_PCB_PRELOCKED - 64} * element) {
    std::fprintf(stderr, "tail %zu bytes: too short\n", tail.bytes);
    _exit(2);
  }
  int lock_error = 0;
  if (auto r = LockWorkerMemory(&lock_error); !r || lock_error != 0) {
    std::fprintf(stderr, "LockWorkerMemory: %s, lock errno %d\n",
                 r ? "ok" : r.error().message().c_str(), lock_error);
    _exit(3);
  }
  const long rss_at_start = SmapsKib(tail.begin, "Rss");
  constexpr size_t kInTail = 20000;  // pcbs carved in the tail
  while (PcbsInUse() < XDPFWD_TCP_PCB_PRELOCKED + kInTail) {
    if (tcp_new() == nullptr) _exit(4);
  }
  const long rss = SmapsKib(tail.begin, "Rss"), locked = SmapsKib(tail.begin, "Locked");
  const long want = static_cast<long>(kInTail * element / 1024);
  // By page (mincore), whichever mapping the tail ended up in.
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  std::vector<unsigned char> in_core(bbr.bytes / page);
  long bbr_rss = -1;
  if (mincore(reinterpret_cast<void*>(bbr.begin), bbr.bytes, in_core.data()) == 0) {
    bbr_rss = 0;
    for (unsigned char c : in_core) bbr_rss += (c & 1) * static_cast<long>(page / 1024);
  }
  std::fprintf(stderr,
               "tail %zu MiB: %ld KiB resident after the lock; after %zu pcbs there %ld KiB "
               "resident, %ld KiB locked (their size: %ld KiB); BBR pool's tail %zu MiB: %ld KiB "
               "resident\n",
               tail.bytes >> 20, rss_at_start, kInTail, rss, locked, want, bbr.bytes >> 20,
               bbr_rss);
  const bool ok =
      rss_at_start == 0 && rss >= want - 8 && rss <= want + 8 && locked == rss && bbr_rss == 0;
  _exit(ok ? 0 : 1);
}
#endif

TEST_F(LwipPoolTest, WorkerLockLocksThePoolBeyondTheDefaultOnlyAsUsed) {
#if defined(__SANITIZE_ADDRESS__)
  GTEST_SKIP() << "the sanitizer tree's pool has no tail, and ASan's mlockall does nothing";
#else
  EXPECT_EXIT(LockThenCarveIntoTheTail(), ::testing::ExitedWithCode(0), "");
#endif
}

}  // namespace
}  // namespace xdpfwd::test
