package main

import (
	"bytes"
	"path/filepath"
	"strings"
	"testing"
)

// foreignCaptures are captures written by scapy, editcap and mergecap, not
// by softnic (testdata/captures/gen.py regenerates them), with decode's
// exit status and output. Every RoCEv2 frame in them is one RC SEND ONLY
// to QP 0x11; TestDecodeForeignCapturesTshark checks that tshark sees the
// same frames.
var foreignCaptures = []struct {
	name, file string
	code       int
	want       []string
}{
	{"pcapng with three link types (mergecap)", "mixed_linktypes.pcapng", 0, []string{
		"#1 1700000000.000000000 10.0.0.1:49152 → 10.0.0.2:4791 RC_SEND_ONLY qp=0x000011 psn=0x000001 ack=0 len=16 icrc=ok",
		"#2 1700000001.000000000 10.0.0.1:49152 → 10.0.0.2:4791 RC_SEND_ONLY qp=0x000011 psn=0x000002 ack=0 len=16 icrc=ok",
		"#3 1700000002.000000000 10.0.0.1:49152 → 10.0.0.2:4791 RC_SEND_ONLY qp=0x000011 psn=0x000003 ack=0 len=16 icrc=ok",
		"3 frames: 3 roce (0 bad icrc, 0 malformed), 0 skipped",
	}},
	{"UDP to 4792 is not RoCEv2", "udp_4792.pcap", 0, []string{
		"1 frames: 0 roce (0 bad icrc, 0 malformed), 1 skipped",
	}},
}

func TestDecodeForeignCaptures(t *testing.T) {
	for _, tc := range foreignCaptures {
		t.Run(tc.name, func(t *testing.T) {
			var out, errb bytes.Buffer
			code := runDecode([]string{filepath.Join("testdata", "captures", tc.file)}, &out, &errb)
			got := strings.TrimRight(out.String(), "\n")
			if want := strings.Join(tc.want, "\n"); got != want || code != tc.code {
				t.Fatalf("exit %d (want %d), output:\n%s\nwant:\n%s\nstderr: %s", code, tc.code, got, want, errb.String())
			}
		})
	}
}
