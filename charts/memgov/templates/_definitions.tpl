{{/*
memgov.boundarySettings: what a kagent definition relayed through memgov may never claim (settings
`boundary`, docs/security.md): the label sets of the pods memgov's boundary lets through or sends
to (memgov's own selector labels, kagent's controller pods, kagent's UI pods), the exception marker
of the admission guard, memgov's own ServiceAccount, every Secret memgov reads, the names of the
objects this chart creates, and kagent's namespace (where kagent puts a definition naming none).
*/}}
{{- define "memgov.boundarySettings" -}}
{{- $v := .Values }}
{{- $full := include "memgov.fullname" . }}
{{- $selectors := list (include "memgov.selectorLabels" . | fromYaml) $v.kagent.controllerSelector $v.kagent.ui.selector }}
{{- $secrets := (include "memgov.secretNames" . | fromYaml).names }}
{{- /* Every object this chart creates is named "<full name>" or "<full name>-…"; a claim may be the user's own. */}}
{{- $names := list $full (include "memgov.stateClaim" .) }}
{{- $accounts := list }}
{{- /* memgov's own ServiceAccount (gateway mode); never "default", which every pod without one runs as. */}}
{{- if and (eq $v.mode "gateway") (or $v.serviceAccount.create $v.serviceAccount.name) }}
{{- $accounts = append $accounts (include "memgov.serviceAccountName" .) }}
{{- end }}
{{- toYaml (dict
  "selectors" $selectors
  "marker_keys" (list (include "memgov.exceptionLabel" .))
  "service_accounts" $accounts
  "secrets" $secrets
  "names" ($names | uniq)
  "name_prefixes" (list (printf "%s-" $full))
  "kagent_namespace" $v.kagent.namespace) }}
{{- end }}
