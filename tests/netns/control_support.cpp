// Helpers of the control-process tests (control_support.h).
#include "tests/netns/control_support.h"

#include <sys/socket.h>
#include <unistd.h>

#include <cstring>
#include <map>
#include <sstream>

#include "os/endpoint.h"

namespace xdpfwd::test {

std::string Addr(in_addr a, uint16_t port) { return ToString(a) + ":" + std::to_string(port); }

// The whole HTTP response to `request` from addr:port (the server closes after one).
std::string Http(in_addr addr, uint16_t port, const std::string& request) {
  UniqueFd fd = TcpConnect("", addr, port);
  EXPECT_EQ(send(fd.get(), request.data(), request.size(), MSG_NOSIGNAL),
            static_cast<ssize_t>(request.size()));
  std::string response;
  char buffer[65536];
  for (ssize_t n; (n = recv(fd.get(), buffer, sizeof buffer, 0)) > 0;) response.append(buffer, n);
  return response;
}

std::string Body(const std::string& response) {
  const size_t end = response.find("\r\n\r\n");
  return end == std::string::npos ? "" : response.substr(end + 4);
}

// promtool's verdict on a metrics text: its exit status and what it said.
CommandResult Promtool(const std::string& text) {
  char path[] = "/tmp/xdpfwd-metrics-XXXXXX";
  const int fd = mkstemp(path);
  EXPECT_GE(fd, 0);
  EXPECT_EQ(write(fd, text.data(), text.size()), static_cast<ssize_t>(text.size()));
  close(fd);
  CommandResult r = RunCommand("", std::string(XDPFWD_PROMTOOL) + " check metrics < " + path);
  unlink(path);
  return r;
}

// The value of the sample `series` (name and labels exactly as printed) in a metrics text.
std::optional<std::string> Sample(const std::string& text, const std::string& series) {
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind(series + " ", 0) == 0) return line.substr(series.size() + 1);
  }
  return std::nullopt;
}

// `path` decoded by protoc with our .proto: the trace as text.
std::string DecodeTrace(const std::string& path) {
  const std::string protoc = XDPFWD_PROTOC;
  if (protoc.empty()) {
    ADD_FAILURE() << "protoc not found when CMake ran (scripts/setup installs it)";
    return {};
  }
  const CommandResult r = RunCommand(
      "",
      protoc + " --decode=perfetto.protos.Trace --proto_path=" +
          std::string(XDPFWD_TRACE_PROTO).substr(0, std::string(XDPFWD_TRACE_PROTO).rfind('/')) +
          " " + XDPFWD_TRACE_PROTO + " < " + path + " 2>&1");
  EXPECT_EQ(r.status, 0) << r.output;
  return r.output;
}

// Where each of `names` first appears in `text` as an event name, in order; a missing name
// fails.
void ExpectInOrder(const std::string& text, const std::vector<std::string>& names) {
  size_t at = 0;
  for (const std::string& name : names) {
    const size_t found = text.find("name: \"" + name + "\"", at);
    ASSERT_NE(found, std::string::npos) << "no '" << name << "' after offset " << at;
    at = found;
  }
}

// The names of the tracks that hold an event named `event` in a decoded trace: each packet is
// either a track's descriptor (uuid, name) or an event (track_uuid, name).
std::set<std::string> TracksWith(const std::string& text, const std::string& event) {
  std::map<std::string, std::string> track_names;  // uuid -> name
  std::vector<std::string> uuids;                  // of the tracks `event` is on
  auto field = [](const std::string& packet, const std::string& key) {
    const size_t at = packet.find(key);
    if (at == std::string::npos) return std::string();
    const size_t begin = at + key.size();
    return packet.substr(begin, packet.find('\n', begin) - begin);
  };
  for (size_t at = text.find("packet {"); at != std::string::npos;) {
    const size_t next = text.find("\npacket {", at + 1);
    const std::string packet = text.substr(at, next == std::string::npos ? next : next - at);
    // The descriptor's and the event's own fields, not their annotations' (indented deeper).
    if (packet.find("track_descriptor {") != std::string::npos) {
      track_names[field(packet, "\n    uuid: ")] = field(packet, "\n    name: \"");
    } else if (field(packet, "\n    name: \"") == event + "\"") {
      uuids.push_back(field(packet, "\n    track_uuid: "));
    }
    at = next == std::string::npos ? next : next + 1;
  }
  std::set<std::string> names;
  for (const std::string& uuid : uuids) {
    const std::string& name = track_names[uuid];
    names.insert(name.substr(0, name.size() - 1));  // without its closing quote
  }
  return names;
}

// A loopback port nobody listens on now, for a rule that no client uses.
std::string LoopbackAddress() {
  UniqueFd fd = TcpListen("", in_addr{htonl(INADDR_LOOPBACK)});
  return "127.0.0.1:" + std::to_string(LocalPort(fd.get()));
}

}  // namespace xdpfwd::test
