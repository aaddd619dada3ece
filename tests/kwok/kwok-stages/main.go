// Command kwok-stages prints the Stages kwokctl gives kwok by default (the
// "fast" Node and Pod lifecycles of the pinned kwok release: a Node is Ready
// at once and keeps its heartbeat, a Pod scheduled to it is Running and Ready
// with IPs of the Node's podCIDRs, a deleted Pod goes at once), as one
// multi-document YAML stream for kwok's --config.
package main

import (
	"os"

	nodefast "sigs.k8s.io/kwok/kustomize/stage/node/fast"
	nodeheartbeat "sigs.k8s.io/kwok/kustomize/stage/node/heartbeat"
	podfast "sigs.k8s.io/kwok/kustomize/stage/pod/fast"
)

func main() {
	for _, doc := range []string{
		nodefast.DefaultNodeInit,
		nodeheartbeat.DefaultNodeHeartbeat,
		podfast.DefaultPodReady,
		podfast.DefaultPodComplete,
		podfast.DefaultPodDelete,
	} {
		os.Stdout.WriteString("---\n")
		os.Stdout.WriteString(doc)
	}
}
