package trace

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"io"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
	"github.com/google/gopacket/pcapgo"
)

// maliciousCaptures are tiny captures whose lengths claim far more than
// they hold, or lie about their blocks: pcapgo allocates a packet's
// captured length (a header's 32-bit field) before reading it, so without
// the tracker's checks the 40 bytes of the first made it allocate 4 GiB.
// Each is a name, what it is, a hex dump, and the bytes as hex, field by
// field.
var maliciousCaptures = []struct {
	name string
	hex  string
}{
	{
		"pcap_snaplen_4GiB", // a classic header's snap length 0xffffffff, a record claiming 4 GiB
		// 0000  d4 c3 b2 a1 02 00 04 00 00 00 00 00 00 00 00 00
		// 0010  ff ff ff ff 01 00 00 00 00 00 00 00 00 00 00 00
		// 0020  f0 ff ff ff f0 ff ff ff
		"d4c3b2a1 0200 0400 00000000 00000000" + // pcap µs magic (little endian), v2.4
			"ffffffff 01000000" + // snap length 0xffffffff, Ethernet
			"00000000 00000000 f0ffffff f0ffffff", // record: time, captured and original length 0xfffffff0
	},
	{
		"pcap_record_past_262144", // a record one byte past libpcap's maximum, the header's snap length 262144
		// 0000  d4 c3 b2 a1 02 00 04 00 00 00 00 00 00 00 00 00
		// 0010  00 00 04 00 01 00 00 00 00 00 00 00 00 00 00 00
		// 0020  01 00 04 00 01 00 04 00
		"d4c3b2a1 0200 0400 00000000 00000000" + // pcap µs magic (little endian), v2.4
			"00000400 01000000" + // snap length 262144, Ethernet
			"00000000 00000000 01000400 01000400", // record: captured and original length 262145
	},
	{
		"pcap_bigendian_nanos_4GiB", // the same in a big-endian nanosecond file
		// 0000  a1 b2 3c 4d 00 02 00 04 00 00 00 00 00 00 00 00
		// 0010  ff ff ff ff 00 00 00 01 00 00 00 00 00 00 00 00
		// 0020  ff ff ff 00 ff ff ff 00
		"a1b23c4d 0002 0004 00000000 00000000" + // pcap ns magic (big endian), v2.4
			"ffffffff 00000001" + // snap length 0xffffffff, Ethernet
			"00000000 00000000 ffffff00 ffffff00", // record: captured and original length 0xffffff00
	},
	{
		"epb_captured_4GiB", // an enhanced packet block of 32 bytes capturing 4 GiB
		// 0000  0a 0d 0d 0a 1c 00 00 00 4d 3c 2b 1a 01 00 00 00
		// 0010  ff ff ff ff ff ff ff ff 1c 00 00 00 01 00 00 00
		// 0020  14 00 00 00 01 00 00 00 00 00 00 00 14 00 00 00
		// 0030  06 00 00 00 20 00 00 00 00 00 00 00 00 00 00 00
		// 0040  00 00 00 00 f0 ff ff ff f0 ff ff ff 20 00 00 00
		"0a0d0d0a 1c000000" + // section header block, 28 bytes
			"4d3c2b1a 0100 0000" + // byte-order magic (little endian), version 1.0
			"ffffffffffffffff 1c000000" + // section length unknown; length again
			"01000000 14000000" + // interface description block, 20 bytes
			"0100 0000 00000000 14000000" + // Ethernet, snap length 0 (unlimited); length again
			"06000000 20000000" + // enhanced packet block, 32 bytes
			"00000000 00000000 00000000" + // interface 0, timestamp
			"f0ffffff f0ffffff 20000000", // captured and original length 0xfffffff0; length again
	},
	{
		"epb_in_a_4GiB_block", // a 4 GiB block whose captured length fits it, past 262144
		// 0000  0a 0d 0d 0a 1c 00 00 00 4d 3c 2b 1a 01 00 00 00
		// 0010  ff ff ff ff ff ff ff ff 1c 00 00 00 01 00 00 00
		// 0020  14 00 00 00 01 00 00 00 00 00 00 00 14 00 00 00
		// 0030  06 00 00 00 fc ff ff ff 00 00 00 00 00 00 00 00
		// 0040  00 00 00 00 00 ff ff ff 00 ff ff ff
		"0a0d0d0a 1c000000" + // section header block, 28 bytes
			"4d3c2b1a 0100 0000" + // byte-order magic (little endian), version 1.0
			"ffffffffffffffff 1c000000" + // section length unknown; length again
			"01000000 14000000" + // interface description block, 20 bytes
			"0100 0000 00000000 14000000" + // Ethernet, snap length 0 (unlimited); length again
			"06000000 fcffffff" + // enhanced packet block, 0xfffffffc bytes
			"00000000 00000000 00000000" + // interface 0, timestamp
			"00ffffff 00ffffff", // captured and original length 0xffffff00
	},
	{
		"epb_past_262144", // a block that holds its 262145 captured bytes, one past the maximum
		// 0000  0a 0d 0d 0a 1c 00 00 00 4d 3c 2b 1a 01 00 00 00
		// 0010  ff ff ff ff ff ff ff ff 1c 00 00 00 01 00 00 00
		// 0020  14 00 00 00 01 00 00 00 00 00 00 00 14 00 00 00
		// 0030  06 00 00 00 24 00 04 00 00 00 00 00 00 00 00 00
		// 0040  00 00 00 00 01 00 04 00 01 00 04 00
		"0a0d0d0a 1c000000" + // section header block, 28 bytes
			"4d3c2b1a 0100 0000" + // byte-order magic (little endian), version 1.0
			"ffffffffffffffff 1c000000" + // section length unknown; length again
			"01000000 14000000" + // interface description block, 20 bytes
			"0100 0000 00000000 14000000" + // Ethernet, snap length 0 (unlimited); length again
			"06000000 24000400" + // enhanced packet block, 262180 bytes
			"00000000 00000000 00000000" + // interface 0, timestamp
			"01000400 01000400", // captured and original length 262145
	},
	{
		"obsolete_packet_4GiB", // the obsolete packet block, the same
		// 0000  0a 0d 0d 0a 1c 00 00 00 4d 3c 2b 1a 01 00 00 00
		// 0010  ff ff ff ff ff ff ff ff 1c 00 00 00 01 00 00 00
		// 0020  14 00 00 00 01 00 00 00 00 00 00 00 14 00 00 00
		// 0030  02 00 00 00 20 00 00 00 00 00 00 00 00 00 00 00
		// 0040  00 00 00 00 f0 ff ff ff f0 ff ff ff 20 00 00 00
		"0a0d0d0a 1c000000" + // section header block, 28 bytes
			"4d3c2b1a 0100 0000" + // byte-order magic (little endian), version 1.0
			"ffffffffffffffff 1c000000" + // section length unknown; length again
			"01000000 14000000" + // interface description block, 20 bytes
			"0100 0000 00000000 14000000" + // Ethernet, snap length 0 (unlimited); length again
			"02000000 20000000" + // packet block, 32 bytes
			"0000 0000 00000000 00000000" + // interface 0, drops, timestamp
			"f0ffffff f0ffffff 20000000", // captured and original length 0xfffffff0; length again
	},
	{
		"spb_unlimited_snaplen_4GiB", // a simple packet block's original length, the interface's snap length unlimited
		// 0000  0a 0d 0d 0a 1c 00 00 00 4d 3c 2b 1a 01 00 00 00
		// 0010  ff ff ff ff ff ff ff ff 1c 00 00 00 01 00 00 00
		// 0020  14 00 00 00 01 00 00 00 00 00 00 00 14 00 00 00
		// 0030  03 00 00 00 10 00 00 00 f0 ff ff ff 10 00 00 00
		"0a0d0d0a 1c000000" + // section header block, 28 bytes
			"4d3c2b1a 0100 0000" + // byte-order magic (little endian), version 1.0
			"ffffffffffffffff 1c000000" + // section length unknown; length again
			"01000000 14000000" + // interface description block, 20 bytes
			"0100 0000 00000000 14000000" + // Ethernet, snap length 0 (unlimited); length again
			"03000000 10000000" + // simple packet block, 16 bytes
			"f0ffffff 10000000", // original length 0xfffffff0; length again
	},
	{
		"spb_snaplen_cut_still_past_block", // the same cut to a 65536 snap length, still past the block
		// 0000  0a 0d 0d 0a 1c 00 00 00 4d 3c 2b 1a 01 00 00 00
		// 0010  ff ff ff ff ff ff ff ff 1c 00 00 00 01 00 00 00
		// 0020  14 00 00 00 01 00 00 00 00 00 01 00 14 00 00 00
		// 0030  03 00 00 00 10 00 00 00 f0 ff ff ff 10 00 00 00
		"0a0d0d0a 1c000000" + // section header block, 28 bytes
			"4d3c2b1a 0100 0000" + // byte-order magic (little endian), version 1.0
			"ffffffffffffffff 1c000000" + // section length unknown; length again
			"01000000 14000000" + // interface description block, 20 bytes
			"0100 0000 00000100 14000000" + // Ethernet, snap length 65536; length again
			"03000000 10000000" + // simple packet block, 16 bytes
			"f0ffffff 10000000", // original length 0xfffffff0; length again
	},
	{
		"epb_behind_skipped_blocks", // the bad packet block after blocks pcapgo skips inside ReadPacketData
		// 0000  0a 0d 0d 0a 1c 00 00 00 4d 3c 2b 1a 01 00 00 00
		// 0010  ff ff ff ff ff ff ff ff 1c 00 00 00 01 00 00 00
		// 0020  14 00 00 00 01 00 00 00 00 00 00 00 14 00 00 00
		// 0030  ad 0b 00 00 0c 00 00 00 0c 00 00 00 05 00 00 00
		// 0040  18 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00
		// 0050  18 00 00 00 06 00 00 00 20 00 00 00 00 00 00 00
		// 0060  00 00 00 00 00 00 00 00 f0 ff ff ff f0 ff ff ff
		// 0070  20 00 00 00
		"0a0d0d0a 1c000000" + // section header block, 28 bytes
			"4d3c2b1a 0100 0000" + // byte-order magic (little endian), version 1.0
			"ffffffffffffffff 1c000000" + // section length unknown; length again
			"01000000 14000000" + // interface description block, 20 bytes
			"0100 0000 00000000 14000000" + // Ethernet, snap length 0 (unlimited); length again
			"ad0b0000 0c000000 0c000000" + // unknown block type 0xbad, 12 bytes
			"05000000 18000000" + // interface statistics block, 24 bytes
			"00000000 00000000 00000000 18000000" + // interface 0, timestamp; length again
			"06000000 20000000" + // enhanced packet block, 32 bytes
			"00000000 00000000 00000000" + // interface 0, timestamp
			"f0ffffff f0ffffff 20000000", // captured and original length 0xfffffff0; length again
	},
	{
		"second_section_bigendian", // the bad packet block in a second, big-endian section
		// 0000  0a 0d 0d 0a 1c 00 00 00 4d 3c 2b 1a 01 00 00 00
		// 0010  ff ff ff ff ff ff ff ff 1c 00 00 00 01 00 00 00
		// 0020  14 00 00 00 01 00 00 00 00 00 00 00 14 00 00 00
		// 0030  0a 0d 0d 0a 00 00 00 1c 1a 2b 3c 4d 00 01 00 00
		// 0040  ff ff ff ff ff ff ff ff 00 00 00 1c 00 00 00 01
		// 0050  00 00 00 14 00 01 00 00 00 00 00 00 00 00 00 14
		// 0060  00 00 00 06 00 00 00 20 00 00 00 00 00 00 00 00
		// 0070  00 00 00 00 ff ff ff f0 ff ff ff f0 00 00 00 20
		"0a0d0d0a 1c000000" + // section header block, 28 bytes
			"4d3c2b1a 0100 0000" + // byte-order magic (little endian), version 1.0
			"ffffffffffffffff 1c000000" + // section length unknown; length again
			"01000000 14000000" + // interface description block, 20 bytes
			"0100 0000 00000000 14000000" + // Ethernet, snap length 0 (unlimited); length again
			"0a0d0d0a 0000001c" + // section header block, 28 bytes
			"1a2b3c4d 0001 0000" + // byte-order magic (big endian), version 1.0
			"ffffffffffffffff 0000001c" + // section length unknown; length again
			"00000001 00000014" + // interface description block, 20 bytes
			"0001 0000 00000000 00000014" + // Ethernet, snap length 0; length again
			"00000006 00000020" + // enhanced packet block, 32 bytes
			"00000000 00000000 00000000" + // interface 0, timestamp
			"fffffff0 fffffff0 00000020", // captured and original length 0xfffffff0; length again
	},
	{
		"block_length_not_multiple_of_4", // a block length of 13
		// 0000  0a 0d 0d 0a 1c 00 00 00 4d 3c 2b 1a 01 00 00 00
		// 0010  ff ff ff ff ff ff ff ff 1c 00 00 00 ad 0b 00 00
		// 0020  0d 00 00 00 00 00 00 00 00
		"0a0d0d0a 1c000000" + // section header block, 28 bytes
			"4d3c2b1a 0100 0000" + // byte-order magic (little endian), version 1.0
			"ffffffffffffffff 1c000000" + // section length unknown; length again
			"ad0b0000 0d000000 00000000 00", // unknown block type 0xbad, 13 bytes
	},
	{
		"block_length_under_12", // a block length of 8, shorter than a block's type and lengths
		// 0000  0a 0d 0d 0a 1c 00 00 00 4d 3c 2b 1a 01 00 00 00
		// 0010  ff ff ff ff ff ff ff ff 1c 00 00 00 ad 0b 00 00
		// 0020  08 00 00 00 ad 0b 00 00 08 00 00 00
		"0a0d0d0a 1c000000" + // section header block, 28 bytes
			"4d3c2b1a 0100 0000" + // byte-order magic (little endian), version 1.0
			"ffffffffffffffff 1c000000" + // section length unknown; length again
			"ad0b0000 08000000" + // unknown block type 0xbad, 8 bytes
			"ad0b0000 08000000", // and again
	},
	{
		"block_trailing_length_differs", // a 12-byte block that ends saying 16 (tshark: "block lengths don't match")
		// 0000  0a 0d 0d 0a 1c 00 00 00 4d 3c 2b 1a 01 00 00 00
		// 0010  ff ff ff ff ff ff ff ff 1c 00 00 00 ad 0b 00 00
		// 0020  0c 00 00 00 10 00 00 00
		"0a0d0d0a 1c000000" + // section header block, 28 bytes
			"4d3c2b1a 0100 0000" + // byte-order magic (little endian), version 1.0
			"ffffffffffffffff 1c000000" + // section length unknown; length again
			"ad0b0000 0c000000 10000000", // unknown block type 0xbad, 12 bytes; 16 at its end
	},
	{
		"epb_names_a_missing_interface", // a packet of interface 5 in a section of one interface
		// 0000  0a 0d 0d 0a 1c 00 00 00 4d 3c 2b 1a 01 00 00 00
		// 0010  ff ff ff ff ff ff ff ff 1c 00 00 00 01 00 00 00
		// 0020  14 00 00 00 01 00 00 00 00 00 00 00 14 00 00 00
		// 0030  06 00 00 00 20 00 00 00 05 00 00 00 00 00 00 00
		// 0040  00 00 00 00 00 00 00 00 00 00 00 00 20 00 00 00
		"0a0d0d0a 1c000000" + // section header block, 28 bytes
			"4d3c2b1a 0100 0000" + // byte-order magic (little endian), version 1.0
			"ffffffffffffffff 1c000000" + // section length unknown; length again
			"01000000 14000000" + // interface description block, 20 bytes
			"0100 0000 00000000 14000000" + // Ethernet, snap length 0; length again
			"06000000 20000000" + // enhanced packet block, 32 bytes
			"05000000 00000000 00000000" + // interface 5, timestamp
			"00000000 00000000 20000000", // captured and original length 0; length again
	},
	{
		"spb_in_a_section_without_interfaces", // a simple packet block with no interface described
		// 0000  0a 0d 0d 0a 1c 00 00 00 4d 3c 2b 1a 01 00 00 00
		// 0010  ff ff ff ff ff ff ff ff 1c 00 00 00 03 00 00 00
		// 0020  10 00 00 00 00 00 00 00 10 00 00 00
		"0a0d0d0a 1c000000" + // section header block, 28 bytes
			"4d3c2b1a 0100 0000" + // byte-order magic (little endian), version 1.0
			"ffffffffffffffff 1c000000" + // section length unknown; length again
			"03000000 10000000 00000000 10000000", // simple packet block, 16 bytes, original length 0
	},
	{
		"shb_trailing_length_differs", // a 28-byte section header that ends saying 32
		// 0000  0a 0d 0d 0a 1c 00 00 00 4d 3c 2b 1a 01 00 00 00
		// 0010  ff ff ff ff ff ff ff ff 20 00 00 00
		"0a0d0d0a 1c000000" + // section header block, 28 bytes
			"4d3c2b1a 0100 0000" + // byte-order magic (little endian), version 1.0
			"ffffffffffffffff 20000000", // section length unknown; 32 at its end
	},
	{
		"shb_shorter_than_its_fields", // a section header of 24 bytes, its fields take 28
		// 0000  0a 0d 0d 0a 18 00 00 00 4d 3c 2b 1a 01 00 00 00
		// 0010  ff ff ff ff ff ff ff ff
		"0a0d0d0a 18000000" + // section header block, 24 bytes
			"4d3c2b1a 0100 0000" + // byte-order magic (little endian), version 1.0
			"ffffffffffffffff", // section length unknown
	},
	{
		"shb_without_byte_order_magic", // a section header with no byte-order magic
		// 0000  0a 0d 0d 0a 1c 00 00 00 44 33 22 11 01 00 00 00
		// 0010  ff ff ff ff ff ff ff ff 1c 00 00 00
		"0a0d0d0a 1c000000" + // section header block, 28 bytes
			"44332211 0100 0000" + // 0x11223344 where the byte-order magic goes
			"ffffffffffffffff 1c000000", // section length unknown; length again
	},
	{
		"idb_shorter_than_its_fields", // an interface description of 16 bytes, its fields take 20
		// 0000  0a 0d 0d 0a 1c 00 00 00 4d 3c 2b 1a 01 00 00 00
		// 0010  ff ff ff ff ff ff ff ff 1c 00 00 00 01 00 00 00
		// 0020  10 00 00 00 01 00 00 00 00 00 00 00
		"0a0d0d0a 1c000000" + // section header block, 28 bytes
			"4d3c2b1a 0100 0000" + // byte-order magic (little endian), version 1.0
			"ffffffffffffffff 1c000000" + // section length unknown; length again
			"01000000 10000000" + // interface description block, 16 bytes
			"0100 0000 00000000", // Ethernet, snap length 0
	},
	{
		"idb_option_past_its_block", // an interface option of 65535 bytes in a 24-byte block
		// 0000  0a 0d 0d 0a 1c 00 00 00 4d 3c 2b 1a 01 00 00 00
		// 0010  ff ff ff ff ff ff ff ff 1c 00 00 00 01 00 00 00
		// 0020  18 00 00 00 01 00 00 00 00 00 00 00 02 00 ff ff
		// 0030  18 00 00 00
		"0a0d0d0a 1c000000" + // section header block, 28 bytes
			"4d3c2b1a 0100 0000" + // byte-order magic (little endian), version 1.0
			"ffffffffffffffff 1c000000" + // section length unknown; length again
			"01000000 18000000" + // interface description block, 24 bytes
			"0100 0000 00000000" + // Ethernet, snap length 0
			"0200 ffff 18000000", // option if_name, 65535 bytes; length again
	},
	{
		"shb_option_past_its_block", // a section option of 65520 bytes in a 32-byte block
		// 0000  0a 0d 0d 0a 20 00 00 00 4d 3c 2b 1a 01 00 00 00
		// 0010  ff ff ff ff ff ff ff ff 01 00 f0 ff 20 00 00 00
		"0a0d0d0a 20000000" + // section header block, 32 bytes
			"4d3c2b1a 0100 0000" + // byte-order magic (little endian), version 1.0
			"ffffffffffffffff" + // section length unknown
			"0100 f0ff 20000000", // option opt_comment, 65520 bytes; length again
	},
	{
		"isb_option_past_its_block", // a statistics option whose padding runs into the block's trailing length
		// 0000  0a 0d 0d 0a 1c 00 00 00 4d 3c 2b 1a 01 00 00 00
		// 0010  ff ff ff ff ff ff ff ff 1c 00 00 00 01 00 00 00
		// 0020  14 00 00 00 01 00 00 00 00 00 00 00 14 00 00 00
		// 0030  05 00 00 00 1c 00 00 00 00 00 00 00 00 00 00 00
		// 0040  00 00 00 00 01 00 05 00 1c 00 00 00
		"0a0d0d0a 1c000000" + // section header block, 28 bytes
			"4d3c2b1a 0100 0000" + // byte-order magic (little endian), version 1.0
			"ffffffffffffffff 1c000000" + // section length unknown; length again
			"01000000 14000000" + // interface description block, 20 bytes
			"0100 0000 00000000 14000000" + // Ethernet, snap length 0 (unlimited); length again
			"05000000 1c000000" + // interface statistics block, 28 bytes
			"00000000 00000000 00000000" + // interface 0, timestamp
			"0100 0500 1c000000", // option opt_comment, 5 bytes (8 padded); length again
	},
}

// readCapture reads in to its end and returns the frames and the error
// that ended it (NewPcapReader's or ReadFrame's).
func readCapture(in []byte) (int, error) {
	r, err := NewPcapReader(bytes.NewReader(in))
	if err != nil {
		return 0, err
	}
	for n := 0; ; n++ {
		if _, err := r.ReadFrame(); err != nil {
			return n, err
		}
	}
}

// TestPcapMaliciousLengths: every malicious capture is refused as
// malformed, without a frame, and reading it allocates under 1 MiB (the
// classic reader allocated up to 4 GiB for a header's snap length of
// 0xffffffff, the pcapng one a packet block's captured length, before
// reading any of it).
func TestPcapMaliciousLengths(t *testing.T) {
	for _, tc := range maliciousCaptures {
		t.Run(tc.name, func(t *testing.T) {
			in, err := hex.DecodeString(strings.ReplaceAll(tc.hex, " ", ""))
			if err != nil {
				t.Fatal(err)
			}
			var before, after runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&before)
			n, err := readCapture(in)
			runtime.ReadMemStats(&after)
			if !errors.Is(err, ErrMalformed) || n != 0 {
				t.Errorf("%d frames, then %v; want none and %v", n, err, ErrMalformed)
			}
			if a := after.TotalAlloc - before.TotalAlloc; a > 1<<20 {
				t.Errorf("reading %d bytes allocated %d", len(in), a)
			}
		})
	}
}

// TestPcapLengthLimits: the bounds are where libpcap has them, not short
// of them: a record or packet block of 262144 captured bytes reads
// whatever the header's snap length (a classic header's 0xffffffff or 64,
// a pcapng interface's 0); one of 262145 is malformed after the frame
// before it; a simple packet block's original length cut to the
// interface's snap length reads the bytes the block holds; a record
// capturing more than its frame's length is malformed.
func TestPcapLengthLimits(t *testing.T) {
	classic := func(snaplen uint32, caplens ...int) []byte {
		var b bytes.Buffer
		w := pcapgo.NewWriter(&b)
		_ = w.WriteFileHeader(snaplen, layers.LinkTypeEthernet)
		for _, n := range caplens {
			ci := gopacket.CaptureInfo{Timestamp: time.Unix(1, 0), CaptureLength: n, Length: n}
			_ = w.WritePacket(ci, make([]byte, n))
		}
		return b.Bytes()
	}
	ng := func(snaplen uint32, caplens ...int) []byte {
		var b bytes.Buffer
		w, err := pcapgo.NewNgWriterInterface(&b, pcapgo.NgInterface{LinkType: layers.LinkTypeEthernet, SnapLength: snaplen}, pcapgo.DefaultNgWriterOptions)
		if err != nil {
			t.Fatal(err)
		}
		for _, n := range caplens {
			ci := gopacket.CaptureInfo{Timestamp: time.Unix(1, 0), CaptureLength: n, Length: n}
			_ = w.WritePacket(ci, make([]byte, n))
		}
		_ = w.Flush()
		return b.Bytes()
	}
	// The second record captures 60 bytes of a 59-byte frame.
	pastOrig := classic(0xffff, 60, 60, 60)
	binary.LittleEndian.PutUint32(pastOrig[24+16+60+12:], 59)
	// A simple packet block: original length 100, 4 bytes held (the
	// interface's snap length).
	spb := append(ng(4), hexBytes(t, "03000000 14000000 64000000 01020304 14000000")...)
	for _, tc := range []struct {
		name   string
		in     []byte
		frames int
		want   error
	}{
		{"pcap_262144_snaplen_0xffffffff", classic(0xffffffff, 60, PcapSnaplen), 2, io.EOF},
		{"pcap_262144_snaplen_64", classic(64, PcapSnaplen, 60), 2, io.EOF},
		{"pcap_262145", classic(0xffffffff, 60, PcapSnaplen+1, 60), 1, ErrMalformed},
		{"pcapng_262144_unlimited", ng(0, 60, PcapSnaplen), 2, io.EOF},
		{"pcapng_262145", ng(0, 60, PcapSnaplen+1, 60), 1, ErrMalformed},
		{"spb_cut_to_snaplen", spb, 1, io.EOF},
		{"pcap_captured_past_original_length", pastOrig, 1, ErrMalformed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n, err := readCapture(tc.in)
			if n != tc.frames || !errors.Is(err, tc.want) {
				t.Fatalf("%d frames, then %v; want %d and %v", n, err, tc.frames, tc.want)
			}
		})
	}
}

func hexBytes(t *testing.T, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(strings.ReplaceAll(s, " ", ""))
	if err != nil {
		t.Fatal(err)
	}
	return b
}
