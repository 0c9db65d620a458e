{{/* The objects' name: the release's, with the chart's name unless it holds it. */}}
{{- define "autocapture.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{/* What selects the daemon's pods; never changes across upgrades (a Deployment's selector is immutable). */}}
{{- define "autocapture.selectorLabels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: daemon
{{- end -}}

{{/* Every object's labels but its component. */}}
{{- define "autocapture.baseLabels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{- define "autocapture.labels" -}}
{{ include "autocapture.baseLabels" . }}
app.kubernetes.io/component: daemon
{{- end -}}

{{/* The Service's in-cluster URL. */}}
{{- define "autocapture.url" -}}
{{- printf "http://%s.%s.svc:%v" (include "autocapture.fullname" .) .Release.Namespace .Values.service.port -}}
{{- end -}}

{{- define "autocapture.persistent" -}}
{{- if and .Values.persistence.enabled (eq (int .Values.replicaCount) 1) }}true{{ end -}}
{{- end -}}

{{/*
The Secrets the values reference, one line each: the Secret, its key, the
file it becomes under /etc/autocapture/secrets and the config key naming
that file.
*/}}
{{- define "autocapture.secretFiles" -}}
{{- $v := .Values -}}
{{- $all := list
  (list $v.auth.existingSecret $v.auth.key "bearer_token" "web.auth.bearer_token_file")
  (list $v.database.existingSecret $v.database.key "database_url" "database.url_file")
  (list $v.s3.existingSecret $v.s3.key "s3_secret_access_key" "storage.s3.secret_access_key_file")
  (list $v.slack.existingSecret $v.slack.tokenKey "slack_token" "notify.slack.token_file")
  (list (ternary $v.slack.existingSecret "" (ne $v.slack.signingSecretKey "")) $v.slack.signingSecretKey "slack_signing_secret" "notify.slack.signing_secret_file")
  (list $v.linkSecret.existingSecret $v.linkSecret.key "link_secret" "web.link_secret_file")
  (list $v.agent.existingSecret $v.agent.key "agent_token" "profiling.agent_token_file") -}}
{{- range $all }}
{{- if index . 0 }}
- {secret: {{ index . 0 | quote }}, key: {{ index . 1 | quote }}, file: {{ index . 2 }}, config: {{ index . 3 }}}
{{- end }}
{{- end }}
{{- end -}}

{{/* setIn sets .v at the dotted .path in the map .m, making the maps on the way. */}}
{{- define "autocapture.setIn" -}}
{{- $m := .m -}}
{{- $path := splitList "." .path -}}
{{- range initial $path -}}
{{- if not (kindIs "map" (get $m .)) }}{{ $_ := set $m . dict }}{{ end -}}
{{- $m = get $m . -}}
{{- end -}}
{{- $_ := set $m (last $path) .v -}}
{{- end -}}

{{/* The daemon's config: the config value with what the chart owns set over it. */}}
{{- define "autocapture.config" -}}
{{- $c := deepCopy .Values.config -}}
{{- include "autocapture.setIn" (dict "m" $c "path" "web.listen_address" "v" (printf "0.0.0.0:%v" .Values.service.port)) -}}
{{- if not (dig "web" "external_url" "" $c) -}}
{{- include "autocapture.setIn" (dict "m" $c "path" "web.external_url" "v" (include "autocapture.url" .)) -}}
{{- end -}}
{{- include "autocapture.setIn" (dict "m" $c "path" "storage.path" "v" "/var/lib/autocapture") -}}
{{- if .Values.playbooks -}}
{{- $_ := set $c "playbooks" (list "/etc/autocapture/playbooks/*.yaml") -}}
{{- end -}}
{{- range (include "autocapture.secretFiles" . | fromYamlArray) -}}
{{- include "autocapture.setIn" (dict "m" $c "path" .config "v" (printf "/etc/autocapture/secrets/%s" .file)) -}}
{{- end -}}
{{- toYaml $c -}}
{{- end -}}

{{/* seconds: a Go duration (1m30s, 20s) in whole seconds. */}}
{{- define "autocapture.seconds" -}}
{{- $n := 0 -}}
{{- range regexFindAll "[0-9]+(ms|h|m|s)" . -1 -}}
{{- if hasSuffix "ms" . }}{{ $n = add $n 1 }}
{{- else if hasSuffix "h" . }}{{ $n = add $n (mul (trimSuffix "h" . | atoi) 3600) }}
{{- else if hasSuffix "m" . }}{{ $n = add $n (mul (trimSuffix "m" . | atoi) 60) }}
{{- else }}{{ $n = add $n (trimSuffix "s" . | atoi) }}
{{- end -}}
{{- end -}}
{{- $n -}}
{{- end -}}

{{/* validate fails the render on values that would make a broken release. */}}
{{- define "autocapture.validate" -}}
{{- if gt (int .Values.replicaCount) 1 -}}
{{- if not .Values.database.existingSecret -}}
{{- fail "replicaCount > 1 needs database.existingSecret: the replicas share one PostgreSQL run store (SQLite is one replica's)" -}}
{{- end -}}
{{- if ne (dig "storage" "backend" "local" .Values.config) "s3" -}}
{{- fail "replicaCount > 1 needs config.storage.backend: s3: every replica serves the artifacts any of them stored" -}}
{{- end -}}
{{- end -}}
{{- if not .Values.auth.existingSecret -}}
{{- fail "auth.existingSecret is required: the daemon listens beyond loopback only with a bearer token" -}}
{{- end -}}
{{- end -}}
