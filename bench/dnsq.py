#!/usr/bin/env python3
"""Tiny stdlib DNS client for the benchmarks (no dig process per query).

Library use:  from dnsq import Client;  Client(port).query(name, "A")
              -> (rcode, [rdata strings of the answer section])
CLI:
  dnsq.py query PORT NAME [TYPE]          one query, prints rcode and answers
  dnsq.py wait PORT NAME EXPECT [TIMEOUT] [INTERVAL]
      polls every INTERVAL s (default 0.1) until NAME's A answer contains
      EXPECT (an address; "ANY" = any NOERROR answer); prints seconds waited,
      exits 1 on timeout (default 60 s).
"""

import os
import random
import socket
import struct
import sys
import time

TYPES = {"A": 1, "NS": 2, "SOA": 6, "TXT": 16, "AAAA": 28, "SRV": 33}
RCODES = {0: "NOERROR", 1: "FORMERR", 2: "SERVFAIL", 3: "NXDOMAIN", 4: "NOTIMP", 5: "REFUSED"}


def encode_name(name):
    out = bytearray()
    for label in name.rstrip(".").split("."):
        if label:
            b = label.encode("ascii")
            out.append(len(b))
            out += b
    out.append(0)
    return bytes(out)


def build_query(qid, name, qtype="A", edns=1232):
    flags = 0  # no RD: we talk to an authoritative server
    header = struct.pack("!HHHHHH", qid, flags, 1, 0, 0, 1 if edns else 0)
    q = encode_name(name) + struct.pack("!HH", TYPES[qtype], 1)
    opt = b""
    if edns:
        opt = b"\x00" + struct.pack("!HHIH", 41, edns, 0, 0)
    return header + q + opt


def read_name(msg, off):
    labels = []
    jumped = False
    end = off
    for _ in range(128):  # bounded: no pointer loops
        n = msg[off]
        if n & 0xC0 == 0xC0:
            ptr = ((n & 0x3F) << 8) | msg[off + 1]
            if not jumped:
                end = off + 2
            jumped = True
            off = ptr
            continue
        if n == 0:
            if not jumped:
                end = off + 1
            break
        labels.append(msg[off + 1: off + 1 + n].decode("ascii", "replace"))
        off += 1 + n
    return ".".join(labels) + ".", end


def parse_response(msg):
    qid, flags, qd, an, ns, ar = struct.unpack("!HHHHHH", msg[:12])
    off = 12
    for _ in range(qd):
        _, off = read_name(msg, off)
        off += 4
    answers = []
    for _ in range(an):
        _, off = read_name(msg, off)
        rtype, _cls, _ttl, rdlen = struct.unpack("!HHIH", msg[off: off + 10])
        off += 10
        rdata = msg[off: off + rdlen]
        if rtype == 1:
            answers.append(socket.inet_ntop(socket.AF_INET, rdata))
        elif rtype == 28:
            answers.append(socket.inet_ntop(socket.AF_INET6, rdata))
        elif rtype == 33:
            prio, weight, port = struct.unpack("!HHH", rdata[:6])
            target, _ = read_name(msg, off + 6)
            answers.append(f"{prio} {weight} {port} {target}")
        else:
            answers.append(rdata.hex())
        off += rdlen
    return qid, RCODES.get(flags & 0xF, str(flags & 0xF)), bool(flags & 0x0200), answers


class Client:
    def __init__(self, port, host="127.0.0.1", timeout=0.5):
        self.addr = (host, port)
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.settimeout(timeout)
        self.qid = random.randrange(65536)

    def query(self, name, qtype="A"):
        """(rcode, answers); rcode "TIMEOUT" when nothing came back in time."""
        self.qid = (self.qid + 1) & 0xFFFF
        self.sock.sendto(build_query(self.qid, name, qtype), self.addr)
        deadline = time.monotonic() + self.sock.gettimeout()
        while True:
            try:
                msg, _ = self.sock.recvfrom(65535)
            except (socket.timeout, ConnectionRefusedError):
                return "TIMEOUT", []
            try:
                qid, rcode, _tc, answers = parse_response(msg)
            except (struct.error, IndexError):
                continue
            if qid == self.qid:
                return rcode, answers
            if time.monotonic() > deadline:  # only stale answers: give up
                return "TIMEOUT", []

    def close(self):
        self.sock.close()


def wait_for(port, name, expect, timeout=60.0, interval=0.1):
    """Seconds until `name` answers `expect` (an address, or "ANY"), or None."""
    c = Client(port, timeout=min(0.5, max(interval, 0.05)))
    start = time.monotonic()
    try:
        while True:
            rcode, answers = c.query(name, "A")
            if rcode == "NOERROR" and (expect in answers or (expect == "ANY" and answers)):
                return time.monotonic() - start
            if time.monotonic() - start > timeout:
                return None
            time.sleep(interval)
    finally:
        c.close()


def main(argv):
    if len(argv) >= 3 and argv[0] == "query":
        rcode, answers = Client(int(argv[1])).query(argv[2], argv[3] if len(argv) > 3 else "A")
        print(rcode, *answers)
        return 0
    if len(argv) >= 4 and argv[0] == "wait":
        timeout = float(argv[4]) if len(argv) > 4 else 60.0
        interval = float(argv[5]) if len(argv) > 5 else 0.1
        waited = wait_for(int(argv[1]), argv[2], argv[3], timeout, interval)
        if waited is None:
            print(f"timeout after {timeout} s", file=sys.stderr)
            return 1
        print(f"{waited:.3f}")
        return 0
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
