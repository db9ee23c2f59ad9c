{{/* Names, labels and the image reference shared by every template. */}}

{{/* The release's base name: the release name, or "<release>-tracehouse" when it does not contain "tracehouse". */}}
{{- define "tracehouse.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 54 | trimSuffix "-" -}}
{{- else if contains "tracehouse" .Release.Name -}}
{{- .Release.Name | trunc 54 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-tracehouse" .Release.Name | trunc 54 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{/* The operator's Deployment, ClusterRole and Lease name. */}}
{{- define "tracehouse.operatorName" -}}
{{- printf "%s-operator" (include "tracehouse.fullname" .) -}}
{{- end -}}

{{- define "tracehouse.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "tracehouse.operatorName" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- required "serviceAccount.name is required when serviceAccount.create is false" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- define "tracehouse.selectorLabels" -}}
app.kubernetes.io/name: tracehouse-operator
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "tracehouse.labels" -}}
{{ include "tracehouse.selectorLabels" . }}
app.kubernetes.io/part-of: tracehouse
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end -}}

{{/* The operator image: repository:tag (tag defaults to the chart's appVersion), or @digest. */}}
{{- define "tracehouse.image" -}}
{{- if .Values.image.digest -}}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest -}}
{{- else -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}
{{- end -}}

{{/* The rules of config/rbac/role.yaml (copied into files/ by charts/gen): the ClusterRole's or the Role's. */}}
{{- define "tracehouse.rules" -}}
{{- $kind := .kind -}}
{{- range splitList "\n---\n" (.root.Files.Get "files/rbac/role.yaml") -}}
{{- $doc := fromYaml . -}}
{{- if eq (get $doc "kind") $kind -}}
{{- toYaml (get $doc "rules") -}}
{{- end -}}
{{- end -}}
{{- end -}}
