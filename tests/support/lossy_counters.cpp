// Reading the loss injector's counters; see lossy_counters.h.
#include "tests/support/lossy_counters.h"

#include <vector>

namespace xdpfwd::test {

std::optional<uint64_t> LossyCounter(const lossy* skel, lossy_counter which) {
  const uint32_t key = which;
  std::vector<uint64_t> per_cpu(static_cast<size_t>(libbpf_num_possible_cpus()));
  if (bpf_map__lookup_elem(skel->maps.lossy_counters, &key, sizeof(key), per_cpu.data(),
                           per_cpu.size() * sizeof(uint64_t), 0) != 0) {
    return std::nullopt;
  }
  uint64_t sum = 0;
  for (uint64_t v : per_cpu) sum += v;
  return sum;
}

}  // namespace xdpfwd::test
