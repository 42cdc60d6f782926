"""A DNS server that answers late, for tests/istio.rs: UDP on ADDR:53, an A
record IP for NAME (no address for other types of NAME, NXDOMAIN for other
names), no answer before DELAY_MS after the first query it gets (so the
delay does not depend on how long its client took to start). Envoy's STRICT_DNS
cluster for NAME warms on its first resolution, so it makes an Envoy that
turns LIVE at a known time.

Usage: slow_dns.py ADDR NAME IP DELAY_MS
"""

import socket
import struct
import sys
import time


def answer(query, name, ip):
    i, labels = 12, []
    while query[i]:
        labels.append(query[i + 1 : i + 1 + query[i]].decode())
        i += 1 + query[i]
    qtype = struct.unpack(">H", query[i + 1 : i + 3])[0]
    question = query[12 : i + 5]
    qname = ".".join(labels).lower()
    records, rcode = b"", 0
    if qname != name:
        rcode = 3
    elif qtype == 1:
        records = b"\xc0\x0c" + struct.pack(">HHIH", 1, 1, 30, 4) + socket.inet_aton(ip)
    header = query[:2] + struct.pack(">HHHHH", 0x8180 | rcode, 1, 1 if records else 0, 0, 0)
    return header + question + records, qname, qtype


def main():
    addr, name, ip, delay_ms = sys.argv[1:]
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind((addr, 53))
    answers_from = None
    print("dns: serving", flush=True)
    while True:
        query, peer = sock.recvfrom(512)
        if answers_from is None:
            answers_from = time.monotonic() + int(delay_ms) / 1000
        time.sleep(max(0, answers_from - time.monotonic()))
        reply, qname, qtype = answer(query, name.lower(), ip)
        sock.sendto(reply, peer)
        print(f"dns: answered {qname} type {qtype}", flush=True)


if __name__ == "__main__":
    main()
