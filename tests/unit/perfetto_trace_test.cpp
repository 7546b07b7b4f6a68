// The Perfetto trace: the protobuf bytes against a known answer, and a scripted connection's
// recorder records turned into a trace that protoc decodes with forwarder/perfetto_trace.proto.
#include "forwarder/perfetto_trace.h"

#include <gtest/gtest.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <map>
#include <regex>
#include <string>
#include <vector>

#include "forwarder/recorder_trace.h"
#include "forwarder/session_log.h"
#include "os/flight_recorder.h"

namespace xdpfwd {
namespace {

std::string Hex(const std::string& bytes) {
  static const char kDigits[] = "0123456789abcdef";
  std::string out;
  for (unsigned char c : bytes) {
    out.push_back(kDigits[c >> 4]);
    out.push_back(kDigits[c & 15]);
  }
  return out;
}

TEST(ProtoMessage, VarintsKnownAnswer) {
  ProtoMessage m;
  m.Varint(1, 0);
  m.Varint(1, 127);
  m.Varint(1, 128);
  m.Varint(1, 300);
  m.Varint(1, UINT64_MAX);
  m.Int64(1, -1);  // int64: two's complement, ten bytes
  EXPECT_EQ(Hex(m.bytes()),
            "0800"
            "087f"
            "088001"
            "08ac02"
            "08ffffffffffffffffff01"
            "08ffffffffffffffffff01");
}

// Derived by hand from the encoding spec, and what
//   echo 'packet { timestamp: 300 trusted_packet_sequence_id: 1 track_event { type:
//   TYPE_SLICE_BEGIN track_uuid: 5 name: "a" counter_value: -1 flow_ids: 0x0102030405060708 } }'
//   | protoc --proto_path=forwarder --encode=perfetto.protos.Trace perfetto_trace.proto | xxd -p
// prints (protoc writes fields in number order; so does this test).
TEST(ProtoMessage, TracePacketKnownAnswer) {
  ProtoMessage event;
  event.Varint(9, 1);                     // type: TYPE_SLICE_BEGIN
  event.Varint(11, 5);                    // track_uuid
  event.Bytes(23, "a");                   // name
  event.Int64(30, -1);                    // counter_value
  event.Fixed64(47, 0x0102030405060708);  // flow_ids
  ProtoMessage packet;
  packet.Varint(8, 300);      // timestamp
  packet.Varint(10, 1);       // trusted_packet_sequence_id
  packet.Message(11, event);  // track_event
  ProtoMessage trace;
  trace.Message(1, packet);  // Trace.packet
  EXPECT_EQ(Hex(trace.bytes()),
            "0a25"                      // Trace.packet, 37 bytes
            "40ac02"                    // timestamp 300
            "5001"                      // trusted_packet_sequence_id 1
            "5a1e"                      // track_event, 30 bytes
            "4801"                      // type 1
            "5805"                      // track_uuid 5
            "ba010161"                  // name "a": tag 23 << 3 | 2 is two bytes
            "f001ffffffffffffffffff01"  // counter_value -1
            "f9020807060504030201");    // flow_ids, fixed64 little endian
}

// A scratch directory removed at the end of the test.
class TraceFiles : public ::testing::Test {
 protected:
  void SetUp() override {
    char pattern[] = "/tmp/xdpfwd-trace-test.XXXXXX";
    ASSERT_NE(mkdtemp(pattern), nullptr);
    dir_ = pattern;
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  // protoc --decode with our .proto: the trace as text, or a failure naming protoc's complaint.
  std::string Decode(const std::string& trace_bytes) {
    const std::string protoc = XDPFWD_PROTOC;
    if (protoc.empty()) {
      ADD_FAILURE() << "protoc not found when CMake ran: apt-get install protobuf-compiler "
                       "(scripts/setup) and re-run cmake";
      return {};
    }
    const std::string path = dir_ + "/recorder.pftrace";
    Result<void> written = WriteTraceFile(path, trace_bytes);
    if (!written.ok()) {
      ADD_FAILURE() << written.error().message();
      return {};
    }
    // A copy to open at ui.perfetto.dev (docs/flight_recorder.md).
    if (const char* keep = getenv("XDPFWD_KEEP_TRACE")) {
      EXPECT_TRUE(WriteTraceFile(keep, trace_bytes).ok());
    }
    const std::filesystem::path proto(XDPFWD_TRACE_PROTO);
    const std::string command = "'" + protoc + "' --proto_path='" + proto.parent_path().string() +
                                "' --decode=perfetto.protos.Trace '" + proto.filename().string() +
                                "' < '" + path + "' 2>&1";
    FILE* pipe = popen(command.c_str(), "r");
    if (pipe == nullptr) {
      ADD_FAILURE() << "popen " << command;
      return {};
    }
    std::string text;
    char buffer[4096];
    size_t n;
    while ((n = fread(buffer, 1, sizeof(buffer), pipe)) > 0) text.append(buffer, n);
    const int status = pclose(pipe);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << command << "\n" << text;
    return text;
  }

  std::string dir_;
};

// One top-level packet of protoc's text output.
struct DecodedPacket {
  std::string text;
  // The first `key: value` at the packet's given depth (protoc indents two spaces a level).
  std::string Field(const std::string& key, int depth) const {
    const std::regex line("(^|\n)" + std::string(2 * depth, ' ') + key + ": ([^\n]*)");
    std::smatch m;
    return std::regex_search(text, m, line) ? m[2].str() : std::string();
  }
  bool IsEvent() const { return text.find("\n  track_event {") != std::string::npos; }
  bool IsTrack() const { return text.find("\n  track_descriptor {") != std::string::npos; }
  std::string EventName() const { return Field("name", 2); }
  uint64_t Track() const {
    const std::string t = IsEvent() ? Field("track_uuid", 2) : Field("uuid", 2);
    return t.empty() ? 0 : std::stoull(t);
  }
};

std::vector<DecodedPacket> Packets(const std::string& text) {
  std::vector<DecodedPacket> packets;
  size_t at = 0;
  while ((at = text.find("packet {\n", at)) != std::string::npos) {
    const size_t end = text.find("\n}\n", at);
    if (end == std::string::npos) break;
    packets.push_back({text.substr(at, end - at + 2)});
    at = end;
  }
  return packets;
}

// A worker's recorder as a scripted connection leaves it: iterations around it, the
// connection's life on its two legs, a gap; then the trace, decoded and checked.
TEST_F(TraceFiles, ScriptedConnectionDecodesWithOurProto) {
  std::vector<uint8_t> memory(FlightRecorder::MemoryBytes(64) + 64);
  void* ring = memory.data() + (64 - reinterpret_cast<uintptr_t>(memory.data()) % 64);
  FlightRecorder::Format(ring, 64);
  FlightRecorder recorder = FlightRecorder::Attach(ring);
  constexpr uint32_t kConnection = 7;
  const uint64_t t = 5'000'000'000;
  using E = RecorderEvent;
  recorder.Iteration(t + 1'000, 5, 3, 600);
  recorder.Record(t + 1'100, E::kClientSyn, kConnection, RecorderLeg::kClient, 2, 40000);
  recorder.Record(t + 2'000, E::kClientEstablished, kConnection, RecorderLeg::kClient);
  recorder.Record(t + 2'100, E::kBackendSynSent, kConnection, RecorderLeg::kBackend, 33001);
  recorder.Iteration(t + 2'500, 2, 2, 1'000);
  recorder.Record(t + 3'000, E::kBackendEstablished, kConnection, RecorderLeg::kBackend);
  recorder.Record(t + 3'100, E::kFirstByteToBackend, kConnection, RecorderLeg::kBackend, 512);
  recorder.Record(t + 4'000, E::kFirstByteToClient, kConnection, RecorderLeg::kClient, 1460);
  recorder.Record(t + 4'500, E::kRetransmit, kConnection, RecorderLeg::kBackend, 1, 1460);
  recorder.Gap(t + 900'000, 800'000, 12, 1, 3);
  recorder.Record(t + 901'000, E::kClientFin, kConnection, RecorderLeg::kClient);
  recorder.Record(t + 902'000, E::kBackendFin, kConnection, RecorderLeg::kBackend);
  recorder.Record(t + 903'000, E::kConnectionEnd, kConnection, RecorderLeg::kWorker,
                  static_cast<uint32_t>(SessionResult::kRemoteClosedFirst));

  Result<RecorderSnapshot> snapshot = ReadRecorder(ring, FlightRecorder::MemoryBytes(64));
  ASSERT_TRUE(snapshot.ok());
  std::vector<WorkerRecording> workers(1);
  workers[0].name = "worker 0";
  workers[0].pid = 4242;
  workers[0].snapshot = std::move(snapshot.value());
  const std::string text = Decode(RecorderTrace(workers, {t + 1'000'000, t + 7'000'000}));
  ASSERT_FALSE(text.empty());
  const std::vector<DecodedPacket> packets = Packets(text);
  ASSERT_GT(packets.size(), 10u);

  // The clock: CLOCK_MONOTONIC is the trace's, tied to BOOTTIME, on the first packet.
  EXPECT_EQ(packets[0].Field("primary_trace_clock", 2), "BUILTIN_CLOCK_MONOTONIC");
  EXPECT_EQ(packets[0].Field("sequence_flags", 1), "1");
  EXPECT_NE(packets[0].text.find("timestamp: 5007000000"), std::string::npos);

  // Tracks by name.
  std::map<std::string, uint64_t> tracks;
  for (const DecodedPacket& p : packets) {
    if (p.IsTrack()) tracks[p.Field("name", 2)] = p.Track();
  }
  for (const char* name : {"\"worker 0\"", "\"loop\"", "\"gaps\"", "\"packets received\"",
                           "\"packets sent\"", "\"conn 7 client\"", "\"conn 7 backend\""}) {
    EXPECT_NE(tracks[name], 0u) << "no track " << name << "\n" << text;
  }
  EXPECT_NE(text.find("pid: 4242"), std::string::npos);
  EXPECT_NE(text.find("process_name: \"worker 0\""), std::string::npos);
  EXPECT_NE(text.find("unit: UNIT_COUNT"), std::string::npos);
  const uint64_t client = tracks["\"conn 7 client\""];
  const uint64_t backend = tracks["\"conn 7 backend\""];

  // The connection's events on their legs, in time order, every one stamped MONOTONIC.
  std::vector<std::pair<std::string, uint64_t>> connection_events;
  std::string client_flow, backend_flow;
  std::vector<std::string> received;
  for (const DecodedPacket& p : packets) {
    if (!p.IsEvent()) continue;
    EXPECT_EQ(p.Field("timestamp_clock_id", 1), "3") << p.text;
    if (p.Track() == client || p.Track() == backend) {
      connection_events.push_back({p.Field("type", 2) + " " + p.EventName(), p.Track()});
    }
    if (p.Track() == client && !p.Field("flow_ids", 2).empty())
      client_flow = p.Field("flow_ids", 2);
    if (p.Track() == backend && !p.Field("terminating_flow_ids", 2).empty()) {
      backend_flow = p.Field("terminating_flow_ids", 2);
    }
    if (p.Track() == tracks["\"packets received\""])
      received.push_back(p.Field("counter_value", 2));
  }
  const std::vector<std::pair<std::string, uint64_t>> want = {
      {"TYPE_SLICE_BEGIN \"connection\"", client},
      {"TYPE_INSTANT \"client SYN\"", client},
      {"TYPE_INSTANT \"client handshake done\"", client},
      {"TYPE_SLICE_BEGIN \"backend leg\"", backend},
      {"TYPE_INSTANT \"backend SYN sent\"", backend},
      {"TYPE_INSTANT \"backend established\"", backend},
      {"TYPE_INSTANT \"first byte client->backend\"", backend},
      {"TYPE_INSTANT \"first byte backend->client\"", client},
      {"TYPE_INSTANT \"retransmission\"", backend},
      {"TYPE_INSTANT \"FIN from client\"", client},
      {"TYPE_INSTANT \"FIN from backend\"", backend},
      {"TYPE_INSTANT \"connection end\"", client},
      {"TYPE_SLICE_END ", client},
      {"TYPE_SLICE_END ", backend},
  };
  EXPECT_EQ(connection_events, want) << text;

  // The flow: from the client leg's handshake to the backend SYN, the same id on both legs.
  EXPECT_FALSE(client_flow.empty()) << text;
  EXPECT_EQ(client_flow, backend_flow);

  // Packets received per iteration: 5 while the first ran, 0 after, 2, 0.
  EXPECT_EQ(received, (std::vector<std::string>{"5", "0", "2", "0"}));

  // Arguments as annotations: the end's reason by number and name, the gap's faults.
  // (protoc prints a message's fields in number order: the value, 4 or 6, before the name, 10.)
  EXPECT_NE(text.find("string_value: \"done-remote-closed\"\n      name: \"reason_name\""),
            std::string::npos);
  EXPECT_NE(text.find("int_value: 1\n      name: \"major_faults\""), std::string::npos);
  EXPECT_NE(text.find("int_value: 800\n      name: \"gap_us\""), std::string::npos);
}

// A connection id the worker reuses after the first connection ended gets tracks of its own.
TEST_F(TraceFiles, ReusedConnectionIdStartsNewTracks) {
  std::vector<RecorderRecord> records;
  auto add = [&](uint64_t ns, RecorderEvent kind, RecorderLeg leg) {
    records.push_back({ns, 9, static_cast<uint16_t>(kind), static_cast<uint8_t>(leg), 0, {}});
  };
  for (uint64_t base : {1'000u, 5'000u}) {
    add(base, RecorderEvent::kClientSyn, RecorderLeg::kClient);
    add(base + 100, RecorderEvent::kBackendSynSent, RecorderLeg::kBackend);
    add(base + 200, RecorderEvent::kConnectionEnd, RecorderLeg::kWorker);
  }
  std::vector<WorkerRecording> workers(1);
  workers[0].name = "worker 3";
  workers[0].snapshot.records = records;
  workers[0].snapshot.published = records.size();
  const std::string text = Decode(RecorderTrace(workers));
  std::map<uint64_t, std::string> client_tracks;
  int flows = 0;
  for (const DecodedPacket& p : Packets(text)) {
    if (p.IsTrack() && p.Field("name", 2) == "\"conn 9 client\"") {
      client_tracks[p.Track()] = p.Field("name", 2);
    }
    if (p.IsEvent() && !p.Field("terminating_flow_ids", 2).empty()) ++flows;
  }
  EXPECT_EQ(client_tracks.size(), 2u) << text;
  EXPECT_EQ(flows, 2);
}

TEST(WriteTraceFile, SaysWhereItCouldNotWrite) {
  Result<void> r = WriteTraceFile("/nonexistent-dir/x.pftrace", "abc");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message().find("open /nonexistent-dir/x.pftrace.partial"), std::string::npos);
}

}  // namespace
}  // namespace xdpfwd
