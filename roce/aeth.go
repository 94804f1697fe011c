package roce

import "github.com/softnic/softnic/sim"

// Syndrome is the AETH syndrome byte: bit 7 reserved, bits 6-5 kind, bits 4-0
// value (rocev2.md §1.6).
type Syndrome uint8

// AckKind is the syndrome's kind (bits 6-5).
type AckKind uint8

// Syndrome kinds.
const (
	KindACK      AckKind = 0
	KindRNRNAK   AckKind = 1
	KindReserved AckKind = 2
	KindNAK      AckKind = 3
)

var ackKindNames = [4]string{"ACK", "RNR_NAK", "RESERVED", "NAK"}

func (k AckKind) String() string { return ackKindNames[k&3] }

// NAK codes (syndrome value when the kind is KindNAK).
const (
	NAKPSNSequenceError     uint8 = 0
	NAKInvalidRequest       uint8 = 1
	NAKRemoteAccessError    uint8 = 2
	NAKRemoteOperationalErr uint8 = 3
	NAKInvalidRDRequest     uint8 = 4
)

// Common syndromes.
const (
	// SyndromeACK is an ACK with credit code 31 ("invalid/unlimited"), what
	// rxe always sends.
	SyndromeACK            Syndrome = 0x1F
	SyndromeNAKPSNSeq      Syndrome = 0x60
	SyndromeNAKInvalidReq  Syndrome = 0x61
	SyndromeNAKRemoteAcc   Syndrome = 0x62
	SyndromeNAKRemoteOp    Syndrome = 0x63
	SyndromeNAKInvalidRDRq Syndrome = 0x64
)

// Kind returns bits 6-5.
func (s Syndrome) Kind() AckKind { return AckKind(s>>5) & 3 }

// Value returns bits 4-0: credit code (ACK), timer code (RNR NAK) or NAK code.
func (s Syndrome) Value() uint8 { return uint8(s) & 0x1F }

// IsACK, IsRNRNAK and IsNAK test the kind.
func (s Syndrome) IsACK() bool    { return s.Kind() == KindACK }
func (s Syndrome) IsRNRNAK() bool { return s.Kind() == KindRNRNAK }
func (s Syndrome) IsNAK() bool    { return s.Kind() == KindNAK }

// ACKSyndrome returns an ACK syndrome with a credit code (0..31).
func ACKSyndrome(creditCode uint8) Syndrome { return Syndrome(creditCode & 0x1F) }

// RNRNAKSyndrome returns an RNR NAK syndrome with an RNR timer code (0..31).
func RNRNAKSyndrome(timerCode uint8) Syndrome { return Syndrome(0x20 | timerCode&0x1F) }

// NAKSyndrome returns a NAK syndrome with a NAK code.
func NAKSyndrome(code uint8) Syndrome { return Syndrome(0x60 | code&0x1F) }

func (s Syndrome) String() string {
	return s.Kind().String() + "(" + string([]byte{hexDigits[s>>4], hexDigits[s&15]}) + ")"
}

// rnrTimerMicros is the minimum RNR NAK wait per timer code, in µs
// (rocev2.md §1.6; code 0 is the longest).
var rnrTimerMicros = [32]uint32{
	655360, 10, 20, 30, 40, 60, 80, 120,
	160, 240, 320, 480, 640, 960, 1280, 1920,
	2560, 3840, 5120, 7680, 10240, 15360, 20480, 30720,
	40960, 61440, 81920, 122880, 163840, 245760, 327680, 491520,
}

// RNRTimerMicros returns the minimum RNR wait of a timer code in µs.
func RNRTimerMicros(code uint8) uint32 { return rnrTimerMicros[code&0x1F] }

// RNRTimer returns the minimum RNR wait of a timer code as virtual time.
func RNRTimer(code uint8) sim.Duration {
	return sim.Duration(rnrTimerMicros[code&0x1F]) * sim.Microsecond
}

// creditCounts maps ACK credit codes to end-to-end credits; code 31 means
// invalid/unlimited and maps to -1.
var creditCounts = [32]int32{
	0, 1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192,
	256, 384, 512, 768, 1024, 1536, 2048, 3072, 4096, 6144, 8192, 12288, 16384, 24576, 32768, -1,
}

// Credits returns the credit count of an ACK credit code, -1 for code 31.
func Credits(code uint8) int32 { return creditCounts[code&0x1F] }
