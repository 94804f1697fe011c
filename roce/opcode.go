package roce

import "strconv"

// Opcode is the BTH OpCode byte: bits 7-5 select the transport (RC, UC, RD,
// UD, CNP, XRC), bits 4-0 the operation (rocev2.md §1.4, §2.1).
type Opcode uint8

// Transport is the transport service selected by an opcode's top three bits.
type Transport uint8

// Transports (opcode bits 7-5 shifted down).
const (
	TransportRC  Transport = 0 // 0x00
	TransportUC  Transport = 1 // 0x20
	TransportRD  Transport = 2 // 0x40
	TransportUD  Transport = 3 // 0x60
	TransportCNP Transport = 4 // 0x80
	TransportXRC Transport = 5 // 0xA0
)

var transportNames = [8]string{"RC", "UC", "RD", "UD", "CNP", "XRC", "T6", "T7"}

func (t Transport) String() string { return transportNames[t&7] }

// Transport returns the opcode's transport (bits 7-5).
func (o Opcode) Transport() Transport { return Transport(o >> 5) }

// Opcodes (rocev2.md §2.1). UC = RC + 0x20, UD = RC + 0x60.
const (
	OpRCSendFirst          Opcode = 0x00
	OpRCSendMiddle         Opcode = 0x01
	OpRCSendLast           Opcode = 0x02
	OpRCSendLastImm        Opcode = 0x03
	OpRCSendOnly           Opcode = 0x04
	OpRCSendOnlyImm        Opcode = 0x05
	OpRCWriteFirst         Opcode = 0x06
	OpRCWriteMiddle        Opcode = 0x07
	OpRCWriteLast          Opcode = 0x08
	OpRCWriteLastImm       Opcode = 0x09
	OpRCWriteOnly          Opcode = 0x0A
	OpRCWriteOnlyImm       Opcode = 0x0B
	OpRCReadRequest        Opcode = 0x0C
	OpRCReadResponseFirst  Opcode = 0x0D
	OpRCReadResponseMiddle Opcode = 0x0E
	OpRCReadResponseLast   Opcode = 0x0F
	OpRCReadResponseOnly   Opcode = 0x10
	OpRCAck                Opcode = 0x11
	OpRCAtomicAck          Opcode = 0x12
	OpRCCmpSwap            Opcode = 0x13
	OpRCFetchAdd           Opcode = 0x14
	OpRCSendLastInv        Opcode = 0x16
	OpRCSendOnlyInv        Opcode = 0x17
	OpRCFlush              Opcode = 0x1C
	OpRCAtomicWrite        Opcode = 0x1D
	OpUCSendFirst          Opcode = 0x20
	OpUCSendMiddle         Opcode = 0x21
	OpUCSendLast           Opcode = 0x22
	OpUCSendLastImm        Opcode = 0x23
	OpUCSendOnly           Opcode = 0x24
	OpUCSendOnlyImm        Opcode = 0x25
	OpUCWriteFirst         Opcode = 0x26
	OpUCWriteMiddle        Opcode = 0x27
	OpUCWriteLast          Opcode = 0x28
	OpUCWriteLastImm       Opcode = 0x29
	OpUCWriteOnly          Opcode = 0x2A
	OpUCWriteOnlyImm       Opcode = 0x2B
	OpUDSendOnly           Opcode = 0x64
	OpUDSendOnlyImm        Opcode = 0x65
	OpCNP                  Opcode = 0x81
)

// HeaderKind names an extended transport header.
type HeaderKind uint8

// Extended header kinds, in the fixed wire order they take after the BTH.
const (
	HdrFETH HeaderKind = iota
	HdrDETH
	HdrRETH
	HdrAtomicETH
	HdrAETH
	HdrAtomicAckETH
	HdrImmDt
	HdrIETH
	HdrCNPPad // CNP: 16 reserved bytes
	numHeaderKinds
)

// HeaderSet is a set of HeaderKinds (bit 1<<kind).
type HeaderSet uint16

// Has reports whether h is in the set.
func (s HeaderSet) Has(h HeaderKind) bool { return s&(1<<h) != 0 }

// Header set members.
const (
	HFETH         = HeaderSet(1 << HdrFETH)
	HDETH         = HeaderSet(1 << HdrDETH)
	HRETH         = HeaderSet(1 << HdrRETH)
	HAtomicETH    = HeaderSet(1 << HdrAtomicETH)
	HAETH         = HeaderSet(1 << HdrAETH)
	HAtomicAckETH = HeaderSet(1 << HdrAtomicAckETH)
	HImmDt        = HeaderSet(1 << HdrImmDt)
	HIETH         = HeaderSet(1 << HdrIETH)
	HCNPPad       = HeaderSet(1 << HdrCNPPad)
)

// headerSizes is indexed by HeaderKind.
var headerSizes = [numHeaderKinds]uint8{
	HdrFETH:         FETHSize,
	HdrDETH:         DETHSize,
	HdrRETH:         RETHSize,
	HdrAtomicETH:    AtomicETHSize,
	HdrAETH:         AETHSize,
	HdrAtomicAckETH: AtomicAckETHSize,
	HdrImmDt:        ImmDtSize,
	HdrIETH:         IETHSize,
	HdrCNPPad:       CNPPadSize,
}

var headerNames = [numHeaderKinds]string{"FETH", "DETH", "RETH", "AtomicETH", "AETH", "AtomicAckETH", "ImmDt", "IETH", "CNPPad"}

func (h HeaderKind) String() string {
	if h < numHeaderKinds {
		return headerNames[h]
	}
	return "HeaderKind(" + strconv.Itoa(int(h)) + ")"
}

// Size is the header's length in bytes.
func (h HeaderKind) Size() int {
	if h < numHeaderKinds {
		return int(headerSizes[h])
	}
	return 0
}

// PayloadRule says how much payload a packet with this opcode carries
// (rocev2.md §2.1, §2.2). The parser checks what it can without knowing the
// path MTU: no payload where none is allowed, a 4-byte multiple (PadCnt 0) for
// First/Middle, at least one byte for Last.
type PayloadRule uint8

// Payload rules.
const (
	PayloadNone    PayloadRule = iota // no payload bytes
	PayloadPMTU                       // exactly the path MTU (First, Middle)
	PayloadLast                       // 1..PMTU
	PayloadOnly                       // 0..PMTU
	PayloadAtomic8                    // exactly 8 bytes (ATOMIC WRITE)
)

var payloadNames = [...]string{"none", "=PMTU", "1..PMTU", "0..PMTU", "8"}

func (r PayloadRule) String() string {
	if int(r) < len(payloadNames) {
		return payloadNames[r]
	}
	return "PayloadRule(" + strconv.Itoa(int(r)) + ")"
}

// Position is where a packet sits in its message.
type Position uint8

// Positions. Single-packet operations (ACK, READ request, atomics) are Only.
const (
	PosFirst  Position = 1
	PosMiddle Position = 2
	PosLast   Position = 4
	PosOnly            = PosFirst | PosLast
)

// First reports whether the packet starts a message (First or Only).
func (p Position) First() bool { return p&PosFirst != 0 }

// Last reports whether the packet ends a message (Last or Only).
func (p Position) Last() bool { return p&PosLast != 0 }

// Operation is the kind of work an opcode carries.
type Operation uint8

// Operations.
const (
	OperationInvalid Operation = iota
	OperationSend
	OperationWrite
	OperationReadRequest
	OperationReadResponse
	OperationAck
	OperationAtomicAck
	OperationCmpSwap
	OperationFetchAdd
	OperationFlush
	OperationAtomicWrite
	OperationCNP
)

// OpcodeInfo is one row of the opcode table.
type OpcodeInfo struct {
	Opcode    Opcode
	Name      string // kernel/scapy style, e.g. "RC_RDMA_WRITE_ONLY"
	Operation Operation
	Headers   HeaderSet // extended headers after the BTH, written in HeaderKind order
	Payload   PayloadRule
	Pos       Position
	Response  bool // true for READ responses, ACK, ATOMIC ACK; false for requests and CNP

	valid  bool
	extLen uint8
	offs   [numHeaderKinds]uint8 // offset of each present header from the end of the BTH
}

// Valid reports whether the row describes a known opcode.
func (i *OpcodeInfo) Valid() bool { return i.valid }

// ExtLen is the total length of the extended headers.
func (i *OpcodeInfo) ExtLen() int { return int(i.extLen) }

// Offset returns the offset of header h from the end of the BTH, and whether
// the opcode carries it.
func (i *OpcodeInfo) Offset(h HeaderKind) (int, bool) {
	if h >= numHeaderKinds || !i.Headers.Has(h) {
		return 0, false
	}
	return int(i.offs[h]), true
}

// HasImm reports whether the opcode carries immediate data.
func (i *OpcodeInfo) HasImm() bool { return i.Headers.Has(HdrImmDt) }

// HasPayload reports whether the opcode may carry payload bytes.
func (i *OpcodeInfo) HasPayload() bool { return i.Payload != PayloadNone }

// opcodeList is the opcode table as data (rocev2.md §2.1). RD opcodes are not
// listed: rxe has no RD QPs.
var opcodeList = [...]OpcodeInfo{
	{Opcode: OpRCSendFirst, Name: "RC_SEND_FIRST", Operation: OperationSend, Payload: PayloadPMTU, Pos: PosFirst},
	{Opcode: OpRCSendMiddle, Name: "RC_SEND_MIDDLE", Operation: OperationSend, Payload: PayloadPMTU, Pos: PosMiddle},
	{Opcode: OpRCSendLast, Name: "RC_SEND_LAST", Operation: OperationSend, Payload: PayloadLast, Pos: PosLast},
	{Opcode: OpRCSendLastImm, Name: "RC_SEND_LAST_WITH_IMMEDIATE", Operation: OperationSend, Headers: HImmDt, Payload: PayloadLast, Pos: PosLast},
	{Opcode: OpRCSendOnly, Name: "RC_SEND_ONLY", Operation: OperationSend, Payload: PayloadOnly, Pos: PosOnly},
	{Opcode: OpRCSendOnlyImm, Name: "RC_SEND_ONLY_WITH_IMMEDIATE", Operation: OperationSend, Headers: HImmDt, Payload: PayloadOnly, Pos: PosOnly},
	{Opcode: OpRCWriteFirst, Name: "RC_RDMA_WRITE_FIRST", Operation: OperationWrite, Headers: HRETH, Payload: PayloadPMTU, Pos: PosFirst},
	{Opcode: OpRCWriteMiddle, Name: "RC_RDMA_WRITE_MIDDLE", Operation: OperationWrite, Payload: PayloadPMTU, Pos: PosMiddle},
	{Opcode: OpRCWriteLast, Name: "RC_RDMA_WRITE_LAST", Operation: OperationWrite, Payload: PayloadLast, Pos: PosLast},
	{Opcode: OpRCWriteLastImm, Name: "RC_RDMA_WRITE_LAST_WITH_IMMEDIATE", Operation: OperationWrite, Headers: HImmDt, Payload: PayloadLast, Pos: PosLast},
	{Opcode: OpRCWriteOnly, Name: "RC_RDMA_WRITE_ONLY", Operation: OperationWrite, Headers: HRETH, Payload: PayloadOnly, Pos: PosOnly},
	{Opcode: OpRCWriteOnlyImm, Name: "RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE", Operation: OperationWrite, Headers: HRETH | HImmDt, Payload: PayloadOnly, Pos: PosOnly},
	{Opcode: OpRCReadRequest, Name: "RC_RDMA_READ_REQUEST", Operation: OperationReadRequest, Headers: HRETH, Payload: PayloadNone, Pos: PosOnly},
	{Opcode: OpRCReadResponseFirst, Name: "RC_RDMA_READ_RESPONSE_FIRST", Operation: OperationReadResponse, Headers: HAETH, Payload: PayloadPMTU, Pos: PosFirst, Response: true},
	{Opcode: OpRCReadResponseMiddle, Name: "RC_RDMA_READ_RESPONSE_MIDDLE", Operation: OperationReadResponse, Payload: PayloadPMTU, Pos: PosMiddle, Response: true},
	{Opcode: OpRCReadResponseLast, Name: "RC_RDMA_READ_RESPONSE_LAST", Operation: OperationReadResponse, Headers: HAETH, Payload: PayloadLast, Pos: PosLast, Response: true},
	{Opcode: OpRCReadResponseOnly, Name: "RC_RDMA_READ_RESPONSE_ONLY", Operation: OperationReadResponse, Headers: HAETH, Payload: PayloadOnly, Pos: PosOnly, Response: true},
	{Opcode: OpRCAck, Name: "RC_ACKNOWLEDGE", Operation: OperationAck, Headers: HAETH, Payload: PayloadNone, Pos: PosOnly, Response: true},
	{Opcode: OpRCAtomicAck, Name: "RC_ATOMIC_ACKNOWLEDGE", Operation: OperationAtomicAck, Headers: HAETH | HAtomicAckETH, Payload: PayloadNone, Pos: PosOnly, Response: true},
	{Opcode: OpRCCmpSwap, Name: "RC_COMPARE_SWAP", Operation: OperationCmpSwap, Headers: HAtomicETH, Payload: PayloadNone, Pos: PosOnly},
	{Opcode: OpRCFetchAdd, Name: "RC_FETCH_ADD", Operation: OperationFetchAdd, Headers: HAtomicETH, Payload: PayloadNone, Pos: PosOnly},
	{Opcode: OpRCSendLastInv, Name: "RC_SEND_LAST_WITH_INVALIDATE", Operation: OperationSend, Headers: HIETH, Payload: PayloadLast, Pos: PosLast},
	{Opcode: OpRCSendOnlyInv, Name: "RC_SEND_ONLY_WITH_INVALIDATE", Operation: OperationSend, Headers: HIETH, Payload: PayloadOnly, Pos: PosOnly},
	{Opcode: OpRCFlush, Name: "RC_FLUSH", Operation: OperationFlush, Headers: HFETH | HRETH, Payload: PayloadNone, Pos: PosOnly},
	{Opcode: OpRCAtomicWrite, Name: "RC_ATOMIC_WRITE", Operation: OperationAtomicWrite, Headers: HRETH, Payload: PayloadAtomic8, Pos: PosOnly},

	{Opcode: OpUCSendFirst, Name: "UC_SEND_FIRST", Operation: OperationSend, Payload: PayloadPMTU, Pos: PosFirst},
	{Opcode: OpUCSendMiddle, Name: "UC_SEND_MIDDLE", Operation: OperationSend, Payload: PayloadPMTU, Pos: PosMiddle},
	{Opcode: OpUCSendLast, Name: "UC_SEND_LAST", Operation: OperationSend, Payload: PayloadLast, Pos: PosLast},
	{Opcode: OpUCSendLastImm, Name: "UC_SEND_LAST_WITH_IMMEDIATE", Operation: OperationSend, Headers: HImmDt, Payload: PayloadLast, Pos: PosLast},
	{Opcode: OpUCSendOnly, Name: "UC_SEND_ONLY", Operation: OperationSend, Payload: PayloadOnly, Pos: PosOnly},
	{Opcode: OpUCSendOnlyImm, Name: "UC_SEND_ONLY_WITH_IMMEDIATE", Operation: OperationSend, Headers: HImmDt, Payload: PayloadOnly, Pos: PosOnly},
	{Opcode: OpUCWriteFirst, Name: "UC_RDMA_WRITE_FIRST", Operation: OperationWrite, Headers: HRETH, Payload: PayloadPMTU, Pos: PosFirst},
	{Opcode: OpUCWriteMiddle, Name: "UC_RDMA_WRITE_MIDDLE", Operation: OperationWrite, Payload: PayloadPMTU, Pos: PosMiddle},
	{Opcode: OpUCWriteLast, Name: "UC_RDMA_WRITE_LAST", Operation: OperationWrite, Payload: PayloadLast, Pos: PosLast},
	{Opcode: OpUCWriteLastImm, Name: "UC_RDMA_WRITE_LAST_WITH_IMMEDIATE", Operation: OperationWrite, Headers: HImmDt, Payload: PayloadLast, Pos: PosLast},
	{Opcode: OpUCWriteOnly, Name: "UC_RDMA_WRITE_ONLY", Operation: OperationWrite, Headers: HRETH, Payload: PayloadOnly, Pos: PosOnly},
	{Opcode: OpUCWriteOnlyImm, Name: "UC_RDMA_WRITE_ONLY_WITH_IMMEDIATE", Operation: OperationWrite, Headers: HRETH | HImmDt, Payload: PayloadOnly, Pos: PosOnly},

	{Opcode: OpUDSendOnly, Name: "UD_SEND_ONLY", Operation: OperationSend, Headers: HDETH, Payload: PayloadOnly, Pos: PosOnly},
	{Opcode: OpUDSendOnlyImm, Name: "UD_SEND_ONLY_WITH_IMMEDIATE", Operation: OperationSend, Headers: HDETH | HImmDt, Payload: PayloadOnly, Pos: PosOnly},

	// CNP: BTH + 16 reserved bytes, no payload (rocev2.md §2.1). Kept in the
	// table so it parses and builds; rxe drops it.
	{Opcode: OpCNP, Name: "CNP", Operation: OperationCNP, Headers: HCNPPad, Payload: PayloadNone, Pos: PosOnly},
}

// opcodeTable is opcodeList indexed by opcode; invalid rows have valid=false.
var opcodeTable [256]OpcodeInfo

func init() {
	for _, row := range opcodeList {
		off := uint8(0)
		for h := HeaderKind(0); h < numHeaderKinds; h++ {
			if row.Headers.Has(h) {
				row.offs[h] = off
				off += headerSizes[h]
			}
		}
		row.extLen = off
		row.valid = true
		opcodeTable[row.Opcode] = row
	}
}

// Info returns the opcode's table row. For an unknown opcode the row has
// Valid() == false.
func (o Opcode) Info() *OpcodeInfo { return &opcodeTable[o] }

// Valid reports whether the opcode is in the table.
func (o Opcode) Valid() bool { return opcodeTable[o].valid }

// Opcodes returns the table rows of all known opcodes, in opcode order.
func Opcodes() []OpcodeInfo {
	out := make([]OpcodeInfo, 0, len(opcodeList))
	for i := range opcodeTable {
		if opcodeTable[i].valid {
			out = append(out, opcodeTable[i])
		}
	}
	return out
}

const hexDigits = "0123456789abcdef"

// String returns the opcode's name, or "Opcode(0xNN)" if unknown.
func (o Opcode) String() string {
	if r := &opcodeTable[o]; r.valid {
		return r.Name
	}
	return "Opcode(0x" + string([]byte{hexDigits[o>>4], hexDigits[o&15]}) + ")"
}
