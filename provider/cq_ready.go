package provider

// Ready reports whether a completion waits at the consumer index, without
// taking it and without driving an emulated device (a Poll that finds the
// CQ empty would): on mlx5 the CQE's ownership, on rxe the ring's
// producer against its consumer. A destroyed CQ is never ready.
func (cq *CQ) Ready() bool {
	switch {
	case cq.gone():
		return false
	case cq.rx != nil:
		return cq.rx.q.producer() != cq.rx.q.consumer()
	}
	return cq.ready()
}
