{{/* The name of every object: the release's, or plegd when the release is named so. */}}
{{- define "plegd.fullname" -}}
{{- if or (eq .Release.Name .Chart.Name) (hasPrefix (printf "%s-" .Chart.Name) .Release.Name) -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{/* The selector: the name only. A DaemonSet's selector is immutable, and every earlier
manifest selected on it, so kubectl apply over an existing install keeps working. */}}
{{- define "plegd.selectorLabels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
{{- end -}}

{{- define "plegd.labels" -}}
{{ include "plegd.selectorLabels" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "plegd.image" -}}
{{- $tag := .Values.image.tag | default .Chart.AppVersion -}}
{{- if .Values.image.digest -}}
{{ .Values.image.repository }}@{{ .Values.image.digest }}
{{- else -}}
{{ .Values.image.repository }}:{{ $tag }}
{{- end -}}
{{- end -}}

{{/* A value as plegd reads it: a number a values file wrote as 1000000 is a float to
Helm, which would print it 1e+06. */}}
{{- define "plegd.scalar" -}}
{{- if or (kindIs "float64" .) (kindIs "int64" .) (kindIs "int" .) -}}
{{- printf "%d" (int64 .) -}}
{{- else -}}
{{- toString . -}}
{{- end -}}
{{- end -}}

{{/* plegd's flags, one "--flag=value" per line; a value left empty is left out. */}}
{{- define "plegd.flags" -}}
{{- $v := .Values -}}
{{- $uids := list -}}
{{- range $v.api.allowUids }}{{ $uids = append $uids (include "plegd.scalar" .) }}{{ end -}}
{{- $gids := list -}}
{{- range $v.api.allowGids }}{{ $gids = append $gids (include "plegd.scalar" .) }}{{ end -}}
{{- $flags := list
  (list "runtime-endpoint" (printf "unix://%s/%s" (trimSuffix "/" $v.runtime.socketDir) $v.runtime.socket))
  (list "runtime-request-timeout" $v.runtime.requestTimeout)
  (list "mode" $v.pleg.mode)
  (list "relist-period" $v.pleg.relistPeriod)
  (list "evented-relist-period" $v.pleg.eventedRelistPeriod)
  (list "relist-threshold" $v.pleg.relistThreshold)
  (list "listen" (printf "unix://%s/plegd.sock" (trimSuffix "/" $v.api.socketDir)))
  (list "allow-uid" (join "," $uids))
  (list "allow-gid" (join "," $gids))
  (list "watch-buffer" $v.api.watchBuffer)
  (list "max-watch-streams-per-uid" $v.api.maxWatchStreamsPerUid)
  (list "admin-addr" (printf "0.0.0.0:%s" (include "plegd.scalar" $v.admin.port)))
  (list "state-dir" $v.journal.stateDir)
  (list "journal-memory-budget" $v.journal.memoryBudget)
  (list "journal-disk-budget" $v.journal.diskBudget)
  (list "tombstone-retention" $v.journal.tombstoneRetention)
  (list "history-retention" $v.journal.historyRetention)
  (list "host-root" "/host")
  (list "kubelet-pods-socket" (ternary (printf "%s/pods-api.sock" (trimSuffix "/" $v.kubelet.podsApiDir)) "" (not (empty $v.kubelet.podsApiDir))))
  (list "nri" (ternary "on" "off" (not (empty $v.nri.socketDir))))
  (list "nri-socket" (ternary (printf "%s/nri.sock" (trimSuffix "/" $v.nri.socketDir)) "" (not (empty $v.nri.socketDir))))
  (list "otlp-endpoint" $v.otlp.endpoint)
  (list "otlp-ca-file" (ternary (printf "/etc/plegd/otlp-ca/%s" $v.otlp.caSecret.key) "" (not (empty $v.otlp.caSecret.name))))
  (list "log-format" $v.log.format)
  (list "log-level" $v.log.level)
-}}
{{- range $flags }}
{{- $value := include "plegd.scalar" (index . 1) }}
{{- if ne $value "" }}
- {{ printf "--%s=%s" (index . 0) $value | quote }}
{{- end }}
{{- end }}
{{- if empty $v.kubelet.podsApiDir }}
- "--kubelet-pods-socket="
{{- end }}
{{- end -}}

{{/* What the schema cannot say, refused with the value's name. */}}
{{- define "plegd.validate" -}}
{{- $set := list -}}
{{- range (include "plegd.flags" . | trim | fromYamlArray) -}}
{{- $set = append $set (regexReplaceAll "=.*$" . "") -}}
{{- end -}}
{{- range .Values.extraArgs -}}
{{- $flag := regexReplaceAll "=.*$" (toString .) "" -}}
{{- if has $flag $set -}}
{{- fail (printf "extraArgs: %s is set by the chart (plegd refuses a flag given twice): set its value instead" $flag) -}}
{{- end -}}
{{- end -}}
{{- /* The three host directories, apart: /var/run is /run on every distribution. */ -}}
{{- $dirs := list (list "runtime.socketDir" .Values.runtime.socketDir) (list "api.socketDir" .Values.api.socketDir) (list "journal.stateDir" .Values.journal.stateDir) -}}
{{- range $i, $a := $dirs -}}
{{- range $j, $b := $dirs -}}
{{- if lt $i $j -}}
{{- $x := regexReplaceAll "^/var/run(/|$)" (clean (index $a 1)) "/run$1" -}}
{{- $y := regexReplaceAll "^/var/run(/|$)" (clean (index $b 1)) "/run$1" -}}
{{- if or (eq $x $y) (hasPrefix (printf "%s/" $x) $y) (hasPrefix (printf "%s/" $y) $x) -}}
{{- fail (printf "%s (%s) and %s (%s) must be apart: each is a host directory of its own (the runtime's, plegd's per-boot socket, the state that survives a reboot)" (index $a 0) (index $a 1) (index $b 0) (index $b 1)) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- $ru := .Values.updateStrategy.rollingUpdate | default dict -}}
{{- if eq (toString .Values.updateStrategy.type) "RollingUpdate" -}}
{{- $unavailable := toString (hasKey $ru "maxUnavailable" | ternary $ru.maxUnavailable 1) -}}
{{- $surge := toString ($ru.maxSurge | default 0) -}}
{{- $noSurge := or (eq $surge "0") (eq $surge "0%") -}}
{{- $noUnavailable := or (eq $unavailable "0") (eq $unavailable "0%") -}}
{{- if and (not $noSurge) (not $noUnavailable) -}}
{{- fail (printf "updateStrategy.rollingUpdate: maxSurge (%s) needs maxUnavailable 0 (Kubernetes refuses both for a DaemonSet)" $surge) -}}
{{- end -}}
{{- if and $noSurge $noUnavailable -}}
{{- fail "updateStrategy.rollingUpdate: maxUnavailable and maxSurge are both 0: no node could ever be updated" -}}
{{- end -}}
{{- end -}}
{{- $own := list "PLEGD_NODE_NAME" "HOST_IP" -}}
{{- if .Values.otlp.headersSecret.name }}{{ $own = append $own "PLEGD_OTLP_HEADER" }}{{ end -}}
{{- range .Values.extraEnv -}}
{{- if has .name $own -}}
{{- fail (printf "extraEnv: %s is set by the chart: set its value instead" .name) -}}
{{- end -}}
{{- end -}}
{{- if and .Values.podMonitor.enabled .Values.serviceMonitor.enabled -}}
{{- fail "podMonitor.enabled and serviceMonitor.enabled: both scrape every pod, so each series would be scraped twice; enable one" -}}
{{- end -}}
{{- range $k, $_ := .Values.podLabels -}}
{{- if hasPrefix "app.kubernetes.io/" $k -}}
{{- fail (printf "podLabels: %s is the chart's own label (its selector and instance)" $k) -}}
{{- end -}}
{{- end -}}
{{- if and .Values.otlp.headersSecret.name (not .Values.otlp.headersSecret.key) -}}
{{- fail "otlp.headersSecret.key: a Secret's name needs the key holding the headers" -}}
{{- end -}}
{{- if and (or .Values.otlp.headersSecret.name .Values.otlp.caSecret.name) (not .Values.otlp.endpoint) -}}
{{- fail "otlp.endpoint: OTLP headers or a CA are set without an endpoint to send to" -}}
{{- end -}}
{{- end -}}
