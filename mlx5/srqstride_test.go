package mlx5

import "testing"

// TestSRQStride: libmlx5's SRQ WQE stride (mlx5_alloc_srq_buf) and the
// scatter entries it holds, which CREATE_SRQ is asked for.
func TestSRQStride(t *testing.T) {
	for _, c := range []struct{ sge, stride, holds int }{
		{0, 32, 1}, {1, 32, 1}, {2, 64, 3}, {3, 64, 3}, {15, 256, 15}, {16, 512, 31}, {30, 512, 31}, {31, 512, 31}, {32, 1024, 63},
	} {
		if got := SRQStride(c.sge); got != c.stride {
			t.Errorf("SRQStride(%d) = %d, want %d", c.sge, got, c.stride)
		}
		if got := SRQStrideSGEs(c.stride); got != c.holds {
			t.Errorf("SRQStrideSGEs(%d) = %d, want %d", c.stride, got, c.holds)
		}
	}
}
