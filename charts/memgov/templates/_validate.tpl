{{/*
Combinations the schema cannot express but that could never work. Every problem found is
reported at once, each naming the values to change. Called from the config ConfigMap, which every
mode renders.
*/}}
{{- define "memgov.validate" -}}
{{- $v := .Values }}
{{- $np := $v.networkPolicy }}
{{- $errors := list }}
{{- $missing := list }}
{{- range $version, $paths := .Files.Get "files/added-values.yaml" | fromYaml }}
{{- range $path := $paths }}
{{- $node := $v }}
{{- range $key := splitList "." $path }}
{{- $node = and (kindIs "map" $node) (hasKey $node $key) | ternary (index (kindIs "map" $node | ternary $node dict) $key) nil }}
{{- end }}
{{- if kindIs "invalid" $node }}{{- $missing = append $missing (printf "%s (new in %s)" $path $version) }}{{- end }}
{{- end }}
{{- end }}
{{- if $missing }}
{{- $errors = append $errors (printf "chart %s's values %s are missing: %s %s" .Chart.Version (join ", " $missing)
  "`helm upgrade --reuse-values` from an older chart keeps that chart's values and drops this one's defaults."
  "Upgrade with --reset-then-reuse-values (docs/deploy.md, \"Upgrade and rollback\").") }}
{{- end }}
{{- if and $v.prometheusRule.enabled (not (regexMatch "^https?://[^\\s]+$" (toString $v.prometheusRule.runbookUrl))) }}
{{- $errors = append $errors (list "prometheusRule.enabled=true needs prometheusRule.runbookUrl: the absolute http(s) URL where your team"
  "reads docs/runbook.md (each alert links <runbookUrl>#<alert name in lower case>; a relative path leads nowhere from a pager)."
  | join " ") }}
{{- end }}
{{- if and (eq $v.mode "sidecar") (ne .Release.Namespace $v.kagent.namespace) }}
{{- $errors = append $errors (printf "%s %q (release namespace is %q): %s %s"
  "in sidecar mode memgov must be installed in kagent's namespace" $v.kagent.namespace .Release.Namespace
  "memgov runs in kagent's controller pod, and the patch mounts ConfigMaps of that namespace."
  (printf "Use --namespace %s or set kagent.namespace (gateway mode may run in a namespace of its own)." $v.kagent.namespace)) }}
{{- end }}
{{- $chosen := list }}
{{- if $v.state.postgresql.existingSecret }}{{- $chosen = append $chosen "state.postgresql.existingSecret" }}{{- end }}
{{- if $v.state.persistence.enabled }}{{- $chosen = append $chosen "state.persistence.enabled" }}{{- end }}
{{- if $v.state.ephemeral }}{{- $chosen = append $chosen "state.ephemeral" }}{{- end }}
{{- if not $chosen }}
{{- $errors = append $errors (list "no state store chosen: memgov keeps consent, ledger, budgets, pending erasures and expiry"
  "there. Set state.postgresql.existingSecret (production, any replica count), state.persistence.enabled=true"
  "(SQLite on a PersistentVolumeClaim, one pod) or, to evaluate only, state.ephemeral=true (lost with every pod)."
  | join " ") }}
{{- else if gt (len $chosen) 1 }}
{{- $errors = append $errors (printf "%s are all set: choose one state store." (join ", " $chosen)) }}
{{- end }}
{{- $sqlite := and $chosen (not $v.state.postgresql.existingSecret) }}
{{- if and (eq $v.mode "gateway") (gt (int $v.replicaCount) 1) $sqlite }}
{{- $errors = append $errors (printf "replicaCount=%d %s %s" (int $v.replicaCount)
  "needs PostgreSQL state: SQLite state lives inside one pod, so replicas would not share consent, ledger or budgets."
  "Set state.postgresql.existingSecret or replicaCount=1.") }}
{{- end }}
{{- if and $v.autoscaling.enabled (or (ne $v.mode "gateway") (not $v.state.postgresql.existingSecret)) }}
{{- $errors = append $errors (list "autoscaling.enabled=true needs gateway mode and PostgreSQL state"
  "(state.postgresql.existingSecret): autoscaled replicas must share one state store." | join " ") }}
{{- end }}
{{- if and $v.autoscaling.enabled (gt (int $v.autoscaling.minReplicas) (int $v.autoscaling.maxReplicas)) }}
{{- $errors = append $errors (printf "autoscaling.minReplicas=%d is above autoscaling.maxReplicas=%d."
  (int $v.autoscaling.minReplicas) (int $v.autoscaling.maxReplicas)) }}
{{- end }}
{{- if and (eq $v.mode "sidecar") $sqlite (gt (int $v.kagent.controller.replicas) 1) }}
{{- $errors = append $errors (printf "kagent.controller.replicas=%d %s %s" (int $v.kagent.controller.replicas)
  "with SQLite state in sidecar mode: each kagent controller pod would keep its own memgov state."
  "Set state.postgresql.existingSecret, or run kagent's controller with replicas 1 (and say so here).") }}
{{- end }}
{{- if and (include "memgov.usesOpa" .) (not $v.policy.opa.container.enabled) (not $v.policy.opa.url) }}
{{- $errors = append $errors (printf "policy.engine=%s %s" $v.policy.engine
  "needs an OPA server: set policy.opa.container.enabled=true or policy.opa.url.") }}
{{- end }}
{{- if and $v.policy.opa.container.enabled $v.policy.opa.url }}
{{- $errors = append $errors (list "policy.opa.container.enabled and policy.opa.url are both set:"
  "memgov talks to one OPA server; keep one." | join " ") }}
{{- end }}
{{- if and (not (include "memgov.usesOpa" .)) (or $v.policy.opa.container.enabled $v.policy.opa.url) }}
{{- $errors = append $errors (list "an OPA server is configured but policy.engine=cedar never asks it:"
  "set policy.engine to opa or shadow, or remove the policy.opa settings." | join " ") }}
{{- end }}
{{- if and (eq $v.erasure.adapter "kagent-db") (not $v.erasure.kagentDb.existingSecret) }}
{{- $errors = append $errors (list "erasure.adapter=kagent-db needs the least-privilege role's URL:"
  "set erasure.kagentDb.existingSecret (a Secret holding a postgresql:// URL)." | join " ") }}
{{- end }}
{{- range $ref, $agent := $v.agents }}
{{- $declared := dig "memory" "modelConfig" "" $agent }}
{{- $spec := include "memgov.declaredModel" (dict "ref" $ref "agent" $agent "modelConfigs" $v.modelConfigs) | fromJson }}
{{- if and $declared (not $spec) }}
{{- $errors = append $errors (printf "agents.%s.memory.modelConfig=%s names no modelConfigs entry: describe %s"
  $ref $declared (printf "modelConfigs.%s/%s (provider, model) as kagent's ModelConfig of that name." (first (splitList "/" $ref)) $declared)) }}
{{- end }}
{{- if and $spec (ne (default "OpenAI" $spec.provider) "OpenAI") }}
{{- $errors = append $errors (printf "agents.%s uses a ModelConfig with provider %s: %s" $ref $spec.provider
  "memgov's embedding route and its re-embedding speak the OpenAI embeddings API; use an OpenAI(-compatible) ModelConfig.") }}
{{- end }}
{{- if and $declared $agent.embeddingModel }}
{{- $errors = append $errors (printf "agents.%s sets both memory.modelConfig and embeddingModel: keep one." $ref) }}
{{- end }}
{{- end }}
{{- if and $v.tracing.enabled (not $v.tracing.endpoint) }}
{{- $errors = append $errors "tracing.enabled=true needs tracing.endpoint (the collector's OTLP/HTTP traces URL)." }}
{{- end }}
{{- if and $np.enabled (eq $v.mode "gateway") }}
{{- if and $v.upstream.embeddingUrl (not $np.embedding.to) }}
{{- $errors = append $errors (list "upstream.embeddingUrl is set but networkPolicy.embedding.to is empty:"
  "memgov's egress policy would block the provider. List it (for example an ipBlock)." | join " ") }}
{{- end }}
{{- if and (include "memgov.usesPostgres" .) (not $np.postgresql.to) }}
{{- $errors = append $errors (list "PostgreSQL is used (state.postgresql or erasure.adapter=kagent-db)"
  "but networkPolicy.postgresql.to is empty: memgov's egress policy would block it. List the PostgreSQL peers."
  | join " ") }}
{{- end }}
{{- if and $v.tracing.enabled (not $np.tracing.to) }}
{{- $errors = append $errors (list "tracing.enabled=true but networkPolicy.tracing.to is empty:"
  "memgov's egress policy would block the collector. List it." | join " ") }}
{{- end }}
{{- if and $v.policy.opa.url (not $np.opa.to) }}
{{- $errors = append $errors (list "policy.opa.url is set but networkPolicy.opa.to is empty:"
  "memgov's egress policy would block OPA. List the OPA peers." | join " ") }}
{{- end }}
{{- end }}
{{- if and $np.enabled (include "memgov.migrationJob" .) (not $np.postgresql.to) (ne $v.mode "gateway") }}
{{- $errors = append $errors (list "state.migrationJob.enabled=true with networkPolicy.enabled: the migration Jobs' egress policy"
  "would block PostgreSQL. List the PostgreSQL peers in networkPolicy.postgresql.to." | join " ") }}
{{- end }}
{{- $files := $v.policy.pack.files }}
{{- if and $files (not (hasKey $files "data/limits.yaml")) }}
{{- $errors = append $errors (list "policy.pack.files has no data/limits.yaml:"
  "give a complete pack, or leave policy.pack.files empty to use the pack inside memgov's image." | join " ") }}
{{- end }}
{{- if and $files $v.policy.opa.container.enabled }}
{{- $rego := false }}
{{- range $path, $_ := $files }}{{- if hasPrefix "rego/" $path }}{{- $rego = true }}{{- end }}{{- end }}
{{- if not $rego }}
{{- $errors = append $errors (list "policy.opa.container.enabled=true"
  "but policy.pack.files has no rego/ files for OPA to load." | join " ") }}
{{- end }}
{{- end }}
{{- if and $v.admissionPolicy.enabled $np.enabled $np.allowOtherControllerPorts (eq $v.rollout.stage "enforce") }}
{{- $errors = append $errors (list "networkPolicy.allowOtherControllerPorts=true opens the controller's other ports to anyone,"
  "which admissionPolicy refuses, the chart's own policy included. Open the one port a peer needs with a policy"
  "labelled memgov/boundary-exception=true, written by someone granted the verb exempt (docs/boundary.md),"
  "or set admissionPolicy.enabled=false." | join " ") }}
{{- end }}
{{- if eq $v.mode "sidecar" }}
{{- if eq $v.kagent.ui.gatewayAccess "port-forward" }}
{{- $errors = append $errors (list "kagent.ui.gatewayAccess=port-forward applies to gateway mode only:"
  "in sidecar mode kagent's UI already reaches the controller through memgov. Set it to none." | join " ") }}
{{- end }}
{{- end }}
{{- if lt (int $v.terminationGracePeriodSeconds) (add (int $v.shutdown.drainSeconds) 10) }}
{{- $errors = append $errors (printf "terminationGracePeriodSeconds=%d %s %s" (int $v.terminationGracePeriodSeconds)
  "leaves requests in flight less than 5 s after shutdown.drainSeconds and the 5 s margin:"
  "raise it or lower shutdown.drainSeconds.") }}
{{- end }}
{{- range $purpose := list "bridge" "operator" }}
{{- if and (index $v.trust (printf "%sKey" $purpose)).existingSecret (index $v.trust (printf "%sKeys" $purpose)).existingSecret }}
{{- $errors = append $errors (printf "trust.%sKey and trust.%sKeys both name a Secret: memgov reads one key file or one key folder. %s"
  $purpose $purpose (printf "Keep trust.%sKeys (it rotates) and empty trust.%sKey.existingSecret." $purpose $purpose)) }}
{{- end }}
{{- end }}
{{- if $errors }}
{{- fail (printf "\n  - %s" (join "\n  - " $errors)) }}
{{- end }}
{{- end }}
