// Route, neighbour and link lookups against the namespace topology: what rtnetlink gives us must
// match what `ip` shows, and NTF_USE must resolve a next hop with ARP alone, no data traffic.
#include "stack/neighbor.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <net/if.h>
#include <unistd.h>

#include <cctype>
#include <chrono>
#include <cstdio>
#include <sstream>
#include <string>
#include <thread>

#include "os/ip_address.h"
#include "tests/support/netns_topology.h"

namespace xdpfwd::test {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

in_addr Addr(const char* dotted) {
  in_addr addr{};
  inet_pton(AF_INET, dotted, &addr);
  return addr;
}

// Host number `host` in the /24 of addr (the topology's subnets are /24s).
in_addr InSubnet(in_addr addr, uint32_t host) {
  return in_addr{htonl((ntohl(addr.s_addr) & 0xffffff00u) | host)};
}

int IfIndex(const std::string& ifname) { return static_cast<int>(if_nametoindex(ifname.c_str())); }

std::string Trim(std::string s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.pop_back();
  return s;
}

// The word after `key` in `ip -o link` output: "mtu 1400", "link/ether 02:...".
std::string WordAfter(const std::string& text, const std::string& key) {
  std::istringstream in(text);
  std::string word;
  while (in >> word) {
    if (word == key && in >> word) return word;
  }
  return "";
}

// IPv4 packets that reached a namespace's IP layer (Ip: InReceives in /proc/net/snmp). ARP does
// not count, so this shows whether anything but ARP arrived.
long IpInReceives(const Topology& topo, const std::string& ns) {
  std::istringstream lines(topo.Run(ns, "cat /proc/net/snmp").output);
  std::string names, values;
  while (std::getline(lines, names) && names.rfind("Ip: ", 0) != 0) {
  }
  std::getline(lines, values);
  std::istringstream n(names), v(values);
  std::string name, value;
  while (n >> name && v >> value) {
    if (name == "InReceives") return std::stol(value);
  }
  return -1;
}

// Polls `done` every few milliseconds until it holds or `timeout` passes.
template <typename Fn>
bool PollUntil(Fn done, std::chrono::milliseconds timeout) {
  const auto deadline = Clock::now() + timeout;
  while (Clock::now() < deadline) {
    if (done()) return true;
    std::this_thread::sleep_for(2ms);
  }
  return done();
}

class NeighborTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (geteuid() != 0) GTEST_SKIP() << "namespace tests need root";
  }
};

TEST_F(NeighborTest, RouteToServerIsOnLinkThroughServerSideInterface) {
  Topology topo;
  auto route = LookupRoute(topo.server_addr());
  ASSERT_TRUE(route) << route.error().message();
  EXPECT_EQ(route->ifname, topo.server_side_if());
  EXPECT_EQ(route->oif, IfIndex(topo.server_side_if()));
  EXPECT_EQ(route->gateway.s_addr, 0u) << ToString(route->gateway);
  EXPECT_EQ(ToString(route->next_hop), ToString(topo.server_addr()));
  EXPECT_EQ(ToString(route->prefsrc), ToString(topo.server_gw()));
}

TEST_F(NeighborTest, RouteFromClientNamespaceGoesViaItsGateway) {
  Topology topo;
  RunInNamespace(topo.client_ns(), [&] {
    auto route = LookupRoute(topo.server_addr());
    ASSERT_TRUE(route) << route.error().message();
    EXPECT_EQ(route->ifname, Topology::kNsIf);
    EXPECT_EQ(ToString(route->gateway), ToString(topo.client_gw()));
    EXPECT_EQ(ToString(route->next_hop), ToString(topo.client_gw()));
    EXPECT_EQ(ToString(route->prefsrc), ToString(topo.client_addr()));
  });
}

TEST_F(NeighborTest, RouteLookupFailsWhereThereIsNoRoute) {
  Topology topo;
  const auto deleted = topo.Run(topo.server_ns(), "ip route del default");
  ASSERT_EQ(deleted.status, 0) << deleted.output;
  RunInNamespace(topo.server_ns(), [&] {
    auto route = LookupRoute(Addr("203.0.113.7"));
    ASSERT_FALSE(route) << "got a route via " << route->ifname;
    EXPECT_TRUE(route.error().code == std::errc::network_unreachable) << route.error().message();
    EXPECT_EQ(route.error().message(), "no route to 203.0.113.7: Network is unreachable");
  });
}

TEST_F(NeighborTest, LocalAndBroadcastDestinationsAreNotHosts) {
  Topology topo;
  auto local = LookupRoute(topo.server_gw());
  ASSERT_FALSE(local) << "got a route via " << local->ifname;
  EXPECT_NE(local.error().message().find("type local"), std::string::npos)
      << local.error().message();
  auto broadcast = LookupRoute(InSubnet(topo.server_addr(), 255));
  ASSERT_FALSE(broadcast) << "got a route via " << broadcast->ifname;
  EXPECT_NE(broadcast.error().message().find("type broadcast"), std::string::npos)
      << broadcast.error().message();
}

in6_addr Addr6(const char* text) {
  in6_addr addr{};
  inet_pton(AF_INET6, text, &addr);
  return addr;
}

std::string Text(const in6_addr& a) { return ToString(IpAddress::V6(a)); }

// IPv6 (issue #31): in the client namespace, fd00:33::2/64 on its interface and a default route
// through a router's link-local address, as IPv6 networks are usually set up. On-link, routed
// and local destinations, and the interface's own global address (its link-local one is not
// what the fast path serves).
TEST_F(NeighborTest, Ipv6RoutesOnLinkViaALinkLocalGatewayAndTheInterfacesAddress) {
  Topology topo;
  const std::string dev = Topology::kNsIf;
  for (const std::string& cmd : {"ip -6 addr add fd00:33::2/64 dev " + dev + " nodad",
                                 "ip -6 route add default via fe80::1 dev " + dev}) {
    const CommandResult r = topo.Run(topo.client_ns(), cmd);
    ASSERT_EQ(r.status, 0) << cmd << ": " << r.output;
  }
  RunInNamespace(topo.client_ns(), [&] {
    const int ifindex = IfIndex(dev);
    auto on_link = LookupRoute(Addr6("fd00:33::7"));
    ASSERT_TRUE(on_link) << on_link.error().message();
    EXPECT_EQ(on_link->ifname, dev);
    EXPECT_EQ(on_link->oif, ifindex);
    EXPECT_EQ(Text(on_link->gateway), "::");
    EXPECT_EQ(Text(on_link->next_hop), "fd00:33::7");

    auto routed = LookupRoute(Addr6("2001:db8:99::1"));
    ASSERT_TRUE(routed) << routed.error().message();
    EXPECT_EQ(routed->ifname, dev);
    EXPECT_EQ(Text(routed->gateway), "fe80::1");
    EXPECT_EQ(Text(routed->next_hop), "fe80::1");
    EXPECT_EQ(Text(routed->prefsrc), "fd00:33::2");

    auto local = LookupRoute(Addr6("fd00:33::2"));
    ASSERT_FALSE(local) << "got a route via " << local->ifname;
    EXPECT_NE(local.error().message().find("type local"), std::string::npos)
        << local.error().message();

    auto own = InterfaceIpv6Address(ifindex);
    ASSERT_TRUE(own) << own.error().message();
    EXPECT_EQ(Text(own->addr), "fd00:33::2");
    EXPECT_EQ(own->prefix_len, 64);
    auto none = InterfaceIpv6Address(IfIndex("lo"));  // ::1 is host scope, not global
    EXPECT_FALSE(none);
  });
}

TEST_F(NeighborTest, ResolutionRequestFillsTheEntryWithArpAlone) {
  Topology topo;
  const int ifindex = IfIndex(topo.server_side_if());
  ASSERT_GT(ifindex, 0);
  auto before = LookupNeighbor(ifindex, topo.server_addr());
  ASSERT_TRUE(before) << before.error().message();
  ASSERT_FALSE(before->has_value()) << "fresh topology already knows " << FormatMac(**before);
  const long ip_packets_before = IpInReceives(topo, topo.server_ns());
  ASSERT_GE(ip_packets_before, 0);

  const auto start = Clock::now();
  auto requested = RequestNeighborResolution(ifindex, topo.server_addr());
  const auto request_took = Clock::now() - start;
  ASSERT_TRUE(requested) << requested.error().message();
  EXPECT_LT(request_took, 500ms) << "the request must not wait for ARP";

  std::optional<MacAddress> mac;
  const bool appeared = PollUntil(
      [&] {
        auto found = LookupNeighbor(ifindex, topo.server_addr());
        if (found && *found) mac = **found;
        return mac.has_value();
      },
      3s);
  ASSERT_TRUE(appeared) << topo.Run("", "ip neigh show dev " + topo.server_side_if()).output;
  EXPECT_EQ(FormatMac(*mac),
            Trim(topo.Run(topo.server_ns(), "cat /sys/class/net/eth0/address").output));
  EXPECT_EQ(IpInReceives(topo, topo.server_ns()), ip_packets_before)
      << "an IP packet reached the server; resolution must take ARP only";
  // The request left an ordinary dynamic entry behind, confirmed by ARP.
  const std::string shown = topo.Run("", "ip neigh show " + ToString(topo.server_addr()) + " dev " +
                                             topo.server_side_if())
                                .output;
  EXPECT_EQ(shown.find("PERMANENT"), std::string::npos) << shown;
  EXPECT_NE(shown.find("REACHABLE"), std::string::npos) << shown;
}

TEST_F(NeighborTest, ResolveNeighborReturnsTheClientMac) {
  Topology topo;
  auto mac = ResolveNeighbor(IfIndex(topo.client_side_if()), topo.client_addr(), 3s);
  ASSERT_TRUE(mac) << mac.error().message();
  EXPECT_EQ(FormatMac(*mac),
            Trim(topo.Run(topo.client_ns(), "cat /sys/class/net/eth0/address").output));
}

// The same over IPv6 (what the fast path primes an IPv6 backend's next hop with): a neighbour
// solicitation, and the client namespace's MAC from its advertisement.
TEST_F(NeighborTest, ResolveNeighborReturnsAnIpv6ClientsMac) {
  Topology topo;
  // A prefix of this process and topology only (as the relay tests' AddIpv6), so that tests
  // running beside this one route none of it.
  char prefix[32];
  std::snprintf(prefix, sizeof(prefix), "fd00:%x:%x:5::", static_cast<unsigned>(getpid()) & 0xffff,
                (ntohl(topo.client_gw().s_addr) >> 8) & 0xff);
  const std::string root = std::string(prefix) + "1", client_text = std::string(prefix) + "2";
  for (const auto& [ns, cmd] :
       {std::pair{std::string(),
                  "ip -6 addr add " + root + "/64 dev " + topo.client_side_if() + " nodad"},
        std::pair{topo.client_ns(), "ip -6 addr add " + client_text + "/64 dev eth0 nodad"},
        // The kernel solicits from a link-local address past duplicate address detection, which
        // a veth made a moment ago has not yet for a second or two: one usable at once.
        std::pair{std::string(),
                  "ip -6 addr add fe80::1/64 dev " + topo.client_side_if() + " nodad"}}) {
    const CommandResult r = topo.Run(ns, cmd);
    ASSERT_EQ(r.status, 0) << cmd << ": " << r.output;
  }
  in6_addr client{};
  ASSERT_EQ(inet_pton(AF_INET6, client_text.c_str(), &client), 1);
  const int ifindex = IfIndex(topo.client_side_if());
  auto before = LookupNeighbor(ifindex, IpAddress::V6(client));
  ASSERT_TRUE(before) << before.error().message();
  EXPECT_FALSE(before->has_value()) << "the kernel knew the client before it was asked";
  auto mac = ResolveNeighbor(ifindex, IpAddress::V6(client), 3s);
  ASSERT_TRUE(mac) << mac.error().message();
  EXPECT_EQ(FormatMac(*mac),
            Trim(topo.Run(topo.client_ns(), "cat /sys/class/net/eth0/address").output));
}

TEST_F(NeighborTest, ResolveNeighborGivesUpWhenNobodyAnswers) {
  Topology topo;
  const int ifindex = IfIndex(topo.server_side_if());
  const in_addr silent = InSubnet(topo.server_addr(), 99);
  const auto start = Clock::now();
  auto mac = ResolveNeighbor(ifindex, silent, 500ms);
  const auto took = Clock::now() - start;
  ASSERT_FALSE(mac) << "resolved " << FormatMac(*mac);
  const std::string message = mac.error().message();
  EXPECT_TRUE(mac.error().code == std::errc::host_unreachable) << message;
  EXPECT_NE(message.find(ToString(silent) + " on " + topo.server_side_if()), std::string::npos)
      << message;
  EXPECT_NE(message.find("no ARP reply within 500 ms"), std::string::npos) << message;
  EXPECT_GE(took, 500ms);
  EXPECT_LT(took, 900ms);
  // The kernel has an entry, still resolving: not usable, so no MAC.
  auto looked = LookupNeighbor(ifindex, silent);
  ASSERT_TRUE(looked) << looked.error().message();
  EXPECT_FALSE(looked->has_value());
}

TEST_F(NeighborTest, StaticEntryIsLeftAlone) {
  // NTF_USE would clear NUD_PERMANENT and send the entry back to ARP; the request must not.
  Topology topo;
  const int ifindex = IfIndex(topo.server_side_if());
  const in_addr pinned = InSubnet(topo.server_addr(), 98);
  const auto added =
      topo.Run("", "ip neigh add " + ToString(pinned) +
                       " lladdr 02:00:00:00:00:98 nud permanent dev " + topo.server_side_if());
  ASSERT_EQ(added.status, 0) << added.output;
  auto requested = RequestNeighborResolution(ifindex, pinned);
  ASSERT_TRUE(requested) << requested.error().message();
  auto mac = LookupNeighbor(ifindex, pinned);
  ASSERT_TRUE(mac) << mac.error().message();
  ASSERT_TRUE(mac->has_value());
  EXPECT_EQ(FormatMac(**mac), "02:00:00:00:00:98");
  const std::string shown =
      topo.Run("", "ip neigh show " + ToString(pinned) + " dev " + topo.server_side_if()).output;
  EXPECT_NE(shown.find("PERMANENT"), std::string::npos) << shown;
}

TEST_F(NeighborTest, InterfaceWithAddressFindsTheServerSideInterface) {
  Topology topo;
  auto found = InterfaceWithAddress(topo.server_gw());
  ASSERT_TRUE(found) << found.error().message();
  EXPECT_EQ(found->first, IfIndex(topo.server_side_if()));
  EXPECT_EQ(found->second, topo.server_side_if());

  const in_addr nobodys = InSubnet(topo.server_addr(), 99);
  auto missing = InterfaceWithAddress(nobodys);
  ASSERT_FALSE(missing) << "found " << missing->second;
  EXPECT_EQ(missing.error().message(),
            "no interface has address " + ToString(nobodys) + ": Cannot assign requested address");
}

TEST_F(NeighborTest, InterfaceMacAndMtuMatchIpLink) {
  Topology topo(TopologyOptions{.mtu = 1400});
  for (const std::string& ifname : {topo.client_side_if(), topo.server_side_if()}) {
    const std::string shown = topo.Run("", "ip -o link show dev " + ifname).output;
    auto mac = InterfaceMac(IfIndex(ifname));
    ASSERT_TRUE(mac) << mac.error().message();
    EXPECT_EQ(FormatMac(*mac), WordAfter(shown, "link/ether")) << shown;
    auto mtu = InterfaceMtu(IfIndex(ifname));
    ASSERT_TRUE(mtu) << mtu.error().message();
    EXPECT_EQ(std::to_string(*mtu), WordAfter(shown, "mtu")) << shown;
    EXPECT_EQ(*mtu, 1400);
  }
  auto loopback = InterfaceMac(IfIndex("lo"));
  ASSERT_FALSE(loopback);
  EXPECT_NE(loopback.error().message().find("lo is not an Ethernet interface"), std::string::npos)
      << loopback.error().message();
}

TEST_F(NeighborTest, UnknownInterfaceIsAnError) {
  constexpr int kNoSuchIndex = 0x7ffffff0;
  ASSERT_EQ(if_indextoname(kNoSuchIndex, std::string(IF_NAMESIZE, '\0').data()), nullptr);
  auto looked = LookupNeighbor(kNoSuchIndex, Addr("198.19.0.1"));
  ASSERT_FALSE(looked);
  EXPECT_TRUE(looked.error().code == std::errc::no_such_device) << looked.error().message();
  auto requested = RequestNeighborResolution(kNoSuchIndex, Addr("198.19.0.1"));
  ASSERT_FALSE(requested);
  EXPECT_TRUE(requested.error().code == std::errc::no_such_device) << requested.error().message();
  auto mtu = InterfaceMtu(kNoSuchIndex);
  ASSERT_FALSE(mtu);
  EXPECT_NE(mtu.error().message().find("interface index " + std::to_string(kNoSuchIndex)),
            std::string::npos)
      << mtu.error().message();
}

TEST(InterfaceDriverTest, VethIsVethAndUnknownIsAnError) {
  if (geteuid() != 0) GTEST_SKIP() << "namespace tests need root";
  Topology topo;
  auto driver = InterfaceDriver(topo.client_side_if());
  ASSERT_TRUE(driver) << driver.error().message();
  EXPECT_EQ(*driver, "veth");
  EXPECT_FALSE(InterfaceDriver("xf-no-such-if"));
}

}  // namespace
}  // namespace xdpfwd::test
