package uverbs

// command describes one write command: its core request and response
// structs (resp nil: no response).
type command struct {
	req, resp func() Struct
}

func mk[T any, P interface {
	*T
	Struct
}]() func() Struct {
	return func() Struct { return P(new(T)) }
}

var writeCommands = map[Command]command{
	CmdGetContext:        {mk[GetContext](), mk[GetContextResp]()},
	CmdQueryDevice:       {mk[QueryDevice](), mk[QueryDeviceResp]()},
	CmdQueryPort:         {mk[QueryPort](), mk[QueryPortResp]()},
	CmdAllocPD:           {mk[AllocPD](), mk[AllocPDResp]()},
	CmdDeallocPD:         {mk[DeallocPD](), nil},
	CmdCreateAH:          {mk[CreateAH](), mk[CreateAHResp]()},
	CmdDestroyAH:         {mk[DestroyAH](), nil},
	CmdRegMR:             {mk[RegMR](), mk[RegMRResp]()},
	CmdDeregMR:           {mk[DeregMR](), nil},
	CmdCreateCompChannel: {mk[CreateCompChannel](), mk[CreateCompChannelResp]()},
	CmdCreateCQ:          {mk[CreateCQ](), mk[CreateCQResp]()},
	CmdDestroyCQ:         {mk[DestroyCQ](), mk[DestroyCQResp]()},
	CmdReqNotifyCQ:       {mk[ReqNotifyCQ](), nil},
	CmdCreateQP:          {mk[CreateQP](), mk[CreateQPResp]()},
	CmdQueryQP:           {mk[QueryQP](), mk[QueryQPResp]()},
	CmdModifyQP:          {mk[ModifyQP](), nil},
	CmdDestroyQP:         {mk[DestroyQP](), mk[DestroyQPResp]()},
	CmdPostSend:          {mk[PostSend](), mk[PostSendResp]()},
	CmdPostRecv:          {mk[PostRecv](), mk[PostRecvResp]()},
	CmdCreateSRQ:         {mk[CreateSRQ](), mk[CreateSRQResp]()},
	CmdModifySRQ:         {mk[ModifySRQ](), nil},
	CmdQuerySRQ:          {mk[QuerySRQ](), mk[QuerySRQResp]()},
	CmdDestroySRQ:        {mk[DestroySRQ](), mk[DestroySRQResp]()},
	CmdPostSRQRecv:       {mk[PostSRQRecv](), mk[PostSRQRecvResp]()},
}

var exCommands = map[Command]command{
	ExCmdQueryDevice: {mk[ExQueryDevice](), mk[ExQueryDeviceResp]()},
	ExCmdCreateCQ:    {mk[ExCreateCQ](), mk[ExCreateCQResp]()},
	ExCmdCreateQP:    {mk[ExCreateQP](), mk[ExCreateQPResp]()},
	ExCmdModifyQP:    {mk[ExModifyQP](), mk[ExModifyQPResp]()},
}

// NewRequest returns a new zero core request struct for a write command
// (extended: its ex form), for a server that dispatches on the header; nil
// for a command this package does not describe.
func NewRequest(c Command, extended bool) Struct {
	m := writeCommands
	if extended {
		m = exCommands
	}
	if d, ok := m[c]; ok {
		return d.req()
	}
	return nil
}

// NewResponse is NewRequest's counterpart for the core response; nil also
// for a command without a response (DEALLOC_PD, MODIFY_QP, ...).
func NewResponse(c Command, extended bool) Struct {
	m := writeCommands
	if extended {
		m = exCommands
	}
	if d, ok := m[c]; ok && d.resp != nil {
		return d.resp()
	}
	return nil
}
