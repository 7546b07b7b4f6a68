// Loading the map-count iterator (xdp/map_count.bpf.c) and reading it.
#include "xdp/map_count.h"

#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <unistd.h>

#include <cerrno>
#include <string>

#include "map_count.skel.h"
#include "os/unique_fd.h"

namespace xdpfwd {

struct MapElementCount::Skeleton {
  map_count* s = nullptr;
  ~Skeleton() {
    if (s != nullptr) map_count__destroy(s);
  }
};

MapElementCount::MapElementCount() : skel_(std::make_unique<Skeleton>()) {}
MapElementCount::~MapElementCount() = default;

Result<std::unique_ptr<MapElementCount>> MapElementCount::Load(uint32_t map_id) {
  std::unique_ptr<MapElementCount> self(new MapElementCount());
  map_count* s = map_count__open();
  if (s == nullptr) return SystemError("map count: open the BPF object");
  self->skel_->s = s;
  s->rodata->target_map_id = map_id;
  if (int err = map_count__load(s); err != 0) {
    return SystemError("map count: load the bpf_map iterator (bpf_map_sum_elem_count, kernel 6.6+)",
                       -err);
  }
  s->links.count_map_elements = bpf_program__attach_iter(s->progs.count_map_elements, nullptr);
  if (s->links.count_map_elements == nullptr) {
    return SystemError("map count: attach the bpf_map iterator");
  }
  // One read now: a kernel that loads the program but cannot count this map fails here, at
  // start, rather than at the first scrape.
  if (!self->Read()) {
    return Error{{}, "map count: the iterator found no map with id " + std::to_string(map_id)};
  }
  return self;
}

Result<std::unique_ptr<MapElementCount>> MapElementCount::LoadForFd(int map_fd) {
  bpf_map_info info{};
  uint32_t len = sizeof(info);
  if (bpf_obj_get_info_by_fd(map_fd, &info, &len) != 0) return SystemError("map count: map info");
  return Load(info.id);
}

std::optional<uint64_t> MapElementCount::Read() const {
  const UniqueFd fd(bpf_iter_create(bpf_link__fd(skel_->s->links.count_map_elements)));
  if (!fd) return std::nullopt;
  // The program writes one __s64 for its map and nothing for the others; a read returns 0 at
  // the end of the walk.
  int64_t count = 0;
  size_t got = 0;
  while (got < sizeof(count)) {
    const ssize_t n = read(fd.get(), reinterpret_cast<char*>(&count) + got, sizeof(count) - got);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return std::nullopt;
    got += static_cast<size_t>(n);
  }
  // Each CPU's share is read in turn: while CPUs add and remove at once, the sum can dip below
  // zero for a moment.
  return count < 0 ? 0 : static_cast<uint64_t>(count);
}

}  // namespace xdpfwd
