// See lossy_link.h.
#include "tests/support/lossy_link.h"

#include <bpf/libbpf.h>
#include <linux/if_link.h>
#include <net/if.h>

#include <stdexcept>

#include "tests/support/lossy_counters.h"
#include "tests/support/netns_topology.h"

namespace xdpfwd::test {

LossyLink::LossyLink(const std::string& ns, uint32_t drop_per_million) : ns_(ns) {
  skel_ = lossy__open();
  if (skel_ == nullptr) throw std::runtime_error("lossy__open");
  skel_->rodata->drop_per_million = drop_per_million;
  if (lossy__load(skel_) != 0) {
    lossy__destroy(skel_);
    throw std::runtime_error("lossy__load");
  }
  try {
    RunInNamespace(ns_, [&] {
      ifindex_ = static_cast<int>(if_nametoindex(Topology::kNsIf));
      if (bpf_xdp_attach(ifindex_, bpf_program__fd(skel_->progs.lossy), XDP_FLAGS_DRV_MODE,
                         nullptr) != 0) {
        throw std::runtime_error("attach lossy in " + ns_);
      }
    });
  } catch (...) {
    lossy__destroy(skel_);
    throw;
  }
}

LossyLink::~LossyLink() {
  try {
    RunInNamespace(ns_, [&] { bpf_xdp_detach(ifindex_, XDP_FLAGS_DRV_MODE, nullptr); });
  } catch (...) {
  }
  lossy__destroy(skel_);
}

uint64_t LossyLink::dropped() const { return LossyCounter(skel_, LOSSY_DROPPED).value_or(0); }

}  // namespace xdpfwd::test
