{{/*
The policy pack. memgov's image carries the default pack (package data of the wheel), so the chart
holds no copy of it. policy.pack.files is an operator's own pack: it is stored in the ConfigMap
<full name>-policies and mounted at /etc/memgov/policies, replacing the image's pack. ConfigMap
keys cannot hold "/", so each file is stored under its path with "/" spelled "__" and mounted
back at its path through the volume's items list.

With the in-pod OPA, an init container writes the pack (the image's or the operator's) as an OPA
bundle into a pod-local folder; OPA loads that bundle and memgov reads the same files, so both
engines of a pod decide with one revision.
*/}}

{{- define "memgov.ownPack" -}}
{{- if .Values.policy.pack.files }}true{{- end }}
{{- end }}

{{/* memgov.packDir: the pack memgov loads; empty means the image's own pack (memgov's default). */}}
{{- define "memgov.packDir" -}}
{{- if .Values.policy.opa.container.enabled }}
{{- include "memgov.bundleDir" . }}
{{- else if include "memgov.ownPack" . }}/etc/memgov/policies
{{- end }}
{{- end }}

{{- define "memgov.packKey" -}}
{{- replace "/" "__" . }}
{{- end }}

{{/* memgov.packData: the ConfigMap data map, failing on keys Kubernetes would refuse or merge. */}}
{{- define "memgov.packData" -}}
{{- $data := dict }}
{{- range $path, $content := .Values.policy.pack.files }}
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
{{- range $path, $_ := .Values.policy.pack.files }}
{{- $items = append $items (dict "key" (include "memgov.packKey" $path) "path" (printf "policies/%s" $path)) }}
{{- end }}
{{- toYaml $items }}
{{- end }}
