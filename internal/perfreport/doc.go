// Command perfreport measures the emulator against commit b152fe6 and
// against anchors (a C post_send with rdma-core's mlx5dv.h helpers, a Go
// copy of 1 MiB, crc32), all in the same run, and writes
// docs/performance.md. Run it as docs/performance.sh from the module root.
//
// Every figure is a ratio of two measurements taken side by side: the
// benchmarks of both trees run alternately, round after round, and each
// figure is the best of its rounds. Absolute wall times are shown for
// reference only; they depend on the machine and its load.
package main
