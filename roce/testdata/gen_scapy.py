#!/usr/bin/python3
"""Generate golden RoCEv2 frames with scapy for softnic's roce package tests.

Run with the Debian interpreter that has python3-scapy:

    /usr/bin/python3 roce/testdata/gen_scapy.py > roce/testdata/scapy_golden.json

scapy.contrib.roce provides BTH (with ICRC for IPv4), AETH and CNPPadding.
RETH, DETH, ImmDt, AtomicETH and AtomicAckETH are packed by hand with struct
(big-endian, layouts from rocev2.md §1.5). Each case records the frame as hex
plus the fields it was built from; the Go test parses the frame, checks those
fields and the ICRC, and rebuilds the frame byte for byte.

ICRC: for IPv4 frames scapy computes the ICRC itself; this script checks it
against ref_icrc below. scapy writes ICRC 0 for IPv6, so for the IPv6 frame the
expected ICRC comes from ref_icrc alone: a slow reference written straight from
rocev2.md §3.1 (mask the fields in a copy, prepend 8 x 0xFF, zlib.crc32, store
least-significant byte first), independent of the Go implementation.
"""
import json
import struct
import sys
import zlib

from scapy.compat import raw
from scapy.contrib.roce import AETH, BTH, CNPPadding
from scapy.layers.inet import IP, UDP
from scapy.layers.inet6 import IPv6
from scapy.layers.l2 import Ether
from scapy.packet import Raw

SRC_MAC = "02:00:00:00:00:01"
DST_MAC = "02:00:00:00:00:02"
SRC4, DST4 = "192.168.10.1", "192.168.10.2"
SRC6, DST6 = "fd00::1", "fd00::2"
RC_SPORT = 0xC30F   # UDPSourcePort(0, 0x1D, 0x1B), rocev2.md §1.3
UD_SPORT = 0xFF28   # QPSourcePort(0x22)


def reth(va, rkey, dmalen):
    return struct.pack("!QII", va, rkey, dmalen)


def deth(qkey, srcqp):
    return struct.pack("!II", qkey, srcqp & 0xFFFFFF)


def immdt(imm):
    return struct.pack("!I", imm)


def atomiceth(va, rkey, swap_add, compare):
    return struct.pack("!QIQQ", va, rkey, swap_add, compare)


def atomicacketh(orig):
    return struct.pack("!Q", orig)


def payload(n):
    return bytes((i * 7 + 3) & 0xFF for i in range(n))


def ref_icrc(frame):
    """rocev2.md §3.1 from scratch; frame is a full Ethernet frame whose last
    4 bytes are the ICRC field (no Ethernet padding)."""
    ip = bytearray(frame[14:-4])
    if ip[0] >> 4 == 4:
        hl = 20
        ip[1] = 0xFF                # TOS
        ip[8] = 0xFF                # TTL
        ip[10:12] = b"\xff\xff"     # header checksum
    else:
        hl = 40
        ip[0] |= 0x0F               # traffic class, high nibble
        ip[1:4] = b"\xff\xff\xff"   # traffic class low nibble + flow label
        ip[7] = 0xFF                # hop limit
    ip[hl + 6:hl + 8] = b"\xff\xff"  # UDP checksum
    ip[hl + 8 + 4] = 0xFF            # BTH FECN/BECN/resv6a
    return zlib.crc32(b"\xff" * 8 + bytes(ip)) & 0xFFFFFFFF


def bth_fields(**kw):
    f = dict(opcode=0, solicited=0, migreq=0, padcount=0, version=0, pkey=0xFFFF,
             fecn=0, becn=0, dqpn=0, ackreq=0, psn=0)
    f.update(kw)
    return f


cases = []


def add(name, bth, ext=b"", data=b"", v6=False, sport=RC_SPORT, ipid=0x1234,
        ttl=64, tos=0, expect=None):
    pad = (-len(data)) & 3
    bth["padcount"] = pad
    ip = (IPv6(src=SRC6, dst=DST6, hlim=ttl, tc=tos, fl=0) if v6 else
          IP(src=SRC4, dst=DST4, ttl=ttl, tos=tos, id=ipid, flags="DF"))
    pkt = (Ether(src=SRC_MAC, dst=DST_MAC) / ip /
           UDP(sport=sport, dport=4791, chksum=0) / BTH(**bth) /
           Raw(ext + data + b"\x00" * pad))
    frame = bytearray(raw(pkt))
    want = ref_icrc(bytes(frame))
    got = struct.unpack("<I", frame[-4:])[0]
    if v6:
        # scapy has no IPv6 ICRC (it writes 0): use the reference.
        assert got == 0, "scapy started computing IPv6 ICRCs; compare instead"
        frame[-4:] = struct.pack("<I", want)
    else:
        assert got == want, "%s: scapy ICRC %#x != reference %#x" % (name, got, want)
    fields = dict(
        ip_version=6 if v6 else 4,
        src_ip=SRC6 if v6 else SRC4, dst_ip=DST6 if v6 else DST4,
        ttl=ttl, tos=tos, ipid=0 if v6 else ipid, src_port=sport,
        opcode=bth["opcode"], se=bth["solicited"], migreq=bth["migreq"],
        pad=pad, pkey=bth["pkey"], fecn=bth["fecn"], becn=bth["becn"],
        dest_qp=bth["dqpn"], ack_req=bth["ackreq"], psn=bth["psn"],
        payload_len=len(data), payload_hex=data.hex(), icrc=want,
        icrc_source="reference (scapy writes 0 for IPv6)" if v6 else "scapy",
    )
    fields.update(expect or {})
    cases.append(dict(name=name, frame=bytes(frame).hex(), fields=fields))


# RC SEND ONLY, 13-byte payload -> PadCnt 3, SE and AckReq.
add("rc_send_only_pad", bth_fields(opcode=0x04, solicited=1, dqpn=0x1B, ackreq=1, psn=5454383),
    data=payload(13))
# RC RDMA WRITE ONLY + RETH, 64 bytes.
add("rc_write_only_reth", bth_fields(opcode=0x0A, dqpn=0x1B, ackreq=1, psn=0x00FFFFFF),
    ext=reth(0x7F1234567000, 0x00ABCDEF, 64), data=payload(64),
    expect=dict(reth=dict(va=0x7F1234567000, rkey=0x00ABCDEF, len=64)))
# RC ACK, syndrome 0x1F (rxe's ACK), MSN 5.
add("rc_ack", bth_fields(opcode=0x11, dqpn=0x1D, psn=5454383),
    ext=raw(AETH(syndrome=0x1F, msn=5)),
    expect=dict(aeth=dict(syndrome=0x1F, msn=5)))
# RC NAK, PSN sequence error (0x60), PSN = expected.
add("rc_nak_psn_seq", bth_fields(opcode=0x11, dqpn=0x1D, psn=1000),
    ext=raw(AETH(syndrome=0x60, msn=4)),
    expect=dict(aeth=dict(syndrome=0x60, msn=4)))
# RC RDMA READ REQUEST, 3000 bytes.
add("rc_read_request", bth_fields(opcode=0x0C, dqpn=0x1B, ackreq=1, psn=2000),
    ext=reth(0x10000, 0x42, 3000),
    expect=dict(reth=dict(va=0x10000, rkey=0x42, len=3000)))
# READ RESPONSE FIRST / MIDDLE / LAST for a 2*256+101 byte READ at PMTU 256.
add("rc_read_resp_first", bth_fields(opcode=0x0D, dqpn=0x1D, psn=2000),
    ext=raw(AETH(syndrome=0x1F, msn=6)), data=payload(256),
    expect=dict(aeth=dict(syndrome=0x1F, msn=6)))
add("rc_read_resp_middle", bth_fields(opcode=0x0E, dqpn=0x1D, psn=2001), data=payload(256))
add("rc_read_resp_last", bth_fields(opcode=0x0F, dqpn=0x1D, psn=2002),
    ext=raw(AETH(syndrome=0x1F, msn=6)), data=payload(101),
    expect=dict(aeth=dict(syndrome=0x1F, msn=6)))
# RC SEND ONLY with immediate.
add("rc_send_only_imm", bth_fields(opcode=0x05, dqpn=0x1B, ackreq=1, psn=77),
    ext=immdt(0xDEADBEEF), data=payload(32), expect=dict(imm=0xDEADBEEF))
# RC FETCH_ADD and its ATOMIC ACKNOWLEDGE.
add("rc_fetch_add", bth_fields(opcode=0x14, dqpn=0x1B, ackreq=1, psn=300),
    ext=atomiceth(0x2000, 0x77, 1, 0),
    expect=dict(atomic=dict(va=0x2000, rkey=0x77, swap_add=1, compare=0)))
add("rc_atomic_ack", bth_fields(opcode=0x12, dqpn=0x1D, psn=300),
    ext=raw(AETH(syndrome=0x1F, msn=9)) + atomicacketh(41),
    expect=dict(aeth=dict(syndrome=0x1F, msn=9), atomic_ack=41))
# UD SEND ONLY + DETH (GSI-style Q_Key), source port from the QPN hash.
add("ud_send_only_deth", bth_fields(opcode=0x64, dqpn=0x23, psn=12), sport=UD_SPORT,
    ext=deth(0x11111111, 0x22), data=payload(30),
    expect=dict(deth=dict(qkey=0x11111111, src_qp=0x22)))
# CNP (0x81) with BECN and 16 reserved bytes, built with scapy's CNPPadding.
add("cnp", bth_fields(opcode=0x81, becn=1, dqpn=0x1B, psn=0), ext=raw(CNPPadding()))
# IPv6: RC WRITE ONLY + RETH with traffic class 0x68 and hop limit 32.
add("ipv6_rc_write_only", bth_fields(opcode=0x0A, dqpn=0x1B, ackreq=1, psn=42), v6=True,
    ttl=32, tos=0x68, ext=reth(0xABCDEF00, 0x99, 21), data=payload(21),
    expect=dict(reth=dict(va=0xABCDEF00, rkey=0x99, len=21)))

json.dump(dict(generator="roce/testdata/gen_scapy.py (scapy %s)" % __import__("scapy").__version__,
               cases=cases), sys.stdout, indent=1)
sys.stdout.write("\n")
