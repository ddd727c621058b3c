{{/*
The policy pack. Helm reads only files inside the chart, so the chart carries a copy of the
repository's policies/ (files/policies, refreshed by scripts/sync-chart-policies.sh and checked
byte for byte by the chart tests); policy.pack.files replaces it with a user pack. ConfigMap keys
cannot hold "/", so each file is stored under its path with "/" spelled "__" and mounted back at
its path through the volume's items list.
*/}}

{{/* memgov.packFiles: YAML map of relative path -> content. */}}
{{- define "memgov.packFiles" -}}
{{- $files := dict }}
{{- if .Values.policy.pack.files }}
{{- $files = .Values.policy.pack.files }}
{{- else }}
{{- range $path, $content := .Files.Glob "files/policies/**" }}
{{- $_ := set $files (trimPrefix "files/policies/" $path) (toString $content) }}
{{- end }}
{{- end }}
{{- /* toYaml drops the document's last newline, which belongs to the last file's content. */}}
{{- toYaml $files }}{{ "\n" }}
{{- end }}

{{- define "memgov.packKey" -}}
{{- replace "/" "__" . }}
{{- end }}

{{/* memgov.packData: the ConfigMap data map, failing on keys Kubernetes would refuse or merge. */}}
{{- define "memgov.packData" -}}
{{- $data := dict }}
{{- range $path, $content := include "memgov.packFiles" . | fromYaml }}
{{- $key := include "memgov.packKey" $path }}
{{- if not (regexMatch "^[-._a-zA-Z0-9]+$" $key) }}
{{- fail (printf "policy pack file %q: only letters, digits, '-', '_', '.' and '/' may appear in a pack path" $path) }}
{{- end }}
{{- if hasKey $data $key }}
{{- fail (printf "policy pack file %q collides with another file once '/' is stored as '__'; rename one" $path) }}
{{- end }}
{{- $_ := set $data $key $content }}
{{- end }}
{{- toYaml $data }}{{ "\n" }}
{{- end }}

{{/* memgov.packItems: configMap volume items that put every file back at policies/<path>. */}}
{{- define "memgov.packItems" -}}
{{- $items := list }}
{{- range $path, $_ := include "memgov.packFiles" . | fromYaml }}
{{- $items = append $items (dict "key" (include "memgov.packKey" $path) "path" (printf "policies/%s" $path)) }}
{{- end }}
{{- toYaml $items }}
{{- end }}
