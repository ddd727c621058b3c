{{/*
Names, labels and fixed ports. memgov's listener ports are part of its contract (SPEC §5): the
data plane listens on 8080 and is published as 8083, the port kagent builds KAGENT_URL with.
*/}}

{{- define "memgov.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "memgov.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "memgov.selectorLabels" -}}
app.kubernetes.io/name: {{ include "memgov.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "memgov.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "memgov.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: memgov
{{- end }}

{{- define "memgov.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "memgov.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "memgov.port.data" -}}8080{{- end }}
{{- define "memgov.port.service" -}}8083{{- end }}
{{- define "memgov.port.control" -}}8081{{- end }}
{{- define "memgov.port.ops" -}}9090{{- end }}
{{- define "memgov.port.controller" -}}8083{{- end }}
{{- define "memgov.port.opa" -}}8181{{- end }}
{{- define "memgov.port.opaDiagnostics" -}}8282{{- end }}

{{/* Where a pod's ServiceAccount token is mounted; memgov's containers mount an empty folder there. */}}
{{- define "memgov.tokenDir" -}}/var/run/secrets/kubernetes.io/serviceaccount{{- end }}

{{/* The folder the OPA bundle is written to (by the init container) and loaded from (by memgov and OPA). */}}
{{- define "memgov.opaDir" -}}/var/run/memgov/opa{{- end }}
{{- define "memgov.bundleDir" -}}{{ include "memgov.opaDir" . }}/pack{{- end }}

{{/* NetworkPolicies on kagent's own pods: only once the rollout reached its enforce stage. */}}
{{- define "memgov.guardsKagent" -}}
{{- if and .Values.networkPolicy.enabled (eq .Values.rollout.stage "enforce") }}true{{- end }}
{{- end }}

{{- define "memgov.image" -}}
{{- if .Values.image.digest }}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}
{{- end }}

{{/* The Secret holding the session key: the named one, or "<full name>-session-key". */}}
{{- define "memgov.sessionKeySecret" -}}
{{- default (printf "%s-session-key" (include "memgov.fullname" .)) .Values.secrets.sessionKey.existingSecret }}
{{- end }}

{{- define "memgov.usesPostgres" -}}
{{- if or .Values.state.postgresql.existingSecret (eq .Values.erasure.adapter "kagent-db") }}true{{- end }}
{{- end }}

{{/* memgov's own listening URL for kagent's agents, cards and clients: its Service on port 8083. */}}
{{- define "memgov.serviceUrl" -}}
{{- printf "http://%s.%s:%s" (include "memgov.fullname" .) .Release.Namespace (include "memgov.port.service" .) }}
{{- end }}

{{- define "memgov.usesOpa" -}}
{{- if ne .Values.policy.engine "cedar" }}true{{- end }}
{{- end }}

{{- define "memgov.controllerUrl" -}}
{{- if .Values.upstream.controllerUrl }}
{{- .Values.upstream.controllerUrl }}
{{- else if eq .Values.mode "sidecar" }}
{{- printf "http://127.0.0.1:%s" (include "memgov.port.controller" .) }}
{{- else }}
{{- printf "http://%s.%s.svc:%s" .Values.kagent.controller.name .Values.kagent.namespace (include "memgov.port.controller" .) }}
{{- end }}
{{- end }}

{{/*
memgov.imagePullSecrets: the pod's imagePullSecrets, global.imagePullSecrets (an umbrella chart's,
names or {name} objects) then imagePullSecrets, each name once; nothing when there are none.
*/}}
{{- define "memgov.imagePullSecrets" -}}
{{- $names := list }}
{{- range concat (dig "imagePullSecrets" list (.Values.global | default dict)) .Values.imagePullSecrets }}
{{- $name := ternary . (get (kindIs "map" . | ternary . dict) "name") (kindIs "string" .) }}
{{- if and $name (not (has $name $names)) }}{{- $names = append $names $name }}{{- end }}
{{- end }}
{{- range $names }}
- name: {{ . | quote }}
{{- end }}
{{- end }}

{{- define "memgov.opaUrl" -}}
{{- if .Values.policy.opa.container.enabled }}
{{- printf "http://127.0.0.1:%s" (include "memgov.port.opa" .) }}
{{- else }}
{{- .Values.policy.opa.url }}
{{- end }}
{{- end }}

{{/* Pods that carry memgov: its own pods in gateway mode, kagent's controller pods in sidecar mode. */}}
{{- define "memgov.podLabelsSelected" -}}
{{- if eq .Values.mode "sidecar" }}
{{- toYaml .Values.kagent.controllerSelector }}
{{- else }}
{{- include "memgov.selectorLabels" . }}
{{- end }}
{{- end }}

{{/*
The ModelConfig an agent declares for its memory, as kagent resolves it: agents.<ns/name>.memory.modelConfig
names a ModelConfig in the agent's namespace, described under modelConfigs.<ns>/<name>. JSON of
that spec, or "{}" when the agent declares none or it is not described.
*/}}
{{- define "memgov.declaredModel" -}}
{{- $name := dig "memory" "modelConfig" "" .agent }}
{{- $key := printf "%s/%s" (first (splitList "/" .ref)) $name }}
{{- if and $name (hasKey .modelConfigs $key) }}{{- index .modelConfigs $key | toJson }}{{- else }}{{- "{}" }}{{- end }}
{{- end }}

{{/*
memgov.stateStore: the state store the values chose - postgresql, persistent (SQLite on a claim) or
ephemeral (SQLite in an emptyDir) - or nothing when they chose none (memgov.validate refuses that).
*/}}
{{- define "memgov.stateStore" -}}
{{- $s := .Values.state }}
{{- if $s.postgresql.existingSecret }}postgresql
{{- else if $s.persistence.enabled }}persistent
{{- else if $s.ephemeral }}ephemeral
{{- end }}
{{- end }}

{{/* memgov.migrationJob: "true" when a hook Job migrates PostgreSQL state before install and upgrade. */}}
{{- define "memgov.migrationJob" -}}
{{- if and .Values.state.migrationJob.enabled (eq (include "memgov.stateStore" .) "postgresql") }}true{{- end }}
{{- end }}

{{/* memgov.stateClaim: the PersistentVolumeClaim holding SQLite state. */}}
{{- define "memgov.stateClaim" -}}
{{- default (printf "%s-state" (include "memgov.fullname" .)) .Values.state.persistence.existingClaim }}
{{- end }}

{{/* memgov.listen: one listener's comma-separated addresses, every listen.hosts entry on port. */}}
{{- define "memgov.listen" -}}
{{- $port := .port }}
{{- $addresses := list }}
{{- range .hosts }}
{{- $addresses = append $addresses (ternary (printf "[%s]:%s" . $port) (printf "%s:%s" . $port) (contains ":" .)) }}
{{- end }}
{{- join "," $addresses }}
{{- end }}

{{/* memgov.podSecurityContext: the pod's security context without the ids left null (OpenShift). */}}
{{- define "memgov.podSecurityContext" -}}
{{- $context := dict }}
{{- range $key, $value := .Values.podSecurityContext }}
{{- if not (kindIs "invalid" $value) }}{{- $_ := set $context $key $value }}{{- end }}
{{- end }}
{{- toYaml $context }}
{{- end }}

{{/* memgov.opaImage: the OPA image, by digest when one is set. */}}
{{- define "memgov.opaImage" -}}
{{- $image := .Values.policy.opa.container.image }}
{{- if $image.digest }}
{{- printf "%s@%s" $image.repository $image.digest }}
{{- else }}
{{- printf "%s:%s" $image.repository $image.tag }}
{{- end }}
{{- end }}

{{/*
memgov.ownNamespace: "true" when memgov runs in a namespace of its own, not kagent's (gateway mode
only). Its pods are then selected by that namespace and their labels, so no pod in kagent's
namespace can pass for memgov.
*/}}
{{- define "memgov.ownNamespace" -}}
{{- if ne .Release.Namespace .Values.kagent.namespace }}true{{- end }}
{{- end }}

{{/* memgov.namespaceSelector: the selector of one namespace by its immutable name label. */}}
{{- define "memgov.namespaceSelector" -}}
matchLabels:
  kubernetes.io/metadata.name: {{ . }}
{{- end }}
