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
	for _, test := range []string{"write_lat", "send_lat", "read_lat", "write_bw", "send_bw"} {
		t.Run(test, func(t *testing.T) {
			a, b, tcp := freeUDPPort(t), freeUDPPort(t), freeTCPPort(t)
			common := []string{"perf", test, "-n", "20", "-s", "64", "-p", strconv.Itoa(tcp), "--quiet", "--timeout", "10s", "--no-progress"}
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
