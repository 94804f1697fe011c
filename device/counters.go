package device

import "github.com/softnic/softnic/mlx5"

// The device's counters, in one catalogue. The first block carries the
// names of the Linux mlx5 and rxe hw_counters (rdma statistic / sysfs
// hw_counters) so that a reader who knows a ConnectX finds them; the rest
// are softnic's own, named after what they count. Warnings recorded in the
// trace use the counter's name as theirs.
const (
	// Requester (Linux mlx5 names).
	CtrPacketSeqErr                = "packet_seq_err"                 // PSN-sequence NAKs received
	CtrRNRNakRetryErr              = "rnr_nak_retry_err"              // RNR NAKs received (retry limit not yet exceeded)
	CtrLocalACKTimeoutErr          = "local_ack_timeout_err"          // local ACK timer expiries (retry limit not yet exceeded)
	CtrImpliedNAKSeqErr            = "implied_nak_seq_err"            // a READ/atomic response implied by a later PSN was missing
	CtrReqCQEError                 = "req_cqe_error"                  // requester error CQEs (flushes excluded)
	CtrReqCQEFlushError            = "req_cqe_flush_error"            // requester WR_FLUSH_ERR CQEs
	CtrReqRemoteAccessErrors       = "req_remote_access_errors"       // NAK remote access received
	CtrReqRemoteInvalidRequest     = "req_remote_invalid_request"     // NAK invalid request received
	CtrReqTransportRetriesExceeded = "req_transport_retries_exceeded" // RETRY_EXC_ERR
	CtrReqRNRRetriesExceeded       = "req_rnr_retries_exceeded"       // RNR_RETRY_EXC_ERR
	CtrRoceAdpRetrans              = "roce_adp_retrans"               // go-back-N restarts (timeout or NAK)
	CtrRoceAdpRetransTo            = "roce_adp_retrans_to"            // restarts caused by a timeout

	// Responder (Linux mlx5 names).
	CtrOutOfSequence            = "out_of_sequence"             // request packets with a PSN ahead of the expected one
	CtrDuplicateRequest         = "duplicate_request"           // request packets with a PSN behind the expected one
	CtrOutOfBuffer              = "out_of_buffer"               // requests that found no receive WQE (RNR NAK sent)
	CtrRxReadRequests           = "rx_read_requests"            // READ requests executed
	CtrRxWriteRequests          = "rx_write_requests"           // WRITE messages started
	CtrRxAtomicRequests         = "rx_atomic_requests"          // atomics executed
	CtrRespCQEError             = "resp_cqe_error"              // responder error CQEs (flushes excluded)
	CtrRespCQEFlushError        = "resp_cqe_flush_error"        // responder WR_FLUSH_ERR CQEs
	CtrRespLocalLengthError     = "resp_local_length_error"     // message larger than the receive WQE
	CtrRespRemoteAccessErrors   = "resp_remote_access_errors"   // rkey / bounds failures (NAK remote access sent)
	CtrRespRemoteInvalidRequest = "resp_remote_invalid_request" // NAK invalid request sent

	// rxe names.
	CtrSentPkts = "sent_pkts" // RoCE packets transmitted (retransmissions included)
	CtrRcvdPkts = "rcvd_pkts" // RoCE packets accepted by a QP

	// softnic: transport.
	CtrRetransmittedPkts = "retransmitted_pkts" // packets sent again by go-back-N
	CtrACKsSent          = "acks_sent"
	CtrNAKsSent          = "naks_sent"
	CtrRNRNAKsSent       = "rnr_naks_sent"
	CtrACKsRcvd          = "acks_rcvd"
	CtrACKStale          = "rx_ack_stale"           // an ACK/NAK for PSNs already acknowledged
	CtrACKBadPSN         = "rx_ack_bad_psn"         // an ACK/NAK for a PSN never sent: dropped
	CtrRespUnexpected    = "rx_response_unexpected" // a response that matches no outstanding WQE: dropped
	CtrRespDuplicate     = "rx_response_duplicate"  // a READ response or atomic ACK already received: dropped
	CtrReadRespOOO       = "rx_read_response_out_of_order"
	CtrReplayRead        = "read_replayed"        // duplicate READ answered from the request's resource
	CtrReplayAtomic      = "atomic_replayed"      // duplicate atomic answered with the saved original value
	CtrReplayMiss        = "replay_miss"          // duplicate READ/atomic with no matching resource: dropped
	CtrWindowStall       = "tx_window_stall"      // transmission held: PSN window or max_rd_atomic full
	CtrWQEUnsignaled     = "wqe_unsignaled"       // WQEs completed without a CQE
	CtrWQEFlushed        = "wqe_flushed"          // send WQEs flushed
	CtrQPToError         = "qp_to_error"          // QP state changes to ERR
	CtrTxDropDestroyed   = "tx_drop_destroyed_qp" // frames built before their QP was destroyed or went to ERR/RESET: not sent
	CtrTxNoPort          = "tx_no_port"
	CtrPacketizeError    = "packetize_error"
	CtrTxPackets         = "tx_packets"
	CtrRxPackets         = "rx_packets"

	// softnic: doorbells and WQEs.
	CtrDoorbells        = "doorbells"
	CtrBlueFlameWrites  = "blueflame_writes"
	CtrDBRejected       = "db_rejected"
	CtrDBUnknownQP      = "db_unknown_qp"
	CtrBFUnknownQP      = "bf_unknown_qp"
	CtrDBBadState       = "db_bad_state"
	CtrWQEUnknownQP     = "wqe_unknown_qp"
	CtrSQOverflow       = "sq_overflow"
	CtrWQEMalformed     = "wqe_malformed"
	CtrWQEBadState      = "wqe_bad_state"
	CtrWQELocalLength   = "wqe_local_length"
	CtrWQEBadLKey       = "wqe_bad_lkey"
	CtrPayloadDMAError  = "payload_dma_error"
	CtrReadScatterProt  = "read_scatter_prot"
	CtrAtomicResultProt = "atomic_result_prot"

	// softnic: receive path.
	CtrRxDropNotRoCE       = "rx_drop_not_roce"
	CtrRxDropBadICRC       = "rx_drop_bad_icrc"
	CtrRxDropMalformed     = "rx_drop_malformed"
	CtrRxDropWrongMAC      = "rx_drop_wrong_mac"
	CtrRxDropWrongIP       = "rx_drop_wrong_ip"
	CtrRxDropNoQP          = "rx_drop_no_qp"
	CtrRxDropBadTransport  = "rx_drop_bad_transport"
	CtrRxDropBadPKey       = "rx_drop_bad_pkey"
	CtrRxDropQPState       = "rx_drop_qp_state"
	CtrRxDropBadSrc        = "rx_drop_bad_src"
	CtrRxUnsupportedOp     = "rx_unsupported_op"
	CtrRxMissingFirst      = "rx_missing_first"
	CtrRxMissingLast       = "rx_missing_last"
	CtrRxBadLength         = "rx_bad_length"
	CtrRxRecvTooSmall      = "rx_recv_too_small"
	CtrRxRecvProt          = "rx_recv_prot"
	CtrRxWriteNotAllowed   = "rx_write_not_allowed"
	CtrRxWriteRKey         = "rx_write_rkey"
	CtrRxWriteDMA          = "rx_write_dma"
	CtrRxReadNotAllowed    = "rx_read_not_allowed"
	CtrRxReadRKey          = "rx_read_rkey"
	CtrRxReadDMA           = "rx_read_dma"
	CtrRxReadTooMany       = "rx_read_atomic_over_limit" // more READ/atomics in flight than max_dest_rd_atomic
	CtrRxAtomicNotAllowed  = "rx_atomic_not_allowed"
	CtrRxAtomicMisaligned  = "rx_atomic_misaligned"
	CtrRxAtomicRKey        = "rx_atomic_rkey"
	CtrRxAtomicDMA         = "rx_atomic_dma"
	CtrRxResponseLength    = "rx_read_response_length"
	CtrRxBadAETH           = "rx_bad_aeth"
	CtrRxNAKRcvd           = "nak_rcvd"
	CtrRQReadError         = "rq_read_error"
	CtrRQPrefetch          = "rq_wqe_prefetch"     // receive WQEs read ahead of the message that uses them
	CtrRQPrefetchHit       = "rq_wqe_prefetch_hit" // messages that found their receive WQE read ahead
	CtrRQDBRReadError      = "rq_dbr_read_error"
	CtrRQDBRBad            = "rq_dbr_bad"
	CtrRQFlushedInErr      = "rq_flushed_in_error"    // receives posted to a QP in ERR, flushed
	CtrRxResponseBadOpcode = "rx_response_bad_opcode" // a response of the wrong kind for its WQE: BAD_RESP

	// softnic: UD, UC, SRQ.
	CtrSRQDBRReadError   = "srq_dbr_read_error"
	CtrSRQDBRBad         = "srq_dbr_bad"
	CtrSRQLimit          = "srq_limit_reached"
	CtrRxDropBadQKey     = "rx_drop_bad_qkey"      // UD: DETH Q_Key differs from the QP's: dropped
	CtrRxUDNoRecv        = "rx_ud_no_receive"      // UD: no receive WQE: dropped (UD has no RNR)
	CtrRxUDTooLong       = "rx_ud_too_long"        // UD: payload + GRH larger than the receive buffer
	CtrRxUCDropped       = "rx_uc_message_dropped" // UC: a message damaged by a lost or reordered packet, dropped
	CtrRxUCError         = "rx_uc_error"           // UC: a message that failed a check, dropped (UC never NAKs)
	CtrUDOversize        = "ud_send_over_mtu"      // UD: a SEND larger than the path MTU
	CtrWQEBadOpcodeForQP = "wqe_opcode_not_for_qp_type"

	// softnic: completions.
	CtrCQEs              = "cqes"
	CtrCQOverrun         = "cq_overrun"
	CtrCQEDroppedOverrun = "cqe_dropped_overrun"
	CtrCQEWriteError     = "cqe_write_error"
	CtrCQArms            = "cq_arms"
	CtrCQArmUnknownCQ    = "cq_arm_unknown_cq"
)

// ctrCQEError is the per-syndrome counter of error CQEs, e.g.
// cqe_error_REMOTE_ACCESS (the names are built once, not per CQE).
func ctrCQEError(s mlx5.Syndrome) string {
	if n := cqeErrorNames[s]; n != "" {
		return n
	}
	return "cqe_error_" + s.String()
}

var cqeErrorNames = func() (m [256]string) {
	for _, s := range []mlx5.Syndrome{mlx5.SyndLocalLength, mlx5.SyndLocalQPOp, mlx5.SyndLocalProt, mlx5.SyndWRFlush,
		mlx5.SyndMWBind, mlx5.SyndBadResp, mlx5.SyndLocalAccess, mlx5.SyndRemoteInvalidReq, mlx5.SyndRemoteAccess,
		mlx5.SyndRemoteOp, mlx5.SyndTransportRetry, mlx5.SyndRNRRetry, mlx5.SyndRemoteAbort} {
		m[s] = "cqe_error_" + s.String()
	}
	return m
}()

// HWCounters returns a copy of every counter of the device (its engines'
// included: bar, dma, wqefetch), by name. The transport counters carry the
// Linux mlx5/rxe hw_counter names (see the catalogue above).
func (d *Device) HWCounters() map[string]uint64 { return d.ctr.Snapshot() }

// LinuxHWCounters are the counters that carry the names of the Linux mlx5
// (and rxe) hw_counters, in the order `rdma statistic show` prints them on
// a ConnectX; softnic stat shows these by default.
var LinuxHWCounters = []string{
	CtrRxWriteRequests, CtrRxReadRequests, CtrRxAtomicRequests, CtrOutOfBuffer, CtrOutOfSequence,
	CtrDuplicateRequest, CtrRNRNakRetryErr, CtrPacketSeqErr, CtrImpliedNAKSeqErr, CtrLocalACKTimeoutErr,
	CtrRespLocalLengthError, CtrRespCQEError, CtrReqCQEError, CtrReqRemoteInvalidRequest,
	CtrReqRemoteAccessErrors, CtrRespRemoteAccessErrors, CtrRespCQEFlushError, CtrReqCQEFlushError,
	CtrRoceAdpRetrans, CtrRoceAdpRetransTo, CtrReqTransportRetriesExceeded, CtrReqRNRRetriesExceeded,
	CtrRespRemoteInvalidRequest, CtrSentPkts, CtrRcvdPkts,
}
