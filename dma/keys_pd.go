package dma

// UsesPD reports whether any registered memory region belongs to pdn (a PD
// with regions cannot be deallocated).
func (k *Keys) UsesPD(pdn uint32) bool {
	for _, mr := range k.m {
		if mr.PDN == pdn {
			return true
		}
	}
	return false
}
