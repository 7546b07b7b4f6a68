// A kernel-path loop's side of the kernel's TCP events (xdp/tcp_events.h, --tune tcp-events):
// tagging its connections' sockets for the BPF programs once they have lived kTagDelay, and
// each drained event into the thread's recorder.
#include <string>

#include "forwarder/kernel_path_connection.h"
#include "os/log.h"

namespace xdpfwd::kernel_path {

void Loop::TagSocket(const Connection& c, const UniqueFd& fd, RecorderLeg leg) {
  if (tcp_events_ == nullptr) return;
  auto tagged = tcp_events_->Tag(fd.get(), c.id, c.rule->id, static_cast<uint8_t>(leg),
                                 static_cast<uint8_t>(thread_));
  if (tagged) Add(counters_.tcp_events_tagged);
  if (!tagged && !warned_tag_) {
    warned_tag_ = true;  // once per thread: the connection is relayed all the same
    Log("kernel path: thread " + std::to_string(thread_) + ": " + tagged.error().message() +
        "; that socket's TCP events are not recorded");
  }
}

void Loop::QueueTag(Connection& c) {
  if (tcp_events_ == nullptr) return;
  pending_tags_.push_back({now_ + kTagDelay, &c});
  c.pending_tag = pending_tags_popped_ + pending_tags_.size();
}

void Loop::TagDue() {
  while (!pending_tags_.empty() && pending_tags_.front().due <= now_) {
    Connection* c = pending_tags_.front().connection;
    pending_tags_.pop_front();
    ++pending_tags_popped_;
    if (c == nullptr) continue;  // ended first
    c->pending_tag = 0;
    c->tagged = true;
    TagSocket(*c, c->client.fd, RecorderLeg::kClient);
    if (c->backend.fd) TagSocket(*c, c->backend.fd, RecorderLeg::kBackend);
  }
}

void Loop::OnTcpEvent(void* loop, const tcp_event& event) {
  Loop& l = *static_cast<Loop*>(loop);
  RecorderEvent kind;
  switch (event.kind) {
    case TCP_EVENT_RETRANSMIT:
      kind = RecorderEvent::kRetransmit;
      break;
    case TCP_EVENT_RTO:
      kind = RecorderEvent::kRto;
      break;
    case TCP_EVENT_RECOVERY:
      kind = RecorderEvent::kFastRecovery;
      break;
    case TCP_EVENT_ZERO_WINDOW_IN:
      kind = RecorderEvent::kZeroWindowIn;
      break;
    case TCP_EVENT_ZERO_WINDOW_OUT:
      kind = RecorderEvent::kZeroWindowOut;
      break;
    case TCP_EVENT_NAGLE_PEER: {
      kind = RecorderEvent::kNaglePeer;
      const bool client = event.leg == static_cast<uint8_t>(RecorderLeg::kClient);
      for (RelayCounters* n : {&l.counters_.relay, &l.counters_.ForRule(event.rule)}) {
        Add(client ? n->client_nagle_peers : n->backend_nagle_peers);
      }
      break;
    }
    default:
      return;  // a kind of a newer program
  }
  // The kernel's time of the event (bpf_ktime_get_ns, CLOCK_MONOTONIC), not the batch's:
  // the trace sorts what a drain appends after later events.
  if (l.recorder_ != nullptr) {
    l.recorder_->Record(event.monotonic_ns, kind, static_cast<uint32_t>(event.connection),
                        static_cast<RecorderLeg>(event.leg), event.args[0], event.args[1]);
  }
}

}  // namespace xdpfwd::kernel_path
