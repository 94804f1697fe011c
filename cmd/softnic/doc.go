// Command softnic is the command line of the softnic emulated RDMA NIC:
// trace one post_send end to end (trace, view), decode RoCEv2 captures
// (decode), run perftest's tests (perf), print devices, counters and
// profiles (devinfo, stat, profiles), check the model and fault plans
// (calibrate, faults), talk RoCEv2 on a real wire (rdma, rc_pingpong) and
// run the device daemon (serve). It is wiring only: flags and a profile
// in, the packages do the work.
//
// Spec: docs/cli.md (the conventions every command follows); where a
// command mirrors a tool it takes that tool's flag names and output
// shapes: perf is perftest (../shared/reference/perftest.md), rc_pingpong
// is rdma-core's ibv_rc_pingpong, devinfo is ibv_devinfo and stat is
// iproute2's rdma statistic show.
package main
