// The kernel path's connection table: the mailbox a loop answers, and what TCP_INFO says of a
// leg, in the words `show sess` uses for both paths.
#include "forwarder/kernel_path_sessions.h"

// The kernel's struct tcp_info, not glibc's: glibc's <netinet/tcp.h> stops at
// tcpi_total_retrans and lacks tcpi_notsent_bytes and tcpi_snd_wnd. The two headers cannot be
// included together, which is why this file reads TCP_INFO rather than the loop's.
#include <linux/sockios.h>
#include <linux/tcp.h>
#include <netinet/in.h>
#include <sys/ioctl.h>

#include <array>
#include <cstddef>
#include <string_view>
#include <utility>

namespace xdpfwd::kernel_path {
namespace {

// tcpi_state is the kernel's TCP_ESTABLISHED... numbering (include/net/tcp_states.h), which
// no user-space header names.
std::string_view StateName(uint8_t state) {
  static constexpr std::array<std::string_view, 14> kNames = {
      "",          "ESTABLISHED", "SYN_SENT",     "SYN_RECV",      "FIN_WAIT1",
      "FIN_WAIT2", "TIME_WAIT",   "CLOSE",        "CLOSE_WAIT",    "LAST_ACK",
      "LISTEN",    "CLOSING",     "NEW_SYN_RECV", "BOUND_INACTIVE"};
  return state < kNames.size() ? kNames[state] : "UNKNOWN";
}

SocketAddress FromStorage(const sockaddr_storage& storage) {
  SocketAddress address;
  address.storage = storage;
  address.length = storage.ss_family == AF_INET6 ? sizeof(sockaddr_in6) : sizeof(sockaddr_in);
  return address;
}

}  // namespace

LegTcpInfo ReadLegTcpInfo(int fd) {
  LegTcpInfo leg;
  tcp_info info{};
  socklen_t len = sizeof(info);
  if (fd < 0 || getsockopt(fd, IPPROTO_TCP, TCP_INFO, &info, &len) != 0) return leg;
  leg.state = StateName(info.tcpi_state);
  leg.srtt_us = info.tcpi_rtt;
  leg.rto_ms = info.tcpi_rto / 1000;
  leg.cwnd_bytes = info.tcpi_snd_cwnd * info.tcpi_snd_mss;
  leg.retransmits = info.tcpi_total_retrans;
  // A kernel older than the header fills less of the struct (len says how much); what it
  // left out stays 0. tcpi_notsent_bytes is 3.15, tcpi_snd_wnd 5.4.
  auto has = [len](size_t end) { return len >= end; };
  if (has(offsetof(tcp_info, tcpi_notsent_bytes) + sizeof(info.tcpi_notsent_bytes))) {
    leg.send_queue = info.tcpi_notsent_bytes;
    // In flight in bytes, exactly: SIOCOUTQ is everything not yet acknowledged, sent or not.
    // (tcpi_unacked counts segments; times the MSS it overstates small writes.)
    int outq = 0;
    if (ioctl(fd, SIOCOUTQ, &outq) == 0 && static_cast<uint32_t>(outq) > leg.send_queue) {
      leg.in_flight = static_cast<uint32_t>(outq) - leg.send_queue;
    }
  }
  if (has(offsetof(tcp_info, tcpi_snd_wnd) + sizeof(info.tcpi_snd_wnd))) {
    leg.peer_window = info.tcpi_snd_wnd;
  }
  return leg;
}

ConnectionRow ToConnectionRow(const SessionRecord& record, int thread,
                              std::chrono::steady_clock::time_point now) {
  ConnectionRow row;
  row.id = record.id;
  row.path = "kernel";
  row.worker = thread;
  row.rule = record.rule->id;
  row.client = ToString(FromStorage(record.client));
  row.backend = ToString(record.rule->backend);
  row.age_ms = static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::milliseconds>(now - record.accepted).count());
  row.bytes_to_backend = record.bytes_to_backend;
  row.bytes_to_client = record.bytes_to_client;
  row.client_leg = record.client_leg;
  row.backend_leg = record.backend_leg;
  return row;
}

void SessionDesk::Ask(const Request& request) {
  std::lock_guard lock(mu_);
  asked_ = request;
}

bool SessionDesk::Await(uint64_t generation, Clock::time_point deadline, Answer& answer) {
  std::unique_lock lock(mu_);
  if (!answered_.wait_until(lock, deadline, [&] { return answer_.generation >= generation; })) {
    asked_.reset();  // not served late into the next asker's answer
    return false;
  }
  answer = std::move(answer_);
  answer_.table.clear();
  return true;
}

std::optional<SessionDesk::Request> SessionDesk::Take() {
  std::lock_guard lock(mu_);
  return std::exchange(asked_, std::nullopt);
}

void SessionDesk::Reply(Answer answer) {
  {
    std::lock_guard lock(mu_);
    answer_ = std::move(answer);
  }
  answered_.notify_all();
}

}  // namespace xdpfwd::kernel_path
