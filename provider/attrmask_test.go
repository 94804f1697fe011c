package provider

import "testing"

// TestAttrMasksAreIBV: the masks are enum ibv_qp_attr_mask's values
// (verbs.h), and ValidMTU takes exactly the IB MTUs.
func TestAttrMasksAreIBV(t *testing.T) {
	for _, c := range []struct {
		name string
		got  uint32
		want uint32
	}{
		{"IBV_QP_STATE", AttrState, 1 << 0}, {"IBV_QP_ACCESS_FLAGS", AttrAccessFlags, 1 << 3},
		{"IBV_QP_PKEY_INDEX", AttrPKeyIndex, 1 << 4}, {"IBV_QP_PORT", AttrPort, 1 << 5},
		{"IBV_QP_QKEY", AttrQKey, 1 << 6}, {"IBV_QP_AV", AttrAV, 1 << 7}, {"IBV_QP_PATH_MTU", AttrPathMTU, 1 << 8},
		{"IBV_QP_TIMEOUT", AttrTimeout, 1 << 9}, {"IBV_QP_RETRY_CNT", AttrRetryCnt, 1 << 10},
		{"IBV_QP_RNR_RETRY", AttrRNRRetry, 1 << 11}, {"IBV_QP_RQ_PSN", AttrRQPSN, 1 << 12},
		{"IBV_QP_MAX_QP_RD_ATOMIC", AttrMaxQPRdAtomic, 1 << 13}, {"IBV_QP_MIN_RNR_TIMER", AttrMinRNRTimer, 1 << 15},
		{"IBV_QP_SQ_PSN", AttrSQPSN, 1 << 16}, {"IBV_QP_MAX_DEST_RD_ATOMIC", AttrMaxDestRdAtomic, 1 << 17},
		{"IBV_QP_DEST_QPN", AttrDestQPN, 1 << 20},
	} {
		if c.got != c.want {
			t.Errorf("%s = %#x, want %#x", c.name, c.got, c.want)
		}
	}
	for _, n := range []int{256, 512, 1024, 2048, 4096} {
		if !ValidMTU(n) {
			t.Errorf("ValidMTU(%d) = false", n)
		}
	}
	for _, n := range []int{0, 100, 1500, 8192, -1} {
		if ValidMTU(n) {
			t.Errorf("ValidMTU(%d) = true", n)
		}
	}
}
