#!/usr/bin/env python3
"""fill_flow_maps.py PID N: puts N synthetic backend-leg entries (origin FROM_WORKER; 10.200/16
-> 10.254.0.1, addresses no packet here uses) into each steer_flows map process PID holds, with
BPF_MAP_UPDATE_BATCH: maps as full as a large idle test's, for bench/control-idle-cost."""
import ctypes
import json
import os
import struct
import subprocess
import sys
import time

SYS_BPF = 321  # x86-64
BPF_MAP_GET_FD_BY_ID = 14
BPF_MAP_UPDATE_BATCH = 26
STEER_FLOW_FROM_WORKER = 2  # xdp/steer_shared.h
libc = ctypes.CDLL(None, use_errno=True)


def bpf(cmd, attr):
    buf = ctypes.create_string_buffer(attr, 128)
    r = libc.syscall(SYS_BPF, cmd, buf, 128)
    if r < 0:
        raise OSError(ctypes.get_errno(), f"bpf command {cmd}")
    return r


def map_ids(pid):
    """The ids of the maps process `pid` holds open (its fds' fdinfo)."""
    ids = set()
    for fd in os.listdir(f"/proc/{pid}/fdinfo"):
        try:
            info = open(f"/proc/{pid}/fdinfo/{fd}").read()
        except OSError:
            continue
        for line in info.splitlines():
            if line.startswith("map_id:"):
                ids.add(int(line.split()[1]))
    return ids


def main():
    pid, n = int(sys.argv[1]), int(sys.argv[2])
    held = map_ids(pid)
    maps = json.loads(subprocess.check_output(["bpftool", "map", "show", "-j"]))
    flows = [m["id"] for m in maps if m.get("name") == "steer_flows" and m["id"] in held]
    now = time.clock_gettime_ns(time.CLOCK_MONOTONIC)
    for map_id in flows:
        fd = bpf(BPF_MAP_GET_FD_BY_ID, struct.pack("III", map_id, 0, 0))
        done = 0
        while done < n:
            k = min(10000, n - done)
            keys, values = bytearray(), bytearray()
            for i in range(done, done + k):
                # struct steer_flow_key: saddr[16], daddr[16], sport, dport, family, pad[3]
                keys += bytes([10, 200, (i // 60000) >> 8 & 255, (i // 60000) & 255]) + bytes(12)
                keys += bytes([10, 254, 0, 1]) + bytes(12)
                keys += struct.pack("!HH", 1024 + i % 60000, 7000) + bytes([2, 0, 0, 0])
                # struct steer_flow: owner, rule_id, created_ns, origin, flags, lock, pad
                values += struct.pack("IIQII", 0, 0, now, STEER_FLOW_FROM_WORKER, 0) + bytes(8)
            kb, vb = ctypes.create_string_buffer(bytes(keys)), ctypes.create_string_buffer(bytes(values))
            bpf(BPF_MAP_UPDATE_BATCH, struct.pack("QQQQIIQQ", 0, 0, ctypes.addressof(kb),
                                                  ctypes.addressof(vb), k, fd, 0, 0))
            done += k
        os.close(fd)
        print(f"flow map {map_id}: {done} entries added")


main()
