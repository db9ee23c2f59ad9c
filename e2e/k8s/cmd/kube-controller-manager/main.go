// Command kube-controller-manager is the upstream kube-controller-manager, built from
// k8s.io/kubernetes at the version pinned in ../../go.mod.
package main

import (
	"os"
	_ "time/tzdata" // CronJob time zones

	"k8s.io/component-base/cli"
	_ "k8s.io/component-base/logs/json/register"
	_ "k8s.io/component-base/metrics/prometheus/clientgo"
	_ "k8s.io/component-base/metrics/prometheus/version"
	"k8s.io/kubernetes/cmd/kube-controller-manager/app"
)

func main() {
	command := app.NewControllerManagerCommand()
	os.Exit(cli.Run(command))
}
