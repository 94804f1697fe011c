#!/usr/bin/python3
"""Captures made by tools nobody in softnic wrote, for TestDecodeForeignCaptures.

Regenerate (Debian's interpreter has python3-scapy; mergecap is Wireshark's):

    cd cmd/softnic/testdata/captures && /usr/bin/python3 gen.py

Every frame is built by scapy (scapy.contrib.roce computes the IPv4 ICRC),
written with scapy's wrpcap, and the mixed-link-type pcapng is merged by
Wireshark's mergecap. Timestamps are fixed so the files are reproducible.
Each file is checked against tshark by the test where tshark is installed.
"""
import struct
import subprocess

from scapy.all import IP, UDP, Ether, IPv6, IPv6ExtHdrHopByHop, Raw, raw, wrpcap
from scapy.contrib.roce import BTH
from scapy.layers.inet import IPOption_RR
from scapy.layers.l2 import CookedLinux, Dot1Q

SRC, DST = "10.0.0.1", "10.0.0.2"
MACS = dict(src="02:00:00:00:00:01", dst="02:00:00:00:00:02")


def payload(n):
    return bytes((i * 7 + 3) & 0xFF for i in range(n))


def roce(ip=None, psn=1, n=16):
    """An RC SEND ONLY of n bytes (n a multiple of 4: no pad) in ip."""
    ip = ip if ip is not None else IP(src=SRC, dst=DST, flags="DF")
    return ip / UDP(sport=0xC000, dport=4791, chksum=0) / BTH(opcode=0x04, dqpn=0x11, psn=psn) / Raw(payload(n))


def write(name, pkts, **kw):
    for i, p in enumerate(pkts):
        p.time = 1700000000 + i
    wrpcap(name, pkts, **kw)


# 802.1Q (VLAN 100, PCP 3: the priority PFC runs on) and 802.1ad QinQ.
write("vlan.pcap", [Ether(**MACS) / Dot1Q(vlan=100, prio=3) / roce()])
write("qinq.pcap", [Ether(type=0x88A8, **MACS) / Dot1Q(vlan=10, type=0x8100) / Dot1Q(vlan=100) / roce()])
# LINKTYPE_LINUX_SLL2 (276): what tcpdump -i any writes with libpcap >= 1.10.
# Header: protocol, reserved, ifindex, ARPHRD_ETHER, packet type, addr len, addr.
sll2 = struct.pack("!HHIHBB8s", 0x0800, 0, 2, 1, 4, 6, bytes.fromhex("020000000001") + b"\0\0")
write("sll2.pcap", [Raw(sll2 + raw(roce()))], linktype=276)
subprocess.run(["editcap", "-F", "pcapng", "sll2.pcap", "sll2.pcapng"], check=True)
# The same frame in a big-endian pcap (written by hand: wrpcap writes the
# host's order), so the link type number is read in the file's order.
with open("sll2_bigendian.pcap", "wb") as f:
    frame = sll2 + raw(roce())
    f.write(struct.pack(">IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 65535, 276))
    f.write(struct.pack(">IIII", 1700000000, 0, len(frame), len(frame)) + frame)
# Not what rxe sends, but RoCEv2 frames all the same: softnic must say what
# it refuses, not count them as "not RoCE".
write("ipv4_options.pcap", [Ether(**MACS) / roce(IP(src=SRC, dst=DST, flags="DF", options=[IPOption_RR()]))])
write("ipv4_bad_checksum.pcap", [Ether(**MACS) / roce(IP(src=SRC, dst=DST, flags="DF", chksum=0x1234))])
write("ipv4_first_fragment.pcap", [Ether(**MACS) / roce(IP(src=SRC, dst=DST, flags="MF"))])
write("ipv6_hop_by_hop.pcap", [Ether(**MACS) / roce(IPv6(src="fd00::1", dst="fd00::2") / IPv6ExtHdrHopByHop())])
# A snap length cut (tcpdump -s 64): scapy's wrpcap does not cut, so the
# records are written by hand: incl_len 64 and orig_len the frame's length.
full = raw(Ether(**MACS) / roce(n=64))
with open("snaplen64.pcap", "wb") as f:
    f.write(struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 64, 1))
    f.write(struct.pack("<IIII", 1700000000, 0, 64, len(full)) + full[:64])
# A header snap length (128) smaller than the record it holds (1098 bytes,
# whole): scapy's wrpcap(snaplen=) writes the number and does not cut.
# libpcap and Wireshark read such records (libpcap up to its 262144 limit).
write("snaplen_header_only.pcap", [Ether(**MACS) / IP(src=SRC, dst=DST, flags="DF") / UDP(sport=0xC000, dport=4791, chksum=0) /
                                   BTH(opcode=0x0A, dqpn=0x11, psn=1) / Raw(struct.pack("!QII", 0x1000, 0x22, 1024) + payload(1024))],
      snaplen=128)
# Three interfaces of three link types in one pcapng (Ethernet, Linux SLL,
# raw IP), merged by mergecap.
write("m_eth.pcap", [Ether(**MACS) / roce(psn=1)])
write("m_sll.pcap", [CookedLinux(proto=0x0800) / roce(psn=2)])
write("m_raw.pcap", [roce(psn=3)], linktype=101)
for i, f in enumerate(["m_eth.pcap", "m_sll.pcap", "m_raw.pcap"]):
    # mergecap orders by time: one second apart, in this order.
    subprocess.run(["editcap", "-t", str(i), f, f + ".t"], check=True)
subprocess.run(["mergecap", "-F", "pcapng", "-w", "mixed_linktypes.pcapng",
                "m_eth.pcap.t", "m_sll.pcap.t", "m_raw.pcap.t"], check=True)
subprocess.run("rm -f m_*.pcap m_*.pcap.t", shell=True, check=True)
# Two sections (pcapng files concatenate): interface 0 is Ethernet in the
# first and SLL2 in the second.
with open("two_sections.pcapng", "wb") as f:
    for part in ["mixed_linktypes.pcapng", "sll2.pcapng"]:
        f.write(open(part, "rb").read())
# Every opcode softnic knows, RC/UC/UD and CNP, with its extension headers
# packed by hand (rocev2.md §1.5), pad counts 0-3, SE and AckReq varied, and
# an RC ACKNOWLEDGE for each AETH syndrome class (ACK with credits 0 and 31,
# RNR NAK timers 0, 1 and 31, NAK codes 0-5 and 31, reserved 0x40).
reth_first = struct.pack("!QII", 0x7F0000001000, 0xABCDEF, 4096)
reth_only = struct.pack("!QII", 0x7F0000001000, 0xABCDEF, 13)
imm, ieth = struct.pack("!I", 0xDEADBEEF), struct.pack("!I", 0x1234)
deth = struct.pack("!II", 0x80010000, 0x22)
atomic = struct.pack("!QIQQ", 0x2000, 0x77, 5, 9)
orig = struct.pack("!Q", 0x1122334455667788)


def aeth(syndrome=0x1F, msn=7):
    return struct.pack("!I", syndrome << 24 | msn)


PMTU = 256
ops = [
    (0x00, b"", PMTU), (0x01, b"", PMTU), (0x02, b"", 13), (0x03, imm, 14), (0x04, b"", 15), (0x05, imm, 0),
    (0x06, reth_first, PMTU), (0x07, b"", PMTU), (0x08, b"", 1), (0x09, imm, 2), (0x0A, reth_only, 13),
    (0x0B, reth_only + imm, 13), (0x0C, reth_first, 0), (0x0D, aeth(), PMTU), (0x0E, b"", PMTU), (0x0F, aeth(), 3),
    (0x10, aeth(), 0), (0x11, aeth(), 0), (0x12, aeth() + orig, 0), (0x13, atomic, 0), (0x14, atomic, 0),
    (0x16, ieth, 5), (0x17, ieth, 6),
    (0x20, b"", PMTU), (0x21, b"", PMTU), (0x22, b"", 1), (0x23, imm, 1), (0x24, b"", 0), (0x25, imm, 1),
    (0x26, reth_first, PMTU), (0x27, b"", PMTU), (0x28, b"", 7), (0x29, imm, 7), (0x2A, reth_only, 13),
    (0x2B, reth_only + imm, 13),
    (0x64, deth, 30), (0x65, deth + imm, 30), (0x81, b"\0" * 16, 0),
] + [(0x11, aeth(s, 3), 0) for s in (0x00, 0x1F, 0x20, 0x21, 0x3F, 0x60, 0x61, 0x62, 0x63, 0x64, 0x65, 0x7F, 0x40)]
pkts = []
for i, (op, ext, n) in enumerate(ops):
    pad = (-n) & 3
    pkts.append(Ether(**MACS) / IP(src=SRC, dst=DST, flags="DF") / UDP(sport=0xC000, dport=4791, chksum=0) /
                BTH(opcode=op, padcount=pad, dqpn=0x100 + i, psn=1000 + i, ackreq=i & 1, solicited=(i >> 1) & 1) /
                Raw(ext + payload(n) + b"\0" * pad))
write("every_opcode.pcap", pkts)
# Opcodes softnic does not read: XRC SEND ONLY (0xA4), RC 0x15 (no such
# opcode) and RD SEND FIRST (0x40), each with 12 more bytes.
write("unknown_opcodes.pcap", [Ether(**MACS) / IP(src=SRC, dst=DST, flags="DF") / UDP(sport=0xC000, dport=4791, chksum=0) /
                               BTH(opcode=op, dqpn=0x11, psn=1) / Raw(payload(12)) for op in (0xA4, 0x15, 0x40)])
# RoCEv1 (EtherType 0x8915: a GRH, then the BTH): not RoCEv2, skipped, and
# the summary says how many there were.
write("rocev1.pcap", [Ether(type=0x8915, **MACS) / Raw(bytes(40) + raw(BTH(opcode=0x04, dqpn=0x11, psn=1)) + payload(16) + bytes(4))])
# pcapng timestamp resolutions (if_tsresol), blocks written by hand: a
# binary one, 2^-10 s, with the frame at 512/1024 s past the second (tshark:
# .500000000), and microseconds, nanoseconds and milliseconds.
def block(typ, body):
    body += bytes(-len(body) & 3)
    return struct.pack("<II", typ, 12 + len(body)) + body + struct.pack("<I", 12 + len(body))


vlan_frame = raw(Ether(**MACS) / Dot1Q(vlan=100, prio=3) / roce())
with open("tsresol.pcapng", "wb") as f:
    f.write(block(0x0A0D0D0A, struct.pack("<IHHq", 0x1A2B3C4D, 1, 0, -1)))
    for i, (tsresol, units) in enumerate([(0x8A, (1700000000 << 10) + 512), (6, 1700000001 * 10**6 + 250),
                                          (9, 1700000002 * 10**9 + 123456789), (3, 1700000003 * 1000 + 7)]):
        f.write(block(1, struct.pack("<HHI", 1, 0, 0) + struct.pack("<HHB3x", 9, 1, tsresol) + bytes(4)))
        f.write(block(6, struct.pack("<IIIII", i, units >> 32, units & 0xFFFFFFFF, len(vlan_frame), len(vlan_frame)) + vlan_frame))
# Resolutions pcapgo cannot scale (its 64-bit factor loses the fraction
# from 2^-30 on, divides by zero from 2^-64 on and wraps past 10^-19):
# 2^-30 at 512 Mi units past the second (.500000000), 2^-40 (5.25 s),
# 2^-127 (0xff: 2^63 units, 2^-64 s), 10^-20 and 10^-127 (0x7f).
with open("tsresol_fine.pcapng", "wb") as f:
    f.write(block(0x0A0D0D0A, struct.pack("<IHHq", 0x1A2B3C4D, 1, 0, -1)))
    for i, (tsresol, units) in enumerate([(0x9E, (1700000004 << 30) + (1 << 29)), (0xA8, (5 << 40) + (1 << 38)),
                                          (0xFF, 1 << 63), (20, 12345678901234567890), (0x7F, (1 << 64) - 1)]):
        f.write(block(1, struct.pack("<HHI", 1, 0, 0) + struct.pack("<HHB3x", 9, 1, tsresol) + bytes(4)))
        f.write(block(6, struct.pack("<IIIII", i, units >> 32, units & 0xFFFFFFFF, len(vlan_frame), len(vlan_frame)) + vlan_frame))
# if_tsresol 0 is 10^0: whole seconds (tshark: 1700000005 units are
# 1700000005 s, and 2^64-1 units wrap to -1 s); pcapgo reads 0 as its
# default, microseconds.
with open("tsresol_seconds.pcapng", "wb") as f:
    f.write(block(0x0A0D0D0A, struct.pack("<IHHq", 0x1A2B3C4D, 1, 0, -1)))
    f.write(block(1, struct.pack("<HHI", 1, 0, 0) + struct.pack("<HHB3x", 9, 1, 0) + bytes(4)))
    for i, units in enumerate([1700000005, (1 << 64) - 1]):
        f.write(block(6, struct.pack("<IIIII", 0, units >> 32, units & 0xFFFFFFFF, len(vlan_frame), len(vlan_frame)) + vlan_frame))
# A simple packet block (type 3) carries no timestamp: tshark shows no
# frame.time_epoch, decode "-" (not the zero time.Time pcapgo reads).
with open("simple_packet_block.pcapng", "wb") as f:
    f.write(block(0x0A0D0D0A, struct.pack("<IHHq", 0x1A2B3C4D, 1, 0, -1)))
    f.write(block(1, struct.pack("<HHI", 1, 0, 0)))
    f.write(block(3, struct.pack("<I", len(vlan_frame)) + vlan_frame))
# Not RoCEv2: UDP to 4792 (held up; here so the skip stays a skip).
write("udp_4792.pcap", [Ether(**MACS) / IP(src=SRC, dst=DST) / UDP(sport=0xC000, dport=4792) / Raw(payload(32))])
