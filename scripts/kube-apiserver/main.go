// Command kube-apiserver is Kubernetes' API server, linked from the pinned k8s.io/kubernetes module
// so that the tests run admission and defaulting on the real thing (no kubelet, no controllers).
package main

import (
	"os"

	"k8s.io/component-base/cli"
	"k8s.io/kubernetes/cmd/kube-apiserver/app"
)

func main() {
	os.Exit(cli.Run(app.NewAPIServerCommand()))
}
