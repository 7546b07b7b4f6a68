// Command-line parsing: --backend-source (the list, its errors), --max-connections per path,
// --cpus, and the sysctl text the kernel path reads its local port range from.
#include <arpa/inet.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "forwarder/kernel_path_backend.h"
#include "forwarder/options.h"

namespace xdpfwd {
namespace {

std::string Dotted(const in_addr& a) {
  char text[INET_ADDRSTRLEN] = "";
  inet_ntop(AF_INET, &a, text, sizeof(text));
  return text;
}

std::vector<std::string> Dotted(const std::vector<in_addr>& list) {
  std::vector<std::string> out;
  for (const in_addr& a : list) out.push_back(Dotted(a));
  return out;
}

Result<Options> Parse(std::vector<std::string> args) {
  args.push_back("10.0.1.1:9000");
  args.push_back("10.0.0.2:9001");
  return ParseCommandLine(args);
}

std::string ErrorOf(const std::vector<std::string>& args) {
  auto o = Parse(args);
  return o ? "(parsed)" : o.error().message();
}

TEST(BackendSourceOption, DefaultIsTheKernelsChoice) {
  auto o = Parse({});
  ASSERT_TRUE(o) << o.error().message();
  EXPECT_TRUE(o->backend_sources.empty());
}

TEST(BackendSourceOption, OneOrSeveralAddressesInOrder) {
  auto one = Parse({"--backend-source", "10.0.0.1"});
  ASSERT_TRUE(one) << one.error().message();
  EXPECT_EQ(Dotted(one->backend_sources), std::vector<std::string>{"10.0.0.1"});

  auto list = Parse({"--backend-source", "10.0.0.3,10.0.0.1,192.168.7.9"});
  ASSERT_TRUE(list) << list.error().message();
  EXPECT_EQ(Dotted(list->backend_sources),
            (std::vector<std::string>{"10.0.0.3", "10.0.0.1", "192.168.7.9"}));

  // Repeating the option adds to the list.
  auto repeated = Parse({"--backend-source", "10.0.0.1", "--backend-source", "10.0.0.2,10.0.0.4"});
  ASSERT_TRUE(repeated) << repeated.error().message();
  EXPECT_EQ(Dotted(repeated->backend_sources),
            (std::vector<std::string>{"10.0.0.1", "10.0.0.2", "10.0.0.4"}));
}

TEST(BackendSourceOption, ErrorsNameTheOptionAndTheFault) {
  EXPECT_EQ(ErrorOf({"--backend-source", ""}),
            "--backend-source: needs at least one address (ADDR[,ADDR...])");
  EXPECT_EQ(ErrorOf({"--backend-source", "10.0.0.1,,10.0.0.2"}),
            "--backend-source: '10.0.0.1,,10.0.0.2' has an empty address (ADDR[,ADDR...])");
  EXPECT_EQ(ErrorOf({"--backend-source", "10.0.0.1,"}),
            "--backend-source: '10.0.0.1,' has an empty address (ADDR[,ADDR...])");
  EXPECT_EQ(ErrorOf({"--backend-source", "10.0.0.300"}),
            "--backend-source: '10.0.0.300' is not an IPv4 address");
  EXPECT_EQ(ErrorOf({"--backend-source", "host.example"}),
            "--backend-source: 'host.example' is not an IPv4 address");
  EXPECT_EQ(ErrorOf({"--backend-source", "2001:db8::1"}),
            "--backend-source: '2001:db8::1' is not an IPv4 address");
  EXPECT_EQ(ErrorOf({"--backend-source", "10.0.0.1 "}),
            "--backend-source: '10.0.0.1 ' is not an IPv4 address");
  EXPECT_EQ(ErrorOf({"--backend-source", "10.0.0.1,10.0.0.2,10.0.0.1"}),
            "--backend-source: 10.0.0.1 is given twice");
  EXPECT_EQ(ErrorOf({"--backend-source", "10.0.0.1", "--backend-source", "10.0.0.1"}),
            "--backend-source: 10.0.0.1 is given twice");
  EXPECT_EQ(ErrorOf({"--backend-source", "0.0.0.0"}),
            "--backend-source: 0.0.0.0 is not a unicast address");
  EXPECT_EQ(ErrorOf({"--backend-source", "224.0.0.1"}),
            "--backend-source: 224.0.0.1 is not a unicast address");
  EXPECT_EQ(ErrorOf({"--backend-source", "255.255.255.255"}),
            "--backend-source: 255.255.255.255 is not a unicast address");
  auto missing = ParseCommandLine({"10.0.1.1:9000", "10.0.0.2:9001", "--backend-source"});
  ASSERT_FALSE(missing);
  EXPECT_EQ(missing.error().message(), "--backend-source needs a value");
}

TEST(BackendSourceOption, UsageMentionsIt) {
  EXPECT_NE(std::string(Usage()).find("--backend-source ADDR[,ADDR...]"), std::string::npos);
}

// Unset, each path keeps its own default (the fast path's is its lwIP pool, far above what the
// kernel path's open files allow); set, it applies to both.
TEST(MaxConnectionsOption, UnsetLeavesEachPathItsDefault) {
  auto unset = Parse({});
  ASSERT_TRUE(unset) << unset.error().message();
  EXPECT_FALSE(unset->max_connections.has_value());
  EXPECT_GE(FastPath::MaxConnections(), 100'000u);
  auto set = Parse({"--max-connections", "5000"});
  ASSERT_TRUE(set) << set.error().message();
  EXPECT_EQ(set->max_connections, 5000u);
  EXPECT_NE(ErrorOf({"--max-connections", "0"}), "(parsed)");
}

// --cpus LIST (and --cpu N, its one-CPU form): parsed as the kernel writes CPU lists, one
// fast-path worker per CPU (whether the interfaces have the queues is checked at start).
TEST(CpusOption, OneWorkerPerCpu) {
  auto unset = Parse({});
  ASSERT_TRUE(unset) << unset.error().message();
  EXPECT_TRUE(unset->cpus.empty());
  auto one = Parse({"--cpus", "1"});
  ASSERT_TRUE(one) << one.error().message();
  EXPECT_EQ(one->cpus, std::vector<int>{1});
  auto old = Parse({"--cpu", "0"});
  ASSERT_TRUE(old) << old.error().message();
  EXPECT_EQ(old->cpus, std::vector<int>{0});
  auto two = Parse({"--cpus", "0-1"});
  ASSERT_TRUE(two) << two.error().message();
  EXPECT_EQ(two->cpus, (std::vector<int>{0, 1}));
}

TEST(CpusOption, ErrorsNameTheOptionAndTheFault) {
  EXPECT_EQ(ErrorOf({"--cpus", "x"}), "--cpus x: 'x' is not a CPU number");
  EXPECT_EQ(ErrorOf({"--cpus", "1,x"}), "--cpus 1,x: 'x' is not a CPU number");
  EXPECT_EQ(ErrorOf({"--cpus", "1-0"}), "--cpus 1-0: '1-0' is a reversed range");
  EXPECT_EQ(ErrorOf({"--cpus", ""}), "--cpus: needs at least one CPU (e.g. 2 or 2-5,7)");
  EXPECT_EQ(ErrorOf({"--cpus", "0,0"}), "--cpus 0,0: CPU 0 is given twice");
  EXPECT_NE(ErrorOf({"--cpu", "100000"}).find("does not exist"), std::string::npos);
  EXPECT_NE(std::string(Usage()).find("--cpus LIST"), std::string::npos);
}

TEST(XdpModeOption, AutomaticUnlessOneModeIsGiven) {
  auto unset = Parse({});
  ASSERT_TRUE(unset.ok()) << unset.error().message();
  EXPECT_FALSE(unset->force_generic);
  EXPECT_FALSE(unset->force_native);
  auto native = Parse({"--native"});
  ASSERT_TRUE(native.ok()) << native.error().message();
  EXPECT_TRUE(native->force_native);
  auto generic = Parse({"--generic"});
  ASSERT_TRUE(generic.ok()) << generic.error().message();
  EXPECT_TRUE(generic->force_generic);
  EXPECT_TRUE(unset->multi_buffer);
  auto single = Parse({"--multi-buffer", "off"});
  ASSERT_TRUE(single.ok()) << single.error().message();
  EXPECT_FALSE(single->multi_buffer);
  EXPECT_NE(ErrorOf({"--multi-buffer", "maybe"}).find("expected on or off"), std::string::npos);
  auto both = Parse({"--generic", "--native"});
  ASSERT_FALSE(both.ok());
  EXPECT_NE(both.error().message().find("give one XDP attach mode"), std::string::npos)
      << both.error().message();
}

TEST(TxOption, AfXdpOrPacketSocketUnsetMeansChosenPerInterface) {
  auto unset = Parse({});
  ASSERT_TRUE(unset) << unset.error().message();
  EXPECT_FALSE(unset->packet_tx.has_value());
  auto packet = Parse({"--tx", "packet"});
  ASSERT_TRUE(packet) << packet.error().message();
  EXPECT_EQ(packet->packet_tx, std::optional<bool>(true));
  auto af_xdp = Parse({"--tx", "af-xdp"});
  ASSERT_TRUE(af_xdp) << af_xdp.error().message();
  EXPECT_EQ(af_xdp->packet_tx, std::optional<bool>(false));
  EXPECT_NE(ErrorOf({"--tx", "xsk"}).find("expected af-xdp or packet"), std::string::npos);
  EXPECT_NE(std::string(Usage()).find("--tx af-xdp|packet"), std::string::npos);
}

TEST(RelayCopyOption, AlwaysOrWhenQueued) {
  auto unset = Parse({});
  ASSERT_TRUE(unset) << unset.error().message();
  EXPECT_TRUE(unset->zero_copy_relay);
  auto always = Parse({"--relay-copy", "always"});
  ASSERT_TRUE(always) << always.error().message();
  EXPECT_FALSE(always->zero_copy_relay);
  auto queued = Parse({"--relay-copy", "when-queued"});
  ASSERT_TRUE(queued) << queued.error().message();
  EXPECT_TRUE(queued->zero_copy_relay);
  EXPECT_NE(ErrorOf({"--relay-copy", "never"}).find("expected always or when-queued"),
            std::string::npos);
  EXPECT_NE(std::string(Usage()).find("--relay-copy always|when-queued"), std::string::npos);
}

TEST(TxSmallOption, AfXdpAcksOrPacket) {
  auto unset = Parse({});
  ASSERT_TRUE(unset) << unset.error().message();
  EXPECT_EQ(unset->small_batches, SmallBatchTx::kAcksThroughPacket);
  for (const auto& [word, want] : {std::pair{"af-xdp", SmallBatchTx::kAfXdp},
                                   std::pair{"acks", SmallBatchTx::kAcksThroughPacket},
                                   std::pair{"packet", SmallBatchTx::kPacket}}) {
    auto o = Parse({"--tx-small", word});
    ASSERT_TRUE(o) << o.error().message();
    EXPECT_EQ(o->small_batches, want) << word;
  }
  EXPECT_NE(ErrorOf({"--tx-small", "xsk"}).find("expected af-xdp, acks or packet"),
            std::string::npos);
  EXPECT_NE(std::string(Usage()).find("--tx-small af-xdp|acks|packet"), std::string::npos);
}

TEST(FillDepthOption, AdaptiveOrFull) {
  auto unset = Parse({});
  ASSERT_TRUE(unset) << unset.error().message();
  EXPECT_TRUE(unset->adaptive_fill);
  auto full = Parse({"--fill-depth", "full"});
  ASSERT_TRUE(full) << full.error().message();
  EXPECT_FALSE(full->adaptive_fill);
  auto adaptive = Parse({"--fill-depth", "adaptive"});
  ASSERT_TRUE(adaptive) << adaptive.error().message();
  EXPECT_TRUE(adaptive->adaptive_fill);
  EXPECT_NE(ErrorOf({"--fill-depth", "512"}).find("expected adaptive or full"), std::string::npos);
  EXPECT_NE(std::string(Usage()).find("--fill-depth adaptive|full"), std::string::npos);
}

TEST(OoseqAckOption, HoldOrNow) {
  auto unset = Parse({});
  ASSERT_TRUE(unset) << unset.error().message();
  EXPECT_TRUE(unset->ooseq_ack_hold);
  auto now = Parse({"--ooseq-ack", "now"});
  ASSERT_TRUE(now) << now.error().message();
  EXPECT_FALSE(now->ooseq_ack_hold);
  auto hold = Parse({"--ooseq-ack", "hold"});
  ASSERT_TRUE(hold) << hold.error().message();
  EXPECT_TRUE(hold->ooseq_ack_hold);
  EXPECT_NE(ErrorOf({"--ooseq-ack", "later"}).find("expected hold or now"), std::string::npos);
  EXPECT_NE(std::string(Usage()).find("--ooseq-ack hold|now"), std::string::npos);
}

TEST(CongestionControlOption, CubicOrBbr) {
  auto unset = Parse({});
  ASSERT_TRUE(unset) << unset.error().message();
  EXPECT_TRUE(unset->bbr);
  auto bbr = Parse({"--congestion-control", "bbr"});
  ASSERT_TRUE(bbr) << bbr.error().message();
  EXPECT_TRUE(bbr->bbr);
  auto cubic = Parse({"--congestion-control", "cubic"});
  ASSERT_TRUE(cubic) << cubic.error().message();
  EXPECT_FALSE(cubic->bbr);
  EXPECT_NE(ErrorOf({"--congestion-control", "reno"}).find("expected cubic or bbr"),
            std::string::npos);
  EXPECT_NE(std::string(Usage()).find("--congestion-control cubic|bbr"), std::string::npos);
}

TEST(StallTimeoutOption, DefaultTwoMinutesZeroTurnsItOff) {
  auto unset = Parse({});
  ASSERT_TRUE(unset) << unset.error().message();
  EXPECT_EQ(unset->limits.stall_timeout, std::chrono::seconds(120));
  auto set = Parse({"--stall-timeout", "750ms"});
  ASSERT_TRUE(set) << set.error().message();
  EXPECT_EQ(set->limits.stall_timeout, std::chrono::milliseconds(750));
  auto off = Parse({"--stall-timeout", "0"});
  ASSERT_TRUE(off) << off.error().message();
  EXPECT_EQ(off->limits.stall_timeout.count(), 0);
  EXPECT_EQ(ErrorOf({"--stall-timeout", "soon"}).rfind("--stall-timeout: ", 0), 0u);
  EXPECT_NE(std::string(Usage()).find("--stall-timeout DUR"), std::string::npos);
}

TEST(WatchdogOption, DefaultFiveSecondsZeroTurnsItOff) {
  auto unset = Parse({});
  ASSERT_TRUE(unset) << unset.error().message();
  EXPECT_EQ(unset->watchdog, std::chrono::seconds(5));
  auto set = Parse({"--watchdog", "1s"});
  ASSERT_TRUE(set) << set.error().message();
  EXPECT_EQ(set->watchdog, std::chrono::seconds(1));
  auto off = Parse({"--watchdog", "0"});
  ASSERT_TRUE(off) << off.error().message();
  EXPECT_EQ(off->watchdog.count(), 0);
  EXPECT_EQ(ErrorOf({"--watchdog", "soon"}).rfind("--watchdog: ", 0), 0u);
  EXPECT_NE(std::string(Usage()).find("--watchdog DUR"), std::string::npos);
}

TEST(LocalPorts, RangeLessReservedPorts) {
  auto p = kernel_path::ParseLocalPorts("32768\t60999\n", "\n");
  ASSERT_TRUE(p) << p.error().message();
  EXPECT_EQ(p->low, 32768);
  EXPECT_EQ(p->high, 60999);
  EXPECT_EQ(p->size(), 28232u);
  EXPECT_EQ(std::count(p->reserved.begin(), p->reserved.end(), true), 0);

  auto r = kernel_path::ParseLocalPorts("40000 40049", "8080,40010-40012,40049,50000-50010\n");
  ASSERT_TRUE(r) << r.error().message();
  EXPECT_EQ(r->size(), 50u);
  std::vector<int> reserved;
  for (uint32_t i = 0; i < r->size(); ++i) {
    if (r->reserved[i]) reserved.push_back(static_cast<int>(r->low + i));
  }
  EXPECT_EQ(reserved, (std::vector<int>{40010, 40011, 40012, 40049}));
}

TEST(LocalPorts, UnreadableTextIsAnError) {
  EXPECT_FALSE(kernel_path::ParseLocalPorts("", ""));
  EXPECT_FALSE(kernel_path::ParseLocalPorts("60999 32768", ""));
  EXPECT_FALSE(kernel_path::ParseLocalPorts("1 70000", ""));
  EXPECT_FALSE(kernel_path::ParseLocalPorts("1000 2000", "9-x"));
}

}  // namespace
}  // namespace xdpfwd
