package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/prometheus/common/model"
	"go.yaml.in/yaml/v3"

	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql/parser"
	"github.com/prometheus/prometheus/promql/promqltest"
	"github.com/prometheus/prometheus/rules"
)

// testFile is the part of promtool's rule unit test format that rulecheck runs: alert tests over
// input series. A key outside it (promql_expr_test, external_labels, ...) is refused, not ignored,
// so a file rulecheck passes means the same to `promtool test rules`.
type testFile struct {
	RuleFiles          []string       `yaml:"rule_files"`
	EvaluationInterval model.Duration `yaml:"evaluation_interval"`
	Tests              []testGroup    `yaml:"tests"`
}

type testGroup struct {
	Name          string         `yaml:"name"`
	Interval      model.Duration `yaml:"interval"`
	InputSeries   []inputSeries  `yaml:"input_series"`
	AlertRuleTest []alertCheck   `yaml:"alert_rule_test"`
}

// inputSeries is one series in the expanding notation of PromQL tests: `0+1x10`, `1x5 _x3 0x4`.
type inputSeries struct {
	Series string `yaml:"series"`
	Values string `yaml:"values"`
}

type alertCheck struct {
	EvalTime  model.Duration  `yaml:"eval_time"`
	Alertname string          `yaml:"alertname"`
	ExpAlerts []expectedAlert `yaml:"exp_alerts"`
}

type expectedAlert struct {
	ExpLabels      map[string]string `yaml:"exp_labels"`
	ExpAnnotations map[string]string `yaml:"exp_annotations"`
}

// unitTest runs every test group of one file and reports each check that did not hold.
func unitTest(path string, _ *slog.Logger) []error {
	raw, err := os.ReadFile(path)
	if err != nil {
		return []error{err}
	}
	var file testFile
	decoder := yaml.NewDecoder(bytes.NewReader(raw))
	decoder.KnownFields(true)
	if err := decoder.Decode(&file); err != nil {
		return []error{err}
	}
	if len(file.RuleFiles) == 0 || len(file.Tests) == 0 {
		return []error{fmt.Errorf("a test file names rule_files and has tests")}
	}
	every := time.Duration(file.EvaluationInterval)
	if every == 0 {
		every = time.Minute // promtool's default
	}
	ruleFiles := make([]string, 0, len(file.RuleFiles))
	for _, name := range file.RuleFiles {
		if !filepath.IsAbs(name) {
			name = filepath.Join(filepath.Dir(path), name)
		}
		ruleFiles = append(ruleFiles, name)
	}
	var errs []error
	checks := 0
	for i, group := range file.Tests {
		name := group.Name
		if name == "" {
			name = fmt.Sprintf("#%d", i)
		}
		done, failed := runGroup(group, every, ruleFiles)
		checks += done
		for _, err := range failed {
			errs = append(errs, fmt.Errorf("test %s: %w", name, err))
		}
	}
	if len(errs) == 0 {
		fmt.Printf("%s: SUCCESS: %d test groups, %d alert checks\n", path, len(file.Tests), checks)
	}
	return errs
}

// runGroup loads the group's series into a fresh TSDB and evaluates every rule group at each
// evaluation step from 0 to the last eval_time; after each step it compares the alerts that are
// firing (not pending) with the checks whose eval_time falls in [step, step + interval), as
// promtool does. It returns how many checks it made and what failed.
func runGroup(group testGroup, every time.Duration, ruleFiles []string) (int, []error) {
	interval := time.Duration(group.Interval)
	if interval == 0 {
		interval = every
	}
	var load strings.Builder
	fmt.Fprintf(&load, "load %s\n", model.Duration(interval))
	for _, s := range group.InputSeries {
		fmt.Fprintf(&load, "  %s %s\n", s.Series, s.Values)
	}
	promql := parser.NewParser(parser.Options{})
	series, err := promqltest.NewLazyLoader(load.String(), promqltest.LazyLoaderOpts{Parser: promql})
	if err != nil {
		return 0, []error{fmt.Errorf("input_series: %w", err)}
	}
	defer series.Close()
	manager := rules.NewManager(&rules.ManagerOptions{
		QueryFunc:    rules.EngineQueryFunc(series.QueryEngine(), series.Storage()),
		AppendableV2: series.Storage(),
		Context:      context.Background(),
		NotifyFunc:   func(context.Context, string, ...*rules.Alert) {},
		Logger:       slog.New(slog.NewTextHandler(io.Discard, nil)),
		Parser:       promql,
	})
	loaded, errs := manager.LoadGroups(interval, labels.EmptyLabels(), "", nil, false, ruleFiles...)
	if errs != nil {
		return 0, errs
	}
	names := make([]string, 0, len(loaded))
	for name := range loaded {
		names = append(names, name)
	}
	sort.Strings(names)
	alerting := map[string][]*rules.AlertingRule{}
	for _, name := range names {
		for _, rule := range loaded[name].Rules() {
			if alert, ok := rule.(*rules.AlertingRule); ok {
				// As after a restart whose `for` state was restored: the rule writes its ALERTS series.
				alert.SetRestored(true)
				alerting[alert.Name()] = append(alerting[alert.Name()], alert)
			}
		}
	}
	checks := slices.Clone(group.AlertRuleTest)
	sort.SliceStable(checks, func(i, j int) bool { return checks[i].EvalTime < checks[j].EvalTime })
	var failed []error
	for _, c := range checks {
		if _, known := alerting[c.Alertname]; !known {
			// A check of an alert no rule defines would pass with exp_alerts empty and prove nothing.
			failed = append(failed, fmt.Errorf("alertname %q is not an alerting rule of %s", c.Alertname, ruleFiles))
		}
	}
	if len(checks) == 0 {
		return 0, []error{fmt.Errorf("no alert_rule_test to run")}
	}
	if len(failed) > 0 {
		return 0, failed
	}
	start := time.Unix(0, 0).UTC()
	last := time.Duration(checks[len(checks)-1].EvalTime)
	next := 0
	for step := time.Duration(0); step <= last; step += every {
		at := start.Add(step)
		var loadErr error
		series.WithSamplesTill(at, func(err error) { loadErr = err })
		if loadErr != nil {
			return next, []error{loadErr}
		}
		for _, name := range names {
			loaded[name].Eval(series.Context(), at)
			for _, rule := range loaded[name].Rules() {
				if err := rule.LastError(); err != nil {
					return next, []error{fmt.Errorf("rule %s at %s: %w", rule.Name(), model.Duration(step), err)}
				}
			}
		}
		for next < len(checks) && time.Duration(checks[next].EvalTime) < step+every {
			c := checks[next]
			next++
			got, want := firing(alerting[c.Alertname]), expected(c)
			if !slices.Equal(got, want) {
				failed = append(failed, fmt.Errorf("%s at %s:\n    expected %s\n    got      %s",
					c.Alertname, c.EvalTime, describe(want), describe(got)))
			}
		}
	}
	return next, failed
}

// firing lists the rules' firing alerts, each as its labels and annotations, sorted.
func firing(rs []*rules.AlertingRule) []string {
	out := []string{}
	for _, r := range rs {
		for _, a := range r.ActiveAlerts() {
			if a.State == rules.StateFiring {
				out = append(out, a.Labels.String()+" "+a.Annotations.String())
			}
		}
	}
	sort.Strings(out)
	return out
}

// expected lists a check's alerts the way firing does; Prometheus adds the alertname label itself.
func expected(c alertCheck) []string {
	out := []string{}
	for _, a := range c.ExpAlerts {
		lbls := map[string]string{labels.AlertName: c.Alertname}
		for k, v := range a.ExpLabels {
			lbls[k] = v
		}
		out = append(out, labels.FromMap(lbls).String()+" "+labels.FromMap(a.ExpAnnotations).String())
	}
	sort.Strings(out)
	return out
}

func describe(alerts []string) string {
	if len(alerts) == 0 {
		return "no alert firing"
	}
	return strings.Join(alerts, "\n             ")
}
