// Command-line parsing: --backend-source (the list, its errors), --max-connections per path,
// --cpus, --tune and its table (with docs/tuning.md's copy), --help's text, and the sysctl text
// the kernel path reads its local port range from.
#include <arpa/inet.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "forwarder/kernel_path_backend.h"
#include "forwarder/options.h"
#include "forwarder/tuning.h"

namespace xdpfwd {
namespace {

std::vector<std::string> Dotted(const std::vector<IpAddress>& list) {
  std::vector<std::string> out;
  for (const IpAddress& a : list) out.push_back(ToString(a));
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

// LISTEN BACKEND with several backends: commas, "@W" weights, "@backup" and "@W+backup", and
// --balance; a plain BACKEND stays one backend.
TEST(BackendList, SeveralBackendsWithWeightsBackupsAndBalance) {
  auto o = ParseCommandLine({"--balance", "source", "10.0.1.1:9000",
                             "10.0.0.2:9001@3,10.0.0.3:9001,[2001:db8::1]:80@2+backup,"
                             "10.0.0.4:9001@backup"});
  ASSERT_TRUE(o) << o.error().message();
  ASSERT_EQ(o->config.rules.size(), 1u);
  const Rule& r = o->config.rules[0];
  EXPECT_EQ(ToString(r.backend), "10.0.0.2:9001");
  EXPECT_EQ(r.backend_weight, 3u);
  EXPECT_EQ(r.balance, BalanceMethod::kSourceHash);
  ASSERT_EQ(r.more_backends.size(), 3u);
  EXPECT_EQ(r.more_backends[0].weight, 1u);
  EXPECT_FALSE(r.more_backends[0].backup);
  EXPECT_EQ(ToString(r.more_backends[1].address), "[2001:db8::1]:80");
  EXPECT_EQ(r.more_backends[1].weight, 2u);
  EXPECT_TRUE(r.more_backends[1].backup);
  EXPECT_TRUE(r.more_backends[2].backup);
  auto one = Parse({});
  ASSERT_TRUE(one);
  EXPECT_TRUE(one->config.rules[0].more_backends.empty());
  EXPECT_EQ(one->config.rules[0].balance, BalanceMethod::kRoundRobin);
}

TEST(BackendList, ErrorsNameTheBackendAndTheFault) {
  auto error = [](const std::string& backends, const std::vector<std::string>& options = {}) {
    std::vector<std::string> args = options;
    args.push_back("10.0.1.1:9000");
    args.push_back(backends);
    auto o = ParseCommandLine(args);
    return o ? std::string("(parsed)") : o.error().message();
  };
  EXPECT_EQ(error("10.0.0.2:9001@0"),
            "BACKEND: 10.0.0.2:9001@0: expected a weight from 1 to 256 after '@'");
  EXPECT_EQ(error("10.0.0.2:9001,10.0.0.2:9001"), "BACKEND: 10.0.0.2:9001 is given twice");
  EXPECT_EQ(error("10.0.0.2:9001@backup,10.0.0.3:9001"),
            "BACKEND: the first backend cannot be a backup (list it later)");
  EXPECT_EQ(error("10.0.0.2:9001,"),
            "BACKEND: '' is not ADDRESS:PORT (for example 10.0.1.1:9000 or [::1]:9000)");
  EXPECT_EQ(error("10.0.0.2:9001", {"--balance", "random"}),
            "--balance: 'random' is not roundrobin, leastconn or source");
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
            "--backend-source: '10.0.0.300' is not an IPv4 or IPv6 address");
  EXPECT_EQ(ErrorOf({"--backend-source", "host.example"}),
            "--backend-source: 'host.example' is not an IPv4 or IPv6 address");
  EXPECT_EQ(ErrorOf({"--backend-source", "[2001:db8::1]"}),
            "--backend-source: '[2001:db8::1]' is not an IPv4 or IPv6 address");
  EXPECT_EQ(ErrorOf({"--backend-source", "10.0.0.1 "}),
            "--backend-source: '10.0.0.1 ' is not an IPv4 or IPv6 address");
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
  EXPECT_EQ(ErrorOf({"--backend-source", "::"}), "--backend-source: :: is not a unicast address");
  EXPECT_EQ(ErrorOf({"--backend-source", "ff02::1"}),
            "--backend-source: ff02::1 is not a unicast address");
  EXPECT_EQ(ErrorOf({"--backend-source", "::ffff:10.0.0.1"}),
            "--backend-source: ::ffff:10.0.0.1 is not a unicast address");
  EXPECT_EQ(ErrorOf({"--backend-source", "fe80::1"}),
            "--backend-source: fe80::1 is link-local, which means something only on one "
            "interface; give a global address");
  // Twice in two spellings is twice.
  EXPECT_EQ(ErrorOf({"--backend-source", "2001:db8::1,2001:DB8:0::1"}),
            "--backend-source: 2001:DB8:0::1 is given twice");
  auto missing = ParseCommandLine({"10.0.1.1:9000", "10.0.0.2:9001", "--backend-source"});
  ASSERT_FALSE(missing);
  EXPECT_EQ(missing.error().message(), "--backend-source needs a value");
}

// Either family, mixed, in the order given (a leg takes those of its backend's family).
TEST(BackendSourceOption, Ipv6AddressesBesideIpv4Ones) {
  auto mixed = Parse({"--backend-source", "2001:db8::5,10.0.0.1", "--backend-source", "fd00::7"});
  ASSERT_TRUE(mixed) << mixed.error().message();
  EXPECT_EQ(Dotted(mixed->backend_sources),
            (std::vector<std::string>{"2001:db8::5", "10.0.0.1", "fd00::7"}));
  EXPECT_EQ(Dotted(OfFamily(mixed->backend_sources, AF_INET6)),
            (std::vector<std::string>{"2001:db8::5", "fd00::7"}));
  EXPECT_EQ(Dotted(OfFamily(mixed->backend_sources, AF_INET)),
            std::vector<std::string>{"10.0.0.1"});
}

TEST(BackendSourceOption, UsageMentionsIt) {
  EXPECT_NE(std::string(Usage()).find("--backend-source ADDR[,ADDR...]"), std::string::npos);
}

// Unset, each path keeps its own default (the fast path's is the part of its lwIP pool locked
// at start, far above what the kernel path's open files allow, and the pool holds more for
// --max-connections); set, it applies to both.
TEST(MaxConnectionsOption, UnsetLeavesEachPathItsDefault) {
  auto unset = Parse({});
  ASSERT_TRUE(unset) << unset.error().message();
  EXPECT_FALSE(unset->max_connections.has_value());
#if defined(__SANITIZE_ADDRESS__)
  EXPECT_EQ(FastPath::DefaultConnections(), 32'768u);  // lwipopts.h says why
  EXPECT_EQ(FastPath::MaxConnections(), FastPath::DefaultConnections());
#else
  EXPECT_GE(FastPath::DefaultConnections(), 100'000u);
  EXPECT_GE(FastPath::MaxConnections(), 1'100'000u);  // bench/run's 1,000,000 idle + 10%
#endif
  auto set = Parse({"--max-connections", "5000"});
  ASSERT_TRUE(set) << set.error().message();
  EXPECT_EQ(set->max_connections, 5000u);
  auto million = Parse({"--max-connections", "1100000"});  // bench/run's 1,000,000 idle + 10%
  ASSERT_TRUE(million) << million.error().message();
  EXPECT_EQ(million->max_connections, 1'100'000u);
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
  auto both = Parse({"--generic", "--native"});
  ASSERT_FALSE(both.ok());
  EXPECT_NE(both.error().message().find("give one XDP attach mode"), std::string::npos)
      << both.error().message();
}

// ---- The measurement levers: --tune KEY=VALUE, one table (forwarder/tuning.h) ----

Tuning TuningOf(const std::vector<std::string>& args) {
  auto o = Parse(args);
  EXPECT_TRUE(o) << o.error().message();
  return o ? o->tuning : Tuning{};
}

// Each key sets its own field of Tuning (what the paths read).
TEST(TuneOption, EachKeySetsItsLever) {
  const Tuning d;
  EXPECT_TRUE(d.adaptive_fill);
  EXPECT_FALSE(d.packet_tx.has_value());
  EXPECT_EQ(d.small_batches, SmallBatchTx::kAcksThroughPacket);
  EXPECT_TRUE(d.zero_copy_relay);
  EXPECT_TRUE(d.ooseq_ack_hold);
  EXPECT_TRUE(d.tx_budget);
  EXPECT_TRUE(d.multi_buffer);
  EXPECT_TRUE(d.tx_checksum_offload);
  EXPECT_TRUE(d.bbr);
  EXPECT_TRUE(d.lock_memory);
  EXPECT_FALSE(d.kernel_copy);
  EXPECT_EQ(d.kernel_buffer, 65536u);

  EXPECT_FALSE(TuningOf({"--tune", "fill-depth=full"}).adaptive_fill);
  EXPECT_EQ(TuningOf({"--tune", "tx=packet"}).packet_tx, std::optional<bool>(true));
  EXPECT_EQ(TuningOf({"--tune", "tx=af-xdp"}).packet_tx, std::optional<bool>(false));
  EXPECT_EQ(TuningOf({"--tune", "tx=auto"}).packet_tx, std::nullopt);
  for (const auto& [word, want] : {std::pair{"af-xdp", SmallBatchTx::kAfXdp},
                                   std::pair{"acks", SmallBatchTx::kAcksThroughPacket},
                                   std::pair{"packet", SmallBatchTx::kPacket}}) {
    EXPECT_EQ(TuningOf({"--tune", std::string("tx-small=") + word}).small_batches, want) << word;
  }
  EXPECT_FALSE(TuningOf({"--tune", "relay-copy=always"}).zero_copy_relay);
  EXPECT_FALSE(TuningOf({"--tune", "ooseq-ack=now"}).ooseq_ack_hold);
  EXPECT_FALSE(TuningOf({"--tune", "tx-budget=kernel"}).tx_budget);
  EXPECT_FALSE(TuningOf({"--tune", "multi-buffer=off"}).multi_buffer);
  EXPECT_FALSE(TuningOf({"--tune", "tx-checksum=software"}).tx_checksum_offload);
  EXPECT_FALSE(TuningOf({"--tune", "congestion-control=cubic"}).bbr);
  EXPECT_FALSE(TuningOf({"--tune", "memory-lock=off"}).lock_memory);
  EXPECT_TRUE(TuningOf({"--tune", "copy=on"}).kernel_copy);
  EXPECT_EQ(TuningOf({"--tune", "buffer-size=4096"}).kernel_buffer, 4096u);
  EXPECT_EQ(TuningOf({"--tune=buffer-size=1048576"}).kernel_buffer, 1048576u);
}

// Every key takes its own default (and changes nothing with it), and every word it lists.
TEST(TuneOption, EveryKeyParsesItsDefaultAndEachOfItsWords) {
  ASSERT_GE(TuningKeys().size(), 11u);
  const Tuning defaults;
  for (const TuningKey& k : TuningKeys()) {
    const std::string key(k.key);
    const Tuning t = TuningOf({"--tune", key + "=" + k.Default()});
    for (const TuningKey& other : TuningKeys()) {
      EXPECT_EQ(other.ValueOf(t), other.ValueOf(defaults)) << key << " moved " << other.key;
    }
    if (k.words.empty()) {
      for (const uint64_t n : {k.min, k.max}) {
        const std::string value = std::to_string(n);
        EXPECT_EQ(k.ValueOf(TuningOf({"--tune", key + "=" + value})), value) << key;
      }
      continue;
    }
    std::istringstream words(k.Values());
    for (std::string word; std::getline(words, word, '|');) {
      EXPECT_EQ(k.ValueOf(TuningOf({"--tune", key + "=" + word})), word) << key;
    }
  }
}

TEST(TuneOption, ErrorsNameTheKeyAndWhatItTakes) {
  EXPECT_EQ(ErrorOf({"--tune", "tx-small=x"}),
            "--tune tx-small=x: expected af-xdp, acks or packet");
  EXPECT_EQ(ErrorOf({"--tune", "multi-buffer=maybe"}),
            "--tune multi-buffer=maybe: expected on or off");
  EXPECT_EQ(ErrorOf({"--tune", "tx="}), "--tune tx=: expected auto, af-xdp or packet");
  EXPECT_EQ(ErrorOf({"--tune", "buffer-size=4095"}),
            "--tune buffer-size=4095: expected a number from 4096 to 67108864");
  EXPECT_EQ(ErrorOf({"--tune", "buffer-size=64k"}),
            "--tune buffer-size=64k: expected a number from 4096 to 67108864");
  const std::string unknown = ErrorOf({"--tune", "tx-smal=acks"});
  EXPECT_EQ(unknown.rfind("--tune tx-smal=acks: no key tx-smal; the keys: fill-depth, tx, ", 0), 0u)
      << unknown;
  EXPECT_NE(unknown.find("buffer-size"), std::string::npos) << unknown;
  EXPECT_EQ(ErrorOf({"--tune", "tx-small"}),
            "--tune tx-small: expected KEY=VALUE (xdpfwd --help-tune lists the keys)");
  auto missing = ParseCommandLine({"10.0.1.1:9000", "10.0.0.2:9001", "--tune"});
  ASSERT_FALSE(missing);
  EXPECT_EQ(missing.error().message(), "--tune needs a value");
}

TEST(TuneOption, RepeatableAndTheLastValueOfAKeyWins) {
  const Tuning t = TuningOf({"--tune", "tx=packet", "--tune", "ooseq-ack=now", "--tune",
                             "tx=af-xdp", "--tune", "buffer-size=8192"});
  EXPECT_EQ(t.packet_tx, std::optional<bool>(false));
  EXPECT_FALSE(t.ooseq_ack_hold);
  EXPECT_EQ(t.kernel_buffer, 8192u);
  EXPECT_TRUE(t.adaptive_fill);
}

// The old spellings (--tx-small packet, --copy) are gone: each is an unknown option, and its
// error says which --tune to write instead, with the value where it was given.
TEST(TuneOption, OldFlagsAreRefusedNamingTune) {
  for (const TuningKey& k : TuningKeys()) {
    const std::string key(k.key);
    const std::string value =
        k.words.empty() ? std::to_string(k.max) : k.Values().substr(0, k.Values().find('|'));
    const std::string error = ErrorOf({"--" + key, value});
    EXPECT_EQ(error.rfind("unknown option --" + key + ": ", 0), 0u) << error;
    EXPECT_NE(error.find("--tune " + key + "=" + value + " "), std::string::npos) << error;
    EXPECT_EQ(ErrorOf({"--" + key + "=" + value}), error);
  }
  EXPECT_EQ(ErrorOf({"--tx-small", "packet"}),
            "unknown option --tx-small: the measurement levers are set with --tune KEY=VALUE: "
            "--tune tx-small=packet (xdpfwd --help-tune lists them)");
  // No value, or not one the key takes: the hint lists what it takes.
  EXPECT_EQ(ErrorOf({"--copy"}),
            "unknown option --copy: the measurement levers are set with --tune KEY=VALUE: "
            "--tune copy=off|on (xdpfwd --help-tune lists them)");
  EXPECT_NE(ErrorOf({"--tx-small", "x"}).find("--tune tx-small=af-xdp|acks|packet "),
            std::string::npos);
  // An option that is no lever keeps the usual error.
  EXPECT_EQ(ErrorOf({"--bogus"}), "unknown option --bogus (xdpfwd --help lists them)");
}

TEST(TuneOption, HelpShowsTuneNotTheLeversOldFlags) {
  const std::string usage = Usage();
  EXPECT_NE(usage.find("--tune KEY=VALUE"), std::string::npos);
  EXPECT_NE(usage.find("--help-tune"), std::string::npos);
  for (const TuningKey& k : TuningKeys()) {
    const std::string flag = "--" + std::string(k.key);
    for (size_t at = usage.find(flag); at != std::string::npos; at = usage.find(flag, at + 1)) {
      const char next = at + flag.size() < usage.size() ? usage[at + flag.size()] : ' ';
      EXPECT_TRUE(std::isalnum(static_cast<unsigned char>(next)) || next == '-')
          << flag << " is in --help";
    }
  }
}

TEST(TuneOption, HelpTuneListsEveryKeyItsValuesAndDefault) {
  auto o = ParseCommandLine({"--help-tune"});
  ASSERT_TRUE(o) << o.error().message();
  EXPECT_TRUE(o->help_tune);
  const std::string text = HelpText(*o);
  EXPECT_EQ(text, TuningHelp());
  for (const TuningKey& k : TuningKeys()) {
    const std::string row = "\n  " + std::string(k.key) + " ";
    const size_t at = text.find(row);
    ASSERT_NE(at, std::string::npos) << k.key;
    const std::string line = text.substr(at + 1, text.find('\n', at + 1) - at - 1);
    EXPECT_NE(line.find(" " + k.Values() + " "), std::string::npos) << line;
    EXPECT_EQ(line.substr(line.rfind(' ') + 1), k.Default()) << line;
  }
  auto help = ParseCommandLine({"--help"});
  ASSERT_TRUE(help) << help.error().message();
  EXPECT_EQ(HelpText(*help), Usage());
}

TEST(TuneOption, HelpLinesFitOneHundredColumns) {
  for (const std::string& text : {std::string(Usage()), TuningHelp()}) {
    std::istringstream lines(text);
    for (std::string line; std::getline(lines, line);) {
      EXPECT_LE(line.size(), 100u) << line;
      EXPECT_EQ(line.find('\t'), std::string::npos) << line;
    }
  }
}

// docs/tuning.md has the table by hand: a row per key, with its values and its default, so
// the two cannot drift apart unseen.
TEST(TuneOption, DocsTuningHasARowForEveryKey) {
  const std::filesystem::path docs =
      std::filesystem::path(__FILE__).parent_path().parent_path().parent_path() / "docs" /
      "tuning.md";
  std::ifstream file(docs);
  ASSERT_TRUE(file) << docs << " cannot be read";
  std::map<std::string, std::string> rows;  // key -> its row
  for (std::string line; std::getline(file, line);) {
    if (line.rfind("| `", 0) != 0) continue;
    const size_t end = line.find('`', 3);
    if (end != std::string::npos) rows[line.substr(3, end - 3)] = line;
  }
  for (const TuningKey& k : TuningKeys()) {
    const std::string key(k.key);
    if (!rows.count(key)) {
      ADD_FAILURE() << "docs/tuning.md has no row | `" << key << "` |";
      continue;
    }
    const std::string& row = rows[key];
    std::vector<std::string> cells;
    for (size_t at = 1, bar; (bar = row.find(" |", at)) != std::string::npos; at = bar + 2) {
      cells.push_back(row.substr(at + 1, bar - at - 1));
    }
    ASSERT_GE(cells.size(), 4u) << row;
    // "`af-xdp`, `acks`, `packet`" for af-xdp|acks|packet ("|" would end the cell).
    std::string values = cells[1];
    values.erase(std::remove(values.begin(), values.end(), '`'), values.end());
    for (size_t at; (at = values.find(", ")) != std::string::npos;) values.replace(at, 2, "|");
    EXPECT_EQ(values, k.Values()) << row;
    EXPECT_EQ(cells[2], "`" + k.Default() + "`") << row;
  }
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
