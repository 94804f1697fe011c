// Package kverbs is the operating-system end of the provider's kernel
// backends: discovery of RDMA devices under /sys/class/infiniband and
// /sys/class/infiniband_verbs (driver, ABI versions, uverbs char device),
// opening /dev/infiniband/uverbsN, a Transport that sends the uverbs bytes
// package uverbs encodes to the kernel (write() or RDMA_VERBS_IOCTL) with
// their nominal response addresses turned into real pointers, mmap of the
// queues the kernel hands out, and the async-event fd. Spec:
// ../shared/reference/uverbs.md §1-§3 and §6 (Linux 6.1
// drivers/infiniband/core/uverbs_main.c, uverbs_ioctl.c, sysfs.c).
package kverbs
