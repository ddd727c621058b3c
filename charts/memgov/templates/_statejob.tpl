{{/*
The hook Jobs that run memgov's state commands against PostgreSQL: `memgov state migrate` before
install and upgrade, `memgov state check` before a rollback. Their pods carry no label the Service,
the PodDisruptionBudget or memgov's own NetworkPolicy select, read the state URL only, run as their
own ServiceAccount without its token, and have an egress policy of their own (migrate-job.yaml).
*/}}

{{- define "memgov.migrateServiceAccount" -}}
{{- $sa := .Values.state.migrationJob.serviceAccount | default dict }}
{{- if $sa.create }}
{{- printf "%s-migrate" (include "memgov.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- default "default" $sa.name }}
{{- end }}
{{- end }}

{{- define "memgov.migrateSelectorLabels" -}}
app.kubernetes.io/name: {{ include "memgov.name" . }}-migrate
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{/* memgov.stateJob: one hook Job; dict with root (the chart's context), component, hook and command. */}}
{{- define "memgov.stateJob" -}}
{{- $ := .root }}
{{- $job := $.Values.state.migrationJob }}
{{- $dir := include "memgov.secretDir" $ }}
apiVersion: batch/v1
kind: Job
metadata:
  name: {{ printf "%s-%s" (include "memgov.fullname" $) .component | trunc 63 | trimSuffix "-" }}
  namespace: {{ $.Release.Namespace }}
  labels:
    {{- include "memgov.labels" $ | nindent 4 }}
    app.kubernetes.io/component: {{ .component }}
  annotations:
    helm.sh/hook: {{ .hook }}
    helm.sh/hook-weight: "0"
    helm.sh/hook-delete-policy: before-hook-creation,hook-succeeded
spec:
  backoffLimit: {{ $job.backoffLimit }}
  activeDeadlineSeconds: {{ $job.activeDeadlineSeconds }}
  template:
    metadata:
      labels:
        {{- include "memgov.migrateSelectorLabels" $ | nindent 8 }}
        app.kubernetes.io/component: {{ .component }}
    spec:
      restartPolicy: Never
      serviceAccountName: {{ include "memgov.migrateServiceAccount" $ }}
      automountServiceAccountToken: false
      enableServiceLinks: false
      {{- with include "memgov.imagePullSecrets" $ }}
      imagePullSecrets:
        {{- . | nindent 8 }}
      {{- end }}
      {{- with $job.priorityClassName }}
      priorityClassName: {{ . }}
      {{- end }}
      securityContext:
        {{- include "memgov.podSecurityContext" $ | nindent 8 }}
      {{- with $.Values.nodeSelector }}
      nodeSelector:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      {{- with $job.affinity }}
      affinity:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      {{- with $.Values.tolerations }}
      tolerations:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      containers:
        - name: {{ .component }}
          image: {{ include "memgov.image" $ | quote }}
          imagePullPolicy: {{ $.Values.image.pullPolicy }}
          command: {{ toJson .command }}
          env:
            - name: MEMGOV_STATE__URL_FILE
              value: {{ printf "%s/state-url" $dir }}
            {{- with $.Values.extraEnv }}
            {{- toYaml . | nindent 12 }}
            {{- end }}
          resources:
            {{- toYaml $.Values.resources | nindent 12 }}
          securityContext:
            {{- include "memgov.containerSecurityContext" $ | nindent 12 }}
          volumeMounts:
            - name: memgov-state-url
              mountPath: {{ $dir }}
              readOnly: true
            - name: memgov-tmp
              mountPath: /tmp
            {{- with $.Values.extraVolumeMounts }}
            {{- toYaml . | nindent 12 }}
            {{- end }}
      volumes:
        - name: memgov-state-url
          secret:
            secretName: {{ $.Values.state.postgresql.existingSecret }}
            defaultMode: 0440
            items:
              - key: {{ $.Values.state.postgresql.key }}
                path: state-url
        - name: memgov-tmp
          emptyDir:
            sizeLimit: 16Mi
        {{- with $.Values.extraVolumes }}
        {{- toYaml . | nindent 8 }}
        {{- end }}
{{- end }}
