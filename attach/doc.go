// Package attach is the protocol between the softnic daemon (softnic
// serve, package serve) and its clients (provider.Dial): messages on a
// unix SOCK_SEQPACKET socket, host memory and the MMIO ring passed as
// memfds with SCM_RIGHTS, and the operations of the ring's calls.
//
// It follows the kernel's split (uverbs.md §1): control is uverbs command
// bytes (ib_uverbs_cmd_hdr or RDMA_VERBS_IOCTL, made by package uverbs, as
// /dev/infiniband/uverbsN reads them), carried whole in a Uverbs message;
// what the kernel serves through event fds (completion channels, the
// async-event queue), extended commands (MODIFY_CQ, RESIZE_CQ) and sysfs
// (hw_counters) is a Sim message with a small fixed encoding; MMIO is
// records in an mmioring ring in shared memory, never on the socket.
// docs/daemon.md describes the whole and its time model.
//
// Every decoder here checks lengths and values: a peer's message is
// untrusted and can produce an error, never a panic.
package attach
