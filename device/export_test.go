package device

// AllowRemoteInvalidate marks the memory key key as one a peer's SEND with
// invalidate may invalidate (mkc en_rinval). Nothing in the model
// registers such keys yet; tests use this to reach the responder's
// invalidate path. It reports whether the key exists.
func (d *Device) AllowRemoteInvalidate(key uint32) bool {
	mr, ok := d.keys.Lookup(key)
	if ok {
		mr.RemoteInvalidate = true
	}
	return ok
}

// SetNextQPN sets the QP number CreateQP tries next (tests of the
// number's wrap, which takes 2^24 QPs to reach otherwise).
func (d *Device) SetNextQPN(n uint32) { d.nextQPN = n }

// SetNextCQN sets the CQ number CreateCQ tries next (tests of the
// number's wrap, which takes 2^24 CQs to reach otherwise).
func (d *Device) SetNextCQN(n uint32) { d.nextCQN = n }

// SetNextPDN sets the PD number AllocPD tries next (tests of the number's
// wrap, which takes 2^24 PDs to reach otherwise).
func (d *Device) SetNextPDN(n uint32) { d.nextPD = n }

// SetNextSRQN sets the SRQ number CreateSRQ tries next (tests of the
// number's wrap, which takes 2^24 SRQs to reach otherwise).
func (d *Device) SetNextSRQN(n uint32) { d.nextSRQN = n }

// SetNextMR sets the registration count RegMR takes its next key from
// (tests of the 24-bit index's wrap, which takes 2^24 MRs to reach).
func (d *Device) SetNextMR(n uint32) { d.nextMR = n }

// SetNextCompChannel sets the number the last completion channel took
// (tests of the number's wrap, which takes 2^32 channels to reach).
func (d *Device) SetNextCompChannel(n uint32) { d.ev.nextCh = n }
