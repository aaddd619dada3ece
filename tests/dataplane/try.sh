#!/usr/bin/env bash
# Issue 47 groundwork: proves by hand that stock kube-proxy (nftables mode),
# built from the pinned k8s.io/kubernetes, routes a Service's ClusterIP to a
# real listener, all inside network namespaces, against the same etcd and
# kube-apiserver the real-control-plane tests run. docs/dataplane-notes.md
# records what this showed and what the Rust scenarios need from it.
#
# Run as root: tests/dataplane/try.sh   (KEEP=1 leaves everything running
# and prints how to clean up; CONTROL_PLANE_BIN and KUBE_PROXY override the
# binaries' places). Needs: ip (iproute2), nft (nftables), socat, nc, openssl.
# Writes /etc/netns/dp-node/resolv.conf (removed at the end).
#
# Topology: one member's node and pod, plus a second cluster's node and pod
# reached through a router namespace (the flat network: pod IPs route
# between clusters). The host's own namespace gains one veth, to reach the
# API server, and forwards nothing.
#
#   root netns               dp-node (kube-proxy)         dp-pod
#   apiserver 127.0.0.1
#   relay 10.200.0.1 ------- 10.200.0.2 eth0
#                            10.244.1.1 pod5 ------------ 10.244.1.5 socat :8080
#                            10.201.1.2 eth1
#                                 |
#                            dp-fabric (router): 10.244/16 via dp-node,
#                                 |               10.245/16 via dp-node2
#                            10.201.2.2 eth1
#                            dp-node2 (the other cluster's node, no kube-proxy)
#                            10.245.2.1 pod7 ------------ dp-pod2 10.245.2.7 socat :8080
#
# The node needs a route for every ClusterIP it dials (the default route
# here): connect() looks a route up before nftables' DNAT rewrites the
# destination, so a VIP with no route fails with "network unreachable".
set -euo pipefail

bins="${CONTROL_PLANE_BIN:-/work/main/target/control-plane}"
kube_proxy="${KUBE_PROXY:-$bins/kube-proxy}"
for tool in ip nft socat nc openssl; do
    command -v "$tool" >/dev/null || { echo "error: $tool is needed" >&2; exit 1; }
done
[ "$(id -u)" = 0 ] || { echo "error: run as root (network namespaces, nftables)" >&2; exit 1; }

node=dp-node
pod=dp-pod
fabric=dp-fabric
node2=dp-node2
pod2=dp-pod2
pod2_ip=10.245.2.7
# IPv6 beside each IPv4 address, for the dual-stack step.
pod_ip6=fd00:10:244:1::5
pod2_ip6=fd00:10:245:2::7
vip_pool6=fd00:c5e7::/108
vip6=fd00:c5e7::5
host_if=dp-host0
host_ip=10.200.0.1
node_ip=10.200.0.2
pod_ip=10.244.1.5
pod_gw=10.244.1.1
vip_pool=243.0.0.0/16
vip=243.0.0.5
work="$(mktemp -d /tmp/dataplane-try.XXXXXX)"
pids=()
resolv_made=""

cleanup() {
    local rc=$?
    if [ "${KEEP:-0}" = 1 ]; then
        echo "KEEP=1: left running; pids ${pids[*]}; work dir $work"
        echo "clean up (SIGTERM leaves kube-apiserver running for minutes):" \
            "kill -9 ${pids[*]}; then ip netns del each of" \
            "$node $pod $fabric $node2 $pod2; ip link del $host_if; rm -rf /etc/netns/$node"
        return
    fi
    # SIGKILL, as the Rust harness does: on SIGTERM kube-apiserver drains
    # for minutes. Nothing here has state worth a clean stop.
    for pid in "${pids[@]}"; do kill -9 "$pid" 2>/dev/null || true; done
    for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
    for ns in "$pod2" "$node2" "$fabric" "$pod" "$node"; do ip netns del "$ns" 2>/dev/null || true; done
    [ -z "$resolv_made" ] || { rm -rf "$resolv_made"; rmdir /etc/netns 2>/dev/null || true; }
    ip link del "$host_if" 2>/dev/null || true
    [ "$rc" = 0 ] && rm -rf "$work" || echo "logs kept in $work"
}
trap cleanup EXIT

step() { printf '\n== %s (%ss)\n' "$*" "$SECONDS"; }
# Polls "$@" every 0.2 s for up to $limit seconds.
until_ok() {
    local limit=$1; shift
    local end=$((SECONDS + limit))
    until "$@" >/dev/null 2>&1; do
        [ "$SECONDS" -lt "$end" ] || { echo "timed out: $*" >&2; return 1; }
        sleep 0.2
    done
}
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

step "network namespaces"
ip netns add "$node"
ip netns add "$pod"
ip link add "$host_if" type veth peer name eth0 netns "$node"
ip addr add "$host_ip/24" dev "$host_if"
ip link set "$host_if" up
ip -n "$node" link set lo up
ip -n "$node" addr add "$node_ip/24" dev eth0
ip -n "$node" link set eth0 up
ip -n "$node" route add default via "$host_ip"
# The node forwards between its pods and the rest of the flat network.
ip netns exec "$node" sysctl -qw net.ipv4.ip_forward=1
ip -n "$node" link add pod5 type veth peer name eth0 netns "$pod"
ip -n "$node" addr add "$pod_gw/24" dev pod5
ip -n "$node" link set pod5 up
ip -n "$pod" link set lo up
ip -n "$pod" addr add "$pod_ip/24" dev eth0
ip -n "$pod" link set eth0 up
ip -n "$pod" route add default via "$pod_gw"
ip netns exec "$node" sysctl -qw net.ipv6.conf.all.forwarding=1
ip addr add fd00:200::1/64 dev "$host_if" nodad
ip -n "$node" addr add fd00:200::2/64 dev eth0 nodad
ip -n "$node" -6 route add default via fd00:200::1
ip -n "$node" addr add fd00:10:244:1::1/64 dev pod5 nodad
ip -n "$pod" addr add "$pod_ip6/64" dev eth0 nodad
ip -n "$pod" -6 route add default via fd00:10:244:1::1
# The other cluster: its node (no kube-proxy needed: nothing dials a VIP
# there in this script), its pod, and the router between the two nodes.
veth() { # veth NS1 IF1 ADDR1 NS2 IF2 ADDR2
    ip -n "$1" link add "$2" type veth peer name "$5" netns "$4"
    ip -n "$1" addr add "$3" dev "$2"
    ip -n "$4" addr add "$6" dev "$5"
    ip -n "$1" link set "$2" up
    ip -n "$4" link set "$5" up
}
for ns in "$fabric" "$node2" "$pod2"; do
    ip netns add "$ns"
    ip -n "$ns" link set lo up
done
ip netns exec "$fabric" sysctl -qw net.ipv4.ip_forward=1
ip netns exec "$node2" sysctl -qw net.ipv4.ip_forward=1
ip netns exec "$fabric" sysctl -qw net.ipv6.conf.all.forwarding=1
ip netns exec "$node2" sysctl -qw net.ipv6.conf.all.forwarding=1
veth "$fabric" n1 10.201.1.1/24 "$node" eth1 10.201.1.2/24
veth "$fabric" n2 10.201.2.1/24 "$node2" eth1 10.201.2.2/24
veth "$node2" pod7 10.245.2.1/24 "$pod2" eth0 "$pod2_ip/24"
ip -n "$fabric" route add 10.244.0.0/16 via 10.201.1.2
ip -n "$fabric" route add 10.245.0.0/16 via 10.201.2.2
ip -n "$node" route add 10.245.0.0/16 via 10.201.1.1
ip -n "$node2" route add default via 10.201.2.1
ip -n "$pod2" route add default via 10.245.2.1
ip -n "$fabric" addr add fd00:201:1::1/64 dev n1 nodad
ip -n "$node" addr add fd00:201:1::2/64 dev eth1 nodad
ip -n "$fabric" addr add fd00:201:2::1/64 dev n2 nodad
ip -n "$node2" addr add fd00:201:2::2/64 dev eth1 nodad
ip -n "$node2" addr add fd00:10:245:2::1/64 dev pod7 nodad
ip -n "$pod2" addr add "$pod2_ip6/64" dev eth0 nodad
ip -n "$fabric" -6 route add fd00:10:244::/48 via fd00:201:1::2
ip -n "$fabric" -6 route add fd00:10:245::/48 via fd00:201:2::2
ip -n "$node" -6 route add fd00:10:245::/48 via fd00:201:1::1
ip -n "$node2" -6 route add default via fd00:201:2::1
ip -n "$pod2" -6 route add default via fd00:10:245:2::1

step "listeners in the pod (the conformance suite's socat lines)"
ip netns exec "$pod" socat TCP6-LISTEN:8080,fork,reuseaddr,ipv6only=0 SYSTEM:"echo pod ip $pod_ip" \
    >"$work/socat-tcp.log" 2>&1 &
pids+=($!)
ip netns exec "$pod" socat UDP6-LISTEN:8080,fork,reuseaddr,ipv6only=0 SYSTEM:"echo pod ip $pod_ip" \
    >"$work/socat-udp.log" 2>&1 &
pids+=($!)
ip netns exec "$pod2" socat TCP6-LISTEN:8080,fork,reuseaddr,ipv6only=0 SYSTEM:"echo pod ip $pod2_ip" \
    >"$work/socat2-tcp.log" 2>&1 &
pids+=($!)
ip netns exec "$pod2" socat UDP6-LISTEN:8080,fork,reuseaddr,ipv6only=0 SYSTEM:"echo pod ip $pod2_ip" \
    >"$work/socat2-udp.log" 2>&1 &
pids+=($!)
until_ok 5 ip netns exec "$node" nc -z -w1 "$pod_ip" 8080
until_ok 5 ip netns exec "$pod" nc -z -w1 "$pod2_ip" 8080
echo "direct, node to pod: $(ip netns exec "$node" nc -w1 "$pod_ip" 8080 </dev/null)"
echo "direct, pod to the other cluster's pod: $(ip netns exec "$pod" nc -w1 "$pod2_ip" 8080 </dev/null)"
until_ok 5 ip netns exec "$pod" nc -z -w1 "$pod2_ip6" 8080
echo "direct, over IPv6: $(ip netns exec "$pod" nc -w1 "$pod2_ip6" 8080 </dev/null)"

step "certificates and etcd"
cd "$work"
openssl req -x509 -newkey rsa:2048 -nodes -days 1 -subj /CN=dataplane-try-ca \
    -keyout ca.key -out ca.crt 2>/dev/null
# The harness's certificate: loopback names only (the node reaches the API
# server through a relay, below, and names it "localhost").
printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\n' >serving.ext
openssl req -newkey rsa:2048 -nodes -subj /CN=kube-apiserver -keyout serving.key -out serving.csr 2>/dev/null
openssl x509 -req -in serving.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 1 \
    -extfile serving.ext -out serving.crt 2>/dev/null
openssl genrsa -out sa.key 2048 2>/dev/null
openssl rsa -in sa.key -pubout -out sa.pub 2>/dev/null
token=dataplane-try-admin
echo "$token,admin,admin-uid,system:masters" >tokens.csv
etcd_port=$(free_port)
peer_port=$(free_port)
"$bins/etcd" --name=try --data-dir="$work/etcd" \
    --listen-client-urls="http://127.0.0.1:$etcd_port" --advertise-client-urls="http://127.0.0.1:$etcd_port" \
    --listen-peer-urls="http://127.0.0.1:$peer_port" --initial-advertise-peer-urls="http://127.0.0.1:$peer_port" \
    --initial-cluster="try=http://127.0.0.1:$peer_port" --log-level=warn \
    --quota-backend-bytes=536870912 >"$work/etcd.log" 2>&1 &
pids+=($!)
until_ok 30 curl -sf "http://127.0.0.1:$etcd_port/health"

step "kube-apiserver on 127.0.0.1, as in the harness; a relay on $host_ip for the node"
api_port=$(free_port)
"$bins/kube-apiserver" --etcd-servers="http://127.0.0.1:$etcd_port" \
    --bind-address=127.0.0.1 --advertise-address=127.0.0.1 --secure-port="$api_port" \
    --endpoint-reconciler-type=none \
    --tls-cert-file=serving.crt --tls-private-key-file=serving.key --client-ca-file=ca.crt \
    --token-auth-file=tokens.csv \
    --service-account-issuer=https://try.clusterset-dns.test \
    --service-account-key-file=sa.pub --service-account-signing-key-file=sa.key \
    --authorization-mode=Node,RBAC --service-cluster-ip-range=10.96.0.0/16,fd00:10:96::/112 \
    --cert-dir="$work/apiserver-certs" --profiling=false --v=1 >"$work/kube-apiserver.log" 2>&1 &
pids+=($!)
# kubeconfig SERVER [TLS-SERVER-NAME]
kubeconfig() {
    cat <<EOF
apiVersion: v1
kind: Config
clusters:
- name: c
  cluster:
    server: https://$1
    certificate-authority: $work/ca.crt
${2:+    tls-server-name: $2}
users:
- name: admin
  user:
    token: $token
contexts:
- name: c
  context:
    cluster: c
    user: admin
current-context: c
EOF
}
kubeconfig "127.0.0.1:$api_port" >kubeconfig
# A namespace's loopback is its own: the node dials the host end of its
# veth, where this relay passes the bytes to the API server's loopback
# port; TLS is end to end, and tls-server-name makes the client check the
# certificate for "localhost".
socat TCP-LISTEN:"$api_port",bind="$host_ip",fork,reuseaddr TCP:127.0.0.1:"$api_port" \
    >"$work/relay.log" 2>&1 &
pids+=($!)
kubeconfig "$host_ip:$api_port" localhost >node.kubeconfig
k() { "$bins/kubectl" --kubeconfig="$work/kubeconfig" "$@"; }
until_ok 60 k get --raw /readyz
echo "apiserver ready"

step "the Node object kube-proxy reads its IPs from"
# kube-proxy waits up to 30 s for its Node to exist with addresses
# (pkg/proxy/node.go) and then goes on without a node IP; making it first
# saves the wait.
k apply -f - <<EOF
apiVersion: v1
kind: Node
metadata: {name: $node}
EOF
k patch node "$node" --subresource=status --type=merge \
    -p "{\"status\":{\"addresses\":[{\"type\":\"InternalIP\",\"address\":\"$node_ip\"},{\"type\":\"InternalIP\",\"address\":\"fd00:200::2\"}]}}"

step "kube-proxy (nftables) in $node"
t_kp=$SECONDS
ip netns exec "$node" "$kube_proxy" --kubeconfig="$work/node.kubeconfig" \
    --proxy-mode=nftables --hostname-override="$node" --cluster-cidr=10.244.0.0/16,fd00:10:244::/48 \
    --conntrack-max-per-core=0 --conntrack-min=0 \
    --v=2 >"$work/kube-proxy.log" 2>&1 &
pids+=($!)
until_ok 30 ip netns exec "$node" nft list table ip kube-proxy
echo "kube-proxy's table is there after $((SECONDS - t_kp))s"

step "a selectorless Service and its EndpointSlice"
k apply -f - <<EOF
apiVersion: v1
kind: Service
metadata: {name: web, namespace: default}
spec:
  ports:
  - {name: tcp, protocol: TCP, port: 80, targetPort: 8080}
  - {name: udp, protocol: UDP, port: 80, targetPort: 8080}
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: web-1
  namespace: default
  labels: {kubernetes.io/service-name: web}
addressType: IPv4
ports:
- {name: tcp, protocol: TCP, port: 8080}
- {name: udp, protocol: UDP, port: 8080}
endpoints:
- addresses: [$pod_ip]
  conditions: {ready: true}
EOF
cluster_ip=$(k get service web -o jsonpath='{.spec.clusterIP}')
echo "ClusterIP $cluster_ip"

# Dials $1 port 80 from the node (or from the namespace $from): TCP, or UDP
# with -u (a datagram in, the listener's line back).
dial() {
    if [ "${2:-}" = -u ]; then
        echo hello | ip netns exec "${from:-$node}" nc -u -w1 "$1" 80
    else
        ip netns exec "${from:-$node}" nc -w2 "$1" 80 </dev/null
    fi
}
answers() { [ "$(dial "$@")" = "pod ip $pod_ip" ]; }
t=$SECONDS
until_ok 30 answers "$cluster_ip"
echo "TCP $cluster_ip:80 -> '$(dial "$cluster_ip")' (rules in place within $((SECONDS - t))s)"
until_ok 10 answers "$cluster_ip" -u
echo "UDP $cluster_ip:80 -> '$(dial "$cluster_ip" -u)'"

step "hairpin: a pod whose own address is the endpoint it lands on"
# kube-proxy masquerades a connection that comes back to the pod it came
# from only for endpoints it knows are on its node (EndpointSlice
# endpoints[].nodeName = its --hostname-override); without nodeName the
# pod's SYN-ACK comes from itself and the dial times out. kube-proxy's
# hairpin set is keyed by address and port, not by Service: one slice
# with nodeName for 10.244.1.5:8080 makes every Service's hairpin work, so
# this runs before web-vip's slice (which has nodeName) exists.
if ip netns exec "$pod" nc -w2 "$cluster_ip" 80 </dev/null | grep -q .; then
    echo "unexpected: hairpin answered without nodeName"; exit 1
else
    echo "without nodeName: $cluster_ip:80 from the pod itself times out (as expected)"
fi
k patch endpointslice web-1 --type=json \
    -p "[{\"op\":\"add\",\"path\":\"/endpoints/0/nodeName\",\"value\":\"$node\"}]"
hairpin() { [ "$(ip netns exec "$pod" nc -w2 "$cluster_ip" 80 </dev/null)" = "pod ip $pod_ip" ]; }
until_ok 30 hairpin
echo "with nodeName $node: $cluster_ip:80 from the pod -> '$(ip netns exec "$pod" nc -w2 "$cluster_ip" 80 </dev/null)'"

step "a ServiceCIDR for the VIP pool and a Service pinned to $vip"
k apply -f - <<EOF
apiVersion: networking.k8s.io/v1
kind: ServiceCIDR
metadata: {name: clusterset-vips}
spec: {cidrs: [$vip_pool, $vip_pool6]}
EOF
# Its Ready condition is kube-controller-manager's (service-cidr-controller),
# not run here; the apiserver's allocator takes the range once its informer
# sees it, so the pinned create below may be refused for a moment.
cat >web-vip.yaml <<EOF
apiVersion: v1
kind: Service
metadata: {name: web-vip, namespace: default}
spec:
  clusterIP: $vip
  ports:
  - {name: tcp, protocol: TCP, port: 80, targetPort: 8080}
  - {name: udp, protocol: UDP, port: 80, targetPort: 8080}
EOF
t=$SECONDS
until_ok 10 k create -f web-vip.yaml
echo "pinned create accepted after $((SECONDS - t))s"
# The two refusals a derived Service's pinned create can meet (issue 47: a
# condition on the ServiceImport, with the reason): the address taken, and
# no ServiceCIDR holding it.
for pinned in "$vip" 244.0.0.5; do
    if sed -e "s/name: web-vip/name: web-refused/" -e "s/clusterIP: $vip/clusterIP: $pinned/" web-vip.yaml |
        k create -f - >refused.out 2>&1; then
        echo "unexpected: a Service pinned to $pinned was created"; exit 1
    fi
    echo "pinned to $pinned: $(cat refused.out)"
done
k apply -f - <<EOF
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: web-vip-1
  namespace: default
  labels: {kubernetes.io/service-name: web-vip}
addressType: IPv4
ports:
- {name: tcp, protocol: TCP, port: 8080}
- {name: udp, protocol: UDP, port: 8080}
endpoints:
- addresses: [$pod_ip]
  nodeName: $node
  conditions: {ready: true}
EOF
echo "web-vip ClusterIP $(k get service web-vip -o jsonpath='{.spec.clusterIP}')," \
    "IPAddress $vip -> $(k get ipaddress "$vip" -o jsonpath='{.spec.parentRef.resource}/{.spec.parentRef.name}')"
t=$SECONDS
until_ok 30 answers "$vip"
echo "TCP $vip:80 -> '$(dial "$vip")' (within $((SECONDS - t))s)"
until_ok 10 answers "$vip" -u
echo "UDP $vip:80 -> '$(dial "$vip" -u)'"

step "a second EndpointSlice for $vip: the other cluster's pod (how MCS slices look)"
k apply -f - <<EOF
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: web-vip-2
  namespace: default
  labels: {kubernetes.io/service-name: web-vip}
addressType: IPv4
ports:
- {name: tcp, protocol: TCP, port: 8080}
- {name: udp, protocol: UDP, port: 8080}
endpoints:
- addresses: [$pod2_ip]
  conditions: {ready: true}
EOF
# Counts the answers of $2 dials of $1 (TCP, or UDP with -u as $3), from
# the node and from the pod (a pod's source address is not masqueraded).
tally() {
    local i
    for ((i = 0; i < $2; i++)); do dial "$1" ${3:-}; echo; done | grep . | sort | uniq -c | tr -s ' ' | tr '\n' ';'
}
both() { local t; t=$(tally "$vip" 12 "$@"); [[ $t == *"$pod_ip"* && $t == *"$pod2_ip"* ]]; }
t=$SECONDS
until_ok 30 both
echo "TCP $vip:80 from the node, 30 dials: $(tally "$vip" 30)"
echo "UDP $vip:80 from the node, 10 dials: $(tally "$vip" 10 -u)"
echo "TCP $vip:80 from the pod, 20 dials: $(from=$pod tally "$vip" 20)"

step "the other cluster's endpoint turning not ready leaves the rotation"
k patch endpointslice web-vip-2 --type=json \
    -p '[{"op":"replace","path":"/endpoints/0/conditions/ready","value":false}]'
only_first() { [ "$(tally "$vip" 10)" = " 10 pod ip $pod_ip;" ]; }
t=$SECONDS
until_ok 30 only_first
echo "TCP $vip:80, 30 dials: $(tally "$vip" 30) (within $((SECONDS - t))s of not-ready)"

step "the Service deleted (an unexport): $vip answers no more"
k delete service web-vip
gone() { ! ip netns exec "$node" nc -z -w1 "$vip" 80; }
t=$SECONDS
until_ok 30 gone
echo "TCP $vip:80 no longer connects (within $((SECONDS - t))s)"

step "dual stack: a Service pinned to $vip and $vip6, one slice per family and cluster"
# $vip was web-vip's a moment ago: its IPAddress may still be going.
cat >web-ds.yaml <<EOF
apiVersion: v1
kind: Service
metadata: {name: web-ds, namespace: default}
spec:
  ipFamilyPolicy: RequireDualStack
  ipFamilies: [IPv4, IPv6]
  clusterIP: $vip
  clusterIPs: [$vip, $vip6]
  ports:
  - {name: tcp, protocol: TCP, port: 80, targetPort: 8080}
  - {name: udp, protocol: UDP, port: 80, targetPort: 8080}
EOF
until_ok 10 k create -f web-ds.yaml
echo "web-ds clusterIPs $(k get service web-ds -o jsonpath='{.spec.clusterIPs}')"
for family in 4 6; do
    for i in 1 2; do
        if [ $family = 4 ]; then ips=("$pod_ip" "$pod2_ip"); type=IPv4; else ips=("$pod_ip6" "$pod2_ip6"); type=IPv6; fi
        # This cluster's endpoint is on this node (hairpin, above); the
        # other cluster's is on none of this cluster's nodes.
        node_name=""
        [ "$i" = 1 ] && node_name="nodeName: $node"
        k apply -f - <<EOF
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: web-ds-$family-$i
  namespace: default
  labels: {kubernetes.io/service-name: web-ds}
addressType: $type
ports:
- {name: tcp, protocol: TCP, port: 8080}
- {name: udp, protocol: UDP, port: 8080}
endpoints:
- addresses: [${ips[i-1]}]
  $node_name
  conditions: {ready: true}
EOF
    done
done
both_ds() { local t; t=$(from=${from:-$node} tally "$1" 12); [[ $t == *"$pod_ip;"* && $t == *"$pod2_ip;"* ]]; }
until_ok 30 both_ds "$vip6"
echo "TCP [$vip6]:80 from the node, 20 dials: $(tally "$vip6" 20)"
echo "UDP [$vip6]:80 from the node, 10 dials: $(tally "$vip6" 10 -u)"
echo "TCP $vip:80 from the node, 20 dials: $(tally "$vip" 20)"
from=$pod until_ok 30 both_ds "$vip6"
echo "TCP [$vip6]:80 from the pod, 20 dials: $(from=$pod tally "$vip6" 20)"

step "by name, as the conformance suite's request Pod dials: DNS through a ClusterIP"
# The node cannot reach a DNS server on the host's loopback; a kube-dns
# style Service can: its ClusterIP (port 53) is DNATed by kube-proxy to a
# DNS server on the host end of the veth, on any port. CoreDNS stands in
# for the cluster's DNS with the answer clusterset-dns would give.
dns_port=$(free_port)
cat >Corefile <<EOF
clusterset.local:$dns_port {
    bind $host_ip
    hosts {
        $vip web-ds.default.svc.clusterset.local
        $vip6 web-ds.default.svc.clusterset.local
    }
}
EOF
"$bins/coredns" -conf Corefile >"$work/coredns.log" 2>&1 &
pids+=($!)
k apply -f - <<EOF
apiVersion: v1
kind: Service
metadata: {name: dns, namespace: default}
spec:
  ports:
  - {name: dns, protocol: UDP, port: 53, targetPort: $dns_port}
  - {name: dns-tcp, protocol: TCP, port: 53, targetPort: $dns_port}
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: dns-1
  namespace: default
  labels: {kubernetes.io/service-name: dns}
addressType: IPv4
ports:
- {name: dns, protocol: UDP, port: $dns_port}
- {name: dns-tcp, protocol: TCP, port: $dns_port}
endpoints:
- addresses: [$host_ip]
  conditions: {ready: true}
EOF
dns_ip=$(k get service dns -o jsonpath='{.spec.clusterIP}')
# `ip netns exec NAME` bind-mounts /etc/netns/NAME/* over /etc.
mkdir -p "/etc/netns/$node"
resolv_made="/etc/netns/$node"
printf 'nameserver %s\noptions ndots:1 timeout:1\n' "$dns_ip" >"/etc/netns/$node/resolv.conf"
by_name() { ip netns exec "$node" sh -c "echo hi | nc -w 2 -4 web-ds.default.svc.clusterset.local 80" | grep -q 'pod ip'; }
until_ok 30 by_name
echo "nameserver $dns_ip (a ClusterIP) -> $host_ip:$dns_port"
echo "echo hi | nc -w 2 -4 web-ds.default.svc.clusterset.local 80 -> $(ip netns exec "$node" sh -c \
    "echo hi | nc -w 2 -4 web-ds.default.svc.clusterset.local 80")"
echo "echo hi | nc -w 2 -6 web-ds.default.svc.clusterset.local 80 -> $(ip netns exec "$node" sh -c \
    "echo hi | nc -w 2 -6 web-ds.default.svc.clusterset.local 80")"

step "done: kube-proxy routed the ClusterIPs, TCP and UDP, both families"
{ ip netns exec "$node" nft list table ip kube-proxy
  ip netns exec "$node" nft list table ip6 kube-proxy; } >"$work/kube-proxy.nft"
echo "ruleset: $(wc -l <"$work/kube-proxy.nft") lines (in $work/kube-proxy.nft if KEEP=1)"
