package uverbs

// RXEDoorbellWQESize is the wqe_size librxe puts in its doorbell:
// sizeof(struct ibv_send_wr), 128 bytes on 64-bit hosts (test/uverbslayout
// checks it against libibverbs). The kernel wants at least
// sizeof(ib_uverbs_send_wr) there even with no work requests.
const RXEDoorbellWQESize = 128

// RXEDoorbell writes rxe's send doorbell into b: a POST_SEND of no work
// requests (in_words 8, out_words 1), which makes the kernel's requester
// drain the SQ ring the provider filled (uverbs.md §5.4). response is the
// address of a 4-byte PostSendResp. It returns the write() length, 32.
func RXEDoorbell(b []byte, qp Handle, response uint64) (int, error) {
	n, err := PutWriteHdr(b, CmdPostSend, PostSendSize, PostSendRespSize)
	if err != nil {
		return 0, err
	}
	req := PostSend{Response: response, QPHandle: qp, WQESize: RXEDoorbellWQESize}
	req.put(b[CmdHdrSize:])
	return n, nil
}
