//go:build tools

// Package tools pins the Kubernetes control-plane commands that tests/cluster
// builds; the blank imports keep them in go.mod and go.sum through go mod tidy.
package tools

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
)
