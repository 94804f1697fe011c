package main

import (
	"bytes"
	"fmt"
	"strconv"
	"sync"
	"testing"
)

// Mode 2 against itself: two softnic perf processes' worth of NICs on UDP
// loopback, one server and one client, speaking perftest's exchange. (The
// same runs against stock perftest are test/interop's perftest test.)
func TestPerfWireLoopback(t *testing.T) {
	if testing.Short() {
		t.Skip("real sockets")
	}
	cases := []struct {
		name, test string
		extra      []string
	}{
		{"write_lat", "write_lat", nil}, {"send_lat", "send_lat", nil}, {"read_lat", "read_lat", nil},
		{"write_bw", "write_bw", nil}, {"send_bw", "send_bw", nil},
		// -e: both sides sleep on their completion channels.
		{"send_lat -e", "send_lat", []string{"-e"}}, {"read_lat -e", "read_lat", []string{"-e"}},
		{"send_bw -e", "send_bw", []string{"-e"}},
		{"write_bw --tclass", "write_bw", []string{"--tclass", "0x68"}},
	}
	for _, c := range cases {
		test := c.test
		t.Run(c.name, func(t *testing.T) {
			a, b, tcp := freeUDPPort(t), freeUDPPort(t), freeTCPPort(t)
			common := append([]string{"perf", test, "-n", "20", "-s", "64", "-p", strconv.Itoa(tcp), "--quiet", "--timeout", "10s", "--no-progress"}, c.extra...)
			var wg sync.WaitGroup
			var sOut, sErr bytes.Buffer
			var sCode int
			wg.Add(1)
			go func() {
				defer wg.Done()
				sCode = run(append(append([]string{}, common...), "--wire", fmt.Sprintf("udp:127.0.0.1:%d,127.0.0.1:%d", a, b), "--ip", "192.0.2.1"), &sOut, &sErr)
			}()
			var cOut, cErr bytes.Buffer
			cCode := run(append(append([]string{}, common...), "--wire", fmt.Sprintf("udp:127.0.0.1:%d,127.0.0.1:%d", b, a), "--ip", "192.0.2.2", "127.0.0.1"), &cOut, &cErr)
			wg.Wait()
			if sCode != 0 || cCode != 0 {
				t.Fatalf("server exit %d: %s\nclient exit %d: %s", sCode, sErr.String(), cCode, cErr.String())
			}
			rows := tableRows(t, cOut.String())
			if len(rows) != 1 || rows[0][0] != "64" || rows[0][1] != "20" {
				t.Errorf("client rows %q\n%s", rows, cOut.String())
			}
			if test != "read_lat" {
				if rows := tableRows(t, sOut.String()); len(rows) != 1 || rows[0][0] != "64" {
					t.Errorf("server rows %q\n%s", rows, sOut.String())
				}
			}
		})
	}
}
