package chaos

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestParseDNATTargets(t *testing.T) {
	save := `*nat
:KUBE-SEP-AAA - [0:0]
-A KUBE-SEP-AAA -s 10.244.0.5/32 -m comment --comment "default/echo" -j KUBE-MARK-MASQ
-A KUBE-SEP-AAA -p tcp -m comment --comment "default/echo" -m tcp -j DNAT --to-destination 10.244.0.5:8080
-A KUBE-SEP-BBB -p udp -m comment --comment "kube-system/kube-dns:dns" -m udp -j DNAT --to-destination 10.244.1.2:53
-A KUBE-SERVICES -d 10.96.0.1/32 -p tcp -j KUBE-SVC-NPX46M4PTMTKRN6Y
COMMIT`
	assert.Equal(t, map[string]bool{"10.244.0.5:8080": true, "10.244.1.2:53": true}, parseDNATTargets(save))
	assert.Empty(t, parseDNATTargets(""))
}
