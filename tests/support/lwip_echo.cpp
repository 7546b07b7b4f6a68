// Echo server on lwIP's raw API; see lwip_echo.h.
#include "tests/support/lwip_echo.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>

extern "C" {
#include "lwip/pbuf.h"
#include "lwip/tcp.h"
}

namespace xdpfwd::test {

struct LwipEchoServer::Conn {
  LwipEchoServer* server;
  tcp_pcb* pcb;
  pbuf* pending = nullptr;  // received, not yet accepted by tcp_write
  bool peer_closed = false;
};

struct EchoCallbacks {
  using Conn = LwipEchoServer::Conn;

  static void Forget(Conn* c) {
    if (c->pending != nullptr) pbuf_free(c->pending);
    c->server->conns_.erase(c);
    delete c;
  }

  // Moves pending bytes into the send buffer; returns ERR_ABRT if it aborted the pcb.
  static err_t Pump(Conn* c) {
    while (c->pending != nullptr) {
      const u16_t room = tcp_sndbuf(c->pcb);
      const u16_t n = std::min<u16_t>(c->pending->len, room);
      if (n == 0) break;
      const err_t err = tcp_write(c->pcb, c->pending->payload, n, TCP_WRITE_FLAG_COPY);
      if (err == ERR_MEM) break;  // send queue full: the sent callback resumes
      if (err != ERR_OK) {
        tcp_abort(c->pcb);
        Forget(c);
        return ERR_ABRT;
      }
      tcp_recved(c->pcb, n);  // open the window only for what was accepted
      c->server->bytes_echoed_ += n;
      c->pending = pbuf_free_header(c->pending, n);
    }
    tcp_output(c->pcb);
    if (c->pending == nullptr && c->peer_closed) {
      tcp_arg(c->pcb, nullptr);
      tcp_recv(c->pcb, nullptr);
      tcp_sent(c->pcb, nullptr);
      tcp_err(c->pcb, nullptr);
      if (tcp_close(c->pcb) != ERR_OK) {
        tcp_abort(c->pcb);
        ++c->server->closed_;
        Forget(c);
        return ERR_ABRT;
      }
      ++c->server->closed_;
      Forget(c);
    }
    return ERR_OK;
  }

  static err_t Recv(void* arg, tcp_pcb*, pbuf* p, err_t) {
    auto* c = static_cast<Conn*>(arg);
    if (p == nullptr) {
      c->peer_closed = true;
    } else if (c->pending == nullptr) {
      c->pending = p;
    } else {
      pbuf_cat(c->pending, p);
    }
    return Pump(c);
  }

  static err_t Sent(void* arg, tcp_pcb*, u16_t) { return Pump(static_cast<Conn*>(arg)); }

  static void Err(void* arg, err_t) {
    if (arg != nullptr) Forget(static_cast<Conn*>(arg));  // lwIP already freed the pcb
  }

  static err_t Accept(void* arg, tcp_pcb* pcb, err_t err) {
    if (err != ERR_OK || pcb == nullptr) return ERR_VAL;
    auto* server = static_cast<LwipEchoServer*>(arg);
    auto* c = new Conn{server, pcb};
    server->conns_.insert(c);
    tcp_nagle_disable(pcb);
    tcp_arg(pcb, c);
    tcp_recv(pcb, Recv);
    tcp_sent(pcb, Sent);
    tcp_err(pcb, Err);
    return ERR_OK;
  }
};

namespace {

tcp_pcb* ListenOn(const ip_addr_t& ip, uint16_t port) {
  tcp_pcb* pcb = tcp_new_ip_type(IP_GET_TYPE(&ip));
  if (pcb == nullptr || tcp_bind(pcb, &ip, port) != ERR_OK) {
    std::fprintf(stderr, "lwIP echo server: bind failed\n");
    std::abort();
  }
  return tcp_listen(pcb);
}

}  // namespace

LwipEchoServer::LwipEchoServer(in_addr addr, uint16_t port) {
  ip_addr_t ip;
  ip_addr_set_ip4_u32(&ip, addr.s_addr);
  listener_ = ListenOn(ip, port);
  tcp_arg(listener_, this);
  tcp_accept(listener_, EchoCallbacks::Accept);
}

LwipEchoServer::LwipEchoServer(const in6_addr& addr, uint16_t port) {
  ip_addr_t ip;
  uint32_t w[4];
  std::memcpy(w, &addr, sizeof(w));
  IP_ADDR6(&ip, w[0], w[1], w[2], w[3]);
  listener_ = ListenOn(ip, port);
  tcp_arg(listener_, this);
  tcp_accept(listener_, EchoCallbacks::Accept);
}

LwipEchoServer::~LwipEchoServer() {
  while (!conns_.empty()) {
    Conn* c = *conns_.begin();
    tcp_arg(c->pcb, nullptr);
    tcp_abort(c->pcb);
    EchoCallbacks::Forget(c);
  }
  if (listener_ != nullptr) tcp_close(listener_);
}

}  // namespace xdpfwd::test
