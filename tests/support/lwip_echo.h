// An echo server on lwIP's raw API, for fast-path tests. It honours lwIP's contract: it takes
// every pbuf its recv callback is given and applies backpressure with tcp_recved (the window
// opens only as echoed bytes are accepted for sending). Must be used on the lwIP thread.
#pragma once

#include <netinet/in.h>

#include <cstdint>
#include <set>

struct tcp_pcb;

namespace xdpfwd::test {

class LwipEchoServer {
 public:
  LwipEchoServer(in_addr addr, uint16_t port);          // aborts the test process if lwIP refuses
  LwipEchoServer(const in6_addr& addr, uint16_t port);  // the same on an IPv6 address
  ~LwipEchoServer();  // aborts live connections, closes the listener
  uint64_t bytes_echoed() const { return bytes_echoed_; }
  uint64_t connections_closed() const { return closed_; }
  size_t open_connections() const { return conns_.size(); }

 private:
  struct Conn;
  friend struct EchoCallbacks;
  tcp_pcb* listener_ = nullptr;
  std::set<Conn*> conns_;
  uint64_t bytes_echoed_ = 0, closed_ = 0;
};

}  // namespace xdpfwd::test
