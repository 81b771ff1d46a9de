package fabric_test

import (
	"fmt"
	"strings"

	"github.com/lockstep-dev/lockstep/pkg/fabric"
)

func ExampleParseIBNetDiscover() {
	// Two leaves under one spine, as ibnetdiscover prints them (the adapters'
	// own blocks left out for brevity).
	const out = `
switchguid=0x7cfe90030012a000(7cfe90030012a000)
Switch	36 "S-7cfe90030012a000"		# "MF0;spine-01:MSB7800/U1" enhanced port 0 lid 1 lmc 0
[1]	"S-7cfe90030012a100"[19]		# "MF0;leaf-01:MSB7800/U1" lid 2 4xEDR
[2]	"S-7cfe90030012a200"[19]		# "MF0;leaf-02:MSB7800/U1" lid 3 4xEDR

switchguid=0x7cfe90030012a100(7cfe90030012a100)
Switch	36 "S-7cfe90030012a100"		# "MF0;leaf-01:MSB7800/U1" enhanced port 0 lid 2 lmc 0
[1]	"H-98039b0300c10100"[1](98039b0300c10100) 		# "node-01 mlx5_0" lid 10 4xEDR

switchguid=0x7cfe90030012a200(7cfe90030012a200)
Switch	36 "S-7cfe90030012a200"		# "MF0;leaf-02:MSB7800/U1" enhanced port 0 lid 3 lmc 0
[1]	"H-98039b0300c10200"[1](98039b0300c10200) 		# "node-02 mlx5_0" lid 11 4xEDR
`
	fab, err := fabric.ParseIBNetDiscover(strings.NewReader(out))
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, a := range fab.Topology(fabric.Options{}).Assignments {
		fmt.Println(a.Host, a.Domains)
	}
	// Output:
	// node-01 [leaf-7cfe90030012a100 spine-group-7cfe90030012a000]
	// node-02 [leaf-7cfe90030012a200 spine-group-7cfe90030012a000]
}
