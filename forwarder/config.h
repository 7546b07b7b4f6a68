// rinetd's configuration grammar (rinetd 0.73's parse.peg and rinetd.8), so every rinetd file
// runs as it is: rules "bindaddress bindport connectaddress connectport [options]", allow/deny
// lines (before the first rule: global; after a rule: that rule's), logfile, pidlogfile and
// logcommon. docs/configuration.md and xdpfwd.conf(5) describe it for users.
#pragma once

#include <string>

#include "forwarder/rules.h"
#include "os/result.h"

namespace xdpfwd {

// Parses a whole file's text. Host names and service names are looked up here (getaddrinfo,
// /etc/services), so a reload looks them up again. Errors are one line,
// "SOURCE:LINE:COLUMN: expected ..., found ...", and name the host or service that did not
// resolve. At least one rule is required, and two rules may not listen on the same address,
// port and protocol.
Result<Config> ParseConfig(const std::string& text, const std::string& source_name);
Result<Config> LoadConfigFile(const std::string& path);

// The configuration as understood, for `xdpfwd -t`: every rule with its addresses resolved,
// its options, its access lines and which path serves it, then the global settings.
std::string DescribeConfig(const Config& config);

}  // namespace xdpfwd
