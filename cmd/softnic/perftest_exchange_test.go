package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestPerftestKeysRoundTrip(t *testing.T) {
	cases := []struct {
		name string
		d    ptDest
		gid  bool
	}{
		{"RoCE with GID", ptDest{LID: 0, OutReads: 16, QPN: 0x11, PSN: 0xabcdef, RKey: 0x1234, VAddr: 0x55d0c0a0b000,
			GID: [16]byte{10: 0xff, 11: 0xff, 12: 192, 13: 0, 14: 2, 15: 9}, SRQN: 0, hasGID: true}, true},
		{"largest values", ptDest{LID: 0xffff, OutReads: 0xffff, QPN: 0xffffff, PSN: 0xffffff, RKey: 0xffffffff, VAddr: ^uint64(0),
			GID: [16]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}, SRQN: 0xffffffff, hasGID: true}, true},
		{"IB without GID", ptDest{LID: 3, OutReads: 1, QPN: 0x100, PSN: 1, RKey: 2, VAddr: 3, SRQN: 4}, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			b := c.d.encode(c.gid)
			want := ptKeyMsg
			if c.gid {
				want = ptKeyMsgGID
			}
			if len(b) != want || b[len(b)-1] != 0 {
				t.Fatalf("message of %d bytes (want %d, NUL-terminated): %q", len(b), want, b)
			}
			got, err := decodePTDest(b)
			if err != nil {
				t.Fatal(err)
			}
			if got != c.d {
				t.Errorf("round trip\n got %+v\nwant %+v", got, c.d)
			}
		})
	}
}

// The bytes of stock perftest 6.06's keys message (its sprintf with the
// GID: LID, out_reads, QPN, PSN, RKey, VAddr, 16 GID bytes, SRQN).
func TestPerftestKeysStockBytes(t *testing.T) {
	msg := "0000:0080:000011:5b2c41:000002a3:000055f1e6a9b000:00:00:00:00:00:00:00:00:00:00:ff:ff:c0:00:02:09:00000000:"
	b := make([]byte, ptKeyMsgGID)
	copy(b, msg)
	d, err := decodePTDest(b)
	if err != nil {
		t.Fatal(err)
	}
	want := ptDest{OutReads: 0x80, QPN: 0x11, PSN: 0x5b2c41, RKey: 0x2a3, VAddr: 0x55f1e6a9b000,
		GID: [16]byte{10: 0xff, 11: 0xff, 12: 0xc0, 14: 2, 15: 9}, hasGID: true}
	if d != want {
		t.Errorf("decoded %+v, want %+v", d, want)
	}
	if got := d.encode(true); !bytes.Equal(got, b) {
		t.Errorf("re-encoded %q, want %q", got, b)
	}
}

func TestPerftestKeysRejects(t *testing.T) {
	for _, bad := range []string{
		"",
		"0000:0080:000011",
		"0000:0080:0000zz:5b2c41:000002a3:000055f1e6a9b000:00000000",
		"0000:0080:1000000:5b2c41:000002a3:000055f1e6a9b000:00000000",
		"0000:0080:000011:5b2c41:000002a3:000055f1e6a9b000:00:00:00:00:00:00:00:00:00:00:ff:ff:c0:00:02:100:00000000:",
	} {
		if _, err := decodePTDest([]byte(bad)); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

func TestPerftestVersion(t *testing.T) {
	v, err := parsePTVersion(ptVersionMsg())
	if err != nil || v != 6.06 || len(ptVersionMsg()) != 16 {
		t.Fatalf("own version %v, %v", v, err)
	}
	if v, err := parsePTVersion([]byte("5.70 beta\x00")); err != nil || v != 5.70 {
		t.Errorf("5.70 beta: %v, %v", v, err)
	}
	if _, err := parsePTVersion([]byte("x")); err == nil {
		t.Error("a version without a number accepted")
	}
	for mtu, e := range map[int]int{256: 1, 1024: 3, 4096: 5, 1000: 0} {
		if got := ibvMTU(mtu); got != e {
			t.Errorf("ibvMTU(%d) = %d, want %d", mtu, got, e)
		}
	}
}

func FuzzPerftestKeys(f *testing.F) {
	f.Add(ptDest{QPN: 0x11, PSN: 1, RKey: 2, VAddr: 3, hasGID: true}.encode(true))
	f.Add(ptDest{QPN: 0x11}.encode(false))
	f.Add([]byte("0000:0080:000011:5b2c41:000002a3:000055f1e6a9b000:00:00:00:00:00:00:00:00:00:00:ff:ff:c0:00:02:09:00000000:"))
	f.Fuzz(func(t *testing.T, b []byte) {
		d, err := decodePTDest(b)
		if err != nil {
			return
		}
		// Whatever decodes re-encodes to a message that decodes the same.
		e := d.encode(d.hasGID)
		d2, err := decodePTDest(e)
		if err != nil || d2 != d {
			t.Fatalf("%q decoded to %+v, re-encoded %q decoded to %+v, %v", b, d, e, d2, err)
		}
	})
}

// The corpus under testdata/fuzz is kept in the repository.
func TestPerftestFuzzCorpusPresent(t *testing.T) {
	ents, err := os.ReadDir(filepath.Join("testdata", "fuzz", "FuzzPerftestKeys"))
	if err != nil || len(ents) == 0 {
		t.Fatalf("no corpus for FuzzPerftestKeys: %v", err)
	}
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join("testdata", "fuzz", "FuzzPerftestKeys", e.Name()))
		if err != nil || !strings.HasPrefix(string(b), "go test fuzz v1") {
			t.Errorf("%s is not a corpus file", e.Name())
		}
	}
}
