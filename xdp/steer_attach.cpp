// Loading the steering program, attaching it to an interface and detaching it, and whose it is:
// the owner record in its read-only data tells a live xdpfwd's program from a stale one. Attaches
// with bpf_xdp_attach (netlink) rather than libxdp's multi-program dispatcher: it works the same
// with and without bpffs, and a detach that names the expected program (XDP_FLAGS_REPLACE) can
// never remove somebody else's program.
#include "xdp/steer.h"

#include <bpf/bpf.h>
#include <bpf/btf.h>
#include <bpf/libbpf.h>
#include <linux/if_link.h>
#include <net/if.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cstdarg>
#include <cstring>
#include <fstream>
#include <mutex>
#include <sstream>
#include <vector>

#include "os/log.h"
#include "os/unique_fd.h"
#include "xdp/map_count.h"
#include "xdp/steer_private.h"

namespace xdpfwd {

namespace {

// libbpf reports verifier logs and netlink extack messages through its print callback.
// Collect warnings while a load or attach runs, so errors can say what the kernel said.
std::mutex g_libbpf_mu;
std::string* g_libbpf_capture = nullptr;

int LibbpfPrint(enum libbpf_print_level level, const char* format, va_list args) {
  if (level == LIBBPF_DEBUG) return 0;
  char buf[1024];
  const int n = vsnprintf(buf, sizeof(buf), format, args);
  if (g_libbpf_capture != nullptr) {
    g_libbpf_capture->append(buf,
                             n < 0 ? 0 : std::min<size_t>(static_cast<size_t>(n), sizeof(buf) - 1));
  } else if (LogVerbosity() >= 1) {
    std::fputs(buf, stderr);
  }
  return 0;
}

// Runs fn with libbpf's messages captured into *out.
template <typename F>
auto WithLibbpfMessages(std::string* out, F fn) {
  std::lock_guard lock(g_libbpf_mu);
  static const bool installed = (libbpf_set_print(LibbpfPrint), true);
  (void)installed;
  g_libbpf_capture = out;
  auto result = fn();
  g_libbpf_capture = nullptr;
  return result;
}

// The kernel's own words from captured libbpf output ("Kernel error message: ..."), if any.
std::string KernelMessage(const std::string& captured) {
  const std::string tag = "Kernel error message: ";
  const size_t at = captured.rfind(tag);
  if (at == std::string::npos) return "";
  std::string msg = captured.substr(at + tag.size());
  while (!msg.empty() && (msg.back() == '\n' || msg.back() == ' ')) msg.pop_back();
  return msg;
}

std::string LastLines(const std::string& text, size_t lines) {
  size_t pos = text.size();
  for (size_t i = 0; i <= lines && pos != std::string::npos && pos > 0; ++i) {
    pos = text.rfind('\n', pos - 1);
  }
  return pos == std::string::npos ? text : text.substr(pos + 1);
}

uint64_t ProcessStartTime(pid_t pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string content((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
  // Field 2 (comm) may contain spaces; fields after it start past the last ')'.
  const size_t close = content.rfind(')');
  if (close == std::string::npos) return 0;
  std::istringstream rest(content.substr(close + 2));
  std::string field;
  for (int i = 3; i <= 22 && rest >> field; ++i) {
    if (i == 22) return std::stoull(field);
  }
  return 0;
}

bool OwnerAlive(const steer_owner& owner) {
  if (owner.pid == 0) return false;
  if (kill(static_cast<pid_t>(owner.pid), 0) != 0 && errno == ESRCH) return false;
  return ProcessStartTime(static_cast<pid_t>(owner.pid)) == owner.start_time;
}

// A program attached to an interface, as the kernel reports it.
struct AttachedProg {
  uint32_t id = 0;
  XdpMode mode = XdpMode::kNative;
  std::string name;
  UniqueFd fd;
};

Result<std::optional<AttachedProg>> QueryAttached(int ifindex, const std::string& ifname) {
  bpf_xdp_query_opts q{};
  q.sz = sizeof(q);
  if (int err = bpf_xdp_query(ifindex, 0, &q); err != 0) {
    return SystemError(ifname + ": querying attached XDP programs", -err);
  }
  if (q.attach_mode == XDP_ATTACHED_NONE) return std::optional<AttachedProg>();
  if (q.attach_mode == XDP_ATTACHED_HW || q.attach_mode == XDP_ATTACHED_MULTI) {
    return Error{{},
                 ifname +
                     ": an offloaded or multi-mode XDP program is attached; xdpfwd "
                     "will not touch it (ip link set dev " +
                     ifname + " xdp off)"};
  }
  AttachedProg prog;
  prog.id = q.attach_mode == XDP_ATTACHED_SKB ? q.skb_prog_id : q.drv_prog_id;
  prog.mode = q.attach_mode == XDP_ATTACHED_SKB ? XdpMode::kGeneric : XdpMode::kNative;
  prog.fd.reset(bpf_prog_get_fd_by_id(prog.id));
  if (!prog.fd)
    return SystemError(ifname + ": opening attached XDP program id " + std::to_string(prog.id));
  bpf_prog_info info{};
  uint32_t len = sizeof(info);
  if (bpf_obj_get_info_by_fd(prog.fd.get(), &info, &len) != 0) {
    return SystemError(ifname + ": reading XDP program info");
  }
  prog.name = info.name;
  return std::optional<AttachedProg>(std::move(prog));
}

// Finds one of a loaded program's maps by name.
Result<UniqueFd> MapOfProgram(int prog_fd, const std::string& name) {
  bpf_prog_info info{};
  uint32_t len = sizeof(info);
  if (bpf_obj_get_info_by_fd(prog_fd, &info, &len) != 0) return SystemError("prog info");
  std::vector<uint32_t> ids(info.nr_map_ids);
  info = {};
  info.nr_map_ids = static_cast<uint32_t>(ids.size());
  info.map_ids = reinterpret_cast<uint64_t>(ids.data());
  len = sizeof(info);
  if (bpf_obj_get_info_by_fd(prog_fd, &info, &len) != 0) return SystemError("prog map ids");
  for (uint32_t id : ids) {
    UniqueFd fd(bpf_map_get_fd_by_id(id));
    if (!fd) continue;
    bpf_map_info minfo{};
    uint32_t mlen = sizeof(minfo);
    if (bpf_obj_get_info_by_fd(fd.get(), &minfo, &mlen) == 0 && name == minfo.name) return fd;
  }
  return Error{std::make_error_code(std::errc::no_such_file_or_directory), "map " + name};
}

// The owner record lives in the program's .rodata map; its offset comes from the map's BTF
// (a DATASEC), so no assumption about how the compiler laid the section out.
Result<steer_owner> ReadOwner(int prog_fd) {
  auto map = MapOfProgram(prog_fd, "steer.rodata");
  if (!map) return map.error();
  bpf_map_info minfo{};
  uint32_t mlen = sizeof(minfo);
  if (bpf_obj_get_info_by_fd(map->get(), &minfo, &mlen) != 0) return SystemError("rodata info");
  btf* types = btf__load_from_kernel_by_id(minfo.btf_id);
  if (types == nullptr) return SystemError("rodata BTF");
  long offset = -1;
  const btf_type* sec = btf__type_by_id(types, minfo.btf_value_type_id);
  if (sec != nullptr && btf_is_datasec(sec)) {
    const btf_var_secinfo* vars = btf_var_secinfos(sec);
    for (uint16_t i = 0; i < btf_vlen(sec); ++i) {
      const btf_type* var = btf__type_by_id(types, vars[i].type);
      if (var != nullptr &&
          std::strcmp(btf__name_by_offset(types, var->name_off), "steer_owner_info") == 0 &&
          vars[i].size == sizeof(steer_owner)) {
        offset = vars[i].offset;
      }
    }
  }
  btf__free(types);
  if (offset < 0) return Error{{}, "no owner record in the program's read-only data"};
  std::vector<uint8_t> value(minfo.value_size);
  const uint32_t zero = 0;
  if (bpf_map_lookup_elem(map->get(), &zero, value.data()) != 0) return SystemError("read owner");
  steer_owner owner{};
  std::memcpy(&owner, value.data() + offset, sizeof(owner));
  return owner;
}

uint32_t XdpFlags(XdpMode mode) {
  return mode == XdpMode::kGeneric ? XDP_FLAGS_SKB_MODE : XDP_FLAGS_DRV_MODE;
}

std::string ForeignMessage(const std::string& ifname, const AttachedProg& prog) {
  std::string hint = "ip link set dev " + ifname + " xdp off";
  if (prog.name == "xdp_dispatcher") hint = "xdp-loader unload " + ifname + " --all";
  return ifname + ": XDP program '" + prog.name + "' (id " + std::to_string(prog.id) + ", " +
         std::string(ModeName(prog.mode)) +
         " mode) is attached and is not xdpfwd's; xdpfwd "
         "will not replace it. Detach it first (" +
         hint + ") or use another interface";
}

// Classifies what is attached: nothing, a stale xdpfwd program (detached here), or a refusal.
Result<void> ClearStale(int ifindex, const std::string& ifname) {
  auto attached = QueryAttached(ifindex, ifname);
  if (!attached) return attached.error();
  if (!attached->has_value()) return {};
  AttachedProg& prog = **attached;
  if (prog.name != STEER_PROG_NAME) return Error{{}, ForeignMessage(ifname, prog)};
  auto owner = ReadOwner(prog.fd.get());
  if (owner && OwnerAlive(*owner)) {
    return Error{{},
                 ifname + ": xdpfwd (pid " + std::to_string(owner->pid) +
                     ") is already attached; stop it first"};
  }
  bpf_xdp_attach_opts opts{};
  opts.sz = sizeof(opts);
  opts.old_prog_fd = prog.fd.get();  // detach only if it is still this program
  if (int err = bpf_xdp_detach(ifindex, XdpFlags(prog.mode), &opts); err != 0) {
    return SystemError(ifname + ": detaching stale xdpfwd program id " + std::to_string(prog.id),
                       -err);
  }
  Log(ifname + ": removed a stale xdpfwd program (id " + std::to_string(prog.id) +
      ") left by pid " + (owner ? std::to_string(owner->pid) : std::string("?")) +
      ", which is no longer running");
  return {};
}

}  // namespace

std::string_view ModeName(XdpMode mode) { return mode == XdpMode::kGeneric ? "generic" : "native"; }

Result<std::unique_ptr<SteerProgram>> SteerProgram::Load(const SteerOptions& options) {
  if (options.flow_capacity == 0 || options.flow_capacity > kMaxFlowCapacity) {
    return Error{{}, "flow capacity must be between 1 and " + std::to_string(kMaxFlowCapacity)};
  }
  std::unique_ptr<SteerProgram> self(new SteerProgram());
  self->options_ = options;
  self->skel_ = std::make_unique<Skeleton>();

  std::string messages;
  const int load_err = WithLibbpfMessages(&messages, [&]() -> int {
    self->skel_->s = steer__open();
    if (self->skel_->s == nullptr) return -errno;
    steer* s = self->skel_->s;
    s->rodata->check_kernel_sockets = options.check_kernel_sockets ? 1 : 0;
    s->rodata->steer_owner_info.pid = static_cast<uint32_t>(getpid());
    s->rodata->steer_owner_info.start_time = ProcessStartTime(getpid());
    s->rodata->syn_flow_budget = options.flow_capacity;
    s->rodata->hash_owner_workers = options.hash_owners;
    if (int err = bpf_map__set_max_entries(s->maps.steer_flows, FlowMapEntries(options))) {
      return err;
    }
    return steer__load(s);
  });
  if (load_err != 0) {
    return SystemError("loading the steering program: " + LastLines(messages, 8), -load_err);
  }
  bpf_prog_info info{};
  uint32_t len = sizeof(info);
  if (bpf_obj_get_info_by_fd(self->prog_fd(), &info, &len) == 0) self->prog_id_ = info.id;
  // The flow map's size as the kernel counts it. A kernel that cannot (before 6.6, or tracing
  // programs refused) leaves FlowCount walking the map, which costs seconds at a million flows.
  // libbpf's account of a refusal (a verifier log) stays out of the log: the errno is the
  // reason the start-up line gives.
  std::string count_messages;
  auto count = WithLibbpfMessages(&count_messages, [&] {
    return MapElementCount::LoadForFd(bpf_map__fd(self->skel_->s->maps.steer_flows));
  });
  if (count) {
    self->flow_count_ = std::move(*count);
  } else {
    self->flow_count_refused_ = count.error().message();
  }
  return self;
}

Result<std::unique_ptr<SteerProgram>> SteerProgram::Attach(const std::string& ifname,
                                                           const SteerOptions& options) {
  auto self = Load(options);
  if (!self) return self.error();
  if (auto attached = (*self)->AttachTo(ifname); !attached) return attached.error();
  return self;
}

int SteerProgram::prog_fd() const { return bpf_program__fd(skel_->s->progs.xdpfwd_steer); }

Result<void> SteerProgram::AttachTo(const std::string& ifname) {
  if (attached_) return Error{{}, "already attached to " + ifname_};
  const int ifindex = static_cast<int>(if_nametoindex(ifname.c_str()));
  if (ifindex == 0) return SystemError("interface " + ifname);
  if (auto cleared = ClearStale(ifindex, ifname); !cleared) return cleared.error();
  ifname_ = ifname;
  ifindex_ = ifindex;

  std::string messages;
  std::string why_not_native;
  if (!options_.force_generic) {
    const int err = WithLibbpfMessages(&messages, [&] {
      return bpf_xdp_attach(ifindex, prog_fd(), XDP_FLAGS_DRV_MODE | XDP_FLAGS_UPDATE_IF_NOEXIST,
                            nullptr);
    });
    if (err == 0) {
      mode_ = XdpMode::kNative;
      attached_ = true;
      return {};
    }
    why_not_native = std::strerror(-err);
    if (std::string k = KernelMessage(messages); !k.empty()) why_not_native += " (" + k + ")";
    if (err == -EBUSY || err == -EEXIST) {
      return Error{{}, ifname + ": another XDP program was attached while xdpfwd was starting"};
    }
    if (!options_.allow_generic) {
      return Error{{}, ifname + ": native XDP attach failed: " + why_not_native};
    }
  } else {
    why_not_native =
        options_.generic_reason.empty() ? "generic mode requested" : options_.generic_reason;
  }

  messages.clear();
  const int err = WithLibbpfMessages(&messages, [&] {
    return bpf_xdp_attach(ifindex, prog_fd(), XDP_FLAGS_SKB_MODE | XDP_FLAGS_UPDATE_IF_NOEXIST,
                          nullptr);
  });
  if (err != 0) {
    std::string k = KernelMessage(messages);
    return Error{{},
                 ifname + ": XDP attach failed in native mode (" + why_not_native +
                     ") and in generic mode (" + std::strerror(-err) + (k.empty() ? "" : ", " + k) +
                     ")"};
  }
  mode_ = XdpMode::kGeneric;
  why_generic_ =
      options_.force_generic ? why_not_native : "native attach failed: " + why_not_native;
  attached_ = true;
  if (!options_.force_generic) {
    Log(ifname +
        ": XDP attached in generic (SKB) mode because native mode failed: " + why_not_native);
  }
  return {};
}

SteerProgram::~SteerProgram() { Detach(); }

void SteerProgram::Detach() noexcept {
  if (!attached_) return;
  attached_ = false;
  bpf_xdp_attach_opts opts{};
  opts.sz = sizeof(opts);
  opts.old_prog_fd = prog_fd();
  if (int err = bpf_xdp_detach(ifindex_, XdpFlags(mode_), &opts); err != 0 && err != -ENODEV) {
    Log(ifname_ + ": detaching the XDP program failed: " + std::strerror(-err));
  }
}

Result<AttachedSteer> InspectSteer(const std::string& ifname) {
  const int ifindex = static_cast<int>(if_nametoindex(ifname.c_str()));
  if (ifindex == 0) return SystemError("interface " + ifname);
  auto attached = QueryAttached(ifindex, ifname);
  if (!attached) return attached.error();
  if (!attached->has_value()) return Error{{}, ifname + ": no XDP program is attached"};
  AttachedProg& prog = **attached;
  if (prog.name != STEER_PROG_NAME) return Error{{}, ForeignMessage(ifname, prog)};
  AttachedSteer out;
  out.prog_id = prog.id;
  out.mode = prog.mode;
  if (auto owner = ReadOwner(prog.fd.get())) {
    out.owner = *owner;
    out.owner_alive = OwnerAlive(*owner);
  }
  if (auto flows = MapOfProgram(prog.fd.get(), "steer_flows")) {
    // The kernel's count where it gives one: a walk costs seconds at a million flows.
    auto count = MapElementCount::LoadForFd(flows->get());
    const std::optional<uint64_t> n = count ? (*count)->Read() : std::nullopt;
    out.flows = n ? *n : CountKeys(flows->get());
  }
  if (auto counters = MapOfProgram(prog.fd.get(), "steer_counters")) {
    out.counters = SumCounters(counters->get());
  }
  return out;
}

Result<void> DetachStaleSteer(const std::string& ifname) {
  const int ifindex = static_cast<int>(if_nametoindex(ifname.c_str()));
  if (ifindex == 0) return SystemError("interface " + ifname);
  return ClearStale(ifindex, ifname);
}

}  // namespace xdpfwd
