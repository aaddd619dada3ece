#!/usr/bin/env python3
"""Runs one dnsperf and prints one TSV row of its results plus CPU accounting.

  run_dnsperf.py OUTFILE SERVER_PID SERVER_CORE CLIENT_CORE SIZE SERVER MODE RUN -- COMMAND...

Row: size server mode run qps lost_pct avg_latency_ms server_cpu_pct
     server_core_pct client_core_pct other_cpu_pct
CPU figures are percent of one core over the run: the server process (all
threads); the server's core and the client's core, all busy time including
interrupts (the kernel's loopback work is accounted there, to no process);
and the time processes other than the server and dnsperf used on the
machine (a busy machine makes the run unreliable, so it is reported).
"""

import os
import re
import subprocess
import sys
import time

HZ = os.sysconf("SC_CLK_TCK")


def cpu_stats():
    """{"cpu": (process_ticks, busy_ticks), "cpu0": ..., ...} from /proc/stat."""
    out = {}
    for line in open("/proc/stat"):
        if not line.startswith("cpu"):
            break
        f = line.split()
        v = [int(x) for x in f[1:9]]
        # process time: user + nice + system (+ steal); busy adds irq + softirq
        out[f[0]] = (v[0] + v[1] + v[2] + v[7], sum(v) - v[3] - v[4])
    return out


def proc_ticks(pid):
    f = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return int(f[11]) + int(f[12])


def main():
    out, pid, score, ccore, size, server, mode, run = sys.argv[1:9]
    cmd = sys.argv[sys.argv.index("--") + 1:]
    s0, m0, t0 = proc_ticks(pid), cpu_stats(), time.monotonic()
    with open(out, "w") as f:
        p = subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT)
        _, status, ru = os.wait4(p.pid, 0)
    s1, m1, t1 = proc_ticks(pid), cpu_stats(), time.monotonic()
    if status != 0:
        sys.exit(f"dnsperf failed ({status}), see {out}")
    text = open(out).read()
    qps = float(re.search(r"Queries per second:\s+([\d.]+)", text).group(1))
    lost = float(re.search(r"Queries lost:\s+\d+ \(([\d.]+)%\)", text).group(1))
    lat = float(re.search(r"Average Latency \(s\):\s+([\d.]+)", text).group(1)) * 1000
    el = t1 - t0
    pct = lambda ticks: ticks / HZ / el * 100  # noqa: E731
    srv = pct(s1 - s0)
    cli = (ru.ru_utime + ru.ru_stime) / el * 100
    score_busy = pct(m1[f"cpu{score}"][1] - m0[f"cpu{score}"][1])
    ccore_busy = pct(m1[f"cpu{ccore}"][1] - m0[f"cpu{ccore}"][1])
    other = max(0.0, pct(m1["cpu"][0] - m0["cpu"][0]) - srv - cli)
    print(f"{size}\t{server}\t{mode}\t{run}\t{qps:.0f}\t{lost:.2f}\t{lat:.3f}\t{srv:.0f}"
          f"\t{score_busy:.0f}\t{ccore_busy:.0f}\t{other:.0f}")


if __name__ == "__main__":
    main()
