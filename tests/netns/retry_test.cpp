// [retry-on=empty-response] through the binary: a backend that resets or closes after reading
// the request and before answering is invisible to the client, which gets its answer from the
// rule's other backend; one that began to answer, or a request too long to keep, is not retried.
#include <gtest/gtest.h>
#include <linux/sockios.h>
#include <poll.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>
#include <nlohmann/json.hpp>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <fstream>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "os/endpoint.h"
#include "tests/support/forwarder_process.h"
#include "tests/support/netns_topology.h"
#include "tests/support/tcp.h"
#include "tests/support/temp_dir.h"

namespace xdpfwd::test {
namespace {

constexpr uint16_t kPort = 9000, kFirstBackendPort = 9100;

// What a backend does with each connection once it has read the request (`request_bytes`, or
// up to the client's FIN).
enum class Act {
  kAnswer,            // reads up to the client's FIN, answers "answer", closes
  kReset,             // closes with a RST (SO_LINGER 0) without a byte
  kClose,             // closes (a FIN) without a byte
  kOneByteThenReset,  // sends one byte, then a RST
};

class ScriptedBackend {
 public:
  ScriptedBackend(const Topology& topo, uint16_t port, Act act, size_t request_bytes)
      : listener_(TcpListen(topo.server_ns(), topo.server_addr(), port)),
        act_(act),
        request_bytes_(request_bytes),
        thread_([this] { Serve(); }) {}
  ~ScriptedBackend() {
    stop_ = true;
    thread_.join();
  }
  // What each connection it accepted received, in accept order.
  std::vector<std::string> received() {
    std::lock_guard lock(mu_);
    return received_;
  }

 private:
  void Serve() {
    while (!stop_) {
      pollfd p{listener_.get(), POLLIN, 0};
      if (poll(&p, 1, 20) != 1) continue;
      UniqueFd c(accept4(listener_.get(), nullptr, nullptr, SOCK_CLOEXEC));
      if (!c) continue;
      const timeval limit{1, 0};  // a test that goes wrong fails in time
      setsockopt(c.get(), SOL_SOCKET, SO_RCVTIMEO, &limit, sizeof limit);
      std::string got;
      char buf[4096];
      while (act_ == Act::kAnswer || got.size() < request_bytes_) {
        const ssize_t n = recv(c.get(), buf, sizeof buf, 0);
        if (n <= 0) break;
        got.append(buf, static_cast<size_t>(n));
      }
      {
        std::lock_guard lock(mu_);
        received_.push_back(got);
      }
      if (act_ == Act::kAnswer) (void)send(c.get(), "answer", 6, MSG_NOSIGNAL);
      if (act_ == Act::kOneByteThenReset && send(c.get(), "a", 1, MSG_NOSIGNAL) == 1) {
        // Acknowledged before the reset, which would otherwise drop it unsent.
        for (int unacked = 1; unacked > 0 && ioctl(c.get(), SIOCOUTQ, &unacked) == 0;) {
          std::this_thread::sleep_for(std::chrono::milliseconds(1));
        }
      }
      if (act_ == Act::kReset || act_ == Act::kOneByteThenReset) {
        const linger abort{1, 0};
        setsockopt(c.get(), SOL_SOCKET, SO_LINGER, &abort, sizeof abort);
      }
    }
  }
  UniqueFd listener_;
  Act act_;
  size_t request_bytes_;
  std::atomic<bool> stop_{false};
  std::mutex mu_;
  std::vector<std::string> received_;
  std::thread thread_;  // last: starts once the rest is made
};

struct Answer {
  std::string bytes;
  int err = 0;  // the recv's errno when the stream ended in an error (ECONNRESET: a reset)
};

class RetryTest : public ::testing::TestWithParam<const char*> {
 protected:
  void SetUp() override {
    if (geteuid() != 0) GTEST_SKIP() << "namespace tests need root";
  }
  // The rule toward kFirstBackendPort and a second backend on the next port. One kernel-path
  // thread: round robin sends the first client to the first backend.
  void Start(const std::string& rule_options) {
    const std::string config = dir_.File("xdpfwd.conf");
    const std::string server = ToString(topo_.server_addr());
    std::ofstream(config) << ToString(topo_.client_gw()) << " " << kPort << " " << server << " "
                          << kFirstBackendPort << " " << rule_options << "\nbackend " << server
                          << " " << kFirstBackendPort + 1 << "\n";
    fwd_ = ForwarderProcess::WithConfig(GetParam(), config,
                                        std::string(GetParam()) == "kernel"
                                            ? std::vector<std::string>{"--threads", "1"}
                                            : std::vector<std::string>{});
  }
  // The client sends `request` and its FIN, and reads until the end of the stream. With
  // `first_part`, it sends that many bytes, waits until the forwarder relayed them, then the rest.
  Answer Ask(const std::string& request, size_t first_part = 0) {
    UniqueFd c = TcpConnect(topo_.client_ns(), topo_.client_gw(), kPort);
    const timeval limit{2, 0};
    setsockopt(c.get(), SOL_SOCKET, SO_RCVTIMEO, &limit, sizeof limit);
    EXPECT_EQ(send(c.get(), request.data(), first_part, MSG_NOSIGNAL),
              static_cast<ssize_t>(first_part));
    if (first_part > 0) {
      fwd_->WaitForStats(
          [&](const auto& s) { return fwd_->Relay(s, "bytes_to_backend") >= first_part; },
          std::chrono::seconds(1));
    }
    EXPECT_EQ(send(c.get(), request.data() + first_part, request.size() - first_part, MSG_NOSIGNAL),
              static_cast<ssize_t>(request.size() - first_part));
    shutdown(c.get(), SHUT_WR);
    Answer a;
    char buf[256];
    for (;;) {
      const ssize_t n = recv(c.get(), buf, sizeof buf, 0);
      if (n > 0) {
        a.bytes.append(buf, static_cast<size_t>(n));
        continue;
      }
      if (n < 0) a.err = errno;
      return a;
    }
  }
  // Once the connection has ended on the forwarder's side: the path's counter.
  uint64_t Counter(const std::string& name) {
    const auto stats =
        fwd_->WaitForStats([&](const auto& s) { return fwd_->Relay(s, "active") == 0; });
    return fwd_->Relay(stats, name);
  }
  uint64_t RuleCounter(const std::string& counter) {
    const nlohmann::json j = nlohmann::json::parse(fwd_->Control("show counters"));
    for (const char* path : {"kernel_path", "fast_path"}) {
      if (!j.contains(path)) continue;
      for (const nlohmann::json& r : j[path]["rules"]) {
        if (r["rule"] == "0") return r[counter].get<uint64_t>();
      }
    }
    return 0;
  }
  // `show backends`' value of `column` for the backend on `port`.
  std::string BackendColumn(uint16_t port, const std::string& column) {
    const std::string listing = fwd_->Control("show backends");
    const std::string backend = ToString(topo_.server_addr()) + ":" + std::to_string(port);
    std::vector<std::string> names;
    auto split = [](const std::string& line) {
      std::vector<std::string> out;
      size_t from = 0;
      for (size_t comma; (comma = line.find(',', from)) != std::string::npos; from = comma + 1) {
        out.push_back(line.substr(from, comma - from));
      }
      out.push_back(line.substr(from));
      return out;
    };
    size_t from = 0;
    for (size_t end; (end = listing.find('\n', from)) != std::string::npos; from = end + 1) {
      const std::string line = listing.substr(from, end - from);
      if (line.rfind("# ", 0) == 0) {
        names = split(line.substr(2));
      } else if (line.find("," + backend + ",") != std::string::npos) {
        const std::vector<std::string> fields = split(line);
        for (size_t i = 0; i < names.size() && i < fields.size(); ++i) {
          if (names[i] == column) return fields[i];
        }
      }
    }
    return "";
  }

  Topology topo_;
  TempDir dir_;
  std::unique_ptr<ForwarderProcess> fwd_;
};

const std::string kRequest = "GET /once HTTP/1.0\r\n\r\n";

// The first backend reads the request and resets: the second answers, having received the
// request once, then the client's FIN; the first backend's session has ended on the board.
TEST_P(RetryTest, AResetBeforeAnsweringIsRetriedOnTheOtherBackend) {
  ScriptedBackend first(topo_, kFirstBackendPort, Act::kReset, kRequest.size());
  ScriptedBackend second(topo_, kFirstBackendPort + 1, Act::kAnswer, kRequest.size());
  Start("[retry-on=empty-response]");
  const Answer a = Ask(kRequest);
  EXPECT_EQ(a.bytes, "answer");
  EXPECT_EQ(a.err, 0);
  EXPECT_EQ(first.received(), std::vector<std::string>{kRequest});
  EXPECT_EQ(second.received(), std::vector<std::string>{kRequest});
  EXPECT_EQ(Counter("backend_retries"), 1u) << fwd_->output();
  EXPECT_EQ(RuleCounter("backend_retries"), 1u);
  EXPECT_EQ(Counter("backend_reset"), 0u);
  EXPECT_EQ(Counter("completed"), 1u);
  EXPECT_EQ(BackendColumn(kFirstBackendPort, "current"), "0");
  EXPECT_EQ(BackendColumn(kFirstBackendPort, "sessions"), "1");
  EXPECT_EQ(BackendColumn(kFirstBackendPort, "bytes_to_backend"), std::to_string(kRequest.size()));
  EXPECT_EQ(BackendColumn(kFirstBackendPort + 1, "sessions"), "1");
  EXPECT_EQ(BackendColumn(kFirstBackendPort + 1, "bytes_to_backend"),
            std::to_string(kRequest.size()));
  EXPECT_EQ(fwd_->Stop(), 0);
}

// The same with a FIN from the first backend instead of a reset.
TEST_P(RetryTest, AFinBeforeAnsweringIsRetriedOnTheOtherBackend) {
  ScriptedBackend first(topo_, kFirstBackendPort, Act::kClose, kRequest.size());
  ScriptedBackend second(topo_, kFirstBackendPort + 1, Act::kAnswer, kRequest.size());
  Start("[retry-on=empty-response]");
  const Answer a = Ask(kRequest);
  EXPECT_EQ(a.bytes, "answer");
  EXPECT_EQ(a.err, 0);
  EXPECT_EQ(second.received(), std::vector<std::string>{kRequest});
  EXPECT_EQ(Counter("backend_retries"), 1u) << fwd_->output();
  EXPECT_EQ(RuleCounter("backend_retries"), 1u);
  EXPECT_EQ(Counter("completed"), 1u);
  EXPECT_EQ(fwd_->Stop(), 0);
}

// Without the option the client sees the first backend's reset, as it always did.
TEST_P(RetryTest, WithoutTheOptionTheClientSeesTheReset) {
  ScriptedBackend first(topo_, kFirstBackendPort, Act::kReset, kRequest.size());
  ScriptedBackend second(topo_, kFirstBackendPort + 1, Act::kAnswer, kRequest.size());
  Start("");
  const Answer a = Ask(kRequest);
  EXPECT_EQ(a.bytes, "");
  EXPECT_EQ(a.err, ECONNRESET);
  EXPECT_TRUE(second.received().empty());
  EXPECT_EQ(Counter("backend_retries"), 0u);
  EXPECT_EQ(Counter("backend_reset"), 1u);
  EXPECT_EQ(fwd_->Stop(), 0);
}

// A backend that sent a byte has answered: its reset reaches the client.
TEST_P(RetryTest, ABackendThatBeganToAnswerIsNotRetried) {
  ScriptedBackend first(topo_, kFirstBackendPort, Act::kOneByteThenReset, kRequest.size());
  ScriptedBackend second(topo_, kFirstBackendPort + 1, Act::kAnswer, kRequest.size());
  Start("[retry-on=empty-response]");
  const Answer a = Ask(kRequest);
  EXPECT_NE(a.bytes, "answer");
  EXPECT_EQ(a.err, ECONNRESET);
  EXPECT_TRUE(second.received().empty());
  EXPECT_EQ(Counter("backend_retries"), 0u);
  EXPECT_EQ(Counter("backend_reset"), 1u);
  EXPECT_EQ(fwd_->Stop(), 0);
}

// More than kRetryBytes (16 KiB) from the client: no longer kept, so not sent again. Its bytes
// reach the backend whole and in order as the direction goes from copying back to splice (the
// kernel path's: the first 20000 bytes are copied, the rest, sent once they are relayed, spliced).
TEST_P(RetryTest, ARequestLongerThanWhatIsKeptIsNotRetried) {
  std::string request(300000, '\0');
  PatternStream(7).Fill(reinterpret_cast<uint8_t*>(request.data()), request.size());
  ScriptedBackend first(topo_, kFirstBackendPort, Act::kReset, request.size());
  ScriptedBackend second(topo_, kFirstBackendPort + 1, Act::kAnswer, request.size());
  Start("[retry-on=empty-response]");
  const Answer a = Ask(request, 20000);
  EXPECT_EQ(a.bytes, "");
  EXPECT_EQ(a.err, ECONNRESET);
  const std::vector<std::string> got = first.received();
  ASSERT_EQ(got.size(), 1u);
  EXPECT_TRUE(got[0] == request) << got[0].size() << " bytes";
  EXPECT_TRUE(second.received().empty());
  EXPECT_EQ(Counter("backend_retries"), 0u);
  EXPECT_EQ(Counter("backend_reset"), 1u);
  if (std::string(GetParam()) == "kernel") {
    EXPECT_GT(Counter("splice_bytes"), 0u) << "splice did not resume";
  }
  EXPECT_EQ(fwd_->Stop(), 0);
}

// Exactly kRetryBytes (16 KiB) are kept whole: retried.
TEST_P(RetryTest, ARequestOfWhatIsKeptIsRetried) {
  std::string request(16 * 1024, '\0');
  PatternStream(9).Fill(reinterpret_cast<uint8_t*>(request.data()), request.size());
  ScriptedBackend first(topo_, kFirstBackendPort, Act::kReset, request.size());
  ScriptedBackend second(topo_, kFirstBackendPort + 1, Act::kAnswer, request.size());
  Start("[retry-on=empty-response]");
  const Answer a = Ask(request);
  EXPECT_EQ(a.bytes, "answer");
  const std::vector<std::string> got = second.received();
  ASSERT_EQ(got.size(), 1u);
  EXPECT_TRUE(got[0] == request) << got[0].size() << " bytes";
  EXPECT_EQ(Counter("backend_retries"), 1u);
  EXPECT_EQ(fwd_->Stop(), 0);
}

// Each backend is tried once: when the second resets as well, the client sees that reset.
TEST_P(RetryTest, WhenEveryBackendResetsTheClientSeesTheLast) {
  ScriptedBackend first(topo_, kFirstBackendPort, Act::kReset, kRequest.size());
  ScriptedBackend second(topo_, kFirstBackendPort + 1, Act::kReset, kRequest.size());
  Start("[retry-on=empty-response]");
  const Answer a = Ask(kRequest);
  EXPECT_EQ(a.bytes, "");
  EXPECT_EQ(a.err, ECONNRESET);
  EXPECT_EQ(second.received(), std::vector<std::string>{kRequest});
  EXPECT_EQ(Counter("backend_retries"), 1u);
  EXPECT_EQ(Counter("backend_reset"), 1u);
  EXPECT_EQ(BackendColumn(kFirstBackendPort, "current"), "0");
  EXPECT_EQ(BackendColumn(kFirstBackendPort + 1, "current"), "0");
  EXPECT_EQ(fwd_->Stop(), 0);
}

INSTANTIATE_TEST_SUITE_P(Paths, RetryTest, ::testing::Values("xdp", "kernel"),
                         [](const auto& p) { return std::string(p.param); });

}  // namespace
}  // namespace xdpfwd::test
