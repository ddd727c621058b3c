{{/*
The memgov containers and volumes. The gateway Deployment and the sidecar patch for kagent's
controller pod both render these, so the two modes cannot drift apart. Volume names carry a
"memgov-" prefix because in sidecar mode they join the controller pod's own volumes.
*/}}

{{- define "memgov.secretDir" -}}/var/run/memgov/secrets{{- end }}

{{/* Where memgov keeps audit records while the state store is down (audit.spool_dir). */}}
{{- define "memgov.spoolDir" -}}
{{- if eq (include "memgov.stateStore" .) "postgresql" }}/var/lib/memgov-spool{{- else }}/var/lib/memgov/audit-spool{{- end }}
{{- end }}

{{/*
memgov.secretFiles: every Secret key memgov reads, in a fixed order, with the file it is mounted as
and the setting (section, key) of sidecar/settings.py that names that file.
*/}}
{{- define "memgov.secretFiles" -}}
{{- $v := .Values }}
{{- $refs := list
  (list (dict "existingSecret" (include "memgov.sessionKeySecret" .) "key" $v.secrets.sessionKey.key)
    "session.key" "secrets" "session_key_file")
  (list $v.secrets.previousSessionKey "previous-session.key" "secrets" "previous_session_key_file")
  (list $v.secrets.nextSessionKey "next-session.key" "secrets" "next_session_key_file")
  (list $v.trust.bridgeKey "bridge.key" "trust" "bridge_key_file")
  (list $v.trust.operatorKey "operator.key" "trust" "operator_key_file")
  (list $v.state.postgresql "state-url" "state" "url_file") }}
{{- if $v.upstream.embeddingUrl }}
{{- $refs = append $refs (list $v.upstream.embeddingApiKey "embedding-api.key" "upstream" "embedding_api_key_file") }}
{{- end }}
{{- if eq $v.erasure.adapter "kagent-db" }}
{{- $refs = append $refs (list $v.erasure.kagentDb "kagent-db-url" "erasure" "kagent_db_url_file") }}
{{- end }}
{{- $files := list }}
{{- range $refs }}
{{- $ref := index . 0 }}
{{- if $ref.existingSecret }}
{{- $files = append $files (dict "secret" $ref.existingSecret "key" $ref.key
  "file" (index . 1) "section" (index . 2) "setting" (index . 3)) }}
{{- end }}
{{- end }}
{{- toYaml (dict "files" $files) }}
{{- end }}

{{/*
memgov.keyFolders: the verification-key Secrets mounted whole as folders (trust.bridgeKeys,
trust.operatorKeys; each data key one key, named by its id), with the volume, the mount path and the
setting of sidecar/settings.py that names the folder. A whole-Secret volume follows the Secret's
edits, so a key id added or removed reaches memgov without a restart.
*/}}
{{- define "memgov.keyFolders" -}}
{{- $folders := list }}
{{- range $purpose := list "bridge" "operator" }}
{{- with (index $.Values.trust (printf "%sKeys" $purpose)).existingSecret }}
{{- $folders = append $folders (dict "secret" . "volume" (printf "memgov-%s-keys" $purpose)
  "path" (printf "/var/run/memgov/keys/%s" $purpose) "setting" (printf "%s_keys_dir" $purpose)) }}
{{- end }}
{{- end }}
{{- toYaml (dict "folders" $folders) }}
{{- end }}

{{/* memgov.secretNames: every Secret memgov reads, as files or as key folders. */}}
{{- define "memgov.secretNames" -}}
{{- $names := list }}
{{- range (include "memgov.secretFiles" . | fromYaml).files }}{{- $names = append $names .secret }}{{- end }}
{{- range (include "memgov.keyFolders" . | fromYaml).folders }}{{- $names = append $names .secret }}{{- end }}
{{- toYaml (dict "names" ($names | uniq)) }}
{{- end }}

{{/* memgov.config: the YAML file `memgov --config` reads; keys are exactly sidecar/settings.py's. */}}
{{- define "memgov.config" -}}
{{- $v := .Values }}
{{- $upstream := dict "controller_url" (include "memgov.controllerUrl" .) }}
{{- with $v.upstream.embeddingUrl }}{{- $_ := set $upstream "embedding_url" . }}{{- end }}
{{- if $v.upstream.embeddingTrustEnv }}{{- $_ := set $upstream "embedding_trust_env" true }}{{- end }}
{{- $_ := set $upstream "kagent_refresh_s" $v.upstream.kagentRefreshS }}
{{- $state := dict }}
{{- if ne (include "memgov.stateStore" .) "postgresql" }}
{{- $_ := set $state "url" "sqlite:////var/lib/memgov/state.db" }}
{{- end }}
{{- if include "memgov.migrationJob" . }}
{{- /* The hook Job migrated before this release's pods start; serve only checks the schema. */}}
{{- $_ := set $state "auto_migrate" false }}
{{- end }}
{{- /* The audit spool outlives a killed container: on the state volume with SQLite, else its own emptyDir. */}}
{{- $audit := dict "spool_dir" (include "memgov.spoolDir" .) }}
{{- $policy := dict "engine" $v.policy.engine }}
{{- with include "memgov.packDir" . }}{{- $_ := set $policy "dir" . }}{{- end }}
{{- if include "memgov.usesOpa" . }}
{{- $_ := set $policy "opa_url" (include "memgov.opaUrl" .) }}
{{- end }}
{{- if eq $v.policy.engine "shadow" }}
{{- $_ := set $policy "shadow_primary" $v.policy.shadowPrimary }}
{{- end }}
{{- $matrix := dict }}
{{- with $v.matrix.serverName }}{{- $_ := set $matrix "server_name" . }}{{- end }}
{{- with $v.matrix.bridgeBot }}{{- $_ := set $matrix "bridge_bot" . }}{{- end }}
{{- $agents := dict }}
{{- range $ref, $agent := $v.agents }}
{{- $entry := dict "disabled_variant" $agent.disabledVariant "ghost" $agent.ghost }}
{{- with $agent.embeddingModel }}{{- $_ := set $entry "embedding_model" . }}{{- end }}
{{- /* The ModelConfigs the agent uses change only with an operator token (boundary, docs/security.md). */}}
{{- $models := concat (list) ($agent.modelConfigs | default list) }}
{{- with dig "memory" "modelConfig" "" $agent }}{{- $models = append $models . }}{{- end }}
{{- with $models }}{{- $_ := set $entry "model_configs" (uniq .) }}{{- end }}
{{- with include "memgov.declaredModel" (dict "ref" $ref "agent" $agent "modelConfigs" $v.modelConfigs) | fromJson }}
{{- /* kagent's runtimes ask an OpenAI provider for 768 dimensions (go/adk embedding.TargetDimension). */}}
{{- $_ := set $entry "embedding_model" .model }}{{- $_ := set $entry "embedding_dimensions" 768 }}
{{- end }}
{{- $_ := set $agents $ref $entry }}
{{- end }}
{{- $hosts := $v.listen.hosts }}
{{- $listen := dict
  "data" (include "memgov.listen" (dict "hosts" $hosts "port" (include "memgov.port.data" .)))
  "control" (include "memgov.listen" (dict "hosts" $hosts "port" (include "memgov.port.control" .)))
  "ops" (include "memgov.listen" (dict "hosts" $hosts "port" (include "memgov.port.ops" .)))
  "shutdown_timeout_s" (include "memgov.shutdownTimeout" . | int)
  "workers" ($v.workers | int) }}
{{- $tracing := dict "enabled" false }}
{{- if $v.tracing.enabled }}
{{- $tracing = dict "enabled" true "endpoint" $v.tracing.endpoint "sample_ratio" $v.tracing.sampleRatio }}
{{- end }}
{{- $config := dict
  "profile" "production"
  "upstream" $upstream
  "listen" $listen
  "state" $state
  "audit" $audit
  "policy" $policy
  "secrets" dict
  "trust" dict
  "matrix" $matrix
  "agents" $agents
  "boundary" (include "memgov.boundarySettings" . | fromYaml)
  "erasure" (dict "adapter" $v.erasure.adapter "rotate" $v.erasure.rotate)
  "log" (dict "level" $v.log.level)
  "tracing" $tracing }}
{{- $dir := include "memgov.secretDir" . }}
{{- range (include "memgov.secretFiles" . | fromYaml).files }}
{{- $_ := set (index $config .section) .setting (printf "%s/%s" $dir .file) }}
{{- end }}
{{- range (include "memgov.keyFolders" . | fromYaml).folders }}
{{- $_ := set (index $config "trust") .setting .path }}
{{- end }}
{{- toYaml $config }}
{{- end }}

{{/*
The user and group are repeated on each container because in sidecar mode the pod-level
security context is kagent's, not ours.
*/}}
{{- define "memgov.containerSecurityContext" -}}
{{- $ids := pick (include "memgov.podSecurityContext" . | fromYaml) "runAsUser" "runAsGroup" }}
{{- toYaml (merge $ids .Values.securityContext) }}
{{- end }}

{{/*
memgov.env: the memgov container's environment: the pod, namespace and node from the downward API
as OpenTelemetry resource attributes of every span, then the operator's extraEnv.
*/}}
{{- define "memgov.env" -}}
- name: OTEL_K8S_POD_NAME
  valueFrom:
    fieldRef:
      fieldPath: metadata.name
- name: OTEL_K8S_NAMESPACE
  valueFrom:
    fieldRef:
      fieldPath: metadata.namespace
- name: OTEL_K8S_NODE_NAME
  valueFrom:
    fieldRef:
      fieldPath: spec.nodeName
- name: OTEL_RESOURCE_ATTRIBUTES
  value: k8s.pod.name=$(OTEL_K8S_POD_NAME),k8s.namespace.name=$(OTEL_K8S_NAMESPACE),k8s.node.name=$(OTEL_K8S_NODE_NAME)
{{- with .Values.extraEnv }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/*
Streams (A2A replies) outlive a roll: the pod keeps serving for drainSeconds while it leaves the
Service's endpoints (preStop), then memgov stops accepting and waits for requests in flight up to
the rest of the grace period, keeping a 5 s margin before the kubelet's SIGKILL.
*/}}
{{- define "memgov.shutdownTimeout" -}}
{{- sub .Values.terminationGracePeriodSeconds (add .Values.shutdown.drainSeconds 5) }}
{{- end }}

{{- define "memgov.preStop" -}}
lifecycle:
  preStop:
    sleep:
      seconds: {{ .Values.shutdown.drainSeconds }}
{{- end }}

{{/*
kagent's controller pod mounts its ServiceAccount token into every container (its Deployment does
not turn automount off). An empty folder mounted over the token path keeps it out of memgov's
containers: the API server does not add the token to a container that already mounts that path.
*/}}
{{- define "memgov.noTokenMount" -}}
- name: memgov-no-token
  mountPath: {{ include "memgov.tokenDir" . }}
  readOnly: true
{{- end }}

{{/* memgov.initContainers: the bundle writer, when the pod runs its own OPA. */}}
{{- define "memgov.initContainers" -}}
{{- if .Values.policy.opa.container.enabled }}
# Writes the pack (the image's, or the operator's from the ConfigMap) as the OPA bundle that both
# OPA and memgov load, so the two engines of this pod decide with one revision.
- name: memgov-bundle
  image: {{ include "memgov.image" . | quote }}
  imagePullPolicy: {{ .Values.image.pullPolicy }}
  command:
    - memgov
    - policy
    - bundle
    - --out
    - {{ include "memgov.bundleDir" . }}
    {{- if include "memgov.ownPack" . }}
    - --dir
    - /etc/memgov/policies
    {{- end }}
  resources:
    {{- toYaml .Values.resources | nindent 4 }}
  securityContext:
    {{- include "memgov.containerSecurityContext" . | nindent 4 }}
  volumeMounts:
    {{- if include "memgov.ownPack" . }}
    - name: memgov-config
      mountPath: /etc/memgov
      readOnly: true
    {{- end }}
    - name: memgov-opa
      mountPath: {{ include "memgov.opaDir" . }}
    {{- include "memgov.noTokenMount" . | nindent 4 }}
{{- end }}
{{- end }}

{{- define "memgov.containers" -}}
- name: memgov
  image: {{ include "memgov.image" . | quote }}
  imagePullPolicy: {{ .Values.image.pullPolicy }}
  command: ["memgov", "--config", "/etc/memgov/config.yaml", "serve"]
  env:
    {{- include "memgov.env" . | nindent 4 }}
  ports:
    {{- if eq .Values.mode "gateway" }}
    - name: data
      containerPort: {{ include "memgov.port.data" . }}
      protocol: TCP
    {{- end }}
    {{- /* In sidecar mode kagent's controller container declares 8080: its Service targets it. */}}
    - name: control
      containerPort: {{ include "memgov.port.control" . }}
      protocol: TCP
    - name: ops
      containerPort: {{ include "memgov.port.ops" . }}
      protocol: TCP
  # Liveness counts only once the process answers: start-up may wait for the state store (and
  # migrate SQLite) for up to periodSeconds x failureThreshold.
  startupProbe:
    httpGet:
      path: /healthz
      port: {{ include "memgov.port.ops" . }}
    periodSeconds: {{ .Values.startupProbe.periodSeconds }}
    timeoutSeconds: 3
    failureThreshold: {{ .Values.startupProbe.failureThreshold }}
  # Ready once memgov can serve traffic (/readyz).
  readinessProbe:
    httpGet:
      path: /readyz
      port: {{ include "memgov.port.ops" . }}
    periodSeconds: 10
    timeoutSeconds: 3
    failureThreshold: 3
  livenessProbe:
    httpGet:
      path: /healthz
      port: {{ include "memgov.port.ops" . }}
    periodSeconds: 20
    timeoutSeconds: 3
    failureThreshold: 3
  {{- include "memgov.preStop" . | nindent 2 }}
  resources:
    {{- toYaml .Values.resources | nindent 4 }}
  securityContext:
    {{- include "memgov.containerSecurityContext" . | nindent 4 }}
  volumeMounts:
    - name: memgov-config
      mountPath: /etc/memgov
      readOnly: true
    - name: memgov-secrets
      mountPath: {{ include "memgov.secretDir" . }}
      readOnly: true
    {{- range (include "memgov.keyFolders" . | fromYaml).folders }}
    - name: {{ .volume }}
      mountPath: {{ .path }}
      readOnly: true
    {{- end }}
    - name: memgov-tmp
      mountPath: /tmp
    {{- if ne (include "memgov.stateStore" .) "postgresql" }}
    - name: memgov-state
      mountPath: /var/lib/memgov
    {{- else }}
    - name: memgov-spool
      mountPath: {{ include "memgov.spoolDir" . }}
    {{- end }}
    {{- if .Values.policy.opa.container.enabled }}
    - name: memgov-opa
      mountPath: {{ include "memgov.opaDir" . }}
      readOnly: true
    {{- end }}
    {{- with .Values.extraVolumeMounts }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
    {{- include "memgov.noTokenMount" . | nindent 4 }}
{{- if .Values.policy.opa.container.enabled }}
{{- $opa := .Values.policy.opa.container }}
- name: opa
  image: {{ include "memgov.opaImage" . | quote }}
  imagePullPolicy: {{ $opa.image.pullPolicy }}
  # OPA owns the Rego: it loads the bundle the init container wrote and names its revision in every
  # answer. Loopback only: memgov is OPA's one client. Diagnostics (/health) serve the kubelet's
  # probes. Test files stay out and decision inputs never reach a log line.
  args:
    - run
    - --server
    - --addr=127.0.0.1:{{ include "memgov.port.opa" . }}
    - --diagnostic-addr=0.0.0.0:{{ include "memgov.port.opaDiagnostics" . }}
    - --ignore=*_test.rego
    - --skip-version-check
    - --log-level=error
    - --log-format=json
    - --bundle
    - {{ include "memgov.bundleDir" . }}
  ports:
    - name: opa-diag
      containerPort: {{ include "memgov.port.opaDiagnostics" . }}
      protocol: TCP
  readinessProbe:
    httpGet:
      path: /health
      port: {{ include "memgov.port.opaDiagnostics" . }}
    periodSeconds: 10
  livenessProbe:
    httpGet:
      path: /health
      port: {{ include "memgov.port.opaDiagnostics" . }}
    initialDelaySeconds: 10
    periodSeconds: 20
  {{- include "memgov.preStop" . | nindent 2 }}
  resources:
    {{- toYaml $opa.resources | nindent 4 }}
  securityContext:
    {{- include "memgov.containerSecurityContext" . | nindent 4 }}
  volumeMounts:
    - name: memgov-opa
      mountPath: {{ include "memgov.opaDir" . }}
      readOnly: true
    {{- include "memgov.noTokenMount" . | nindent 4 }}
{{- end }}
{{- end }}

{{- define "memgov.volumes" -}}
- name: memgov-config
  projected:
    sources:
      - configMap:
          name: {{ include "memgov.fullname" . }}-config
          items:
            - key: config.yaml
              path: config.yaml
      {{- if include "memgov.ownPack" . }}
      - configMap:
          name: {{ include "memgov.fullname" . }}-policies
          items:
            {{- include "memgov.packItems" . | nindent 12 }}
      {{- end }}
- name: memgov-secrets
  projected:
    # Group-readable through fsGroup; nobody else in the pod reads them.
    defaultMode: 0440
    sources:
      {{- range (include "memgov.secretFiles" . | fromYaml).files }}
      - secret:
          name: {{ .secret }}
          items:
            - key: {{ .key }}
              path: {{ .file }}
      {{- end }}
{{- range (include "memgov.keyFolders" . | fromYaml).folders }}
- name: {{ .volume }}
  secret:
    secretName: {{ .secret }}
    defaultMode: 0440
{{- end }}
- name: memgov-tmp
  emptyDir:
    sizeLimit: 64Mi
{{- $store := include "memgov.stateStore" . }}
{{- if eq $store "persistent" }}
# SQLite state on a claim: it outlives the pod (one pod at a time: replicas 1, Recreate).
- name: memgov-state
  persistentVolumeClaim:
    claimName: {{ include "memgov.stateClaim" . }}
{{- else if ne $store "postgresql" }}
# SQLite state in an emptyDir (state.ephemeral): lost whenever the pod is replaced.
- name: memgov-state
  emptyDir:
    sizeLimit: 1Gi
{{- else }}
# The audit spool (PostgreSQL state): it outlives a killed or OOM-killed container (not the pod).
- name: memgov-spool
  emptyDir:
    sizeLimit: 64Mi
{{- end }}
{{- with .Values.extraVolumes }}
{{ toYaml . }}
{{- end }}
{{- if .Values.policy.opa.container.enabled }}
# The OPA bundle of this pod, written once by the init container.
- name: memgov-opa
  emptyDir:
    sizeLimit: 16Mi
{{- end }}
# Shadows the ServiceAccount token path (see memgov.noTokenMount).
- name: memgov-no-token
  emptyDir:
    medium: Memory
    sizeLimit: 1Mi
{{- end }}
