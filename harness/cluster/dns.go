package cluster

// Corefile is the CoreDNS configuration of clusters whose DNS is our CoreDNS build
// (hack/kubebins/coredns): it serves cluster.local from the API and nothing else. Pods have no
// outside network, so there is nowhere to forward to, and other names get REFUSED at once
// instead of a timeout.
const Corefile = `.:53 {
    errors
    health :8080
    ready :8181
    kubernetes cluster.local in-addr.arpa ip6.arpa {
        pods insecure
        fallthrough in-addr.arpa ip6.arpa
        ttl 5
    }
    cache 5
    loadbalance
}
`
