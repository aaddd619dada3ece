// Command etcd is etcd's own server, built from the go.etcd.io/etcd/server/v3
// module that the pinned Kubernetes release is built against.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
	etcdmain.Main(os.Args)
}
