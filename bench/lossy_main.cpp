// xdpfwd-lossy: the loss injector (xdp/lossy.bpf.c) on one interface, for the benchmark's loss
// rows. Run inside the namespace that owns the interface (`ip netns exec NS xdpfwd-lossy IF N
// [generic]`); holds the program until SIGINT/SIGTERM or its standard input closes, then
// detaches it and prints what it dropped and passed as one JSON line.
//
// Native mode (the default) on a veth takes TSO from its peer, so the sender's segments arrive
// one by one and a drop takes one. Generic mode leaves the peer its TSO: a GSO packet arrives
// whole and a drop takes all its segments, as a full switch queue drops a burst.
#include <net/if.h>
#include <poll.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include <linux/if_link.h>

#include "lossy.skel.h"
#include "lossy_shared.h"
#include "os/parse_number.h"

namespace {

volatile sig_atomic_t g_stop = 0;

void OnSignal(int) { g_stop = 1; }

uint64_t Counter(const lossy* skel, lossy_counter which) {
  const uint32_t key = which;
  std::vector<uint64_t> per_cpu(static_cast<size_t>(libbpf_num_possible_cpus()));
  if (bpf_map__lookup_elem(skel->maps.lossy_counters, &key, sizeof(key), per_cpu.data(),
                           per_cpu.size() * sizeof(uint64_t), 0) != 0) {
    return 0;
  }
  uint64_t sum = 0;
  for (uint64_t v : per_cpu) sum += v;
  return sum;
}

// Waits for a stop signal or for stdin to close (the benchmark holds a pipe: should it die,
// the program comes off with this process rather than staying behind).
void WaitForStop() {
  while (!g_stop) {
    pollfd p{STDIN_FILENO, POLLIN, 0};
    const int n = poll(&p, 1, 200);
    if (n > 0) {
      char buf[256];
      if (read(STDIN_FILENO, buf, sizeof(buf)) <= 0) return;
    } else if (n < 0 && errno != EINTR) {
      return;
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  const bool generic = argc == 4 && std::strcmp(argv[3], "generic") == 0;
  if (argc != 3 && !generic) {
    std::fprintf(stderr, "usage: xdpfwd-lossy IFACE DROP_PER_MILLION [generic]\n");
    return 2;
  }
  const uint32_t mode = generic ? XDP_FLAGS_SKB_MODE : XDP_FLAGS_DRV_MODE;
  const std::string ifname = argv[1];
  const std::string rate = argv[2];
  const std::optional<uint32_t> parsed = xdpfwd::ParseDecimal<uint32_t>(rate, 0, 1'000'000);
  if (!parsed) {
    std::fprintf(stderr, "xdpfwd-lossy: DROP_PER_MILLION is 0-1000000, not '%s'\n", argv[2]);
    return 2;
  }
  const uint32_t per_million = *parsed;
  const int ifindex = static_cast<int>(if_nametoindex(ifname.c_str()));
  if (ifindex == 0) {
    std::fprintf(stderr, "xdpfwd-lossy: no interface %s in this namespace\n", ifname.c_str());
    return 1;
  }
  lossy* skel = lossy__open();
  if (skel == nullptr) {
    std::fprintf(stderr, "xdpfwd-lossy: cannot open the BPF object\n");
    return 1;
  }
  skel->rodata->drop_per_million = per_million;
  if (lossy__load(skel) != 0) {
    std::fprintf(stderr, "xdpfwd-lossy: cannot load the program (root? kernel BPF support?)\n");
    lossy__destroy(skel);
    return 1;
  }
  const int err = bpf_xdp_attach(ifindex, bpf_program__fd(skel->progs.lossy), mode, nullptr);
  if (err != 0) {
    std::fprintf(stderr, "xdpfwd-lossy: attaching to %s: %s (another XDP program there?)\n",
                 ifname.c_str(), std::strerror(-err));
    lossy__destroy(skel);
    return 1;
  }
  signal(SIGINT, OnSignal);
  signal(SIGTERM, OnSignal);
  std::printf("attached %s %u %s\n", ifname.c_str(), per_million, generic ? "generic" : "native");
  std::fflush(stdout);
  WaitForStop();
  const uint64_t dropped = Counter(skel, LOSSY_DROPPED);
  const uint64_t dropped_bytes = Counter(skel, LOSSY_DROPPED_BYTES);
  const uint64_t passed = Counter(skel, LOSSY_PASSED_TCP);
  bpf_xdp_detach(ifindex, mode, nullptr);
  lossy__destroy(skel);
  std::printf("{\"dropped\": %llu, \"dropped_bytes\": %llu, \"passed_tcp\": %llu}\n",
              static_cast<unsigned long long>(dropped),
              static_cast<unsigned long long>(dropped_bytes),
              static_cast<unsigned long long>(passed));
  return 0;
}
