// See write_ref.h.
#include "stack/write_ref.h"

#include "os/log.h"

extern "C" {
#include "lwip/tcp.h"
}

namespace xdpfwd {

WriteRefPool::WriteRefPool(uint32_t capacity) : capacity_(capacity), refs_(new Ref[capacity]) {
  for (uint32_t i = 0; i < capacity; ++i) {
    refs_[i].pool = this;
    refs_[i].next_free = free_;
    free_ = &refs_[i];
  }
}

WriteRefPool::~WriteRefPool() {
  // lwIP would free a Ref into memory that is gone: a leak is the lesser harm.
  if (in_use_ != 0) {
    Log("write-ref pool: " + std::to_string(in_use_) + " references still held by lwIP at exit");
    (void)refs_.release();
  }
}

err_t WriteRefPool::Write(tcp_pcb* pcb, pbuf* owner, const void* data, uint16_t len) {
  Call call{this, owner};
  return tcp_write_ref(pcb, data, len, 0, Make, &call);
}

pbuf* WriteRefPool::Make(void* call_arg, const void* data, u16_t len) {
  const Call& call = *static_cast<Call*>(call_arg);
  WriteRefPool& pool = *call.pool;
  Ref* r = pool.free_;
  if (r == nullptr || call.owner->ref == LWIP_PBUF_REF_T(~0)) return nullptr;
  pbuf* p = pbuf_alloced_custom(PBUF_RAW, len, PBUF_REF, &r->custom, const_cast<void*>(data), len);
  if (p == nullptr) return nullptr;
  pool.free_ = r->next_free;
  ++pool.in_use_;
  r->custom.custom_free_function = Free;
  r->owner = call.owner;
  pbuf_ref(call.owner);
  return p;
}

void WriteRefPool::Free(pbuf* p) {
  Ref* r = reinterpret_cast<Ref*>(p);
  WriteRefPool& pool = *r->pool;
  pbuf* owner = r->owner;
  r->owner = nullptr;
  r->next_free = pool.free_;
  pool.free_ = r;
  --pool.in_use_;
  pbuf_free(owner);
}

}  // namespace xdpfwd
