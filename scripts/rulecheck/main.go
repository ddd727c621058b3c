// rulecheck validates Prometheus rule files with Prometheus's own rule parser (model/rulefmt, the
// parser `promtool check rules` runs): YAML structure with unknown fields refused, every PromQL
// expression, label and annotation templates, durations; and, like promtool's lint, no two rules
// with one name and one label set. It builds in about a minute where promtool takes several
// (docs/deploy.md, "Checks that run in make test").
package main

import (
	"fmt"
	"log/slog"
	"os"
	"sort"
	"strings"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/rulefmt"
	"github.com/prometheus/prometheus/promql/parser"
)

func ruleKey(rule rulefmt.Rule) string {
	name := rule.Alert
	if name == "" {
		name = rule.Record
	}
	pairs := make([]string, 0, len(rule.Labels))
	for k, v := range rule.Labels {
		pairs = append(pairs, k+"="+v)
	}
	sort.Strings(pairs)
	return name + "{" + strings.Join(pairs, ",") + "}"
}

func check(path string, logger *slog.Logger) []error {
	groups, errs := rulefmt.ParseFile(path, false, model.UTF8Validation, parser.NewParser(parser.Options{}), logger)
	if len(errs) > 0 {
		return errs
	}
	seen := map[string]bool{}
	rules := 0
	for _, group := range groups.Groups {
		for _, rule := range group.Rules {
			rules++
			key := ruleKey(rule)
			if seen[key] {
				errs = append(errs, fmt.Errorf("duplicate rule %s", key))
			}
			seen[key] = true
		}
	}
	if len(errs) == 0 {
		fmt.Printf("%s: SUCCESS: %d rules found\n", path, rules)
	}
	return errs
}

func main() {
	logger := slog.New(slog.NewTextHandler(os.Stderr, nil))
	failed := len(os.Args) < 2
	for _, path := range os.Args[1:] {
		for _, err := range check(path, logger) {
			fmt.Fprintf(os.Stderr, "%s: FAILED: %v\n", path, err)
			failed = true
		}
	}
	if failed {
		os.Exit(1)
	}
}
