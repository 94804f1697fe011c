package provider_test

import (
	"fmt"

	"github.com/softnic/softnic/testbed"
)

func ExampleContext_QueryPort() {
	w, err := testbed.New(testbed.DefaultConfig())
	if err != nil {
		panic(err)
	}
	defer w.Close()
	pa, err := w.Hosts[0].Ctx.QueryPort(1)
	if err != nil {
		panic(err)
	}
	fmt.Println(pa.State, pa.ActiveMTU, pa.LinkLayer, pa.GIDs[0].Type)
	// Output: PORT_ACTIVE 4096 Ethernet RoCE v2
}
