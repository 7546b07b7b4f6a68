#!/usr/bin/env python3
"""bench/run's loss rows (by default; --no-loss skips them, --loss-only runs nothing else): 64
MiB each way through the fast path and the kernel path at 0, 1 and 3% loss and at 1 and 3% in
bursts, same run (issue #14's and #34's target: the fast path within 1.5x of the kernel path's
time).

The loss is xdp/lossy.bpf.c (bench/lossy_main.cpp, `xdpfwd-lossy`) on the namespace side of
both veths: it drops that share of the TCP frames the client and the server receive, i.e. the
forwarder's data and ACKs toward them. Two kinds (LEVELS): "segment", the program in native
mode, which takes TSO from the veth's peer, so each drop takes one segment; and "burst" (issue
#34), the program in generic mode, which leaves the senders their TSO (the kernel path's
sockets, the fast path's packet socket), so a drop takes a whole GSO packet, up to ~44
segments at MTU 1500, as a full switch queue drops a burst. One transfer per row: the client sends 64 MiB and
half-closes while it reads the server's 64 MiB until EOF; the server does the same the other
way. Both streams are a seeded pseudo-random pattern, hashed at the receiver after the clock
stops and compared with the sender's. A transfer that does not end within --loss-timeout
seconds fails its row and says so.

The rows run in rounds (--loss-rounds, 3 by default): in each round both paths run every loss
level, one forwarder start each, so a round's two rows of a level ran minutes apart at most.
One round was not enough to read the target: the 3% row's ratio moved from 0.88x to 2.65x
between two published runs. The table gives each round's ratio and judges the median of them.

Also the transfer's two ends: `loss.py serve ADDR:PORT BYTES SEED` and `loss.py client ADDR:PORT
BYTES SEED` (each prints one JSON line; run inside the namespaces by bench/run).
"""

import hashlib
import json
import os
import random
import socket
import subprocess
import sys
import threading
import time

# (percent, kind) per row of a round, in the order a round runs them: kind "segment" drops
# frames one segment each (native XDP), "burst" whole GSO packets (generic XDP).
LEVELS = ((0, "segment"), (1, "segment"), (3, "segment"), (1, "burst"), (3, "burst"))
RATIO_TARGET = 1.5
LISTEN_BASE, SERVER_BASE = 8900, 6900  # below bench/run's blocks (9000+, 7000+)
SLOTS = 100  # listen/server port pairs from those bases; each row of each round has its own
CHUNK = 1 << 20


def pattern(nbytes, seed):
    """The stream one side sends: pseudo-random bytes, so a misplaced segment shows."""
    rng = random.Random(seed)
    return rng.randbytes(nbytes)


def digest(data):
    return hashlib.sha256(data).hexdigest()


def stream(sock, out, nbytes, start):
    """Sends `out` and half-closes while reading until EOF; returns the end's JSON."""
    got = bytearray(nbytes + CHUNK)
    view = memoryview(got)
    result = {}

    def send():
        sock.sendall(out)
        sock.shutdown(socket.SHUT_WR)
        result["sent_s"] = time.monotonic() - start

    sender = threading.Thread(target=send)
    sender.start()
    n = 0
    while True:
        k = sock.recv_into(view[n:n + CHUNK])
        if k == 0:
            break
        n += k
        if n > nbytes:
            break
    result["received_s"] = time.monotonic() - start
    sender.join()
    result.update(received=n, received_sha256=digest(view[:n]), sent_sha256=digest(out))
    return result


def serve(addr, nbytes, seed):
    host, port = addr.rsplit(":", 1)
    ls = socket.socket()
    ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    ls.bind((host, int(port)))
    ls.listen(4)
    out = pattern(nbytes, seed)  # before the clock starts
    print("listening", flush=True)
    c, _ = ls.accept()
    # The server's clock starts at its accept; the client reports its connect time on the
    # same clock (CLOCK_MONOTONIC is one clock across namespaces), bench/run aligns them.
    start = time.monotonic()
    r = stream(c, out, nbytes, start)
    r["start"] = start
    print(json.dumps(r), flush=True)


def client(addr, nbytes, seed):
    host, port = addr.rsplit(":", 1)
    out = pattern(nbytes, seed)
    start = time.monotonic()
    s = socket.create_connection((host, int(port)), timeout=600)
    s.settimeout(None)
    r = stream(s, out, nbytes, start)
    r["start"] = start
    print(json.dumps(r), flush=True)


# --- run by bench/run --------------------------------------------------------------------------

def level_name(percent, kind):
    """A level's name in the table, logs and file names: "3%", "3% burst"."""
    return f"{percent}%" + (" burst" if kind == "burst" else "")


def level_file(percent, kind):
    return f"loss{percent}" + ("-burst" if kind == "burst" else "")


def attach_loss(bench, topo, percent, kind="segment"):
    """xdpfwd-lossy on both namespaces' veths, native mode for "segment", generic for "burst";
    returns the two processes (stop_loss ends them)."""
    procs = []
    mode = ["generic"] if kind == "burst" else []
    for ns in (topo.cns, topo.sns):
        p = subprocess.Popen(["ip", "netns", "exec", ns, bench.args.lossy, "eth0",
                              str(percent * 10_000), *mode], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        procs.append(p)
        line = p.stdout.readline()
        if not line.startswith("attached"):
            stop_loss(procs)
            raise RuntimeError(f"xdpfwd-lossy in {ns}: {line.strip() or 'exited'}")
    return procs


def stop_loss(procs):
    """Detaches (closing stdin ends xdpfwd-lossy); returns the frames and bytes dropped, both
    sides."""
    dropped = dropped_bytes = 0
    for p in procs:
        try:
            out, _ = p.communicate(timeout=10)
            counts = json.loads(out.strip().splitlines()[-1])
            dropped += counts.get("dropped", 0)
            dropped_bytes += counts.get("dropped_bytes", 0)
        except (subprocess.TimeoutExpired, ValueError, IndexError):
            p.kill()
            p.wait()
    return dropped, dropped_bytes


def transfer(bench, topo, config, slot, percent, kind, nbytes, logdir):
    """One row: returns {"seconds", "upload_s", "download_s", "dropped", "dropped_bytes",
    "error"?, ...}."""
    me = os.path.abspath(__file__)
    listen, server = LISTEN_BASE + slot, SERVER_BASE + slot
    seed_up, seed_down = 1000 + slot, 2000 + slot
    row = {"loss": percent, "kind": kind, "topology": topo.kind, "bytes": nbytes}
    srv = subprocess.Popen(bench.netns(topo.sns, [sys.executable, me, "serve",
                                                  f"{topo.server}:{server}", str(nbytes),
                                                  str(seed_down)]),
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    loss = []
    cli = None
    try:
        if srv.stdout.readline().strip() != "listening":
            raise RuntimeError("the transfer's server did not start")
        loss = attach_loss(bench, topo, percent, kind)
        cli = subprocess.Popen(bench.netns(topo.cns, [sys.executable, me, "client",
                                                      f"{topo.client_gw}:{listen}", str(nbytes),
                                                      str(seed_up)]),
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        try:
            cout, _ = cli.communicate(timeout=bench.args.loss_timeout)
            sout, _ = srv.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            row["error"] = f"not finished within {bench.args.loss_timeout} s"
            return row
        c, s = json.loads(cout.strip().splitlines()[-1]), json.loads(sout.strip().splitlines()[-1])
        row["upload_s"] = round(s["received_s"] + s["start"] - c["start"], 3)
        row["download_s"] = round(c["received_s"], 3)
        row["seconds"] = max(row["upload_s"], row["download_s"])
        bad = []
        if s["received"] != nbytes or s["received_sha256"] != c["sent_sha256"]:
            bad.append(f"upload: {s['received']} bytes, hash {'ok' if s['received_sha256'] == c['sent_sha256'] else 'differs'}")
        if c["received"] != nbytes or c["received_sha256"] != s["sent_sha256"]:
            bad.append(f"download: {c['received']} bytes, hash {'ok' if c['received_sha256'] == s['sent_sha256'] else 'differs'}")
        if bad:
            row["error"] = "; ".join(bad)
    except (RuntimeError, ValueError, IndexError, KeyError) as e:
        row["error"] = str(e)
    finally:
        for p in (cli, srv):
            if p is not None and p.poll() is None:
                p.kill()
                p.wait()
        row["dropped"], row["dropped_bytes"] = stop_loss(loss)
        stats = None
        try:
            stats = config.stats()
        except Exception:  # counters are extra information, the row stands without them
            pass
        if stats:
            row["retransmits"] = stats.get("retransmits")
        with open(os.path.join(logdir, f"{config.name}-{level_file(percent, kind)}.json"), "w") as f:
            json.dump(row, f)
    return row


def max_rounds(configs):
    """The most rounds whose rows all get ports of their own (a port pair per row)."""
    return SLOTS // (len(configs) * len(LEVELS))


def measure_loss(bench, topo, configs, logdir, log, rounds=1):
    """Every loss level through each configuration, `rounds` times; within a round the
    configurations take turns (one forwarder start each), so the rows a round compares ran at
    about the same time. Every row has its own ports: a connection of an earlier row in
    TIME_WAIT cannot meet a later one. Returns {config name: [[row per loss level] per round]}."""
    if not 1 <= rounds <= max_rounds(configs):
        raise ValueError(f"loss rounds must be 1 to {max_rounds(configs)}, not {rounds}")
    results = {config.name: [] for config in configs}
    n = len(LEVELS)
    for r in range(rounds):
        rounddir = os.path.join(logdir, f"round{r + 1}")
        os.makedirs(rounddir, exist_ok=True)
        for k, config in enumerate(configs):
            first = (r * len(configs) + k) * n
            config.ports = LossPorts(first)
            rows = []
            results[config.name].append(rows)
            try:
                config.start(topo, rounddir)
                for i, (percent, kind) in enumerate(LEVELS):
                    name = level_name(percent, kind)
                    log(f"loss round {r + 1}/{rounds}: {config.name}, {name} loss, "
                        f"{bench.args.loss_mib} MiB each way")
                    row = transfer(bench, topo, config, first + i, percent, kind,
                                   bench.args.loss_mib << 20, rounddir)
                    log(f"loss round {r + 1}/{rounds}: {config.name} {name}: " +
                        (f"FAILED: {row['error']}" if "error" in row else
                         f"{row['seconds']:.2f} s (upload {row['upload_s']:.2f}, download "
                         f"{row['download_s']:.2f}), {row['dropped']} frames "
                         f"({row['dropped_bytes']:,} bytes) dropped"))
                    rows.append(row)
            except Exception as e:
                log(f"loss round {r + 1}/{rounds}: {config.name}: FAILED: {e}")
                rows.append({"error": str(e)})
            finally:
                config.stop()
    return results


class LossPorts:
    """A configuration's ports for one round of loss rows: a listen/server pair per loss level,
    from slot `first`."""

    def __init__(self, first):
        self.pairs = [(LISTEN_BASE + first + i, SERVER_BASE + first + i)
                      for i in range(len(LEVELS))]

    def rules(self):
        return self.pairs


if __name__ == "__main__":
    if len(sys.argv) != 5 or sys.argv[1] not in ("serve", "client"):
        sys.exit("usage: loss.py serve|client ADDR:PORT BYTES SEED")
    (serve if sys.argv[1] == "serve" else client)(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))
