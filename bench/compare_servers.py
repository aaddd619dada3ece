#!/usr/bin/env python3
"""Asks two DNS servers the same questions with dig and compares the answers.

  compare_servers.py PORT_A PORT_B NAMES_FILE      ("name type" per line)

For each question compares the RCODE, the AA flag and the answer section
(owner, TTL, class, type, rdata; order ignored). SOA serials differ between
the servers by design, so SOA answers are compared without their serial.
Prints one line per mismatch and a summary; exits 1 on any mismatch.
"""

import re
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor


def ask(port, name, qtype):
    out = subprocess.run(
        ["dig", "@127.0.0.1", "-p", str(port), "+norec", "+noall", "+comments", "+answer",
         "+bufsize=1232", "+tries=2", "+time=2", name, qtype],
        capture_output=True, text=True, timeout=20,
    ).stdout
    status = re.search(r"status: (\w+)", out)
    flags = re.search(r";; flags: ([a-z ]*);", out)
    answers = []
    for line in out.splitlines():
        if not line or line.startswith(";"):
            continue
        f = line.split()
        if len(f) >= 5 and f[3] == "SOA":
            f[6] = "<serial>"
        answers.append(" ".join(f).lower())
    aa = bool(flags and "aa" in flags.group(1).split())
    return (status.group(1) if status else "NO-RESPONSE", aa, tuple(sorted(answers)))


def main():
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    port_a, port_b, path = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
    questions = [l.split() for l in open(path) if l.strip()]
    def both(q):
        return q, ask(port_a, *q), ask(port_b, *q)
    bad = 0
    kinds = {}
    with ThreadPoolExecutor(4) as pool:
        for (name, qtype), a, b in pool.map(both, questions):
            kinds[a[0]] = kinds.get(a[0], 0) + 1
            if a != b:
                bad += 1
                if bad <= 20:
                    print(f"MISMATCH {name} {qtype}\n  {port_a}: {a[0]} aa={a[1]} {list(a[2])[:4]}"
                          f"\n  {port_b}: {b[0]} aa={b[1]} {list(b[2])[:4]}")
    summary = ", ".join(f"{k} {v}" for k, v in sorted(kinds.items()))
    print(f"compared {len(questions)} questions ({summary}): {bad} mismatches")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
