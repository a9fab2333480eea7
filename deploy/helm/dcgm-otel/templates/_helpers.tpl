{{/* The chart's name. */}}
{{- define "dcgm-otel.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* The fullname: the release name when it contains the chart's name, else release-chart. */}}
{{- define "dcgm-otel.fullname" -}}
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

{{- define "dcgm-otel.namespace" -}}
{{- default .Release.Namespace .Values.namespaceOverride }}
{{- end }}

{{/* Selector labels (also on the Service, pods and monitors). */}}
{{- define "dcgm-otel.selectorLabels" -}}
app.kubernetes.io/name: {{ include "dcgm-otel.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "dcgm-otel.labels" -}}
{{ include "dcgm-otel.selectorLabels" . }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{- define "dcgm-otel.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "dcgm-otel.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- required "serviceAccount.name is required when serviceAccount.create is false" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* The counters ConfigMap's name and key. */}}
{{- define "dcgm-otel.countersConfigMap" -}}
{{- default (printf "%s-counters" (include "dcgm-otel.fullname" .)) .Values.countersConfigMap.name }}
{{- end }}
{{- define "dcgm-otel.countersKey" -}}
{{- if .Values.countersConfigMap.name }}{{ .Values.countersConfigMap.key }}{{ else }}metrics{{ end }}
{{- end }}

{{/* The API server is needed for pod metadata: pod labels, pod UIDs, DRA. */}}
{{- define "dcgm-otel.needsApi" -}}
{{- if and .Values.kubernetes.enabled (or .Values.kubernetes.enablePodLabels .Values.kubernetes.enablePodUID .Values.kubernetesDRA.enabled) }}true{{ end }}
{{- end }}

{{/* The server asks every client for a certificate it must present (mTLS): the kubelet's probes have none. */}}
{{- define "dcgm-otel.requiresClientCert" -}}
{{- $tls := .Values.tlsServerConfig }}
{{- if and $tls.enabled (has $tls.clientAuthType (list "RequireAndVerifyClientCert" "RequireAnyClientCert")) }}true{{ end }}
{{- end }}

{{/* The counters come from the API (-m): only for the chart's own ConfigMap or an existing one. */}}
{{- define "dcgm-otel.countersFromApi" -}}
{{- if .Values.countersConfigMap.fromApi }}true{{ end }}
{{- end }}

{{/* A web config file is used: TLS or basic auth. */}}
{{- define "dcgm-otel.webConfig" -}}
{{- if or .Values.tlsServerConfig.enabled .Values.basicAuth.users .Values.basicAuth.existingSecret }}true{{ end }}
{{- end }}

{{- define "dcgm-otel.webConfigSecret" -}}
{{- default (printf "%s-web-config" (include "dcgm-otel.fullname" .)) .Values.basicAuth.existingSecret }}
{{- end }}

{{- define "dcgm-otel.tlsSecret" -}}
{{- default (printf "%s-tls" (include "dcgm-otel.fullname" .)) .Values.tlsServerConfig.existingSecret }}
{{- end }}

{{/* The port of service.address (":9400" -> 9400). */}}
{{- define "dcgm-otel.port" -}}
{{- last (splitList ":" .Values.service.address) }}
{{- end }}
