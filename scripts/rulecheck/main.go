// rulecheck checks Prometheus rule files with Prometheus's own code, in a binary that builds in
// about a minute where promtool takes several (docs/deploy.md, "Checks that run in make test").
//
//	rulecheck FILE...        parse each rule file with model/rulefmt (the parser `promtool check
//	                         rules` runs): YAML structure with unknown fields refused, every PromQL
//	                         expression, label and annotation templates, durations; and, like
//	                         promtool's lint, no two rules with one name and one label set.
//	rulecheck test FILE...   run rule unit tests written in promtool's format (`promtool test
//	                         rules`): input series are loaded into Prometheus's own TSDB, the rule
//	                         groups are evaluated step by step by its rule manager and PromQL engine,
//	                         and the alerts firing at each eval_time are compared with exp_alerts.
//
// Exit status 0 when every file passes, 1 otherwise.
package main

import (
	"fmt"
	"log/slog"
	"os"
)

func main() {
	logger := slog.New(slog.NewTextHandler(os.Stderr, nil))
	args := os.Args[1:]
	run := check
	if len(args) > 0 && args[0] == "test" {
		args, run = args[1:], unitTest
	}
	failed := len(args) == 0
	for _, path := range args {
		for _, err := range run(path, logger) {
			fmt.Fprintf(os.Stderr, "%s: FAILED: %v\n", path, err)
			failed = true
		}
	}
	if failed {
		os.Exit(1)
	}
}
