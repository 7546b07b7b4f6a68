// The control socket, the metrics listener and `xdpfwd ctl` (control_socket.h).
#include "forwarder/control_socket.h"

#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

namespace xdpfwd {
namespace {

Result<sockaddr_un> UnixAddress(const std::string& path) {
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  if (path.empty() || path.size() >= sizeof a.sun_path) {
    return Error{{},
                 "control socket '" + path + "': a path of 1 to " +
                     std::to_string(sizeof a.sun_path - 1) + " characters is needed"};
  }
  std::memcpy(a.sun_path, path.data(), path.size());
  return a;
}

// Creates each missing directory of `path`'s parent, mode 0755.
Result<void> MakeParents(const std::string& path) {
  for (size_t slash = path.find('/', 1); slash != std::string::npos;
       slash = path.find('/', slash + 1)) {
    const std::string dir = path.substr(0, slash);
    if (mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST) return SystemError("mkdir " + dir);
  }
  return {};
}

}  // namespace

Result<ControlListener> ListenControl(const std::string& path) {
  auto address = UnixAddress(path);
  if (!address) return address.error();
  if (auto made = MakeParents(path); !made) return made.error();
  UniqueFd fd(socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  if (!fd) return SystemError("control socket: socket");
  const auto* sa = reinterpret_cast<const sockaddr*>(&*address);
  struct stat st {};
  if (lstat(path.c_str(), &st) == 0) {
    if (!S_ISSOCK(st.st_mode)) {
      return Error{{}, "control socket " + path + ": a file that is not a socket is there"};
    }
    // Someone listening there is a running xdpfwd (or another program): never take it over.
    UniqueFd probe(socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
    if (probe && connect(probe.get(), sa, sizeof *address) == 0) {
      return Error{{},
                   "control socket " + path +
                       " is in use (another xdpfwd?): give this one --control PATH, or "
                       "--control none"};
    }
    if (unlink(path.c_str()) != 0) return SystemError("control socket: remove stale " + path);
  }
  // The socket file is created with the umask's mode: bind under a umask that leaves only the
  // owner's bits, so there is no moment at which others could connect.
  const mode_t old = umask(0177);
  const int bound = bind(fd.get(), sa, sizeof *address);
  const int bind_errno = errno;
  umask(old);
  if (bound != 0) return SystemError("control socket: bind " + path, bind_errno);
  if (listen(fd.get(), 16) != 0) return SystemError("control socket: listen " + path);
  ControlListener l;
  if (lstat(path.c_str(), &st) != 0) return SystemError("control socket: stat " + path);
  l.fd = std::move(fd);
  l.path = path;
  l.dev = st.st_dev;
  l.ino = st.st_ino;
  return l;
}

void RemoveControlSocket(const ControlListener& listener) {
  if (listener.path.empty()) return;  // none was bound
  struct stat st {};
  if (lstat(listener.path.c_str(), &st) == 0 && st.st_dev == listener.dev &&
      st.st_ino == listener.ino) {
    unlink(listener.path.c_str());
  }
}

Result<UniqueFd> ListenMetrics(const SocketAddress& address) {
  UniqueFd fd(socket(address.family(), SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  if (!fd) return SystemError("--metrics: socket");
  const int one = 1;
  setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  if (bind(fd.get(), address.get(), address.length) != 0) {
    return SystemError("--metrics: bind " + ToString(address));
  }
  if (listen(fd.get(), 64) != 0) return SystemError("--metrics: listen " + ToString(address));
  return fd;
}

int RunControlClient(const std::vector<std::string>& args) {
  std::string path = kDefaultControlPath;
  std::string command;
  for (size_t i = 0; i < args.size(); ++i) {
    if ((args[i] == "--control" || args[i] == "-s") && i + 1 < args.size() && command.empty()) {
      path = args[++i];
    } else if (args[i].rfind("--control=", 0) == 0 && command.empty()) {
      path = args[i].substr(10);
    } else {
      command += (command.empty() ? "" : " ") + args[i];
    }
  }
  if (command.empty()) {
    std::fprintf(stderr,
                 "usage: xdpfwd ctl [--control PATH] COMMAND\n(xdpfwd ctl help lists the "
                 "commands; the socket is %s unless --control says otherwise)\n",
                 kDefaultControlPath);
    return 2;
  }
  auto address = UnixAddress(path);
  if (!address) {
    std::fprintf(stderr, "xdpfwd ctl: %s\n", address.error().message().c_str());
    return 2;
  }
  UniqueFd fd(socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!fd || connect(fd.get(), reinterpret_cast<const sockaddr*>(&*address), sizeof *address)) {
    std::fprintf(stderr,
                 "xdpfwd ctl: cannot connect to %s: %s (is xdpfwd running? --control "
                 "PATH names another socket)\n",
                 path.c_str(), std::strerror(errno));
    return 2;
  }
  command += '\n';
  for (size_t sent = 0; sent < command.size();) {
    const ssize_t n = send(fd.get(), command.data() + sent, command.size() - sent, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      std::fprintf(stderr, "xdpfwd ctl: send: %s\n", std::strerror(errno));
      return 2;
    }
    sent += static_cast<size_t>(n);
  }
  shutdown(fd.get(), SHUT_WR);  // one command: the server answers it and closes
  std::string answer;
  char buffer[65536];
  for (;;) {
    const ssize_t n = read(fd.get(), buffer, sizeof buffer);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      std::fprintf(stderr, "xdpfwd ctl: read: %s\n", std::strerror(errno));
      return 2;
    }
    if (n == 0) break;
    answer.append(buffer, static_cast<size_t>(n));
  }
  // The answer's blank last line ends it for interactive users; a pipe does not need it.
  if (answer.size() >= 2 && answer.compare(answer.size() - 2, 2, "\n\n") == 0) answer.pop_back();
  std::fwrite(answer.data(), 1, answer.size(), stdout);
  return answer.rfind("error:", 0) == 0 ? 1 : 0;
}

}  // namespace xdpfwd
