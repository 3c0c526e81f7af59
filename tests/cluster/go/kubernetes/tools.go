//go:build tools

// Package tools pins the Kubernetes commands that tests/cluster builds (the
// control plane, kubectl for the mig_layout role's eviction calls, and the
// kubelet of the real test node, node.sh); the blank imports keep them in
// go.mod and go.sum through go mod tidy.
package tools

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
	_ "k8s.io/kubernetes/cmd/kubectl"
	_ "k8s.io/kubernetes/cmd/kubelet"
)
