// Package uverbsdev is the device end of softnic's control channel: it
// serves the kernel's uverbs bytes (package uverbs) for one emulated NIC
// (package device), as /dev/infiniband/uverbsN and mlx5_ib do for a
// ConnectX. A Server is one client context (one open of the uverbs file):
// it decodes each command, resolves the client's object handles to device
// numbers (PD → pdn, MR → lkey, CQ → cqn, QP → qpn, SRQ → srqn, AH,
// completion channel, dynamic UAR), calls the device's control methods and
// writes the kernel's response bytes, core struct then mlx5 driver struct.
// The daemon (softnic serve) carries those bytes over a unix socket; in one
// process a provider calls Server.Do directly (the loopback transport).
//
// # Framing
//
// Server.Handle takes one command in the write() form (ib_uverbs_cmd_hdr,
// optionally ib_uverbs_ex_cmd_hdr, core request, mlx5 driver data; as
// uverbs.ParseWrite splits it) or, when the first 16 bits are an ioctl
// length (an ib_uverbs_ioctl_hdr, see IsIoctl), the RDMA_VERBS_IOCTL form,
// for what only exists as a method: MLX5_IB_METHOD_UAR_OBJ_ALLOC/DESTROY,
// UVERBS_METHOD_QUERY_GID_ENTRY and the generic <object>/DESTROY methods.
//
// There is no shared address space for command buffers across a socket,
// so the user addresses a command carries are read as follows. write():
// the response address is ignored; the response (core then driver) is
// written at the start of the response buffer, at most out_words*4 bytes
// (extended: the core response first, the driver response after it). ioctl:
// the response buffer starts with the request's header and attribute array
// as the kernel leaves them (IDR_NEW and FD_OUT data set, VALID_OUTPUT in
// the flags of every output written); a PTR_OUT attribute's data is the
// byte offset in the response buffer of its output, a PTR_IN of more than
// 8 bytes the byte offset of its data in the request buffer. A backend for
// the real /dev/infiniband/uverbsN uses the same encoders with real
// addresses.
//
// # Errors
//
// A refused command returns a *uverbs.Error: the command's name, the errno
// the kernel would return and the device's reason. mlx5 command statuses
// map to errno as mlx5_core does (Errno); handle and framing errors as the
// uverbs core does. Nothing a client sends can panic the server (FuzzHandle),
// and every refusal is counted (Server.Counters, Device.Counters).
//
// Handles are unique across the clients of one Device, so that a handle of
// another client is told apart from one that never existed: EBADF for the
// former, ENOENT for the latter (the kernel, whose handles are per file,
// cannot tell them apart and answers EINVAL or ENOENT). A handle of the
// wrong object type is EINVAL, as in the kernel.
package uverbsdev
