// Command etcd is etcd built from its Go module: go install cannot build it
// because go.etcd.io/etcd/server/v3 carries replace directives.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
