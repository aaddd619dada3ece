{{/*
The labels of every object: app.kubernetes.io/name as in config/kubernetes
(the only one selectors use), then Helm's own (tests/it/helm_chart.rs removes
exactly these before comparing with config/kubernetes).
*/}}
{{- define "clusterset-dns.labels" -}}
app.kubernetes.io/name: clusterset-dns
{{ include "clusterset-dns.helmLabels" . }}
{{- end }}

{{- define "clusterset-dns.helmLabels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{/* The selector of the Deployment, PodDisruptionBudget, Service and ServiceMonitor. */}}
{{- define "clusterset-dns.selector" -}}
app.kubernetes.io/name: clusterset-dns
{{- end }}

{{/* True (non-empty) when this release runs clusterset-dns: member or embedded. */}}
{{- define "clusterset-dns.runs" -}}
{{- if or (eq .Values.mode "member") (eq .Values.mode "embedded") }}true{{ end }}
{{- end }}

{{- define "clusterset-dns.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end }}
