// Loading the kernel path's TCP event programs (xdp/tcp_events.bpf.c), their per-thread
// rings and the socket tags.
#include "xdp/tcp_events.h"

#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <unistd.h>

#include <cerrno>
#include <utility>

#include "tcp_events.skel.h"

namespace xdpfwd {

struct TcpEvents::Skeleton {
  tcp_events* s = nullptr;
  ~Skeleton() {
    if (s != nullptr) tcp_events__destroy(s);
  }
};

TcpEventRing::~TcpEventRing() {
  if (ring_ != nullptr) ring_buffer__free(ring_);
}

int TcpEventRing::OnSample(void* self, void* data, size_t bytes) {
  if (bytes < sizeof(tcp_event)) return 0;
  auto* ring = static_cast<TcpEventRing*>(self);
  ring->handler_(ring->context_, *static_cast<const tcp_event*>(data));
  return 0;
}

size_t TcpEventRing::Drain() {
  const int n = ring_buffer__consume(ring_);
  return n > 0 ? static_cast<size_t>(n) : 0;
}

Result<std::unique_ptr<TcpEvents>> TcpEvents::Load(int threads) {
  if (threads <= 0 || threads > TCP_EVENTS_MAX_THREADS) {
    return Error{{},
                 "TCP events: " + std::to_string(threads) + " threads, at most " +
                     std::to_string(TCP_EVENTS_MAX_THREADS) + " have rings"};
  }
  std::unique_ptr<TcpEvents> events(new TcpEvents);
  events->skeleton_ = std::make_unique<Skeleton>();
  // The rings' inner map: the outer map needs one to load; user space puts the real ones in.
  const int template_fd =
      bpf_map_create(BPF_MAP_TYPE_RINGBUF, "tcp_ev_tmpl", 0, 0, TCP_EVENTS_RING_BYTES, nullptr);
  if (template_fd < 0) return SystemError("TCP events: create a ring buffer");
  // The delayed-ACK timer's program is the one a kernel with TCP tracepoints may still refuse
  // (the timer tracepoint's BTF, the address taken of tcp_delack_timer): when the whole object
  // does not load, it is loaded again without it (no Nagle peers). A kernel whose BTF lacks
  // tcp_delack_timer fails both (libbpf resolves every extern), and the path runs without.
  int err = 0;
  for (bool with_timer : {true, false}) {
    tcp_events* s = tcp_events__open();
    if (s == nullptr) {
      close(template_fd);
      return SystemError("TCP events: open the BPF object");
    }
    events->skeleton_->s = s;
    bpf_map__set_inner_map_fd(s->maps.rings, template_fd);
    if (!with_timer) bpf_program__set_autoload(s->progs.timer_expires, false);
    err = tcp_events__load(s);
    if (err == 0) break;
    if (with_timer) {
      events->missing_.push_back("tp_btf/timer_expire_entry (Nagle peers): " +
                                 std::error_code(-err, std::system_category()).message());
    }
    tcp_events__destroy(s);
    events->skeleton_->s = nullptr;
  }
  if (err != 0) {
    close(template_fd);
    return SystemError(
        "TCP events: load the BPF programs (a kernel with BTF and BPF socket "
        "storage is needed)",
        -err);
  }
  tcp_events* s = events->skeleton_->s;
  close(template_fd);
  struct Attach {
    bpf_program* program;
    bpf_link** link;
    const char* name;
  };
  const Attach attaches[] = {
      {s->progs.retransmit, &s->links.retransmit, "tp_btf/tcp_retransmit_skb"},
      {s->progs.cong_state, &s->links.cong_state, "tp_btf/tcp_cong_state_set"},
      {s->progs.segment_in, &s->links.segment_in, "tp_btf/tcp_probe"},
      {s->progs.timer_expires, &s->links.timer_expires, "tp_btf/timer_expire_entry"},
  };
  size_t attached = 0;
  for (const Attach& a : attaches) {
    if (!bpf_program__autoload(a.program)) continue;
    *a.link = bpf_program__attach(a.program);
    if (*a.link == nullptr) {
      events->missing_.push_back(std::string(a.name) + ": " +
                                 std::error_code(errno, std::system_category()).message());
    } else {
      ++attached;
    }
  }
  if (attached == 0)
    return Error{{}, "TCP events: no program attached (" + events->missing_[0] + ")"};
  for (int t = 0; t < threads; ++t) {
    const int fd =
        bpf_map_create(BPF_MAP_TYPE_RINGBUF, "tcp_ev_ring", 0, 0, TCP_EVENTS_RING_BYTES, nullptr);
    if (fd < 0) return SystemError("TCP events: create thread " + std::to_string(t) + "'s ring");
    events->ring_fds_.push_back(fd);
    const uint32_t key = static_cast<uint32_t>(t);
    if (bpf_map_update_elem(bpf_map__fd(s->maps.rings), &key, &fd, BPF_ANY) != 0) {
      return SystemError("TCP events: install thread " + std::to_string(t) + "'s ring");
    }
  }
  return events;
}

TcpEvents::~TcpEvents() {
  for (int fd : ring_fds_) close(fd);
}

Result<std::unique_ptr<TcpEventRing>> TcpEvents::OpenRing(int thread, TcpEventRing::Handler handler,
                                                          void* context) {
  if (thread < 0 || static_cast<size_t>(thread) >= ring_fds_.size()) {
    return Error{{}, "TCP events: no ring for thread " + std::to_string(thread)};
  }
  std::unique_ptr<TcpEventRing> ring(new TcpEventRing(handler, context));
  ring->ring_ = ring_buffer__new(ring_fds_[static_cast<size_t>(thread)], &TcpEventRing::OnSample,
                                 ring.get(), nullptr);
  if (ring->ring_ == nullptr)
    return SystemError("TCP events: map thread " + std::to_string(thread) + "'s ring");
  return ring;
}

Result<void> TcpEvents::Tag(int fd, uint64_t connection, uint32_t rule, uint8_t leg,
                            uint8_t thread) {
  tcp_socket_tag tag{};
  tag.connection = connection;
  tag.rule = rule;
  tag.leg = leg;
  tag.thread = thread;
  if (bpf_map_update_elem(bpf_map__fd(skeleton_->s->maps.tagged), &fd, &tag, BPF_ANY) != 0) {
    return SystemError("TCP events: tag socket " + std::to_string(fd));
  }
  return {};
}

uint64_t TcpEvents::dropped() const {
  const int cpus = libbpf_num_possible_cpus();
  if (cpus <= 0) return 0;
  std::vector<uint64_t> per_cpu(static_cast<size_t>(cpus));
  const uint32_t key = 0;
  if (bpf_map_lookup_elem(bpf_map__fd(skeleton_->s->maps.dropped), &key, per_cpu.data()) != 0) {
    return 0;
  }
  uint64_t sum = 0;
  for (uint64_t n : per_cpu) sum += n;
  return sum;
}

}  // namespace xdpfwd
