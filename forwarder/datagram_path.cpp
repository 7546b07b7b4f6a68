// The datagram path: its event loop on one thread (datagram_path_loop.cpp), started and
// stopped, and its totals.
#include "forwarder/datagram_path.h"

#include <string>
#include <system_error>
#include <utility>

#include "forwarder/datagram_path_loop.h"

namespace xdpfwd {

std::string DatagramPathTotals::Format() const {
  std::string out;
#define XDPFWD_FIELD(name, kind, what) \
  if (!out.empty()) out += ' ';        \
  out += #name "=" + std::to_string(name);
  XDPFWD_DATAGRAM_COUNTERS(XDPFWD_FIELD)
#undef XDPFWD_FIELD
  return out;
}

DatagramPath::DatagramPath(DatagramPathConfig config)
    : config_(std::move(config)), counters_(std::make_unique<datagram_path::Counters>()) {}

DatagramPath::~DatagramPath() { Stop(); }

Result<std::unique_ptr<DatagramPath>> DatagramPath::Start(DatagramPathConfig config) {
  if (config.rules.empty()) return Error{{}, "datagram path: no rules"};
  if (config.max_associations == 0) {
    return Error{{}, "datagram path: max_associations is 0; it must allow at least one client"};
  }
  for (const Rule& rule : config.rules) {
    if (rule.is_stream()) {
      return Error{{},
                   "datagram path: " + ToString(rule.listen) +
                       " is TCP on both sides; the stream paths serve that rule"};
    }
  }
  std::unique_ptr<DatagramPath> path(new DatagramPath(std::move(config)));
  auto loop = datagram_path::Loop::Create(path->config_, *path->counters_);
  if (!loop) return loop.error();
  path->loop_ = std::move(*loop);
  for (size_t i = 0; i < path->config_.rules.size(); ++i) {
    path->bound_.push_back(path->loop_->bound(i));
  }
  try {
    path->thread_ = std::thread([l = path->loop_.get()] { l->Run(); });
  } catch (const std::system_error& e) {
    return Error{e.code(), "datagram path: start a thread"};
  }
  return path;
}

void DatagramPath::Stop() {
  std::lock_guard<std::mutex> lock(stop_mutex_);
  if (!loop_) return;
  loop_->RequestStop();
  if (thread_.joinable()) thread_.join();
  loop_.reset();  // closes every listener, association, the epoll set and the eventfd
}

DatagramPathTotals DatagramPath::Totals() const { return counters_->Snapshot(); }

}  // namespace xdpfwd
