{{/*
The admission guards' shared parts (docs/boundary.md, "The cluster refuses a path around memgov").
Every guard lets a requester through only on an RBAC grant: a verb on the resource "boundaries" of
the API group "memgov", named after memgov's full name, in kagent's namespace. No such resource
exists; RBAC grants verbs on it all the same, and the CEL authorizer asks RBAC, so whoever may
grant it is decided by RBAC's own escalation rules (the chart's ClusterRole, boundary-admin.yaml).
*/}}

{{/* memgov.boundaryName: the prefix of the cluster-scoped guard objects (per release and namespace). */}}
{{- define "memgov.boundaryName" -}}
{{- printf "%s-%s-boundary" (include "memgov.fullname" .) .Release.Namespace | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "memgov.grantGroup" -}}memgov{{- end }}
{{- define "memgov.grantResource" -}}boundaries{{- end }}

{{/* memgov.grant: CEL that is true when the requester holds .verb on memgov's boundary; call with (dict "top" $ "verb" "…"). */}}
{{- define "memgov.grant" -}}
authorizer.group('{{ include "memgov.grantGroup" .top }}').resource('{{ include "memgov.grantResource" .top }}').namespace('{{ .top.Values.kagent.namespace }}').name('{{ include "memgov.fullname" .top }}').check('{{ .verb }}').allowed()
{{- end }}

{{/* memgov.grantText: how a refusal names the grant it wanted, for (dict "top" $ "verb" "…"). */}}
{{- define "memgov.grantText" -}}
verb {{ .verb }} on {{ include "memgov.grantResource" .top }}.{{ include "memgov.grantGroup" .top }}/{{ include "memgov.fullname" .top }} in namespace {{ .top.Values.kagent.namespace }}
{{- end }}

{{/* memgov.exceptionLabel: the label an operator puts on a policy meant to open kagent's controller. */}}
{{- define "memgov.exceptionLabel" -}}memgov/boundary-exception{{- end }}

{{/* memgov.guardedNamespaces: kagent's namespace, and memgov's when it has its own. */}}
{{- define "memgov.guardedNamespaces" -}}
{{- toJson (uniq (list .Values.kagent.namespace .Release.Namespace)) }}
{{- end }}

{{/* memgov.binding: the ValidatingAdmissionPolicyBinding of the guard named .name, denying in .namespaces (a list). */}}
{{- define "memgov.binding" -}}
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicyBinding
metadata:
  name: {{ .name }}
  labels:
    {{- include "memgov.labels" .top | nindent 4 }}
spec:
  policyName: {{ .name }}
  validationActions: ["Deny"]
  matchResources:
    namespaceSelector:
      matchExpressions:
        - key: kubernetes.io/metadata.name
          operator: In
          values: {{ .namespaces }}
{{- end }}

{{/*
memgov.spellings: JSON of a pod's labels (.labels) for memgov.contradicts, each key also spelt with
each of .prefixes (Cilium's "k8s:" and "any:" label sources).
*/}}
{{- define "memgov.spellings" -}}
{{- $out := dict }}
{{- range $key, $value := .labels }}
{{- $_ := set $out $key $value }}
{{- range $.prefixes }}{{- $_ := set $out (printf "%s%s" . $key) $value }}{{- end }}
{{- end }}
{{- toJson $out }}
{{- end }}

{{/*
memgov.contradicts: CEL that is true when the label selector at the CEL path .sel cannot select a
pod carrying the labels of the CEL map .labels (memgov.spellings). A term about a key the map does
not hold contradicts nothing, since pods carry more labels than anyone knows: such a selector "may
select".
*/}}
{{- define "memgov.contradicts" -}}
(has({{ .sel }}.matchLabels) && {{ .sel }}.matchLabels.exists(k, k in {{ .labels }} && {{ .sel }}.matchLabels[k] != {{ .labels }}[k]))
|| (has({{ .sel }}.matchExpressions) && {{ .sel }}.matchExpressions.exists(e, e.key in {{ .labels }}
&& ((e.operator == 'In' && !(has(e.values) && {{ .labels }}[e.key] in e.values))
|| (e.operator == 'NotIn' && has(e.values) && {{ .labels }}[e.key] in e.values)
|| e.operator == 'DoesNotExist')))
{{- end }}
