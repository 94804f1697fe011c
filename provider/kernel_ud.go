package provider

import (
	"github.com/softnic/softnic/uverbs"
)

// kernAH is a kernel device's address handle: CREATE_AH's handle and
// rxe's AH number, which a UD WQE names (uverbs.md §5.4).
type kernAH struct {
	handle uint32
	num    uint32
}

// kernCreateAH is CREATE_AH: the kernel resolves the destination MAC
// from the GID itself (ib_resolve_eth_dmac), so DMAC may be zero.
func (pd *PD) kernCreateAH(attr AHAttr) (*AH, error) {
	const op = "create_ah"
	chk := attr
	if chk.DMAC == ([6]byte{}) {
		chk.DMAC = [6]byte{0x02} // the kernel finds the real one; check the rest
	}
	if err := checkAHAttr(&chk); err != nil {
		return nil, opErr(op, 0, err)
	}
	c := pd.ctx
	h, num, err := c.kern.rxe.createAH(pd.pdn, attr)
	if err != nil {
		return nil, opErr(op, 0, err)
	}
	ah := &AH{pd: pd, attr: attr, kern: &kernAH{handle: h, num: num}}
	pd.refs++
	c.ahs[ah] = struct{}{}
	return ah, nil
}

// createAH is CREATE_AH with rxe's 8-byte response (ah_num).
func (r *rxeControl) createAH(pdHandle uint32, a AHAttr) (uint32, uint32, error) {
	const cmd = "CREATE_AH"
	pd, err := r.handle(cmd, r.pds, "PD", pdHandle)
	if err != nil {
		return 0, 0, err
	}
	core := uverbs.CreateAH{Response: nominalResponse, PDHandle: pd, Attr: uverbs.AHAttr{
		Grh:      uverbs.GlobalRoute{DGID: a.DGID, FlowLabel: a.FlowLabel, SGIDIndex: a.SGIDIndex, HopLimit: a.HopLimit, TrafficClass: a.TrafficClass},
		IsGlobal: 1, PortNum: a.Port}}
	b, err := r.write(uverbs.CmdCreateAH, &core, nil, uverbs.CreateAHRespSize+uverbs.RXECreateAHRespSize)
	if err != nil {
		return 0, 0, err
	}
	var resp uverbs.CreateAHResp
	var drv uverbs.RXECreateAHResp
	if err := decodeResp(cmd, b, &resp, uverbs.CreateAHRespSize); err != nil {
		return 0, 0, err
	}
	if err := decodeResp(cmd, b[uverbs.CreateAHRespSize:], &drv, 4); err != nil {
		return 0, 0, err
	}
	if drv.AHNum == 0 {
		// Only kernels before 5.x answer 0 and want the whole rxe_av in
		// the WQE instead (uverbs.md §5.4); not supported here.
		return 0, 0, detail(ErrNotSupported, "uverbs %s: rxe returned no AH number (an old kernel)", cmd)
	}
	return resp.AHHandle, drv.AHNum, nil
}

// destroyAH is DESTROY_AH.
func (r *rxeControl) destroyAH(h uint32) error {
	_, err := r.write(uverbs.CmdDestroyAH, &uverbs.DestroyAH{AHHandle: h}, nil, 0)
	return err
}
