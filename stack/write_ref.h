// Sending received data without copying it (lwIP patch 0032, tcp_write_ref): lwIP's send queue
// points into the pbuf the data arrived in (a UMEM frame) through small custom pbufs, each
// holding a reference on that pbuf until lwIP frees it (the data acknowledged, the pcb aborted).
// The pool bounds how many such references exist at once, and so how many receive frames
// send queues can pin: past it the caller copies, as before (docs/relay.md, "Zero-copy relay").
#pragma once

#include <cstdint>
#include <memory>

extern "C" {
#include "lwip/err.h"
#include "lwip/pbuf.h"
}

struct tcp_pcb;

namespace xdpfwd {

class WriteRefPool {
 public:
  explicit WriteRefPool(uint32_t capacity);
  ~WriteRefPool();  // every reference must have been released (lwIP freed its pbufs)
  WriteRefPool(const WriteRefPool&) = delete;
  WriteRefPool& operator=(const WriteRefPool&) = delete;

  // tcp_write of `len` bytes at `data`, which lie inside `owner`, without copying them. ERR_MEM
  // (nothing queued) when the pool or lwIP runs out: the caller may copy instead.
  err_t Write(tcp_pcb* pcb, pbuf* owner, const void* data, uint16_t len);

  uint32_t in_use() const { return in_use_; }
  uint32_t capacity() const { return capacity_; }

 private:
  struct Ref {
    pbuf_custom custom;  // first member: lwIP's free callback gets it back as a pbuf*
    pbuf* owner;
    WriteRefPool* pool;
    Ref* next_free;
  };
  struct Call {
    WriteRefPool* pool;
    pbuf* owner;
  };
  static pbuf* Make(void* call, const void* data, u16_t len);
  static void Free(pbuf* p);

  uint32_t capacity_;
  std::unique_ptr<Ref[]> refs_;
  Ref* free_ = nullptr;
  uint32_t in_use_ = 0;
};

}  // namespace xdpfwd
