#!/usr/bin/env python3
"""Endpoint-change convergence against a running clusterset-dns.

  converge.py --manifests DIR --port PORT [--changes 100] [--timeout 30]
              [--gap 0.05] [--seed 1] [--raw FILE]

Each change: picks a headless service, a cluster and an endpoint with a
hostname (seeded random), replaces that endpoint's IP in the cluster's
namespace file with a fresh 100.64.0.0/10 address (the file is rewritten to a
temporary file, then renamed over the original), and polls the endpoint's
per-pod name (hostname stays, address changes) over UDP until the answer is
the new address. The time from just before the write to the first correct
answer is the convergence time. The files are restored at the end.

Prints: changes, file size, min / median / p99 / max / mean milliseconds.
"""

import argparse
import json
import os
import random
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import dnsq  # noqa: E402
from gen_clusterset import Layout  # noqa: E402

DIRTY = ".bench-dirty"  # tells gen_clusterset.py the files differ from what it generated


def replace_file(path, text):
    tmp = os.path.join(os.path.dirname(path), "." + os.path.basename(path) + ".tmp")
    with open(tmp, "w") as f:
        f.write(text)
    os.rename(tmp, path)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--manifests", required=True)
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--changes", type=int, default=100)
    p.add_argument("--timeout", type=float, default=30.0)
    p.add_argument("--gap", type=float, default=0.05, help="seconds between changes")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--raw", help="write every measurement (ms) here")
    a = p.parse_args()
    meta = json.load(open(os.path.join(a.manifests, "bench-meta.json")))
    pr = meta["params"]
    lay = Layout(pr["services"], pr["headless"], pr["endpoints"], pr["clusters"], pr["namespaces"])
    if lay.m == 0 or lay.k == 0:
        sys.exit("needs headless services with endpoints")
    rng = random.Random(a.seed)
    originals, current = {}, {}
    open(os.path.join(a.manifests, DIRTY), "w").close()
    client = dnsq.Client(a.port, timeout=0.2)
    times, sizes, failures = [], [], 0
    try:
        used = set()
        for i in range(a.changes):
            while True:  # an endpoint not changed before, with a hostname
                h, ci, j = rng.randrange(lay.m), rng.randrange(lay.c), rng.randrange(0, lay.k, 2)
                if (h, ci, j) not in used:
                    used.add((h, ci, j))
                    break
            path = lay.file(a.manifests, ci, h % lay.ns)
            if path not in current:
                originals[path] = current[path] = open(path).read()
            old_ip = lay.pod_ip(ci, h, j)
            new_ip = f"100.{64 + (i >> 16)}.{(i >> 8) & 255}.{i & 255}"
            old = f"- addresses: [{old_ip}]\n"
            text = current[path]
            if text.count(old) != 1:
                sys.exit(f"{path}: expected one '{old.strip()}'")
            text = text.replace(old, f"- addresses: [{new_ip}]\n")
            name = lay.pod_name(ci, h, j)
            start = time.monotonic()
            replace_file(path, text)
            current[path] = text
            sizes.append(len(text))
            while True:
                rcode, answers = client.query(name, "A")
                now = time.monotonic()
                if rcode == "NOERROR" and answers == [new_ip]:
                    times.append((now - start) * 1000)
                    break
                if now - start > a.timeout:
                    failures += 1
                    print(f"change {i}: {name} still {rcode} {answers} after {a.timeout} s",
                          file=sys.stderr)
                    break
                time.sleep(0.0005)
            time.sleep(a.gap)
    finally:
        for path, text in originals.items():
            replace_file(path, text)
        os.unlink(os.path.join(a.manifests, DIRTY))
        client.close()
    if a.raw:
        with open(a.raw, "w") as f:
            f.write("\n".join(f"{t:.3f}" for t in times) + "\n")
    if not times:
        sys.exit("no change converged")
    s = sorted(times)
    p99 = s[min(len(s) - 1, max(0, -(-99 * len(s) // 100) - 1))]  # nearest rank
    print(json.dumps({
        "changes": len(times), "failures": failures,
        "file_kib": round(statistics.mean(sizes) / 1024),
        "min": round(s[0], 1), "p50": round(statistics.median(s), 1), "p99": round(p99, 1),
        "max": round(s[-1], 1), "mean": round(statistics.mean(s), 1),
    }))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
