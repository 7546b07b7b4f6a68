"""bench/run's report: a run's results as Markdown tables (throughput and latency, connection
rate per close order, idle connections), the targets (the fast path against the kernel path
in the same run), the chart, and --publish into docs/benchmarks.md. No measuring here."""

import os
import shutil
import statistics
import subprocess
import sys

TOP = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# Forwarder counters a rate test reports beside the load generator's failures (xdpfwd's stats
# line, before and after): connections the forwarder ended otherwise than cleanly, and SYNs the
# fast path's steering program passed to the kernel. A load generator can see no failure while
# these grow (a reset that answers the forwarder's FIN after the client closed), so both are shown.
FORWARDER_COUNTERS = ("over_limit", "backend_refused", "backend_timeout", "backend_error",
                      "backend_no_port", "idle_timeout", "client_reset", "backend_reset",
                      "shutdown_reset", "pass_kernel_owns", "pass_flow_table_full")
CLOSE_ORDERS = ("server", "client")
CLOSE_LABEL = {"server": "server closes first", "client": "client closes first"}
# The scale for the fast path's memory target.
IDLE_TARGET = 100_000
# Issue #32: a million idle connections on one fast-path worker, each ≤ 1 KiB (process +
# kernel, as IDLE_TARGET's row counts it), no fill-ring drop while they open, wait and close;
# and bulk beside them at ≥ BESIDE_TARGET of bulk without them.
IDLE_MILLION = 1_000_000
IDLE_MILLION_KIB = 1.0
BESIDE_TARGET = 0.95
# The access log's cost: connections/s with it on at least this share of the same fast path's
# without it, in the same run (xdpfwd-xdp-log against xdpfwd-xdp).
LOG_RATE_TARGET = 0.95
# A PROXY v2 header first on every backend connection (#30): connections/s with it at least this
# share of the same fast path's without it, in the same run (xdpfwd-xdp-proxy against xdpfwd-xdp).
PROXY_RATE_TARGET = 0.95
# The flight recorder's cost (#29): the fast path with it on (xdpfwd-xdp) at least this share
# of the same fast path with it off (xdpfwd-xdp-norec) in bulk and connections/s, and its rr
# p99 at most this many µs above, in the same run.
RECORDER_RATIO_TARGET = 0.99
RECORDER_P99_TARGET_US = 1.0
# The topologies (bench/run's TOPOLOGIES) as the tables name them: what the namespace-side
# veths do with the packets the peers receive.
TOPOLOGY_LABEL = {
    "plain": "plain veths",
    "rps": "RPS to the load's CPU",
    "gro-napi": "GRO + threaded NAPI",
}
TOPOLOGY_TEXT = {
    "plain": "nothing set on the namespace-side veths: every path pays its receivers' work (the "
             "peers' TCP) in softirq on the forwarder's core",
    "rps": "rps_cpus on the namespace-side veths = the load generators' CPU: the receivers' "
           "work leaves the forwarder's core for every path alike",
    "gro-napi": "GRO, GRO fraglist and threaded NAPI on the namespace-side veths, the NAPI "
                "threads on the load generators' CPU: only a packet socket's skbs (the fast "
                "path's) are received off the forwarder's core, so it favours the fast path",
}
# The fair bulk targets (issue #34), fast path / kernel path on the same topology and run, per
# MTU and stream count: with the receivers' work off the forwarder's core for every path (rps)
# and on plain veths, where every path pays it on its own core.
TOPOLOGY_TARGETS = {"rps": 1.0, "plain": 0.8}
# The rows of the throughput-and-latency table, and the connection-rate table's.
THROUGHPUT_ROWS = ("gbps_p1", "gbps_p8", "rr1", "rr64")
RATE_ROWS = ("rate_server", "rate_client")


def log(msg):
    print(f"bench: {msg}", file=sys.stderr, flush=True)


def fmt_value(v):
    if isinstance(v, dict) and "deaths" in v:
        return churn_text(v)
    if isinstance(v, dict) and "latency_us" in v:
        lat = v["latency_us"]
        rate = v.get("exchanges_per_sec", v.get("connections_per_sec", 0))
        out = f"{rate:,.0f}/s, p50 {lat['p50']:.1f} µs, p99 {lat['p99']:.1f} µs, errors {v.get('errors')}"
        load = v.get("forwarder")
        if load:
            out += f"; forwarder: {load_text(load)}"
        if "forwarder_counters" in v:
            out += f"; forwarder counters: {counters_text(v, with_completed=True) or 'none'}"
        if "namespaces" in v:
            out += "; " + "; ".join(
                f"{side} namespace: " + ", ".join(
                    ([f"TIME_WAIT overflow {c['tw_overflow']:,}", f"resets sent {c['resets_sent']:,}"]
                     if "tw_overflow" in c else []) +
                    ([f"TCP sockets after {c['sockets_after']}"] if "sockets_after" in c else []))
                for side, c in v["namespaces"].items())
        return out
    if isinstance(v, dict) and "forwarder_lines" in v:
        return access_log_text(v)
    if isinstance(v, dict) and "rate_server" in v and "wrong" in v:
        return proxy_backend_text(v)
    if isinstance(v, dict) and "sess" in v and "metrics" in v:
        return watch_text(v)
    if isinstance(v, dict) and "held" in v:
        return (f"held {v['held']:,} of {v['requested']:,} (opened {v['opened']:,}, proven at "
                f"open {v['verified_open']:,}, at close {v['verified_close']:,}, dropped "
                f"{v['dropped']:,}, not attempted {v['not_attempted']:,}; errors {v['errors']}, "
                f"at close {v['errors_at_close']}); {v['processes']} hold process(es), "
                f"PSS {v['pss_kib'] / 1024:,.1f} MiB")
    if isinstance(v, float):
        return f"{v:,.2f}"
    return str(v)


def counters_text(v, with_completed=False):
    """The forwarder counters of FORWARDER_COUNTERS that moved in a rate test ("" if none)."""
    c = v.get("forwarder_counters") or {}
    keys = (("completed",) if with_completed else ()) + FORWARDER_COUNTERS
    return ", ".join(f"{k} {c[k]:,}" for k in keys if c.get(k))


def tw_overflow_text(v):
    """TIME_WAIT sockets each namespace could not keep in a rate test."""
    ns = v.get("namespaces") or {}
    return ", ".join(f"{side} {c['tw_overflow']:,}" for side, c in ns.items() if c.get("tw_overflow"))


def access_log_text(a):
    """An access log's count (bench/run's XdpfwdLog.check_log) in words."""
    return (f"{a['lines']:,} whole lines, expected {a['expected']:,} (2 × {a['accepted']:,} "
            f"accepted; {a['opened']:,} 'opened'), torn {a['torn']:,}; the forwarder counted "
            f"lines={a['forwarder_lines']:,} dropped={a['dropped']:,} "
            f"write_errors={a['write_errors']:,}; {a['bytes'] / MIB:,.1f} MiB; control process "
            f"CPU {cell(a.get('control_us_per_conn'), 2)} µs/connection"
            + ("" if a["ok"] else f"; FAILED: {'; '.join(a['wrong'])}"))


MIB = 1 << 20


def proxy_backend_text(b):
    """The PROXY headers a configuration's servers read (bench/run's XdpfwdProxy.check_backends)
    in words."""
    parts = []
    for order in CLOSE_ORDERS:
        got = b.get(f"rate_{order}")
        if got:
            parts.append(f"{CLOSE_LABEL[order]}: {got['proxy_headers']:,} headers read for "
                         f"{got['connections']:,} connections, errors {got['errors']}")
    return "; ".join(parts) + ("" if b["ok"] else f"; FAILED: {'; '.join(b['wrong'])}")


def watch_text(w):
    """A watched configuration's watcher and hold (bench/run's Bench.watch_end) in words."""
    m, q, h = w["metrics"], w["sess"], w["held"]
    return (f"{w['seconds']} s at {w['hz']} Hz: GET /metrics {m['answers']:,} answers "
            f"({m['failures']} failed), median {cell(m['median_ms'], 2)} / max "
            f"{cell(m['max_ms'], 2)} ms; show sess {q['answers']:,} answers ({q['failures']} "
            f"failed), median {cell(q['median_ms'], 2)} / max {cell(q['max_ms'], 2)} ms, "
            f"{cell(q['rows_min'], 0)}-{cell(q['rows_max'], 0)} rows; idle connections held "
            f"{h['held']:,} of {h['requested']:,}")


def load_text(load):
    if load.get("error"):
        return f"not measured ({load['error']})"
    per = load.get("us_per_conn")
    wait, runs = load.get("runqueue_wait_percent"), load.get("runs_per_conn")
    return (f"{'—' if per is None else f'{per:,.1f}'} µs {load['kind']}/connection, "
            f"{load['kind']} {load['percent']:.0f}%"
            + ("" if wait is None else f", waited for its core {wait:.0f}%")
            + ("" if runs is None else f", put on a CPU {runs:.2f} times per connection"))


# --- the report --------------------------------------------------------------------------------

def cell(v, digits=1):
    return "—" if v is None else f"{v:,.{digits}f}"


def lat(r, key, p):
    return r.get(key, {}).get("latency_us", {}).get(p)


def rate_of(r, key):
    v = r.get(key, {})
    return v.get("exchanges_per_sec", v.get("connections_per_sec"))


# A close order below this share of the same configuration's other order, while its forwarder
# was busy less than COLLAPSE_BUSY_PERCENT of the time, was not held back by the forwarder: the
# load generator waited (issue #32 item 6: client first, 3,446/s against 24,344/s server first,
# the kernel path 16% busy, the load generator's connect()s scanning its TIME_WAIT ports). A
# forwarder busy all the time (socat, 99%: 704 against 2,238/s) is slower, not collapsed.
COLLAPSE_RATIO = 0.5
COLLAPSE_BUSY_PERCENT = 50


def collapse_verdict(r):
    """(order, why, own) when one close order's rate collapsed against the other's; None when
    not, or when either was not measured. own: the forwarder's own CPU per connection rose
    by half or more in that order, so its own calls were slow (the load generator was not
    what waited)."""
    rates = {o: rate_of(r, f"rate_{o}") for o in CLOSE_ORDERS}
    if None in rates.values() or not max(rates.values()):
        return None
    slow = min(CLOSE_ORDERS, key=lambda o: rates[o])
    fast = max(CLOSE_ORDERS, key=lambda o: rates[o])
    if rates[slow] >= COLLAPSE_RATIO * rates[fast]:
        return None
    row = r[f"rate_{slow}"]
    load = row.get("forwarder") or {}
    busy = load.get("percent")
    if busy is not None and busy >= COLLAPSE_BUSY_PERCENT:
        return None
    why = (f"collapsed: {CLOSE_LABEL[slow]} {rates[slow]:,.0f}/s against {rates[fast]:,.0f}/s "
           f"{CLOSE_LABEL[fast]}")
    own = False
    if busy is None:
        why += " with no forwarder"
    else:
        # Its cost per connection says whose the wait was: about the same as in the other
        # order, the forwarder waited for connections; far more, its own calls were slow (a
        # proxy's backend connect() scanning its TIME_WAIT ports).
        other = (r[f"rate_{fast}"].get("forwarder") or {}).get("us_per_conn")
        per = load.get("us_per_conn")
        why += f", the forwarder busy {busy:.0f}% of the time"
        if load.get("runqueue_wait_percent") is not None:
            why += f" and waiting for its core {load['runqueue_wait_percent']:.0f}%"
        if per is not None and other:
            why += f", {per:,.1f} µs of its CPU per connection against {other:,.1f}"
            own = per >= 1.5 * other
    if row.get("slow_connect_calls"):
        why += (f"; the load generator's connect() took ≥ 1 ms {row['slow_connect_calls']:,} "
                f"times (longest {row['connect_call_us_max'] / 1000:,.1f} ms): it scanned its "
                "namespace's TIME_WAIT ports (--sources)")
    return slow, why, own


def failed_of(r, key):
    """Failed connections of a rate run (None when it did not run), and the kinds."""
    v = r.get(key)
    if not v or "errors" not in v:
        return None, {}
    kinds = {k: n for k, n in v["errors"].items() if n}
    return sum(kinds.values()), kinds


def failed_cell(r, key):
    n, kinds = failed_of(r, key)
    if n is None:
        return "—"
    if n == 0:
        return "0"
    return f"**{n:,}** ({', '.join(f'{k} {c:,}' for k, c in kinds.items())})"


def load_of(r, key):
    """The forwarder's µs per connection in a rate run, its kind and load %; or why not."""
    load = r.get(key, {}).get("forwarder")
    if not load:
        return None
    return load


def load_cell(r, key):
    load = load_of(r, key)
    if load is None:
        return "—"
    if load.get("error"):
        return "**not measured**"
    per = load.get("us_per_conn")
    if per is None:
        return "—"
    core = load.get("core_us_per_conn")
    extra = f" + {core - per:,.1f} irq" if load["kind"] == "cpu" and core is not None else ""
    own = load.get("own_us_per_conn")
    if own is not None:  # the fast path's busy time: its own work, then its TX syscalls'
        extra = f" = {own:,.1f} own + {load['tx_syscall_us_per_conn']:,.1f} TX syscalls"
    wait = load.get("runqueue_wait_percent")
    waited = "" if wait is None else f", waited for its core {wait:.0f}%"
    return f"{per:,.1f} {load['kind']}{extra} ({load['kind']} {load['percent']:.0f}%{waited})"


def ports_cell(r):
    """"9012→7012 / 9013→7013": the rate tests' ports, listen → server (direct: the server's)."""
    p = r.get("ports")
    if not p:
        return "—"
    return " / ".join(str(p["server"][k]) if p["listen"] is None else
                      f"{p['listen'][k]}→{p['server'][k]}" for k in ("rate_server", "rate_client"))


def idle_ok(r):
    i = r.get("idle")
    return bool(i) and i["held"] == i["requested"]


def idle_held_cell(r):
    i = r.get("idle")
    if not i:
        return "**FAILED**" if "idle" in r.get("errors", {}) else "—"
    if i["held"] == i["requested"]:
        return f"{i['held']:,}"
    why = [f"{k} {n:,}" for k, n in i["errors"].items() if n]
    why += [f"{k} {n:,} at close" for k, n in i["errors_at_close"].items() if n]
    if i["dropped"]:
        why.append(f"dropped while held {i['dropped']:,}")
    if i["not_attempted"]:
        why.append(f"not attempted {i['not_attempted']:,}")
    return (f"**FAILED: {i['held']:,} of {i['requested']:,} held**" +
            (f" ({', '.join(why)})" if why else ""))


def idle_mem_cell(name, r):
    i = r.get("idle")
    if name == "direct":
        base = r.get("idle_kernel_kib_per_conn")
        return "—" if base is None else f"baseline: {base:,.2f} kernel"
    total = r.get("idle_kib_per_conn")
    if total is None:
        return "not measured" if i else "—"
    return f"{total:,.2f} ({r['idle_process_kib_per_conn']:,.2f} + {r['idle_kernel_kib_per_conn']:,.2f})"


def xsk_text(phase):
    return ", ".join(f"{k} {v:,}" for k, v in phase.items())


def idle_detail_lines(by_cfg, shown):
    """Under the idle table: how long opening and closing took, the fast path's AF_XDP drops per
    phase, and where the kernel's memory went (machine-wide, so both namespaces' sockets too)."""
    out = []
    for c in shown:
        i = (by_cfg[c.name].get("idle") or {})
        if not i.get("held"):
            continue
        text = (f"{c.label}: {i['held']:,} held, opened in {i.get('open_seconds', '—')} s by "
                f"{i.get('processes', '—')} process(es), proven again and closed in "
                f"{i.get('close_seconds', '—')} s")
        if i.get("busy_while_held") is not None:
            text += f"; worker busy {i['busy_while_held']:.2f}% of 2 s while they were held idle"
        if i.get("xsk"):
            text += "; AF_XDP drops " + "; ".join(f"{phase.replace('_', ' and ')}: {xsk_text(v)}"
                                                  for phase, v in i["xsk"].items())
        if i.get("forwarder_counters"):
            text += "; forwarder counters that moved: " + ", ".join(
                f"{n} {v:,}" for n, v in i["forwarder_counters"].items())
        for side, moved in (i.get("namespaces") or {}).items():
            if moved:
                text += f"; {side} namespace: " + ", ".join(f"{n} {v:,}" for n, v in moved.items())
        k = i.get("kernel_detail")
        if k:
            mem = k["meminfo_kib"]
            text += (f"; kernel memory grew Slab {mem.get('Slab', 0) / 1024:,.0f} MiB "
                     f"(unreclaimable {mem.get('SUnreclaim', 0) / 1024:,.0f}), page tables "
                     f"{mem.get('PageTables', 0) / 1024:,.0f}, vmalloc "
                     f"{mem.get('VmallocUsed', 0) / 1024:,.0f} MiB; TCP buffer pages "
                     f"{k.get('tcp_pages') if k.get('tcp_pages') is not None else '—'}; "
                     "slab caches: " + ", ".join(f"{n} {v / 1024:,.0f} MiB"
                                                 for n, v in list(k["slabs_kib"].items())[:6]))
        out.append(text)
    return ["", "Idle test details (kernel memory is the machine's, both namespaces' sockets "
            "included):", ""] + [f"- {t}" for t in out] if out else []


def beside_of(r):
    """(without, with) Gbit/s pairs for -P 1 and -P 8 of a configuration whose idle row ran its
    bulk rows again beside the held connections, and how many it held; None if it did not."""
    b = (r.get("idle") or {}).get("beside")
    if not b or b.get("error"):
        return None
    return {n: (r.get(f"gbps_p{n}"), b.get(f"gbps_p{n}")) for n in (1, 8)}, b.get("held")


def beside_table(mtu, by_cfg, shown):
    out = []
    for c in shown:
        r = by_cfg[c.name]
        b = (r.get("idle") or {}).get("beside")
        if not b:
            continue
        if b.get("error"):
            out.append(f"| {c.label} | — | not measured: {b['error']} | |")
            continue
        pairs, held = beside_of(r)
        cells = []
        for n in (1, 8):
            without, with_ = pairs[n]
            ratio = f"{with_ / without:.2f}×" if without and with_ is not None else "—"
            cells.append(f"{cell(without, 2)} / {cell(with_, 2)}, {ratio}")
        out.append(f"| {c.label} | {held:,} | " + " | ".join(cells) + " |")
    if not out:
        return []
    return ["", f"Bulk beside idle connections, MTU {mtu} (issue #32): iperf3 -P 1 and -P 8 "
            "through the configuration while its idle row's connections are held (after the "
            "memory was read, before they are proven again and closed), against its own bulk "
            f"rows of the same run without them; target ≥ {BESIDE_TARGET}×.", "",
            "| configuration | idle connections held | -P 1 Gbit/s without / with, ratio | "
            "-P 8 Gbit/s without / with, ratio |", "|---|---|---|---|"] + out


def idle_targets(mtu, by):
    """Issue #32's targets, read on xdpfwd-xdp's idle row: a million held, ≤ 1 KiB each, no
    fill-ring drop during the idle test (its bulk beside excluded), bulk beside ≥ 0.95×."""
    x = by.get("xdpfwd-xdp")
    if not x or not (x.get("idle") or "idle" in x.get("errors", {})):
        return []
    rows = []
    i, m = x.get("idle"), x.get("idle_kib_per_conn")
    row = (f"{IDLE_MILLION:,} idle connections on one worker, every one proven at open and at "
           f"close, ≤ {IDLE_MILLION_KIB:g} KiB each (process + kernel)")
    if not i:
        rows.append((mtu, row, "not measured", None))
    elif not idle_ok(x):
        rows.append((mtu, row, f"FAILED: {i['held']:,} of {i['requested']:,} held", None))
    elif i["held"] < IDLE_MILLION:
        rows.append((mtu, row, f"{m:.2f} KiB, but at {i['held']:,} held", None))
    else:
        rows.append((mtu, row, f"{m:.2f} KiB at {i['held']:,}", m <= IDLE_MILLION_KIB))
    row = "0 xsk_fill_ring_empty while the idle connections open, wait and close"
    xsk = (i or {}).get("xsk")
    if not xsk:
        rows.append((mtu, row, "not measured", None))
    else:
        n = sum(v.get("xsk_fill_ring_empty", 0) for phase, v in xsk.items() if phase != "beside")
        held = f" at {i['held']:,} held" if i.get("held") else ""
        rows.append((mtu, row, f"{n:,}{held}", n == 0 if idle_ok(x) else None))
    b = beside_of(x)
    if b:
        pairs, held = b
        row = f"bulk beside {held:,} idle connections ≥ {BESIDE_TARGET}× of bulk without them"
        ratios = [w / wo for wo, w in pairs.values() if wo and w is not None]
        if len(ratios) != 2:
            rows.append((mtu, row, "not measured", None))
        else:
            rows.append((mtu, row, f"-P 1 {ratios[0]:.2f}×, -P 8 {ratios[1]:.2f}×",
                         all(v >= BESIDE_TARGET for v in ratios) if idle_ok(x) else None))
    return rows


def topology_table(mtu, main, by_topology, configs, meta):
    """The bulk rows per topology at one MTU: each of the bulk tables' topologies (by_topology:
    {kind: {configuration: row}}), then the main table's for the same configurations, each
    with its fast path / kernel path ratio on the same topology."""
    if not by_topology:
        return []
    names = [c.name for c in configs if any(c.name in by for by in by_topology.values())]
    label = {c.name: c.label for c in configs}
    out = ["", f"Bulk throughput per topology, MTU {mtu}: the same iperf3 rows ({meta['seconds']} "
           "s each) on a topology set up for each table; every row's topology in results.json. "
           + " ".join(f"{TOPOLOGY_LABEL[k]}: {TOPOLOGY_TEXT[k]}." for k in
                      dict.fromkeys([*by_topology, meta.get("topology", "gro-napi")])) +
           " Plain veths and RPS treat every path alike and carry the bulk targets; GRO + "
           "threaded NAPI favours the fast path.", "",
           "| topology | configuration | iperf3 -P 1 Gbit/s | iperf3 -P 8 Gbit/s | against the "
           "kernel path, -P 1 / -P 8 |", "|---|---|---|---|---|"]
    tables = [*by_topology.items(), (meta.get("topology", "gro-napi"), main)]
    for kind, by in tables:
        kernel = by.get("xdpfwd-kernel", {})
        for name in names:
            r = by.get(name)
            if r is None:
                continue
            ratios = []
            for key in ("gbps_p1", "gbps_p8"):
                a, b = r.get(key), kernel.get(key)
                ratios.append(f"{a / b:.2f}×" if a is not None and b else "—")
            ratio = " / ".join(ratios) if name != "xdpfwd-kernel" and kernel else "—"
            if name == "xdpfwd-kernel":
                ratio = "(reference)"
            failed = "; ".join(f"{k}: {e}" for k, e in r.get("errors", {}).items())
            out.append(f"| {TOPOLOGY_LABEL[kind]} | {label[name]} | {cell(r.get('gbps_p1'), 2)} "
                       f"| {cell(r.get('gbps_p8'), 2)} | {ratio} |" +
                       (f" FAILED: {failed}" if failed else ""))
    return out


def markdown(results, configs, meta, by_topology=None):
    out = [f"Run {meta['date']} on {meta['kernel']}, {meta['cpus']} CPUs; forwarder on CPU "
           f"{meta['fwd_cpu']}, load generators on CPU {meta['gen_cpu']}; {meta['seconds']} s per "
           f"measurement, {meta['rate_seconds']} s per connection-rate order. Command: "
           f"`{meta['command']}`", ""]
    by_topology = by_topology or {}
    for mtu, by_cfg in results.items():
        shown = [c for c in configs if c.name in by_cfg]
        kind = meta.get("topology", "gro-napi")
        out += [f"### MTU {mtu}", "",
                f"Topology of the tables below: {TOPOLOGY_LABEL[kind]} ({TOPOLOGY_TEXT[kind]}). "
                "The bulk rows on fair "
                "topologies are in \"Bulk throughput per topology\".", "",
                "| configuration | iperf3 -P 1 Gbit/s | iperf3 -P 8 Gbit/s | forwarder CPU s/GiB | "
                "syscalls/MiB strace -P1; counted -P1 / -P8 | rr 1 conn p50 / p99 / p99.9 µs | rr 64 conns k exchanges/s, p50 / p99 µs |",
                "|---|---|---|---|---|---|---|"]
        for c in shown:
            if not any(c.measures(k) for k in THROUGHPUT_ROWS):  # xdpfwd-xdp-log
                continue
            r = by_cfg[c.name]
            rr64 = rate_of(r, "rr64")
            out.append(
                f"| {c.label} | {cell(r.get('gbps_p1'), 2)} | {cell(r.get('gbps_p8'), 2)} | "
                f"{cell(r.get('cpu_s_per_gib'), 2)} | {cell(r.get('syscalls_per_mib'))}; "
                f"{cell(r.get('syscalls_per_mib_counted_p1'))} / "
                f"{cell(r.get('syscalls_per_mib_counted_p8'))} | "
                f"{cell(lat(r, 'rr1', 'p50'))} / {cell(lat(r, 'rr1', 'p99'))} / {cell(lat(r, 'rr1', 'p999'))} | "
                f"{cell(rr64 / 1000 if rr64 else None)}, {cell(lat(r, 'rr64', 'p50'))} / {cell(lat(r, 'rr64', 'p99'))} |")
        out += topology_table(mtu, by_cfg, by_topology.get(mtu, {}), configs, meta)
        rated = any(c.measures(k) for c in shown for k in RATE_ROWS)
        out += [] if not rated else ["", f"Connection rate, MTU {mtu}: {meta['rate_concurrency']} connections at a "
                f"time, {meta['rate_seconds']} s per close order, one 32-byte exchange each. "
                "Forwarder µs/connection: CPU time of its processes, plus (\"irq\") the "
                "interrupt time on its core, which on veth is mostly the peer namespaces' "
                "stacks receiving what it sent and which the kernel charges to the core, not the "
                "process; for the fast path its worker's busy time (it busy-polls a whole core "
                "whatever the load), which holds that work already (it runs inside the worker's "
                "TX syscalls), split into its own work and the time in those syscalls. In brackets the CPU or busy time as a share of the test's wall "
                "time, and the time its threads were runnable but another program held the "
                "core (schedstat), which a forwarder on a shared machine loses. Each "
                "configuration has ports of "
                "its own (listen → server; direct routing: the server's), so what one leaves "
                "in TIME_WAIT cannot reach another.", "",
                "| configuration | server closes first: connections/s, p50 / p99 µs | failed "
                "connections | forwarder µs/connection | client closes first: connections/s, "
                "p50 / p99 µs | failed connections | forwarder µs/connection | ports, server "
                "first / client first |",
                "|---|---|---|---|---|---|---|---|"]
        for c in shown if rated else []:
            if not any(c.measures(k) for k in RATE_ROWS):  # xdpfwd-xdp-watched
                continue
            r = by_cfg[c.name]
            cells = []
            for order in CLOSE_ORDERS:
                key = f"rate_{order}"
                verdict = collapse_verdict(r)
                flag = " **collapsed**" if verdict and verdict[0] == order else ""
                cells += [f"{cell(rate_of(r, key), 0)}, {cell(lat(r, key, 'p50'))} / "
                          f"{cell(lat(r, key, 'p99'))}{flag}",
                          failed_cell(r, key), load_cell(r, key)]
            cells.append(ports_cell(r))
            out.append(f"| {c.label} | " + " | ".join(cells) + " |")
        out += access_log_table(mtu, by_cfg, shown)
        out += proxy_table(mtu, by_cfg, shown)
        out += recorder_table(mtu, by_cfg, shown)
        out += watched_table(mtu, by_cfg, shown)
        out += churn_table(mtu, by_cfg, shown)
        out += ["", f"Idle connections, MTU {mtu}: each proven by a 32-byte exchange when opened "
                "and again before closing; memory per connection = the forwarder's PSS growth + "
                "the kernel memory it added beyond direct routing's (client and server sockets), "
                "over the connections held. The socket forwarders need two open files per "
                f"connection and this machine's hard limit ({meta['nofile']:,}) caps them; the "
                "fast path holds no file descriptor per connection.", "",
                "| configuration | asked | held | KiB per connection (process + kernel) | "
                "forwarder PSS while holding, MiB |",
                "|---|---|---|---|---|"]
        for c in shown:
            if not c.measures("idle"):
                continue
            r = by_cfg[c.name]
            i = r.get("idle")
            asked = meta["idle_asked"].get(c.name)
            note = meta["idle_notes"].get(c.name)
            asked_cell = "—" if asked is None else f"{asked:,}" + (f" ({note})" if note else "")
            pss = None if not i or c.name == "direct" else i["pss_kib"] / 1024
            out.append(f"| {c.label} | {asked_cell} | {idle_held_cell(r)} | "
                       f"{idle_mem_cell(c.name, r)} | {cell(pss)} |")
        out += idle_detail_lines(by_cfg, shown)
        out += beside_table(mtu, by_cfg, shown)
        failures = [(c, k, e) for c in shown for k, e in by_cfg[c.name].get("errors", {}).items()]
        if failures:
            out += ["", "**Failed measurements:** " + "; ".join(f"{c.name} {k}: {e}" for c, k, e in failures)]
        dropped = []
        for c in shown:
            for order in CLOSE_ORDERS:
                n, kinds = failed_of(by_cfg[c.name], f"rate_{order}")
                if n:
                    dropped.append(f"{c.label}, {CLOSE_LABEL[order]}: {n:,}")
        if dropped:
            out += ["", "**Failed connections in the rate tests:** " + "; ".join(dropped)]
        counted, overflow = [], []
        for c in shown:
            for order in CLOSE_ORDERS:
                v = by_cfg[c.name].get(f"rate_{order}") or {}
                if counters_text(v):
                    counted.append(f"{c.label}, {CLOSE_LABEL[order]}: {counters_text(v)}")
                if tw_overflow_text(v):
                    overflow.append(f"{c.label}, {CLOSE_LABEL[order]}: {tw_overflow_text(v)}")
        if counted:
            out += ["", "Forwarder counters that moved in the rate tests (connections it ended "
                    "otherwise than cleanly, SYNs it passed to the kernel; the load generator "
                    "may have seen none of it): " + "; ".join(counted)]
        if overflow:
            out += ["", "TIME_WAIT sockets a namespace could not keep (client, server, root: the "
                    "forwarder's, shared with the rest of the machine) "
                    "(`TCPTimeWaitOverflow`, tcp_max_tw_buckets reached): a socket that closed "
                    "first and overflows in FIN_WAIT2 (its FIN acknowledged, the forwarder's not "
                    "yet sent) is freed at once, and the forwarder's FIN that follows is answered "
                    "with a reset, which the forwarder counts (client_reset, backend_reset) "
                    "although the load generator saw the connection complete: " +
                    "; ".join(overflow)]
        out.append("")
    if meta.get("notes"):
        out += ["Notes: " + " ".join(meta["notes"]), ""]
    targets = target_rows(results, by_topology, meta.get("topology", "gro-napi"),
                          meta.get("idle_only", False))
    if targets:
        out += ["### Targets: the fast path against the kernel path (and against itself with "
                "its access log on, a PROXY header to its backends and its flight recorder off), "
                "same run", "",
                "| MTU | target | measured | |", "|---|---|---|---|"]
        out += [f"| {m} | {t} | {v} | {STATUS[ok]} |" for m, t, v, ok in targets]
        out.append("")
    return "\n".join(out)


STATUS = {True: "met", False: "**missed**", None: "**not measured**"}


def access_log_table(mtu, by_cfg, shown):
    """Markdown lines: each configuration with an access log (bench/run's xdpfwd-xdp-log) beside
    the one it is compared with, per close order, and its log's lines against its connections."""
    rows = [c for c in shown if c.comparison == "access_log"]
    if not rows:
        return []
    out = ["", f"Access log cost, MTU {mtu}: the fast path with `logfile` in its rules file, in "
           "the connection-rate rows only, beside the same fast path without it (its "
           f"`{'`, `'.join(sorted({by_cfg[c.name]['baseline'] for c in rows}))}` rows above: the "
           "same options, ports of its own), on / off per close order, target ≥ "
           f"{LOG_RATE_TARGET}×. Control CPU: the control process's own CPU time over its life "
           "(its threads, the log's writer among them; not the workers), per connection "
           "accepted. After it stopped its log is counted: a whole line ends in a "
           "newline and has 9 tab-separated fields; expected = 2 × the connections it accepted "
           "(`show counters` just before its SIGTERM; an `opened` line and an end line each); "
           "dropped and write errors are its own `access log:` counters (printed on exit) (a full ring drops a record and counts "
           "it). A count other than expected, a torn line, a dropped record or a failed write "
           "fails the row.", "",
           "| configuration | server closes first: connections/s off → on (on / off) | client "
           "closes first: connections/s off → on (on / off) | whole lines | expected (2 × "
           "accepted) | torn | dropped | write errors | control CPU µs/connection |",
           "|---|---|---|---|---|---|---|---|---|"]
    for c in rows:
        r = by_cfg[c.name]
        cells = rate_ratio_cells(r, by_cfg.get(r["baseline"], {}))
        a = r.get("access_log")
        if a:
            cells += [f"{a['lines']:,}", f"{a['expected']:,} ({a['accepted']:,} accepted)",
                      f"{a['torn']:,}", f"{a['dropped']:,}", f"{a['write_errors']:,}",
                      cell(a.get("control_us_per_conn"), 2)]
            if not a["ok"]:
                cells[2] = f"**FAILED: {a['lines']:,}**"
        else:
            why = r.get("errors", {}).get("access_log")
            cells += ["**FAILED**" if why else "—", "—", "—", "—", "—", "—"]
        out.append(f"| {c.label} | " + " | ".join(cells) + " |")
    return out + time_wait_lines(rows, by_cfg)


def rate_ratio_cells(r, base):
    """Per close order, a configuration's connections/s against its baseline's (the same fast
    path without the one thing it changes): "off → on (on / off)"."""
    cells = []
    for order in CLOSE_ORDERS:
        on, off = rate_of(r, f"rate_{order}"), rate_of(base, f"rate_{order}")
        ratio = f"{on / off:.2f}×" if on and off else "—"
        cells.append(f"{cell(off, 0)} → {cell(on, 0)} ({ratio})")
    return cells


def rate_ratio_targets(mtu, name, r, by, what, goal):
    """Target rows: per close order, `name`'s connections/s `what` (e.g. "with the access log")
    at least `goal` × its baseline's without."""
    rows = []
    base = by.get(r["baseline"], {})
    for order in CLOSE_ORDERS:
        row = (f"{name}: connections/s {what} ≥ {goal}× without ({r['baseline']}), "
               f"{CLOSE_LABEL[order]}")
        on, off = rate_of(r, f"rate_{order}"), rate_of(base, f"rate_{order}")
        if not on or not off:
            rows.append((mtu, row, "not measured", None))
        else:
            v = on / off
            rows.append((mtu, row, f"{on:,.0f} vs {off:,.0f} = {v:.2f}×", v >= goal))
    return rows


def time_wait_lines(rows, by_cfg):
    """Markdown lines: for each compared configuration in `rows`, the TIME_WAIT sockets its rate
    rows began with against its baseline's (bench/run's match_time_wait)."""
    out = []
    for c in rows:
        r = by_cfg[c.name]
        starts = []
        for order in CLOSE_ORDERS:
            m = (r.get(f"rate_{order}") or {}).get("time_wait_match")
            if not m:
                continue
            s = m["start"]
            text = f"{CLOSE_LABEL[order]}: client {s['client']:,} / server {s['server']:,}"
            if m.get("target"):
                t = m["target"]
                text += (f" against {t['client']:,} / {t['server']:,} when {r['baseline']}'s "
                         f"began" + (f", after {m['waited_s']:.0f} s" if m["waited_s"] >= 1 else "")
                         + ("" if m["matched"] else " (**more**: not matched)"))
            else:
                text += f" ({m.get('why', 'nothing to match')})"
            starts.append(text)
        if starts:
            out += ["", f"TIME_WAIT sockets in the peers' namespaces when {c.name}'s rows began "
                    "(it waits, up to 65 s and not with --quick, until there are no more than "
                    "when the same rows of the configuration it is compared with began: a table "
                    "still full from an earlier row frees each closing socket at once and speeds "
                    "the client's connect()s): " + "; ".join(starts) + "."]
    return out


def compared_metrics(on, off):
    """(metric, row key, value on, value off, kind) for the rows a compared configuration
    shares with its baseline; `on` and `off` are results; kind: "ratio" (compared as on / off)
    or the latency percentile (compared as on − off)."""
    rows = []
    for key, what in (("gbps_p1", "iperf3 -P 1 Gbit/s"), ("gbps_p8", "iperf3 -P 8 Gbit/s")):
        rows.append((what, key, on.get(key), off.get(key), "ratio"))
    for key, what in (("rr1", "rr 1 connection"), ("rr64", "rr 64 connections")):
        for p in ("p50", "p99"):
            rows.append((f"{what} {p} µs", key, lat(on, key, p), lat(off, key, p), p))
    for order in CLOSE_ORDERS:
        key = f"rate_{order}"
        rows.append((f"connections/s, {CLOSE_LABEL[order]}", key, rate_of(on, key),
                     rate_of(off, key), "ratio"))
    return rows


def compared_cells(a, b, kind):
    """The a-against-b cell of a compared metric: a / b for throughput and rates, a − b µs for
    latency; and the number itself (None when either side is missing)."""
    if a is None or b is None or (kind == "ratio" and not b):
        return "—", None
    if kind == "ratio":
        return f"{a / b:.3f}×", a / b
    return f"{a - b:+,.1f} µs", a - b


def recorder_verdict(kind, v):
    """The recorder target for one metric: (target text, met) or None where it has none."""
    if kind == "ratio":
        return f"≥ {RECORDER_RATIO_TARGET}×", None if v is None else v >= RECORDER_RATIO_TARGET
    if kind == "p99":
        return f"≤ +{RECORDER_P99_TARGET_US:g} µs", None if v is None else v <= RECORDER_P99_TARGET_US
    return None


def recorder_table(mtu, by_cfg, shown):
    """Markdown lines: the fast path with its flight recorder on (its baseline, xdpfwd-xdp)
    against off (xdpfwd-xdp-norec), per metric, with the #29 targets."""
    out = []
    for c in shown:
        if c.comparison != "recorder":
            continue
        off = by_cfg[c.name]
        on = by_cfg.get(off["baseline"], {})
        out += ["", f"Flight recorder cost, MTU {mtu}: the fast path with its flight recorder on "
                f"(`{off['baseline']}`, the default) against the same fast path with it off "
                f"(`{c.name}`: `--tune recorder=off`), same run, same options, ports of their "
                f"own. Targets (#29): on ≥ {RECORDER_RATIO_TARGET}× off in bulk and "
                f"connections/s, rr p99 on − off ≤ {RECORDER_P99_TARGET_US:g} µs (p50 shown, no "
                "target).", "",
                f"| metric | recorder on ({off['baseline']}) | off ({c.name}) | on / off, or "
                "on − off | target | |", "|---|---|---|---|---|---|"]
        for what, key, a, b, kind in compared_metrics(on, off):
            diff, v = compared_cells(a, b, kind)
            verdict = recorder_verdict(kind, v)
            digits = 2 if key.startswith("gbps") else 0 if key in RATE_ROWS else 1
            target, status = (verdict[0], STATUS[verdict[1]]) if verdict else ("none", "")
            out.append(f"| {what} | {cell(a, digits)} | {cell(b, digits)} | {diff} | {target} | "
                       f"{status} |")
    return out


def recorder_targets(mtu, by):
    """Target rows for the flight recorder's cost (recorder_table's verdicts)."""
    rows = []
    for name, off in by.items():
        if off.get("comparison") != "recorder":
            continue
        on = by.get(off["baseline"], {})
        for what, key, a, b, kind in compared_metrics(on, off):
            diff, v = compared_cells(a, b, kind)
            verdict = recorder_verdict(kind, v)
            digits = 2 if key.startswith("gbps") else 0 if key in RATE_ROWS else 1
            if verdict:
                rows.append((mtu, f"flight recorder on vs off ({off['baseline']} vs {name}), "
                             f"{what}: {verdict[0]}", "not measured" if v is None else
                             f"{cell(a, digits)} vs {cell(b, digits)} = {diff}", verdict[1]))
    return rows


def watched_table(mtu, by_cfg, shown):
    """Markdown lines: the fast path's bulk and rr rows while watched (xdpfwd-xdp-watched:
    idle connections held through it, GET /metrics and show sess 10 times a second) against
    the same rows unwatched (its baseline), and what the watcher saw."""
    out = []
    for c in shown:
        if c.comparison != "watched":
            continue
        w = by_cfg[c.name]
        base = by_cfg.get(w["baseline"], {})
        watch = w.get("watch")
        held = f"{watch['held']['requested']:,}" if watch else "the asked"
        out += ["", f"Watched, MTU {mtu}: the fast path with `--metrics` on (`{c.name}`), its "
                f"bulk and request/response rows run while {held} idle connections were held "
                "open through it (`hold`, as the idle row) and a watcher (a thread of bench/run "
                f"on the load generators' CPU) did, {watch['hz'] if watch else 10} times a "
                "second, one GET /metrics and one `show sess` (every open connection) over the "
                f"control socket; against the same fast path unwatched (`{w['baseline']}`, same "
                "run). Target (#29): rr p99 and bulk within noise.", "",
                f"| metric | {w['baseline']} | watched ({c.name}) | watched / unwatched, or "
                "watched − unwatched |", "|---|---|---|---|"]
        for what, key, a, b, kind in compared_metrics(w, base):
            if key in RATE_ROWS:
                continue  # no connection-rate rows watched
            digits = 2 if key.startswith("gbps") else 1
            why = w.get("errors", {})
            shown_a = cell(a, digits) if a is not None or key not in why else "**not measured**"
            out.append(f"| {what} | {cell(b, digits)} | {shown_a} | {compared_cells(a, b, kind)[0]} |")
        out += ["", "| watcher | answers (failed) | median ms | max ms | connections listed, "
                "fewest / most |", "|---|---|---|---|---|"]
        if not watch:
            why = w.get("errors", {}).get("watch", "not run")
            out.append(f"| GET /metrics | **not measured** ({why}) | — | — | — |")
            out.append(f"| show sess | **not measured** ({why}) | — | — | — |")
            continue
        m, q, h = watch["metrics"], watch["sess"], watch["held"]
        listed = (f"{q['rows_min']:,} / {q['rows_max']:,}" if q["rows_min"] is not None else "—")
        if q["rows_min"] is not None and q["rows_min"] < h["requested"]:
            listed = f"**{listed}** (fewer than the {h['requested']:,} held)"
        out.append(f"| GET /metrics | {m['answers']:,} ({m['failures']}) | "
                   f"{cell(m['median_ms'], 2)} | {cell(m['max_ms'], 2)} | n/a ({m['bytes'] or 0:,} "
                   "bytes an answer) |")
        out.append(f"| show sess | {q['answers']:,} ({q['failures']}) | {cell(q['median_ms'], 2)} "
                   f"| {cell(q['max_ms'], 2)} | {listed} |")
        out += ["", f"Watched for {watch['seconds']} s; idle connections: {h['held']:,} of "
                f"{h['requested']:,} proven at close (opened and proven in {h['open_seconds']} s)"
                + (f"; **{w['errors']['watch']}**" if w.get("errors", {}).get("watch") else "")
                + "."]
    return out


def access_log_targets(mtu, by):
    """Target rows for each configuration with an access log: its connections/s against its
    baseline's per close order (≥ LOG_RATE_TARGET×), and its lines (2 per connection accepted,
    every one whole, none dropped)."""
    rows = []
    for name, r in by.items():
        if r.get("comparison") != "access_log":
            continue
        rows += rate_ratio_targets(mtu, name, r, by, "with the access log", LOG_RATE_TARGET)
        row = f"{name}: 2 whole access-log lines per connection accepted, none torn or dropped"
        a = r.get("access_log")
        if not a:
            rows.append((mtu, row, "not measured", None))
        else:
            rows.append((mtu, row, f"{a['lines']:,} of {a['expected']:,} expected, torn "
                         f"{a['torn']:,}, dropped {a['dropped']:,}", a["ok"]))
    return rows


def proxy_table(mtu, by_cfg, shown):
    """Markdown lines: each configuration that sends a PROXY header to its backends (bench/run's
    xdpfwd-xdp-proxy) beside the one it is compared with, per close order, and the headers its
    servers read against the connections they accepted."""
    rows = [c for c in shown if c.comparison == "proxy"]
    if not rows:
        return []
    out = ["", f"PROXY protocol cost, MTU {mtu}: the fast path with `[proxy=v2]` on its rules "
           "(every backend connection starts with a PROXY v2 header naming the client) and its "
           "servers `serve --accept-proxy` (each reads and checks the header before the "
           "request, and closes a connection without a valid one), in the connection-rate rows "
           "only, beside the same fast path without it (its "
           f"`{'`, `'.join(sorted({by_cfg[c.name]['baseline'] for c in rows}))}` rows above: the "
           "same options, ports of its own), on / off per close order, target ≥ "
           f"{PROXY_RATE_TARGET}× (#30). Headers read: the servers' own counts (their summaries "
           "on exit), warm-up included, against the connections they accepted; a header "
           "malformed or missing, or a connection without one, fails the row.", "",
           "| configuration | server closes first: connections/s off → on (on / off) | client "
           "closes first: connections/s off → on (on / off) | headers read / connections, "
           "server closes first | headers read / connections, client closes first | headers "
           "malformed or missing |",
           "|---|---|---|---|---|---|"]
    for c in rows:
        r = by_cfg[c.name]
        cells = rate_ratio_cells(r, by_cfg.get(r["baseline"], {}))
        b = r.get("backend")
        if b:
            bad = 0
            for order in CLOSE_ORDERS:
                got = b[f"rate_{order}"]
                text = f"{got['proxy_headers']:,} / {got['connections']:,}"
                cells.append(text if got["proxy_headers"] == got["connections"]
                             else f"**FAILED: {text}**")
                bad += got["errors"].get("proxy", 0)
            cells.append(f"{bad:,}" if not bad else f"**{bad:,}**")
        else:
            why = r.get("errors", {}).get("backend")
            cells += ["**FAILED**" if why else "—", "—", "—"]
        out.append(f"| {c.label} | " + " | ".join(cells) + " |")
    return out + time_wait_lines(rows, by_cfg)


def proxy_targets(mtu, by):
    """Target rows for each configuration that sends a PROXY header to its backends: its
    connections/s against its baseline's per close order (≥ PROXY_RATE_TARGET×), and its
    servers' headers (one valid header per connection accepted)."""
    rows = []
    for name, r in by.items():
        if r.get("comparison") != "proxy":
            continue
        rows += rate_ratio_targets(mtu, name, r, by, "with a PROXY v2 header", PROXY_RATE_TARGET)
        row = f"{name}: a valid PROXY v2 header read first on every backend connection"
        b = r.get("backend")
        if not b:
            rows.append((mtu, row, "not measured", None))
        else:
            read = sum(b[f"rate_{o}"]["proxy_headers"] for o in CLOSE_ORDERS)
            accepted = sum(b[f"rate_{o}"]["connections"] for o in CLOSE_ORDERS)
            bad = sum(b[f"rate_{o}"]["errors"].get("proxy", 0) for o in CLOSE_ORDERS)
            rows.append((mtu, row, f"{read:,} headers for {accepted:,} connections, "
                         f"{bad:,} malformed or missing", b["ok"]))
    return rows


def derive(results):
    """Memory per idle connection of each forwarder that held every connection asked: its own
    PSS growth plus the kernel memory it added beyond what direct routing (client and server
    sockets only) adds for as many connections, over the connections held."""
    for by in results.values():
        d = by.get("direct", {})
        base = None
        if idle_ok(d):
            base = d["idle"]["kernel_kib"] / d["idle"]["held"]
            d["idle_kernel_kib_per_conn"] = base
        for name, r in by.items():
            if name == "direct" or not idle_ok(r):
                continue
            i = r["idle"]
            kernel = i["kernel_kib"] - (base * i["held"] if base is not None else 0)
            r["idle_process_kib_per_conn"] = max(0.0, i["process_kib"]) / i["held"]
            r["idle_kernel_kib_per_conn"] = max(0.0, kernel) / i["held"]
            r["idle_kib_per_conn"] = r["idle_process_kib_per_conn"] + r["idle_kernel_kib_per_conn"]
            r["idle_baseline_subtracted"] = base is not None


def topology_targets(mtu, by_topology):
    """The fair bulk targets at one MTU: on each topology of TOPOLOGY_TARGETS that ran, the fast
    path's -P 1 and -P 8 against the kernel path's on the same topology."""
    rows = []
    for kind, goal in TOPOLOGY_TARGETS.items():
        by = by_topology.get(kind)
        if not by or "xdpfwd-xdp" not in by or "xdpfwd-kernel" not in by:
            continue  # --quick: the fast path alone
        x, k = by["xdpfwd-xdp"], by["xdpfwd-kernel"]
        for key, streams in (("gbps_p1", 1), ("gbps_p8", 8)):
            row = f"{TOPOLOGY_LABEL[kind]}: iperf3 -P {streams} ≥ {goal}× kernel path"
            a, b = x.get(key), k.get(key)
            if a is None or not b:
                rows.append((mtu, row, "not measured", None))
            else:
                rows.append((mtu, row, f"{a / b:.2f}× ({a:.2f} vs {b:.2f} Gbit/s)", a / b >= goal))
    return rows


# The IPv6 pass (issue #31 item 5): the rows it runs on both paths, and how far each IPv6 row's
# fast/kernel ratio may be from the IPv4 row's of the same run.
IPV6_ROWS = ("gbps_p1", "gbps_p8", "rr1", "idle", "rate_server", "rate_client")
# With --quick one row of each kind the pass measures (the smoke run's: each measurement's
# IPv6 addressing exercised once), the connection rate on the fast path only: the kernel path's
# backend legs would hold their ports for a minute after it (bench/run's drain_time_wait), at
# the end of the run.
IPV6_QUICK_ROWS = {"kernel": ("gbps_p8", "rr1", "idle"),
                   "xdp": ("gbps_p8", "rr1", "idle", "rate_client")}
IPV6_TOLERANCE = 0.10
# Steering reasons that would mean a rule's IPv6 flow went to the kernel (its SYN passed).
IPV6_PASSED_FLOW = ("pass_kernel_owns", "pass_flow_table_full", "pass_no_socket",
                    "pass_not_listener")


def idle_raw_kib(r):
    """KiB per idle connection, the forwarder's PSS growth plus all the kernel memory added
    (nothing subtracted: the IPv6 pass has no direct routing to subtract); None unless every
    connection asked was held."""
    if not idle_ok(r):
        return None
    i = r["idle"]
    return (max(0.0, i["process_kib"]) + max(0.0, i["kernel_kib"])) / i["held"]


def ipv6_figures(r):
    """(what, value, unit) of one configuration's results, in the IPv6 pass's rows."""
    return [("iperf3 -P 1", r.get("gbps_p1"), "Gbit/s"),
            ("iperf3 -P 8", r.get("gbps_p8"), "Gbit/s"),
            ("request/response, 1 connection, p50", lat(r, "rr1", "p50"), "µs"),
            ("request/response, 1 connection, p99", lat(r, "rr1", "p99"), "µs"),
            ("idle connections held: memory per connection (process + kernel)", idle_raw_kib(r),
             "KiB"),
            *[(f"connections/s, {CLOSE_LABEL[o]}", rate_of(r, f"rate_{o}"), "/s")
              for o in CLOSE_ORDERS]]


def ipv6_table(v4, v6, mtu, topology):
    """The IPv6 pass against the same run's IPv4 rows: per row the kernel path and the fast path
    over IPv6, their ratio, the IPv4 rows' ratio, and whether the two ratios are within
    IPV6_TOLERANCE of each other. v4 and v6: configuration -> results (xdpfwd-kernel and
    xdpfwd-xdp). Returns (markdown, target rows as target_rows gives them)."""
    label = f"{mtu}, IPv6"
    k6, x6 = v6.get("xdpfwd-kernel", {}), v6.get("xdpfwd-xdp", {})
    k4, x4 = v4.get("xdpfwd-kernel", {}), v4.get("xdpfwd-xdp", {})
    lines = [f"## IPv6: the fast path against the kernel path over IPv6 (MTU {mtu}, "
             f"{TOPOLOGY_LABEL[topology]})", "",
             "Each row's fast/kernel ratio over IPv6 beside the same ratio over IPv4 in this run "
             f"(the main table's rows); the target is the two within {IPV6_TOLERANCE:.0%} of "
             "each other. Idle memory here is everything the forwarder and the kernel added, "
             "nothing subtracted, for both families.", "",
             "| row | kernel path | fast path | fast / kernel, IPv6 | fast / kernel, IPv4 | "
             "IPv6 / IPv4 |", "|---|---|---|---|---|---|"]
    targets = []
    for (what, k, unit), (_, x, _), (_, kv4, _), (_, xv4, _) in zip(
            ipv6_figures(k6), ipv6_figures(x6), ipv6_figures(k4), ipv6_figures(x4)):
        r6 = x / k if x is not None and k else None
        r4 = xv4 / kv4 if xv4 is not None and kv4 else None
        off = r6 / r4 if r6 is not None and r4 else None
        shown = [("—" if v is None else f"{cell(v)} {unit}") for v in (k, x)]
        lines.append(f"| {what} | {shown[0]} | {shown[1]} | "
                     f"{'—' if r6 is None else f'{r6:.2f}×'} | "
                     f"{'—' if r4 is None else f'{r4:.2f}×'} | "
                     f"{'—' if off is None else f'{off:.2f}'} |")
        row = f"IPv6 {what}: fast/kernel within {IPV6_TOLERANCE:.0%} of IPv4's"
        if off is None:
            targets.append((label, row, "not measured", None))
        else:
            targets.append((label, row, f"{r6:.2f}× vs {r4:.2f}×",
                            abs(off - 1) <= IPV6_TOLERANCE + 1e-9))
    for name, r in (("kernel path", k6), ("fast path", x6)):
        for o in CLOSE_ORDERS:
            n, kinds = failed_of(r, f"rate_{o}")
            row = f"IPv6 {name}: zero failed connections, {CLOSE_LABEL[o]}"
            targets.append((label, row, "not measured" if n is None else
                            f"{n:,}" + (f" ({kinds})" if kinds else ""),
                            None if n is None else n == 0))
    passed = x6.get("steer_after")
    row = "IPv6: no rule's flow passed to the kernel (" + ", ".join(IPV6_PASSED_FLOW) + ")"
    if passed is None:
        targets.append((label, row, "not measured", None))
    else:
        bad = {k: passed.get(k, 0) for k in IPV6_PASSED_FLOW if passed.get(k, 0)}
        taken = passed.get("redirect_new_flow", 0)
        targets.append((label, row, f"{taken:,} flows taken, passed: {bad or 'none'}",
                        taken > 0 and not bad))
    lines += ["", "| MTU | target | measured | |", "|---|---|---|---|"]
    lines += [f"| {m} | {t} | {v} | {STATUS[ok]} |" for m, t, v, ok in targets]
    return "\n".join(lines) + "\n", targets


def target_rows(results, by_topology=None, topology="gro-napi", idle_only=False):
    """(MTU, target, measured, met): met is True, False, or None when it was not measured.
    idle_only (bench/run --idle-only): the idle connections' rows only."""
    rows = []
    for mtu in (by_topology or {}):
        rows += topology_targets(mtu, by_topology[mtu])
    for mtu, by in results.items():
        x, k, d = by.get("xdpfwd-xdp"), by.get("xdpfwd-kernel"), by.get("direct")
        if not x or not k:
            continue
        big = int(mtu) > 1500

        def ratio(row, a, b, goal, higher=True):
            if a is None or b is None or b == 0:
                rows.append((mtu, row, "not measured", None))
                return
            v = a / b
            rows.append((mtu, row, f"{v:.2f}×", v >= goal if higher else v <= goal))

        goal = 1.5 if big else 1.0
        on = TOPOLOGY_LABEL[topology]
        ratio(f"{on}: iperf3 -P 1 ≥ {goal}× kernel path", x.get("gbps_p1"), k.get("gbps_p1"), goal)
        ratio(f"{on}: iperf3 -P 8 ≥ {goal}× kernel path", x.get("gbps_p8"), k.get("gbps_p8"), goal)
        for order in CLOSE_ORDERS:
            key, when = f"rate_{order}", CLOSE_LABEL[order]
            fx, fk = failed_of(x, key)[0], failed_of(k, key)[0]
            if fx is None or fk is None:
                rows.append((mtu, f"zero failed connections on both paths, {when}", "not measured", None))
            else:
                rows.append((mtu, f"zero failed connections on both paths, {when}",
                             f"fast path {fx:,}, kernel path {fk:,}", fx == 0 and fk == 0))
            ratio(f"connections/s ≥ 1.5× kernel path, {when}", rate_of(x, key), rate_of(k, key), 1.5)
            lx, lk = load_of(x, key), load_of(k, key)
            row = f"forwarder CPU per connection ≤ 1/3 of the kernel path's, {when}"
            if not lx or not lk or lx.get("error") or lk.get("error") or \
                    lx.get("us_per_conn") is None or not lk.get("us_per_conn"):
                why = (lx or {}).get("error") and "fast path's busy time not measured"
                rows.append((mtu, row, why or "not measured", None))
            elif lk.get("core_us_per_conn") and lx.get("core_us_per_conn") is not None:
                # Judged on everything each costs on its core: the kernel path's CPU time plus
                # the interrupt work on its core, against the fast path's busy time (which holds
                # that work); its CPU time alone is shown beside.
                v = lx["core_us_per_conn"] / lk["core_us_per_conn"]
                alone = lx["us_per_conn"] / lk["us_per_conn"]
                rows.append((mtu, row, f"{lx['core_us_per_conn']:,.1f} {lx['kind']} vs "
                             f"{lk['us_per_conn']:,.1f} {lk['kind']} + "
                             f"{lk['core_us_per_conn'] - lk['us_per_conn']:,.1f} irq on its core "
                             f"µs = {v:.2f} (against its CPU time alone: {alone:.2f})", v <= 1 / 3))
            else:
                v = lx["us_per_conn"] / lk["us_per_conn"]
                rows.append((mtu, row, f"{lx['us_per_conn']:,.1f} {lx['kind']} vs "
                             f"{lk['us_per_conn']:,.1f} {lk['kind']} µs = {v:.2f}", v <= 1 / 3))
            # Issue #32 item 5: the worker's busy time less its TX syscalls (on veth the
            # receivers' stacks run there, as they do in the kernel path's softirq).
            own = (lx or {}).get("own_us_per_conn")
            row = f"the fast path worker's own work ≤ 5 µs per connection, {when}"
            if own is None:
                rows.append((mtu, row, "not measured", None))
            else:
                rows.append((mtu, row, f"{own:,.1f} µs own + {lx['tx_syscall_us_per_conn']:,.1f} "
                             f"in TX syscalls = {lx['us_per_conn']:,.1f} busy", own <= 5))
        if d:
            for p in ("p50", "p99"):
                dx, dk, dd = lat(x, "rr1", p), lat(k, "rr1", p), lat(d, "rr1", p)
                if None not in (dx, dk, dd) and dk > dd:
                    v = (dx - dd) / (dk - dd)
                    rows.append((mtu, f"added latency {p} ≤ 1/3 of the kernel path's",
                                 f"+{dx - dd:.1f} vs +{dk - dd:.1f} µs = {v:.2f}", v <= 1 / 3))
        sx, sk = x.get("syscalls_per_mib"), k.get("syscalls_per_mib")
        goal = 10 if big else 4
        if sx is not None and sk is not None:
            v = sk / sx if sx else float("inf")
            rows.append((mtu, f"≥ {goal}× fewer syscalls/MiB", f"{sx:.1f} vs {sk:.1f} = {v:.2f}×", v >= goal))
            rows.append((mtu, "syscalls/MiB ≤ the kernel path's, under strace -c -f (-P 1)",
                         f"{sx:.1f} vs {sk:.1f}", sx <= sk))
        counted = [(x.get(f"syscalls_per_mib_counted_p{n}"), k.get(f"syscalls_per_mib_counted_p{n}"))
                   for n in (1, 8)]
        if all(c is not None for pair in counted for c in pair):
            rows.append((mtu, "syscalls/MiB ≤ the kernel path's, counted by perf (-P 1, -P 8)",
                         "; ".join(f"{cx:.1f} vs {ck:.1f}" for cx, ck in counted),
                         all(cx <= ck for cx, ck in counted)))
        elif x.get("gbps_p1") is not None:
            rows.append((mtu, "syscalls/MiB ≤ the kernel path's, counted by perf (-P 1, -P 8)",
                         "not measured", None))
        row = f"≤ 2 KiB per idle connection (process + kernel) at ≥ {IDLE_TARGET:,} held"
        i, m = x.get("idle"), x.get("idle_kib_per_conn")
        if not i:
            rows.append((mtu, row, "not measured", None))
        elif not idle_ok(x):
            rows.append((mtu, row, f"FAILED: {i['held']:,} of {i['requested']:,} held", None))
        elif i["held"] < IDLE_TARGET:
            rows.append((mtu, row, f"{m:.2f} KiB, but at {i['held']:,} held", None))
        else:
            rows.append((mtu, row, f"{m:.2f} KiB at {i['held']:,}", m <= 2))
    # The access log's and the PROXY header's rows last within each MTU (a stable sort keeps the
    # rest in order).
    for mtu, by in results.items():
        rows += idle_targets(mtu, by)
        rows += kernel_haproxy_targets(mtu, by)
        rows += access_log_targets(mtu, by)
        rows += proxy_targets(mtu, by)
        rows += recorder_targets(mtu, by)
        rows += churn_targets(mtu, by)
    mtus = list(results) + [m for m in (by_topology or {}) if m not in results]
    rows.sort(key=lambda t: mtus.index(t[0]))
    if idle_only:
        rows = [r for r in rows if "idle connection" in r[1]]
    return rows


def kernel_haproxy_targets(mtu, by):
    """Issue #32 item 6: the kernel path never falls behind HAProxy in connections/s, its p99
    within 2x of HAProxy's, in both close orders of the same run."""
    k, h = by.get("xdpfwd-kernel"), by.get("haproxy")
    rows = []
    if not k or not h:
        return rows
    for order in CLOSE_ORDERS:
        key, when = f"rate_{order}", CLOSE_LABEL[order]
        row = f"kernel path connections/s ≥ HAProxy's, p99 ≤ 2× HAProxy's, {when}"
        rk, rh, pk, ph = rate_of(k, key), rate_of(h, key), lat(k, key, "p99"), lat(h, key, "p99")
        if None in (rk, rh, pk, ph) or not rh or not ph:
            rows.append((mtu, row, "not measured", None))
            continue
        rows.append((mtu, row, f"{rk:,.0f} vs {rh:,.0f}/s = {rk / rh:.2f}×; p99 {pk:,.0f} vs "
                     f"{ph:,.0f} µs = {pk / ph:.2f}×", rk >= rh and pk <= 2 * ph))
    return rows


# --- the churn rows (#30: failover) ------------------------------------------------------------

# Passive health's `fall` (forwarder/backend_health.h, PassiveHealth::kFall): failed handshakes
# in a row that leave a backend out of the picks. The target: at most this many per death.
CHURN_FALL = 3


def churn_served_text(c):
    """Connections each backend served in a churn row; the killed one per life."""
    parts = []
    for b in c["backends"]:
        lives = b["lives"]
        counts = ["?" if x["connections"] is None else f"{x['connections']:,}" for x in lives]
        if len(lives) == 1:
            parts.append(f"{b['port']}: {counts[0]}")
        else:
            parts.append(f"{b['port']}: {' / '.join(counts)} ({len(lives)} lives)")
    return "; ".join(parts)


def churn_deaths_text(c):
    """"3+1, 4+0": each death's failed handshakes soon after the kill + in the rest of it."""
    return ", ".join(f"{d['at_kill']['failed_handshakes']}+"
                     f"{d['rest_of_death']['failed_handshakes']}" for d in c["per_death"])


def churn_text(c):
    """A churn row (bench/run's Bench.churn) in words."""
    k = c["counters"]
    per = c["failed_handshakes_per_death"]
    return (f"{c['connections']:,} connections, {c['failed']:,} failed {c['errors']}, "
            f"{cell(c['connections_per_sec'], 0)}/s; {c['deaths']} deaths; failed handshakes "
            f"{c['failed_handshakes']:,} ({cell(per, 1)} per death: failovers "
            f"{k['backend_failovers']:,}, refused {k['backend_refused']:,}, timed out "
            f"{k['backend_timeout']:,}; per death after the kill + later: "
            f"{churn_deaths_text(c)}), marked down {k['backends_marked_down']:,}, backend resets "
            f"{k['backend_reset']:,} ({c['resets_at_kills']:,} at the kills), retried "
            f"{k.get('backend_retries', 0):,}; served "
            f"{churn_served_text(c)}")


def churn_table(mtu, by_cfg, shown):
    """Markdown lines: the churn rows (bench/run's xdpfwd-*-churn), one per path."""
    rows = [c for c in shown if c.measures("churn")]
    if not rows:
        return []
    first = next((by_cfg[c.name]["churn"] for c in rows if "churn" in by_cfg[c.name]), None)
    what = ("" if first is None else
            f" {first['seconds']} s of connection rate ({first['concurrency']} at a time, the "
            f"server closing first) while the third backend is killed (SIGKILL) after each "
            f"{first['up_s']:g} s up and started again after {first['down_s']:g} s down; rule "
            f"options: {first['rule_options'] or 'none (passive health only)'}")
    settle = f"{first['settle_s']:g}" if first else "0.5"
    out = ["", f"Backend churn, MTU {mtu} (#30, failover): one rule with three backends "
           f"(`backend` lines),{what}. Failed handshakes: xdpfwd's own count of backend "
           "handshakes that failed (`backend_failovers`, retried on another backend, plus "
           "`backend_refused` and `backend_timeout`, which ended the client's connection); "
           f"target: no client connection fails, at most {CHURN_FALL} (passive health's "
           "`fall`) failed handshakes per death. Per death: the failed handshakes in the first "
           f"{settle} s after the kill + in the rest of the death (passive health leaves a "
           "backend out for 2 s, then one connection tries it: one more per 2 s it stays "
           "dead). Backend resets: "
           "connections whose backend leg was open when it reset and reached the client, at the "
           "kills / at other times (a kill resets what the killed server had accepted or was "
           "accepting: failover cannot move those, as the request went to the dead backend); "
           "retried: those that `[retry-on=empty-response]` sent to another backend instead "
           "(`backend_retries`: the killed backend had not answered). Served: each backend's connections by its own count "
           "(the killed one per life: up to its last report, at most 0.1 s before it was "
           "killed, then its summary).", "",
           "| configuration | connections | failed | connections/s | deaths | failed handshakes "
           "(per death) | per death: after the kill + later | failovers / refused / timed out "
           "| marked down | backend resets at the kills / other times; retried | served per "
           "backend |",
           "|---|---|---|---|---|---|---|---|---|---|---|"]
    for c in rows:
        r = by_cfg[c.name]
        ch = r.get("churn")
        if not ch:
            why = r.get("errors", {}).get("churn") or r.get("errors", {}).get("start")
            out.append(f"| {c.label} | **{'FAILED' if why else 'not measured'}** |" +
                       " — |" * 9)
            continue
        k = ch["counters"]
        per = ch["failed_handshakes_per_death"]
        per_cell = cell(per, 1)
        if per is not None and per > CHURN_FALL:
            per_cell = f"**{per_cell}**"
        kinds = ", ".join(f"{e} {n:,}" for e, n in ch["errors"].items() if n)
        failed = f"**{ch['failed']:,}** ({kinds})" if ch["failed"] else "0"
        deaths = churn_deaths_text(ch)
        at_kills = ch["resets_at_kills"]
        out.append(f"| {c.label} | {ch['connections']:,} | {failed} | "
                   f"{cell(ch['connections_per_sec'], 0)} | {ch['deaths']} | "
                   f"{ch['failed_handshakes']:,} ({per_cell}) | {deaths or '—'} | "
                   f"{k['backend_failovers']:,} / {k['backend_refused']:,} / "
                   f"{k['backend_timeout']:,} | {k['backends_marked_down']:,} | "
                   f"{at_kills:,} / {k['backend_reset'] - at_kills:,}; "
                   f"{k.get('backend_retries', 0):,} | "
                   f"{churn_served_text(ch)} |")
    return out


def churn_targets(mtu, by):
    """Target rows for each churn row: no client connection failed, at most CHURN_FALL failed
    handshakes per death, and the killed backend served again after every restart."""
    rows = []
    for name, r in by.items():
        if "churn" not in r and "churn" not in r.get("errors", {}):
            continue
        c = r.get("churn")
        row_failed = f"{name}: 0 failed client connections while 1 of 3 backends dies and restarts"
        row_fall = (f"{name}: ≤ {CHURN_FALL} (fall) failed backend handshakes per death, "
                    "xdpfwd's count")
        row_back = f"{name}: the killed backend serves again after each restart"
        if not c:
            rows += [(mtu, row, "not measured", None) for row in (row_failed, row_fall, row_back)]
            continue
        why = (f" (xdpfwd: {c['resets_at_kills']:,} backend legs reset at the kills, open on "
               "the killed backend)" if c["failed"] else "")
        rows.append((mtu, row_failed, f"{c['failed']:,} of {c['connections']:,}{why}",
                     c["failed"] == 0))
        per = c["failed_handshakes_per_death"]
        if per is None:
            rows.append((mtu, row_fall, "no death", None))
        else:
            rows.append((mtu, row_fall, f"{c['failed_handshakes']:,} in {c['deaths']} deaths "
                         f"= {per:.1f}", per <= CHURN_FALL))
        restarts = c["backends"][-1]["lives"][1:]
        counts = [x["connections"] for x in restarts]
        rows.append((mtu, row_back, ", ".join("?" if n is None else f"{n:,}" for n in counts) or
                     "no restart", None if not counts or None in counts else all(counts)))
    return rows


def chart(results, configs, outdir):
    """A PNG with throughput, latency and connection rate per configuration (gnuplot)."""
    if shutil.which("gnuplot") is None:
        log("gnuplot not installed: no chart")
        return None
    data = os.path.join(outdir, "chart.dat")
    mtus = list(results)
    with open(data, "w") as f:
        f.write("# config " + " ".join(f"p1_{m} p8_{m} lat50_{m} lat99_{m} rate_server_{m} "
                                       f"rate_client_{m}" for m in mtus) + "\n")
        for c in configs:
            vals = []
            for m in mtus:
                r = results[m].get(c.name, {})
                vals += [r.get("gbps_p1"), r.get("gbps_p8"), lat(r, "rr1", "p50"), lat(r, "rr1", "p99")]
                vals += [rate_of(r, f"rate_{o}") / 1000 if rate_of(r, f"rate_{o}") else None
                         for o in CLOSE_ORDERS]
            f.write(f'"{c.name}" ' + " ".join("NaN" if v is None else f"{v:.3f}" for v in vals) + "\n")
    png = os.path.join(outdir, "chart.png")
    plots = []
    for title, offs, ylabel in (("throughput (iperf3)", (0, 1), "Gbit/s"),
                                ("request/response latency, 32 B, 1 connection", (2, 3), "µs"),
                                ("connection rate", (4, 5), "k connections/s")):
        cols = []
        for i, m in enumerate(mtus):
            for o in offs:
                name = ["-P 1", "-P 8", "p50", "p99", "server closes", "client closes"][o]
                cols.append(f"'{data}' using {2 + i * 6 + o}:xtic(1) title 'MTU {m} {name}'")
        plots.append(f"set title '{title}'\nset ylabel '{ylabel}'\nplot " + ", ".join(cols))
    script = (f"set terminal pngcairo size 1400,{420 * 3} noenhanced font ',10'\n"
              f"set output '{png}'\nset multiplot layout 3,1\nset style data histograms\n"
              "set style histogram clustered gap 1\nset style fill solid 0.8 border -1\n"
              "set key outside right top\nset grid ytics\nset yrange [0:*]\n"
              f"set xrange [-0.6:{len(configs) - 0.4}]\n" + "\n".join(plots) +
              "\nunset multiplot\n")
    path = os.path.join(outdir, "chart.gp")
    with open(path, "w") as f:
        f.write(script)
    p = subprocess.run(["gnuplot", path], capture_output=True, text=True)
    if p.returncode != 0:
        log(f"gnuplot failed: {p.stderr.strip()[-400:]}")
        return None
    return png


def publish(table, png, meta):
    """Replaces the results section of docs/benchmarks.md and copies the chart beside it."""
    doc = os.path.join(TOP, "docs", "benchmarks.md")
    begin, end = "<!-- results:begin -->", "<!-- results:end -->"
    with open(doc) as f:
        text = f.read()
    if begin not in text or end not in text:
        raise RuntimeError(f"{doc} has no {begin} ... {end} section")
    chart_md = ""
    if png:
        shutil.copy(png, os.path.join(TOP, "docs", "benchmarks.png"))
        chart_md = "\n![throughput, latency and connection rate per configuration](benchmarks.png)\n"
    head, rest = text.split(begin, 1)
    tail = rest.split(end, 1)[1]
    with open(doc, "w") as f:
        f.write(f"{head}{begin}\n{table}{chart_md}\n{end}{tail}")
    log(f"updated {doc}")


def loss_table(results, levels, target, fast="xdpfwd-xdp", kernel="xdpfwd-kernel"):
    """bench/loss.py's rounds ({config: [[row per level] per round]}) as Markdown: per loss
    level, each path's median time over the rounds (with the range and the median upload and
    download), each round's ratio (fast path time / kernel path time: a round's two rows ran
    minutes apart at most, so they are compared with each other), the median of those ratios
    and the verdict on it against `target`; and whether a transfer failed in any round (not
    finished in time, bytes or hashes wrong), which fails the run. A missed target does not, as
    for bench/run's other targets. `levels`: (name, percent) per row of a round, in order; under
    the table, the bytes one drop took per level and path (a burst's: a whole GSO packet)."""
    fr, kr = results.get(fast, []), results.get(kernel, [])
    rounds = max(len(fr), len(kr))

    def row(rs, r, i):
        return rs[r][i] if r < len(rs) and i < len(rs[r]) else {"error": "not measured"}

    def cell(rows):
        s = sorted(x["seconds"] for x in rows)
        spread = f"{s[0]:.2f}-{s[-1]:.2f}; " if len(s) > 1 else ""
        up = statistics.median(x["upload_s"] for x in rows)
        down = statistics.median(x["download_s"] for x in rows)
        return f"{statistics.median(s):.2f} s ({spread}up {up:.2f} / down {down:.2f})"

    lines = [f"| loss | kernel path | fast path | ratio per round | median ratio | "
             f"target ≤ {target}x |", "|---|---|---|---|---|---|"]
    failed = False
    per_drop = []
    for i, (name, percent) in enumerate(levels):
        ks = [row(kr, r, i) for r in range(rounds)]
        fs = [row(fr, r, i) for r in range(rounds)]
        errors = [f"round {r + 1} {name}: {x['error']}" for r in range(rounds)
                  for name, x in (("kernel path", ks[r]), ("fast path", fs[r])) if "error" in x]
        if errors or not rounds:
            failed = True
            why = "; ".join(errors) or "not measured"
            lines.append(f"| {name} | FAILED ({why}) | | - | - | **FAILED** |")
            continue
        ratios = [f["seconds"] / k["seconds"] for f, k in zip(fs, ks)]
        median = statistics.median(ratios)
        verdict = "met" if median <= target else "**missed**"
        if percent == 0:  # the target is for loss; without it the row is the reference
            verdict = "(reference)"
        lines.append(f"| {name} | {cell(ks)} | {cell(fs)} | "
                     f"{', '.join(f'{x:.2f}x' for x in ratios)} | {median:.2f}x | {verdict} |")
        took = []
        for who, rows in (("kernel path", ks), ("fast path", fs)):
            sizes = [x["dropped_bytes"] / x["dropped"] for x in rows
                     if x.get("dropped") and x.get("dropped_bytes") is not None]
            if sizes:
                took.append(f"{who} {statistics.median(sizes):,.0f} "
                            f"({sum(x['dropped'] for x in rows):,} drops)")
        if took:
            per_drop.append(f"{name}: " + ", ".join(took))
    lines.append(f"\n{rounds} round{'s' if rounds != 1 else ''}, each both paths at every level "
                 "(one forwarder start per path and round); times are medians over the rounds "
                 "(range; median upload / download), the target is judged on the median of the "
                 "rounds' ratios.")
    if per_drop:
        lines.append("\nBytes one drop took (median over the rounds; frames as the peer "
                     "received them, so a burst's is a whole GSO packet), and the drops in all "
                     "rounds: " + "; ".join(per_drop) + ".")
    return "\n".join(lines) + "\n", failed
