package roce

import (
	"encoding/binary"
	"errors"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
)

// gopacket layer types for the BTH and each extended header. BTH is
// registered on UDP port 4791, so gopacket.NewPacket(frame,
// layers.LayerTypeEthernet, ...) yields BTH, the opcode's extended headers and
// a gopacket.Payload holding the payload without pad and ICRC. Numbers are in
// gopacket's 1000-1999 range for well-known application layers.
var (
	LayerTypeBTH          = gopacket.RegisterLayerType(1791, gopacket.LayerTypeMetadata{Name: "BTH", Decoder: gopacket.DecodeFunc(decodeBTH)})
	LayerTypeFETH         = gopacket.RegisterLayerType(1792, gopacket.LayerTypeMetadata{Name: "FETH", Decoder: extDecoder(HdrFETH)})
	LayerTypeDETH         = gopacket.RegisterLayerType(1793, gopacket.LayerTypeMetadata{Name: "DETH", Decoder: extDecoder(HdrDETH)})
	LayerTypeRETH         = gopacket.RegisterLayerType(1794, gopacket.LayerTypeMetadata{Name: "RETH", Decoder: extDecoder(HdrRETH)})
	LayerTypeAtomicETH    = gopacket.RegisterLayerType(1795, gopacket.LayerTypeMetadata{Name: "AtomicETH", Decoder: extDecoder(HdrAtomicETH)})
	LayerTypeAETH         = gopacket.RegisterLayerType(1796, gopacket.LayerTypeMetadata{Name: "AETH", Decoder: extDecoder(HdrAETH)})
	LayerTypeAtomicAckETH = gopacket.RegisterLayerType(1797, gopacket.LayerTypeMetadata{Name: "AtomicAckETH", Decoder: extDecoder(HdrAtomicAckETH)})
	LayerTypeImmDt        = gopacket.RegisterLayerType(1798, gopacket.LayerTypeMetadata{Name: "ImmDt", Decoder: extDecoder(HdrImmDt)})
	LayerTypeIETH         = gopacket.RegisterLayerType(1799, gopacket.LayerTypeMetadata{Name: "IETH", Decoder: extDecoder(HdrIETH)})
	LayerTypeCNPPad       = gopacket.RegisterLayerType(1800, gopacket.LayerTypeMetadata{Name: "CNPPad", Decoder: extDecoder(HdrCNPPad)})
)

var extLayerTypes = [numHeaderKinds]*gopacket.LayerType{
	HdrFETH: &LayerTypeFETH, HdrDETH: &LayerTypeDETH, HdrRETH: &LayerTypeRETH,
	HdrAtomicETH: &LayerTypeAtomicETH, HdrAETH: &LayerTypeAETH, HdrAtomicAckETH: &LayerTypeAtomicAckETH,
	HdrImmDt: &LayerTypeImmDt, HdrIETH: &LayerTypeIETH, HdrCNPPad: &LayerTypeCNPPad,
}

func init() {
	layers.RegisterUDPPortLayerType(UDPPort, LayerTypeBTH)
}

var (
	errLayerTruncated = errors.New("roce: layer truncated")
	errLayerOpcode    = errors.New("roce: unknown BTH opcode")
	errLayerPad       = errors.New("roce: BTH pad count exceeds the payload")
)

// ---------------------------------------------------------------- BTH layer

// BTHLayer is the gopacket layer of a BTH. On decode it takes the whole UDP
// payload: Contents is the 12-byte BTH, Payload the extended headers and
// payload without pad and ICRC; the ICRC (wire value, read least-significant
// byte first) and pad bytes are kept here. gopacket cannot check the ICRC
// (it covers the IP and UDP headers); use ParseFrame for that.
//
// On serialize it prepends the BTH and appends pad (PadCnt computed when
// opts.FixLengths is set) and the 4-byte ICRC field holding ICRC. Call
// PatchFrame on the finished frame to set the real ICRC.
type BTHLayer struct {
	layers.BaseLayer
	BTHFields
	PadBytes []byte
	ICRC     uint32
}

func (l *BTHLayer) LayerType() gopacket.LayerType     { return LayerTypeBTH }
func (l *BTHLayer) CanDecode() gopacket.LayerClass    { return LayerTypeBTH }
func (l *BTHLayer) NextLayerType() gopacket.LayerType { return nextLayer(l.Opcode, -1) }

// DecodeFromBytes decodes a UDP payload (BTH through ICRC).
func (l *BTHLayer) DecodeFromBytes(data []byte, df gopacket.DecodeFeedback) error {
	if len(data) < BTHSize+ICRCSize {
		df.SetTruncated()
		return errLayerTruncated
	}
	b := BTH(data[:BTHSize])
	l.BTHFields = b.Fields()
	info := l.Opcode.Info()
	if !info.valid {
		return errLayerOpcode
	}
	end := len(data) - ICRCSize
	pad := int(l.PadCnt)
	if BTHSize+int(info.extLen)+pad > end {
		return errLayerPad
	}
	l.Contents = data[:BTHSize]
	l.Payload = data[BTHSize : end-pad]
	l.PadBytes = data[end-pad : end]
	l.ICRC = binary.LittleEndian.Uint32(data[end:])
	return nil
}

// SerializeTo implements gopacket.SerializableLayer.
func (l *BTHLayer) SerializeTo(b gopacket.SerializeBuffer, opts gopacket.SerializeOptions) error {
	info := l.Opcode.Info()
	if !info.valid {
		return errLayerOpcode
	}
	pad := int(l.PadCnt)
	if opts.FixLengths {
		pad = PadLen(len(b.Bytes()) - int(info.extLen))
		l.PadCnt = uint8(pad)
	}
	tail, err := b.AppendBytes(pad + ICRCSize)
	if err != nil {
		return err
	}
	clear(tail[:pad])
	binary.LittleEndian.PutUint32(tail[pad:], l.ICRC)
	h, err := b.PrependBytes(BTHSize)
	if err != nil {
		return err
	}
	BTH(h).Encode(&l.BTHFields)
	return nil
}

// nextLayer returns the layer type after header after (-1 = after the BTH)
// for opcode op: the next extended header, else the payload.
func nextLayer(op Opcode, after int) gopacket.LayerType {
	info := op.Info()
	for h := HeaderKind(after + 1); h < numHeaderKinds; h++ {
		if info.Headers.Has(h) {
			return *extLayerTypes[h]
		}
	}
	return gopacket.LayerTypePayload
}

func decodeBTH(data []byte, p gopacket.PacketBuilder) error {
	b := &BTHLayer{}
	if err := b.DecodeFromBytes(data, p); err != nil {
		return err
	}
	p.AddLayer(b)
	info := b.Opcode.Info()
	rest := b.Payload
	for h := HeaderKind(0); h < numHeaderKinds; h++ {
		if !info.Headers.Has(h) {
			continue
		}
		l := newExtLayer(h, b)
		if err := l.DecodeFromBytes(rest, p); err != nil {
			return err
		}
		p.AddLayer(l)
		rest = l.LayerPayload()
	}
	return p.NextDecoder(gopacket.LayerTypePayload)
}

// extDecoder decodes one standalone extended header followed by payload.
func extDecoder(h HeaderKind) gopacket.Decoder {
	return gopacket.DecodeFunc(func(data []byte, p gopacket.PacketBuilder) error {
		l := newExtLayer(h, nil)
		if err := l.DecodeFromBytes(data, p); err != nil {
			return err
		}
		p.AddLayer(l)
		return p.NextDecoder(gopacket.LayerTypePayload)
	})
}

type extDecodingLayer interface {
	gopacket.DecodingLayer
	gopacket.Layer
}

func newExtLayer(h HeaderKind, ctx *BTHLayer) extDecodingLayer {
	e := extLayer{ctx: ctx}
	switch h {
	case HdrFETH:
		return &FETHLayer{extLayer: e}
	case HdrDETH:
		return &DETHLayer{extLayer: e}
	case HdrRETH:
		return &RETHLayer{extLayer: e}
	case HdrAtomicETH:
		return &AtomicETHLayer{extLayer: e}
	case HdrAETH:
		return &AETHLayer{extLayer: e}
	case HdrAtomicAckETH:
		return &AtomicAckETHLayer{extLayer: e}
	case HdrImmDt:
		return &ImmDtLayer{extLayer: e}
	case HdrIETH:
		return &IETHLayer{extLayer: e}
	}
	return &CNPPadLayer{extLayer: e}
}

// ---------------------------------------------------------------- extended header layers

// extLayer is the common part of the extended-header layers. ctx, when set
// (by decodeBTH or NewDecodingLayers), is the BTH layer of the same packet:
// the opcode decides which layer follows. Without it the next layer is the
// payload.
type extLayer struct {
	layers.BaseLayer
	ctx *BTHLayer
}

func (e *extLayer) decode(h HeaderKind, data []byte, df gopacket.DecodeFeedback) ([]byte, error) {
	n := int(headerSizes[h])
	if len(data) < n {
		df.SetTruncated()
		return nil, errLayerTruncated
	}
	e.Contents = data[:n:n]
	e.Payload = data[n:]
	return e.Contents, nil
}

func (e *extLayer) next(h HeaderKind) gopacket.LayerType {
	if e.ctx == nil {
		return gopacket.LayerTypePayload
	}
	return nextLayer(e.ctx.Opcode, int(h))
}

// RETHLayer is the gopacket layer of a RETH.
type RETHLayer struct {
	extLayer
	RETHFields
}

func (l *RETHLayer) LayerType() gopacket.LayerType     { return LayerTypeRETH }
func (l *RETHLayer) CanDecode() gopacket.LayerClass    { return LayerTypeRETH }
func (l *RETHLayer) NextLayerType() gopacket.LayerType { return l.next(HdrRETH) }
func (l *RETHLayer) DecodeFromBytes(data []byte, df gopacket.DecodeFeedback) error {
	c, err := l.decode(HdrRETH, data, df)
	if err == nil {
		l.RETHFields = RETH(c).Fields()
	}
	return err
}
func (l *RETHLayer) SerializeTo(b gopacket.SerializeBuffer, _ gopacket.SerializeOptions) error {
	h, err := b.PrependBytes(RETHSize)
	if err == nil {
		RETH(h).Encode(&l.RETHFields)
	}
	return err
}

// AETHLayer is the gopacket layer of an AETH.
type AETHLayer struct {
	extLayer
	AETHFields
}

func (l *AETHLayer) LayerType() gopacket.LayerType     { return LayerTypeAETH }
func (l *AETHLayer) CanDecode() gopacket.LayerClass    { return LayerTypeAETH }
func (l *AETHLayer) NextLayerType() gopacket.LayerType { return l.next(HdrAETH) }
func (l *AETHLayer) DecodeFromBytes(data []byte, df gopacket.DecodeFeedback) error {
	c, err := l.decode(HdrAETH, data, df)
	if err == nil {
		l.AETHFields = AETH(c).Fields()
	}
	return err
}
func (l *AETHLayer) SerializeTo(b gopacket.SerializeBuffer, _ gopacket.SerializeOptions) error {
	h, err := b.PrependBytes(AETHSize)
	if err == nil {
		AETH(h).Encode(&l.AETHFields)
	}
	return err
}

// AtomicETHLayer is the gopacket layer of an AtomicETH.
type AtomicETHLayer struct {
	extLayer
	AtomicETHFields
}

func (l *AtomicETHLayer) LayerType() gopacket.LayerType     { return LayerTypeAtomicETH }
func (l *AtomicETHLayer) CanDecode() gopacket.LayerClass    { return LayerTypeAtomicETH }
func (l *AtomicETHLayer) NextLayerType() gopacket.LayerType { return l.next(HdrAtomicETH) }
func (l *AtomicETHLayer) DecodeFromBytes(data []byte, df gopacket.DecodeFeedback) error {
	c, err := l.decode(HdrAtomicETH, data, df)
	if err == nil {
		l.AtomicETHFields = AtomicETH(c).Fields()
	}
	return err
}
func (l *AtomicETHLayer) SerializeTo(b gopacket.SerializeBuffer, _ gopacket.SerializeOptions) error {
	h, err := b.PrependBytes(AtomicETHSize)
	if err == nil {
		AtomicETH(h).Encode(&l.AtomicETHFields)
	}
	return err
}

// AtomicAckETHLayer is the gopacket layer of an AtomicAckETH.
type AtomicAckETHLayer struct {
	extLayer
	AtomicAckETHFields
}

func (l *AtomicAckETHLayer) LayerType() gopacket.LayerType     { return LayerTypeAtomicAckETH }
func (l *AtomicAckETHLayer) CanDecode() gopacket.LayerClass    { return LayerTypeAtomicAckETH }
func (l *AtomicAckETHLayer) NextLayerType() gopacket.LayerType { return l.next(HdrAtomicAckETH) }
func (l *AtomicAckETHLayer) DecodeFromBytes(data []byte, df gopacket.DecodeFeedback) error {
	c, err := l.decode(HdrAtomicAckETH, data, df)
	if err == nil {
		l.AtomicAckETHFields = AtomicAckETH(c).Fields()
	}
	return err
}
func (l *AtomicAckETHLayer) SerializeTo(b gopacket.SerializeBuffer, _ gopacket.SerializeOptions) error {
	h, err := b.PrependBytes(AtomicAckETHSize)
	if err == nil {
		AtomicAckETH(h).Encode(&l.AtomicAckETHFields)
	}
	return err
}

// DETHLayer is the gopacket layer of a DETH.
type DETHLayer struct {
	extLayer
	DETHFields
}

func (l *DETHLayer) LayerType() gopacket.LayerType     { return LayerTypeDETH }
func (l *DETHLayer) CanDecode() gopacket.LayerClass    { return LayerTypeDETH }
func (l *DETHLayer) NextLayerType() gopacket.LayerType { return l.next(HdrDETH) }
func (l *DETHLayer) DecodeFromBytes(data []byte, df gopacket.DecodeFeedback) error {
	c, err := l.decode(HdrDETH, data, df)
	if err == nil {
		l.DETHFields = DETH(c).Fields()
	}
	return err
}
func (l *DETHLayer) SerializeTo(b gopacket.SerializeBuffer, _ gopacket.SerializeOptions) error {
	h, err := b.PrependBytes(DETHSize)
	if err == nil {
		DETH(h).Encode(&l.DETHFields)
		h[4] = 0
	}
	return err
}

// FETHLayer is the gopacket layer of a FETH.
type FETHLayer struct {
	extLayer
	FETHFields
}

func (l *FETHLayer) LayerType() gopacket.LayerType     { return LayerTypeFETH }
func (l *FETHLayer) CanDecode() gopacket.LayerClass    { return LayerTypeFETH }
func (l *FETHLayer) NextLayerType() gopacket.LayerType { return l.next(HdrFETH) }
func (l *FETHLayer) DecodeFromBytes(data []byte, df gopacket.DecodeFeedback) error {
	c, err := l.decode(HdrFETH, data, df)
	if err == nil {
		l.FETHFields = FETH(c).Fields()
	}
	return err
}
func (l *FETHLayer) SerializeTo(b gopacket.SerializeBuffer, _ gopacket.SerializeOptions) error {
	h, err := b.PrependBytes(FETHSize)
	if err == nil {
		FETH(h).Encode(&l.FETHFields)
	}
	return err
}

// ImmDtLayer is the gopacket layer of an ImmDt header.
type ImmDtLayer struct {
	extLayer
	Imm uint32
}

func (l *ImmDtLayer) LayerType() gopacket.LayerType     { return LayerTypeImmDt }
func (l *ImmDtLayer) CanDecode() gopacket.LayerClass    { return LayerTypeImmDt }
func (l *ImmDtLayer) NextLayerType() gopacket.LayerType { return l.next(HdrImmDt) }
func (l *ImmDtLayer) DecodeFromBytes(data []byte, df gopacket.DecodeFeedback) error {
	c, err := l.decode(HdrImmDt, data, df)
	if err == nil {
		l.Imm = ImmDt(c).Imm()
	}
	return err
}
func (l *ImmDtLayer) SerializeTo(b gopacket.SerializeBuffer, _ gopacket.SerializeOptions) error {
	h, err := b.PrependBytes(ImmDtSize)
	if err == nil {
		ImmDt(h).Encode(l.Imm)
	}
	return err
}

// IETHLayer is the gopacket layer of an IETH.
type IETHLayer struct {
	extLayer
	RKey uint32
}

func (l *IETHLayer) LayerType() gopacket.LayerType     { return LayerTypeIETH }
func (l *IETHLayer) CanDecode() gopacket.LayerClass    { return LayerTypeIETH }
func (l *IETHLayer) NextLayerType() gopacket.LayerType { return l.next(HdrIETH) }
func (l *IETHLayer) DecodeFromBytes(data []byte, df gopacket.DecodeFeedback) error {
	c, err := l.decode(HdrIETH, data, df)
	if err == nil {
		l.RKey = IETH(c).RKey()
	}
	return err
}
func (l *IETHLayer) SerializeTo(b gopacket.SerializeBuffer, _ gopacket.SerializeOptions) error {
	h, err := b.PrependBytes(IETHSize)
	if err == nil {
		IETH(h).Encode(l.RKey)
	}
	return err
}

// CNPPadLayer is the gopacket layer of the 16 reserved bytes of a CNP.
type CNPPadLayer struct {
	extLayer
}

func (l *CNPPadLayer) LayerType() gopacket.LayerType     { return LayerTypeCNPPad }
func (l *CNPPadLayer) CanDecode() gopacket.LayerClass    { return LayerTypeCNPPad }
func (l *CNPPadLayer) NextLayerType() gopacket.LayerType { return l.next(HdrCNPPad) }
func (l *CNPPadLayer) DecodeFromBytes(data []byte, df gopacket.DecodeFeedback) error {
	_, err := l.decode(HdrCNPPad, data, df)
	return err
}
func (l *CNPPadLayer) SerializeTo(b gopacket.SerializeBuffer, _ gopacket.SerializeOptions) error {
	h, err := b.PrependBytes(CNPPadSize)
	if err == nil {
		clear(h)
	}
	return err
}

// ---------------------------------------------------------------- DecodingLayerParser support

// DecodingLayers holds one of each RoCE decoding layer, wired so that the
// extended-header layers follow the BTH's opcode. Add them to a
// gopacket.DecodingLayerParser (with gopacket.Payload for the payload); the
// parser then decodes RoCE frames without allocating.
type DecodingLayers struct {
	BTH          BTHLayer
	FETH         FETHLayer
	DETH         DETHLayer
	RETH         RETHLayer
	AtomicETH    AtomicETHLayer
	AETH         AETHLayer
	AtomicAckETH AtomicAckETHLayer
	ImmDt        ImmDtLayer
	IETH         IETHLayer
	CNPPad       CNPPadLayer
}

// NewDecodingLayers returns a wired set of decoding layers.
func NewDecodingLayers() *DecodingLayers {
	d := &DecodingLayers{}
	for _, e := range []*extLayer{&d.FETH.extLayer, &d.DETH.extLayer, &d.RETH.extLayer, &d.AtomicETH.extLayer,
		&d.AETH.extLayer, &d.AtomicAckETH.extLayer, &d.ImmDt.extLayer, &d.IETH.extLayer, &d.CNPPad.extLayer} {
		e.ctx = &d.BTH
	}
	return d
}

// Layers returns the layers for gopacket.DecodingLayerParser.
func (d *DecodingLayers) Layers() []gopacket.DecodingLayer {
	return []gopacket.DecodingLayer{&d.BTH, &d.FETH, &d.DETH, &d.RETH, &d.AtomicETH, &d.AETH,
		&d.AtomicAckETH, &d.ImmDt, &d.IETH, &d.CNPPad}
}

// PatchFrame finishes a frame serialized with gopacket: it sets the IPv4
// header checksum (IPv4 only) and writes the ICRC, found from the UDP length
// (gopacket's Ethernet layer pads short frames to 60 bytes after the ICRC).
// Serialize with FixLengths: true and ComputeChecksums: false; the UDP
// checksum should stay 0.
func PatchFrame(frame []byte) error {
	if len(frame) < EthHeaderSize+1 {
		return parseErr(LayerEthernet, 0, ErrTruncated, "")
	}
	ip := frame[EthHeaderSize:]
	var hl int
	switch ip[0] >> 4 {
	case 4:
		hl = IPv4HeaderSize
	case 6:
		hl = IPv6HeaderSize
	default:
		return parseErr(LayerIP, EthHeaderSize, ErrBadVersion, "")
	}
	if len(ip) < hl+UDPHeaderSize {
		return parseErr(LayerIP, EthHeaderSize, ErrTruncated, "")
	}
	udpLen := int(binary.BigEndian.Uint16(ip[hl+4:]))
	if udpLen < UDPHeaderSize+BTHSize+ICRCSize || hl+udpLen > len(ip) {
		return parseErr(LayerUDP, EthHeaderSize+hl+4, ErrBadLength, "")
	}
	if hl == IPv4HeaderSize {
		binary.BigEndian.PutUint16(ip[10:], ipv4Checksum(ip))
	}
	end := hl + udpLen - ICRCSize
	c := icrc4
	if hl == IPv6HeaderSize {
		c = icrc6
	}
	binary.LittleEndian.PutUint32(ip[end:], c(ip[:end]))
	return nil
}
