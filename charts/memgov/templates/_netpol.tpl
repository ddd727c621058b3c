{{/*
NetworkPolicy building blocks. A selector left empty in values is not rendered, so an empty
namespaceSelector keeps a peer inside kagent's namespace instead of opening every namespace.
*/}}

{{/*
memgov.peer: a one-element list holding the NetworkPolicyPeer of a {podSelector, namespaceSelector}
pair. With "home" set (a policy outside kagent's namespace), an empty namespaceSelector names home.
*/}}
{{- define "memgov.peer" -}}
{{- $peer := dict }}
{{- with .namespaceSelector }}{{- $_ := set $peer "namespaceSelector" . }}
{{- else }}{{- with .home }}{{- $_ := set $peer "namespaceSelector" (include "memgov.namespaceSelector" . | fromYaml) }}{{- end }}
{{- end }}
{{- with .podSelector }}{{- $_ := set $peer "podSelector" . }}{{- end }}
{{- if not $peer }}{{- $_ := set $peer "podSelector" dict }}{{- end }}
{{- toYaml (list $peer) }}
{{- end }}

{{- define "memgov.tcp" -}}
- port: {{ . }}
  protocol: TCP
{{- end }}

{{/*
memgov.otherPorts: TCP ranges covering 1-65535 except the given ascending ports, so a policy can
restrict the ports it governs and leave the pod's other listeners as they were.
*/}}
{{- define "memgov.otherPorts" -}}
{{- $ranges := list }}
{{- $start := 1 }}
{{- range $p := . }}
{{- if gt $p $start }}
{{- $range := dict "port" $start "protocol" "TCP" }}
{{- if gt (sub $p 1) $start }}{{- $_ := set $range "endPort" (sub $p 1) }}{{- end }}
{{- $ranges = append $ranges $range }}
{{- end }}
{{- $start = add $p 1 }}
{{- end }}
{{- toYaml (append $ranges (dict "port" $start "endPort" 65535 "protocol" "TCP")) }}
{{- end }}

{{/*
memgov.agentLabels: labels that networkPolicy.agents' podSelector selects (matchLabels, and a value
for every In or Exists expression), for the `helm test` pod that stands in for an agent.
*/}}
{{- define "memgov.agentLabels" -}}
{{- $labels := dict }}
{{- $selector := .Values.networkPolicy.agents.podSelector }}
{{- range $k, $v := $selector.matchLabels }}{{- $_ := set $labels $k $v }}{{- end }}
{{- range $e := $selector.matchExpressions }}
{{- if and (eq $e.operator "In") (not (hasKey $labels $e.key)) }}{{- $_ := set $labels $e.key (first $e.values) }}{{- end }}
{{- if and (eq $e.operator "Exists") (not (hasKey $labels $e.key)) }}{{- $_ := set $labels $e.key "memgov-boundary-test" }}{{- end }}
{{- end }}
{{- toYaml $labels }}
{{- end }}
