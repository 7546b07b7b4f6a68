#!/usr/bin/env bash
# Side-by-side numbers for the relay (issue #5's acceptance): iperf3 -P 1 and -P 8 throughput
# and sockperf TCP ping-pong latency, through `xdpfwd --path xdp`, `xdpfwd --path kernel` and
# direct kernel routing (no proxy), all in one run on one namespace topology:
#
#   ns xfb-c (client) --veth-- root ns (xdpfwd, or plain routing) --veth-- ns xfb-s (server)
#
# usage: sudo bench/relay-compare.sh [--mtu N] [--seconds N] [--fwd-cpu N] [--xdpfwd PATH]
# The forwarder is pinned to --fwd-cpu (default 1), the load generators to the other core. The
# topology is removed on exit, also on failure or Ctrl-C. This is the precursor of the full
# benchmark runner (issue #7).
set -euo pipefail

mtu=1500
seconds=5
fwd_cpu=1
top=$(cd "$(dirname "$0")/.." && pwd)
xdpfwd="$top/build/forwarder/xdpfwd"
while [ $# -gt 0 ]; do
  case "$1" in
    --mtu) mtu=$2; shift 2 ;;
    --seconds) seconds=$2; shift 2 ;;
    --fwd-cpu) fwd_cpu=$2; shift 2 ;;
    --xdpfwd) xdpfwd=$2; shift 2 ;;
    *) echo "relay-compare: unknown argument $1" >&2; exit 2 ;;
  esac
done
[ "$(id -u)" = 0 ] || { echo "relay-compare: needs root (namespaces, XDP)" >&2; exit 1; }
[ -x "$xdpfwd" ] || { echo "relay-compare: $xdpfwd not built (run scripts/setup)" >&2; exit 1; }
for tool in iperf3 sockperf; do
  command -v $tool >/dev/null || { echo "relay-compare: $tool missing (run scripts/setup)" >&2; exit 1; }
done
ncpu=$(nproc)
gen_cpu=$(( (fwd_cpu + 1) % ncpu ))

C=xfb-c S=xfb-s CI=xfbc0 SI=xfbs0
CA=198.18.250.2 CG=198.18.250.1 SA=198.19.250.2 SG=198.19.250.1
PORT=9000 BPORT=9001 SPPORT=9100

pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  ip link del $CI 2>/dev/null || true
  ip link del $SI 2>/dev/null || true
  ip netns del $C 2>/dev/null || true
  ip netns del $S 2>/dev/null || true
}
trap cleanup EXIT INT TERM
cleanup

ip netns add $C
ip netns add $S
ip link add $CI mtu "$mtu" type veth peer name eth0 mtu "$mtu" netns $C
ip link add $SI mtu "$mtu" type veth peer name eth0 mtu "$mtu" netns $S
ip addr add $CG/24 dev $CI && ip link set $CI up
ip addr add $SG/24 dev $SI && ip link set $SI up
ip -n $C addr add $CA/24 dev eth0 && ip -n $C link set eth0 up && ip -n $C link set lo up
ip -n $S addr add $SA/24 dev eth0 && ip -n $S link set eth0 up && ip -n $S link set lo up
ip -n $C route add default via $CG
ip -n $S route add default via $SG
# Routing for the direct reference only on these two interfaces (the global switch is untouched).
sysctl -qw net.ipv4.conf.$CI.forwarding=1 net.ipv4.conf.$SI.forwarding=1

taskset -c $gen_cpu ip netns exec $S iperf3 -s -p $BPORT >/dev/null 2>&1 &
pids+=($!)
taskset -c $gen_cpu ip netns exec $S sockperf server --tcp -i $SA -p $SPPORT >/dev/null 2>&1 &
pids+=($!)
sleep 0.5

results=()
run_case() {  # name target_addr iperf_port sockperf_port
  local name=$1 addr=$2 iport=$3 sport=$4
  local p1 p8 lat
  echo "relay-compare: $name: iperf3 -P 1 (${seconds}s)" >&2
  p1=$(taskset -c $gen_cpu ip netns exec $C iperf3 -c "$addr" -p "$iport" -t "$seconds" -P 1 -J |
       python3 -c 'import json,sys; print("%.2f" % (json.load(sys.stdin)["end"]["sum_received"]["bits_per_second"]/1e9))')
  echo "relay-compare: $name: iperf3 -P 8 (${seconds}s)" >&2
  p8=$(taskset -c $gen_cpu ip netns exec $C iperf3 -c "$addr" -p "$iport" -t "$seconds" -P 8 -J |
       python3 -c 'import json,sys; print("%.2f" % (json.load(sys.stdin)["end"]["sum_received"]["bits_per_second"]/1e9))')
  echo "relay-compare: $name: sockperf ping-pong 32 B (${seconds}s)" >&2
  lat=$(taskset -c $gen_cpu ip netns exec $C sockperf ping-pong --tcp -i "$addr" -p "$sport" -m 32 -t "$seconds" 2>&1 |
        awk '/percentile 50.000/ {p50=$NF} /percentile 99.000/ {p99=$NF} /percentile 99.900/ {p999=$NF}
             END {printf "%s %s %s", p50, p99, p999}')
  results+=("$name $p1 $p8 $lat")
}

start_fwd() {  # path
  local log=/tmp/xfb-xdpfwd-$1.log
  # Two rules: iperf3 and sockperf each have their own backend port.
  printf '%s %s %s %s\n%s %s %s %s\n' $CG $PORT $SA $BPORT $CG $SPPORT $SA $SPPORT > /tmp/xfb-rules
  taskset -c $fwd_cpu "$xdpfwd" --path "$1" --cpu $fwd_cpu --threads 1 -c /tmp/xfb-rules >"$log" 2>&1 &
  fwd_pid=$!
  pids+=($fwd_pid)
  for _ in $(seq 100); do grep -q 'ready:' "$log" && return 0; sleep 0.1; done
  echo "relay-compare: xdpfwd --path $1 did not start:" >&2
  cat "$log" >&2
  exit 1
}
stop_fwd() {
  kill -TERM "$fwd_pid"
  wait "$fwd_pid" || true
}

run_case direct $SA $BPORT $SPPORT
start_fwd kernel
run_case "xdpfwd-kernel" $CG $PORT $SPPORT
stop_fwd
start_fwd xdp
run_case "xdpfwd-xdp" $CG $PORT $SPPORT
stop_fwd

echo
echo "MTU $mtu, ${seconds}s per measurement, forwarder on CPU $fwd_cpu, load on CPU $gen_cpu, $(uname -r)"
echo
echo "| path | iperf3 -P 1 Gbit/s | iperf3 -P 8 Gbit/s | ping-pong p50 us | p99 us | p99.9 us |"
echo "|---|---|---|---|---|---|"
for r in "${results[@]}"; do
  set -- $r
  echo "| $1 | $2 | $3 | $4 | $5 | $6 |"
done
