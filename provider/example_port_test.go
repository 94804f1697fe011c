package provider_test

import (
	"fmt"
	"net/netip"

	"github.com/softnic/softnic/provider"
)

func ExampleContext_QueryPort() {
	w := newWorld()
	defer w.Close()
	pa, err := w.Hosts[0].Ctx.QueryPort(1)
	if err != nil {
		panic(err)
	}
	// The GID table: a RoCE port has a RoCE v2 GID for its IPv4 address.
	v2 := false
	for _, g := range pa.GIDs {
		v2 = v2 || g.Type == "RoCE v2" && netip.AddrFrom16(g.GID).Unmap().Is4()
	}
	fmt.Println(pa.State, pa.LinkLayer, provider.ValidMTU(pa.ActiveMTU), v2)
	// Output: PORT_ACTIVE Ethernet true true
}
