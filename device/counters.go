package device

import (
	"github.com/softnic/softnic/mlx5"
	"github.com/softnic/softnic/trace"
)

// The device's counters, in one catalogue. The first block carries the
// names of the Linux mlx5 and rxe hw_counters (rdma statistic / sysfs
// hw_counters) so that a reader who knows a ConnectX finds them; the rest
// are softnic's own, named after what they count. Warnings recorded in the
// trace use the counter's name as theirs.
var (
	// Requester (Linux mlx5 names).
	CtrPacketSeqErr                = trace.NewCounter("packet_seq_err")                 // PSN-sequence NAKs received
	CtrRNRNakRetryErr              = trace.NewCounter("rnr_nak_retry_err")              // RNR NAKs received (retry limit not yet exceeded)
	CtrLocalACKTimeoutErr          = trace.NewCounter("local_ack_timeout_err")          // local ACK timer expiries (retry limit not yet exceeded)
	CtrImpliedNAKSeqErr            = trace.NewCounter("implied_nak_seq_err")            // a READ/atomic response implied by a later PSN was missing
	CtrReqCQEError                 = trace.NewCounter("req_cqe_error")                  // requester error CQEs (flushes excluded)
	CtrReqCQEFlushError            = trace.NewCounter("req_cqe_flush_error")            // requester WR_FLUSH_ERR CQEs
	CtrReqRemoteAccessErrors       = trace.NewCounter("req_remote_access_errors")       // NAK remote access received
	CtrReqRemoteInvalidRequest     = trace.NewCounter("req_remote_invalid_request")     // NAK invalid request received
	CtrReqTransportRetriesExceeded = trace.NewCounter("req_transport_retries_exceeded") // RETRY_EXC_ERR
	CtrReqRNRRetriesExceeded       = trace.NewCounter("req_rnr_retries_exceeded")       // RNR_RETRY_EXC_ERR
	CtrRoceAdpRetrans              = trace.NewCounter("roce_adp_retrans")               // go-back-N restarts (timeout or NAK)
	CtrRoceAdpRetransTo            = trace.NewCounter("roce_adp_retrans_to")            // restarts caused by a timeout

	// Responder (Linux mlx5 names).
	CtrOutOfSequence            = trace.NewCounter("out_of_sequence")             // request packets with a PSN ahead of the expected one
	CtrDuplicateRequest         = trace.NewCounter("duplicate_request")           // request packets with a PSN behind the expected one
	CtrOutOfBuffer              = trace.NewCounter("out_of_buffer")               // requests that found no receive WQE (RNR NAK sent)
	CtrRxReadRequests           = trace.NewCounter("rx_read_requests")            // READ requests executed
	CtrRxWriteRequests          = trace.NewCounter("rx_write_requests")           // WRITE messages started
	CtrRxAtomicRequests         = trace.NewCounter("rx_atomic_requests")          // atomics executed
	CtrRespCQEError             = trace.NewCounter("resp_cqe_error")              // responder error CQEs (flushes excluded)
	CtrRespCQEFlushError        = trace.NewCounter("resp_cqe_flush_error")        // responder WR_FLUSH_ERR CQEs
	CtrRespLocalLengthError     = trace.NewCounter("resp_local_length_error")     // message larger than the receive WQE
	CtrRespRemoteAccessErrors   = trace.NewCounter("resp_remote_access_errors")   // rkey / bounds failures (NAK remote access sent)
	CtrRespRemoteInvalidRequest = trace.NewCounter("resp_remote_invalid_request") // NAK invalid request sent

	// rxe names.
	CtrSentPkts = trace.NewCounter("sent_pkts") // RoCE packets transmitted (retransmissions included)
	CtrRcvdPkts = trace.NewCounter("rcvd_pkts") // RoCE packets accepted by a QP

	// softnic: transport.
	CtrRetransmittedPkts = trace.NewCounter("retransmitted_pkts") // packets sent again by go-back-N
	CtrACKsSent          = trace.NewCounter("acks_sent")
	CtrNAKsSent          = trace.NewCounter("naks_sent")
	CtrRNRNAKsSent       = trace.NewCounter("rnr_naks_sent")
	CtrACKsRcvd          = trace.NewCounter("acks_rcvd")
	CtrACKStale          = trace.NewCounter("rx_ack_stale")           // an ACK/NAK for PSNs already acknowledged
	CtrACKBadPSN         = trace.NewCounter("rx_ack_bad_psn")         // an ACK, NAK or response for a PSN not sent yet: dropped
	CtrNAKSeqRepeat      = trace.NewCounter("rx_nak_seq_repeat")      // the PSN-sequence NAK of the go-back under way again, nothing acknowledged since: gone back again, no retry spent
	CtrRespUnexpected    = trace.NewCounter("rx_response_unexpected") // a response that matches no outstanding WQE: dropped
	CtrRespDuplicate     = trace.NewCounter("rx_response_duplicate")  // a READ response or atomic ACK already received: dropped
	CtrReadRespOOO       = trace.NewCounter("rx_read_response_out_of_order")

	CtrReadRespNoFirst = trace.NewCounter("rx_read_response_no_first") // a READ response MIDDLE or LAST where the READ's FIRST or ONLY is due: BAD_RESP
	CtrACKInsideRead   = trace.NewCounter("rx_ack_inside_read")        // an ACK whose PSN is one of an unanswered READ/atomic's response PSNs: acknowledges the requests before it, otherwise dropped

	CtrReplayRead      = trace.NewCounter("read_replayed")        // duplicate READ answered from the request's resource
	CtrReplayAtomic    = trace.NewCounter("atomic_replayed")      // duplicate atomic answered with the saved original value
	CtrReplayMiss      = trace.NewCounter("replay_miss")          // duplicate READ/atomic with no matching resource: dropped
	CtrWindowStall     = trace.NewCounter("tx_window_stall")      // transmission held: PSN window or max_rd_atomic full
	CtrTxBufferFull    = trace.NewCounter("tx_buffer_full")       // transmission held: the port's transmit buffer is full (txbuf.go)
	CtrWQEUnsignaled   = trace.NewCounter("wqe_unsignaled")       // WQEs completed without a CQE
	CtrWQEFlushed      = trace.NewCounter("wqe_flushed")          // send WQEs flushed
	CtrQPToError       = trace.NewCounter("qp_to_error")          // QP state changes to ERR
	CtrTxDropDestroyed = trace.NewCounter("tx_drop_destroyed_qp") // frames built before their QP was destroyed or went to ERR/SQE/RESET (or the device to fatal): not sent
	CtrTxDepartStale   = trace.NewCounter("tx_depart_stale")      // a UC/UD WQE's last frame left but the WQE no longer heads the send ring (a model bug: should stay 0)
	CtrTxNoPort        = trace.NewCounter("tx_no_port")
	CtrTxLoopback      = trace.NewCounter("tx_loopback_pkts") // frames to the port's own MAC, looped back inside the NIC (never on the wire)
	CtrPacketizeError  = trace.NewCounter("packetize_error")
	CtrTxPackets       = trace.NewCounter("tx_packets")
	CtrRxPackets       = trace.NewCounter("rx_packets")

	// softnic: doorbells and WQEs.
	CtrDoorbells        = trace.NewCounter("doorbells")
	CtrBlueFlameWrites  = trace.NewCounter("blueflame_writes")
	CtrDBRejected       = trace.NewCounter("db_rejected")
	CtrDBUnknownQP      = trace.NewCounter("db_unknown_qp")
	CtrBFUnknownQP      = trace.NewCounter("bf_unknown_qp")
	CtrDBBadState       = trace.NewCounter("db_bad_state")
	CtrWQEUnknownQP     = trace.NewCounter("wqe_unknown_qp")
	CtrSQOverflow       = trace.NewCounter("sq_overflow")
	CtrWQEMalformed     = trace.NewCounter("wqe_malformed")
	CtrWQEBadState      = trace.NewCounter("wqe_bad_state")
	CtrWQELocalLength   = trace.NewCounter("wqe_local_length")
	CtrWQEBadLKey       = trace.NewCounter("wqe_bad_lkey")
	CtrPayloadDMAError  = trace.NewCounter("payload_dma_error")
	CtrReadScatterProt  = trace.NewCounter("read_scatter_prot")
	CtrAtomicResultProt = trace.NewCounter("atomic_result_prot")

	// softnic: receive path.
	CtrRxDropNotRoCE       = trace.NewCounter("rx_drop_not_roce")
	CtrRxDropVLAN          = trace.NewCounter("rx_drop_vlan")    // a VLAN-tagged RoCE frame: the port has no VLAN (receive.go)
	CtrRxUDParkFull        = trace.NewCounter("rx_ud_park_full") // a frame for a QP with rxParkMax bytes of frames parked: dropped (udpark.go)
	CtrRxDropBadICRC       = trace.NewCounter("rx_drop_bad_icrc")
	CtrRxDropMalformed     = trace.NewCounter("rx_drop_malformed")
	CtrRxDropWrongMAC      = trace.NewCounter("rx_drop_wrong_mac")
	CtrRxDropWrongIP       = trace.NewCounter("rx_drop_wrong_ip")
	CtrRxDropNoQP          = trace.NewCounter("rx_drop_no_qp")
	CtrRxDropBadTransport  = trace.NewCounter("rx_drop_bad_transport")
	CtrRxDropBadPKey       = trace.NewCounter("rx_drop_bad_pkey")
	CtrRxDropQPState       = trace.NewCounter("rx_drop_qp_state")
	CtrRxDropBadSrc        = trace.NewCounter("rx_drop_bad_src")
	CtrRxUnsupportedOp     = trace.NewCounter("rx_unsupported_op")
	CtrRxMissingFirst      = trace.NewCounter("rx_missing_first")
	CtrRxMissingLast       = trace.NewCounter("rx_missing_last")
	CtrRxBadLength         = trace.NewCounter("rx_bad_length")
	CtrRxRecvTooSmall      = trace.NewCounter("rx_recv_too_small")
	CtrRxRecvProt          = trace.NewCounter("rx_recv_prot")
	CtrRxWriteNotAllowed   = trace.NewCounter("rx_write_not_allowed")
	CtrRxWriteRKey         = trace.NewCounter("rx_write_rkey")
	CtrRxWriteDMA          = trace.NewCounter("rx_write_dma")
	CtrRxReadNotAllowed    = trace.NewCounter("rx_read_not_allowed")
	CtrRxReadRKey          = trace.NewCounter("rx_read_rkey")
	CtrRxReadDMA           = trace.NewCounter("rx_read_dma")
	CtrRxReadTooMany       = trace.NewCounter("rx_read_atomic_over_limit") // more READ/atomics in flight than max_dest_rd_atomic
	CtrRxAtomicNotAllowed  = trace.NewCounter("rx_atomic_not_allowed")
	CtrRxAtomicMisaligned  = trace.NewCounter("rx_atomic_misaligned")
	CtrRxAtomicRKey        = trace.NewCounter("rx_atomic_rkey")
	CtrRxAtomicDMA         = trace.NewCounter("rx_atomic_dma")
	CtrRxResponseLength    = trace.NewCounter("rx_read_response_length")
	CtrRxBadAETH           = trace.NewCounter("rx_bad_aeth")
	CtrRxNAKRcvd           = trace.NewCounter("nak_rcvd")
	CtrRQReadError         = trace.NewCounter("rq_read_error")
	CtrRQPrefetch          = trace.NewCounter("rq_wqe_prefetch")     // receive WQEs read ahead of the message that uses them
	CtrRQPrefetchHit       = trace.NewCounter("rq_wqe_prefetch_hit") // messages that found their receive WQE read ahead
	CtrRQDBRReadError      = trace.NewCounter("rq_dbr_read_error")
	CtrRQDBRBad            = trace.NewCounter("rq_dbr_bad")
	CtrRQFlushedInErr      = trace.NewCounter("rq_flushed_in_error")    // receives posted to a QP in ERR, flushed
	CtrRxResponseBadOpcode = trace.NewCounter("rx_response_bad_opcode") // a response of the wrong kind for its WQE: BAD_RESP
	CtrRxSendInvalidate    = trace.NewCounter("rx_send_invalidate")     // SEND with invalidate that invalidated its IETH key
	CtrRxSendInvRKey       = trace.NewCounter("rx_send_inv_rkey")       // SEND with invalidate naming a key that cannot be invalidated: REM_INV_REQ_ERR
	CtrRxDropRespFailing   = trace.NewCounter("rx_drop_resp_failing")   // RC requests after one the responder failed, which waits behind READ responses to go to ERR: dropped

	// softnic: UD, UC, SRQ.
	CtrSRQDBRReadError   = trace.NewCounter("srq_dbr_read_error")
	CtrSRQDBRBad         = trace.NewCounter("srq_dbr_bad")
	CtrCQDBRReadError    = trace.NewCounter("cq_dbr_read_error") // a CQ doorbell-record read failed: the device keeps its last consumer index
	CtrSRQLimit          = trace.NewCounter("srq_limit_reached")
	CtrRxDropBadQKey     = trace.NewCounter("rx_drop_bad_qkey")      // UD: DETH Q_Key differs from the QP's: dropped
	CtrRxUDNoRecv        = trace.NewCounter("rx_ud_no_receive")      // UD: no receive WQE: dropped (UD has no RNR)
	CtrRxUDTooLong       = trace.NewCounter("rx_ud_too_long")        // UD: payload + GRH larger than the receive buffer
	CtrRxUCDropped       = trace.NewCounter("rx_uc_message_dropped") // UC: a message damaged by a lost or reordered packet, dropped
	CtrRxUCError         = trace.NewCounter("rx_uc_error")           // UC: a message that failed a check, dropped (UC never NAKs)
	CtrUDOversize        = trace.NewCounter("ud_send_over_mtu")      // UD: a SEND larger than the path MTU
	CtrWQEBadOpcodeForQP = trace.NewCounter("wqe_opcode_not_for_qp_type")

	// softnic: completions.
	CtrCQEs              = trace.NewCounter("cqes")
	CtrCQOverrun         = trace.NewCounter("cq_overrun")
	CtrCQEDroppedOverrun = trace.NewCounter("cqe_dropped_overrun")
	CtrCQEWriteError     = trace.NewCounter("cqe_write_error")
	CtrCQArms            = trace.NewCounter("cq_arms")
	CtrCQArmUnknownCQ    = trace.NewCounter("cq_arm_unknown_cq")
)

// ctrCQEError is the per-syndrome counter of error CQEs, e.g.
// cqe_error_REMOTE_ACCESS (registered once for every syndrome value).
func ctrCQEError(s mlx5.Syndrome) trace.Counter { return cqeErrorCtrs[s] }

var cqeErrorCtrs = func() (m [256]trace.Counter) {
	for i := range m {
		m[i] = trace.NewCounter("cqe_error_" + mlx5.Syndrome(i).String())
	}
	return m
}()

// HWCounters returns a copy of every counter of the device (its engines'
// included: bar, dma, wqefetch), by name. The transport counters carry the
// Linux mlx5/rxe hw_counter names (see the catalogue above).
func (d *Device) HWCounters() map[string]uint64 { return d.ctr.Snapshot() }

// counter is a counter id of the catalogue above.
type counter = trace.Counter

// LinuxHWCounters are the counters that carry the names of the Linux mlx5
// (and rxe) hw_counters, in the order `rdma statistic show` prints them on
// a ConnectX; softnic stat shows these by default.
var LinuxHWCounters = counterNames(
	CtrRxWriteRequests, CtrRxReadRequests, CtrRxAtomicRequests, CtrOutOfBuffer, CtrOutOfSequence,
	CtrDuplicateRequest, CtrRNRNakRetryErr, CtrPacketSeqErr, CtrImpliedNAKSeqErr, CtrLocalACKTimeoutErr,
	CtrRespLocalLengthError, CtrRespCQEError, CtrReqCQEError, CtrReqRemoteInvalidRequest,
	CtrReqRemoteAccessErrors, CtrRespRemoteAccessErrors, CtrRespCQEFlushError, CtrReqCQEFlushError,
	CtrRoceAdpRetrans, CtrRoceAdpRetransTo, CtrReqTransportRetriesExceeded, CtrReqRNRRetriesExceeded,
	CtrRespRemoteInvalidRequest, CtrSentPkts, CtrRcvdPkts,
)

// counterNames are the names of cs, in order.
func counterNames(cs ...counter) []string {
	n := make([]string, len(cs))
	for i, c := range cs {
		n[i] = c.String()
	}
	return n
}
