package main

import (
	"fmt"
	"log/slog"
	"sort"
	"strings"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/rulefmt"
	"github.com/prometheus/prometheus/promql/parser"
)

// ruleKey names a rule by its name and sorted labels, the identity promtool's duplicate lint uses.
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

// check parses one rule file and reports its errors; on success it prints promtool's summary line.
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
