package provider

// gone reports whether an object cannot be used: nil, destroyed (or its
// Context closed), or a zero value the application built itself
// (&provider.QP{}) rather than one a verb returned — such a value has no
// owner, and each verb refuses it with ErrClosed as it does a destroyed
// object, instead of dereferencing the owner it lacks.
func (c *Context) gone() bool      { return c == nil || c.closed || c.ctl == nil || c.mem == nil }
func (pd *PD) gone() bool          { return pd == nil || pd.dead || pd.ctx == nil }
func (mr *MR) gone() bool          { return mr == nil || mr.dead || mr.pd == nil }
func (cq *CQ) gone() bool          { return cq == nil || cq.dead || cq.ctx == nil }
func (qp *QP) gone() bool          { return qp == nil || qp.dead || qp.ctx == nil }
func (s *SRQ) gone() bool          { return s == nil || s.dead || s.ctx == nil }
func (ah *AH) gone() bool          { return ah == nil || ah.dead || ah.pd == nil }
func (ch *CompChannel) gone() bool { return ch == nil || ch.dead || ch.ctx == nil }
