{{/* Names ------------------------------------------------------------------------------- */}}

{{- define "imagerefresh.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "imagerefresh.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "imagerefresh.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "imagerefresh.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- required "serviceAccount.name is required when serviceAccount.create is false" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{/*
The name of an RBAC object of this release in namespace $ns. In the release namespace it is the
full name; elsewhere it carries the release namespace, so two releases of the same name (in two
namespaces) that reach one target namespace never collide. The chart renders at most one Role
and one RoleBinding per namespace (rules merged), so a namespace that is both watched and a
target — or a pair whose two sides are the same namespace — still yields one object each.
Cluster-scoped objects always carry the release namespace.
*/}}
{{- define "imagerefresh.rbacName" -}}
{{- $root := index . 0 -}}
{{- $ns := index . 1 -}}
{{- if eq $ns $root.Release.Namespace -}}
{{- include "imagerefresh.fullname" $root -}}
{{- else -}}
{{- printf "%s-%s" $root.Release.Namespace (include "imagerefresh.fullname" $root) -}}
{{- end -}}
{{- end -}}

{{- define "imagerefresh.clusterRbacName" -}}
{{- printf "%s-%s" .Release.Namespace (include "imagerefresh.fullname" .) -}}
{{- end -}}

{{- define "imagerefresh.selectorLabels" -}}
app.kubernetes.io/name: {{ include "imagerefresh.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "imagerefresh.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "imagerefresh.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/component: operator
{{- end -}}

{{- define "imagerefresh.image" -}}
{{- if .Values.image.digest -}}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest -}}
{{- else -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}
{{- end -}}

{{/* Configuration ------------------------------------------------------------------------- */}}

{{/* The watched namespaces (exact names and patterns), as a JSON list (empty with watch.allNamespaces). */}}
{{- define "imagerefresh.watched" -}}
{{- if .Values.watch.allNamespaces -}}
[]
{{- else -}}
{{- $given := .Values.watch.namespaces | default (list .Release.Namespace) -}}
{{- toJson (uniq $given | sortAlpha) -}}
{{- end -}}
{{- end -}}

{{/*
Namespace patterns, in the operator's grammar (imagerefresh run --namespace): comma-separated
globs (`*`, `?`); a `!` glob excludes; a leading exclusion implies a catch-all before it; an
inclusive glob after the first re-includes only what the first matched (`edge-*, !*-test`).
values.schema.json keeps globs to [a-z0-9-*?], so a glob becomes a regular expression by
replacing `*` and `?` alone. tests/chart checks these against the operator's own matching.
*/}}
{{- define "imagerefresh.isPattern" -}}
{{- if regexMatch "[*?!,]" . }}true{{ end -}}
{{- end -}}

{{/* Whether policies are watched cluster-wide: every namespace, or some pattern to match. */}}
{{- define "imagerefresh.clusterwide" -}}
{{- if .Values.watch.allNamespaces }}true{{ end -}}
{{- range .Values.watch.namespaces }}{{ include "imagerefresh.isPattern" . }}{{ end -}}
{{- end -}}

{{- define "imagerefresh.globMatches" -}}
{{- $glob := index . 1 | replace "*" ".*" | replace "?" "." -}}
{{- if regexMatch (printf "^%s$" $glob) (index . 0) }}true{{ end -}}
{{- end -}}

{{/* (list NAMESPACE PATTERN): "true" when PATTERN (an exact name too) serves NAMESPACE. */}}
{{- define "imagerefresh.patternServes" -}}
{{- $name := index . 0 -}}
{{- $globs := list -}}
{{- range splitList "," (index . 1) }}{{ $globs = append $globs (trim .) }}{{ end -}}
{{- if hasPrefix "!" (first $globs) }}{{ $globs = prepend $globs "*" }}{{ end -}}
{{- $first := include "imagerefresh.globMatches" (list $name (first $globs)) -}}
{{- $matched := $first -}}
{{- range rest $globs -}}
{{- if hasPrefix "!" . -}}
{{- if include "imagerefresh.globMatches" (list $name (trimPrefix "!" .)) }}{{ $matched = "" }}{{ end -}}
{{- else if and $first (include "imagerefresh.globMatches" (list $name .)) -}}
{{- $matched = "true" -}}
{{- end -}}
{{- end -}}
{{- $matched -}}
{{- end -}}

{{/* (list ROOT NAMESPACE): "true" when the operator serves policies in NAMESPACE. */}}
{{- define "imagerefresh.serves" -}}
{{- $root := index . 0 -}}
{{- $ns := index . 1 -}}
{{- if $root.Values.watch.allNamespaces -}}
true
{{- else -}}
{{- range (include "imagerefresh.watched" $root | fromJsonArray) -}}
{{- include "imagerefresh.patternServes" (list $ns .) -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/*
The policies from values, normalised, as a JSON list: each {name, namespace, spec, targets}
where targets are {kind, resource, name, namespace} with namespaces defaulted as the operator
defaults them. Fails on what the operator would refuse anyway (a policy in a namespace it does
not watch, a cross-namespace target with no allow-list pair), so the mistake shows at install.
*/}}
{{- define "imagerefresh.policies" -}}
{{- $root := . -}}
{{- $resources := dict "Deployment" "deployments" "DaemonSet" "daemonsets" "StatefulSet" "statefulsets" -}}
{{- $pairs := list -}}
{{- range .Values.allowNamespacePairs -}}
{{- $pairs = append $pairs (printf "%s=%s" .policyNamespace .targetNamespace) -}}
{{- end -}}
{{- $out := list -}}
{{- $seen := dict -}}
{{- range .Values.policies -}}
{{- $ns := .namespace | default $root.Release.Namespace -}}
{{- $key := printf "%s/%s" $ns .name -}}
{{- if hasKey $seen $key -}}
{{- fail (printf "policies: %s is declared twice" $key) -}}
{{- end -}}
{{- $_ := set $seen $key true -}}
{{- if not (include "imagerefresh.serves" (list $root $ns)) -}}
{{- fail (printf "policies: %s is in namespace %s, which the operator does not watch; add it (or a pattern matching it) to watch.namespaces" $key $ns) -}}
{{- end -}}
{{- $targets := list -}}
{{- range .spec.targets -}}
{{- $tns := .namespace | default $ns -}}
{{- if and (ne $tns $ns) (not (has (printf "%s=%s" $ns $tns) $pairs)) -}}
{{- fail (printf "policies: %s targets %s %s/%s, but no allowNamespacePairs entry lets namespace %s reach %s" $key .kind $tns .name $ns $tns) -}}
{{- end -}}
{{- $targets = append $targets (dict "kind" .kind "resource" (get $resources .kind) "name" .name "namespace" $tns) -}}
{{- end -}}
{{- $out = append $out (dict "name" .name "namespace" $ns "spec" .spec "targets" $targets) -}}
{{- end -}}
{{- toJson $out -}}
{{- end -}}

{{/*
Whether the operator keeps watch-fed copies of its targets' workloads and pods (watchEvidence):
the run option and the list/watch verbs follow this one answer. Absent (`helm upgrade
--reuse-values` from a chart without the value) counts as off: the verbs of before, and
--no-watch-evidence, which needs none of the new ones.
*/}}
{{- define "imagerefresh.watchEvidence" -}}
{{- if .Values.watchEvidence }}true{{ end -}}
{{- end -}}

{{/* Whether RBAC on workloads is scoped to the targets of the values' policies. */}}
{{- define "imagerefresh.scoped" -}}
{{- if and .Values.rbac.scopeToPolicies .Values.policies -}}true{{- end -}}
{{- end -}}

{{/*
What each namespace needs, as a JSON object keyed by namespace:
  {policies: bool, targets: bool, names: {deployments: [...], ...}}
`policies`: ImageRefreshPolicies live here (watched). `targets`: the operator reads and patches
workloads here; `names` lists them when known (scoped), else every workload may be reached.
Watched cluster-wide (watch.allNamespaces, or a namespace pattern: policies may be in
namespaces no one can list at install), policy rules are cluster-wide (no entry here) and so
are target rules unless scoped.
*/}}
{{- define "imagerefresh.rbacPlan" -}}
{{- $plan := dict -}}
{{- $scoped := include "imagerefresh.scoped" . -}}
{{- $clusterwide := include "imagerefresh.clusterwide" . -}}
{{- if not $clusterwide -}}
{{- range (include "imagerefresh.watched" . | fromJsonArray) -}}
{{- $_ := set $plan . (dict "policies" true "targets" false "names" dict) -}}
{{- end -}}
{{- end -}}
{{- if $scoped -}}
{{- range (include "imagerefresh.policies" . | fromJsonArray) -}}
{{- range .targets -}}
{{- $entry := get $plan .namespace | default (dict "policies" false "targets" false "names" dict) -}}
{{- $_ := set $entry "targets" true -}}
{{- $names := get $entry.names .resource | default list -}}
{{- $_ := set $entry.names .resource (append $names .name | uniq | sortAlpha) -}}
{{- $_ := set $plan .namespace $entry -}}
{{- end -}}
{{- end -}}
{{- else if not $clusterwide -}}
{{- $targetNamespaces := include "imagerefresh.watched" . | fromJsonArray -}}
{{- range .Values.allowNamespacePairs -}}
{{- $targetNamespaces = append $targetNamespaces .targetNamespace -}}
{{- end -}}
{{- range $targetNamespaces -}}
{{- $entry := get $plan . | default (dict "policies" false "targets" false "names" dict) -}}
{{- $_ := set $entry "targets" true -}}
{{- $_ := set $plan . $entry -}}
{{- end -}}
{{- end -}}
{{- toJson $plan -}}
{{- end -}}

{{/*
The rules a target namespace (or, unscoped and watched cluster-wide, the cluster) needs.
With watchEvidence (the default) the operator keeps watch-fed copies of its targets' workloads
and their pods instead of reading them on every tick and polling rollouts: one LIST then one
WATCH stream per kind and namespace where it may list every workload there, else one per
declared workload by name — a LIST and WATCH with fieldSelector=metadata.name=<name>, the only
list and watch that `resourceNames` allows — and one stream of the namespace's pods. Without it,
the verbs of before: no list or watch on workloads, no watch on pods.
*/}}
{{- define "imagerefresh.targetRules" -}}
{{- $root := index . 0 -}}
{{- $names := index . 1 -}}
{{- $watch := eq (include "imagerefresh.watchEvidence" $root) "true" -}}
{{- $workloadVerbs := ternary `["get", "list", "watch", "patch"]` `["get", "patch"]` $watch -}}
{{- if $names }}
{{- range $resource := list "daemonsets" "deployments" "statefulsets" }}
{{- with get $names $resource }}
{{- if $watch }}
# The declared {{ $resource }}: read (image, rollout state) and guarded image patches; list and
# watch by name only (fieldSelector=metadata.name=<name>): one watch-fed copy per workload, so a
# rollout's verdict follows its watch event rather than a poll.
{{- else }}
# The declared {{ $resource }}: read (image, rollout state) and guarded image patches.
{{- end }}
- apiGroups: ["apps"]
  resources: [{{ $resource | quote }}]
  resourceNames: {{ toJson . }}
  verbs: {{ $workloadVerbs }}
{{- end }}
{{- end }}
{{- else }}
{{- if $watch }}
# Any workload the allowed policies may name: read (image, rollout state), guarded image
# patches; list and watch: one watch-fed copy per kind and namespace, so a rollout's verdict
# follows its watch event rather than a poll.
{{- else }}
# Any workload the allowed policies may name: read (image, rollout state), guarded image patches.
{{- end }}
- apiGroups: ["apps"]
  resources: ["deployments", "daemonsets", "statefulsets"]
  verbs: {{ $workloadVerbs }}
{{- end }}
# The workloads' revisions (a Deployment's ReplicaSets, a DaemonSet's or StatefulSet's
# ControllerRevisions), listed by the workload's selector while a rollout of ours is in flight:
# a rollback restores only what its previous revision ran. Read-only; a list cannot be scoped
# by name.
- apiGroups: ["apps"]
  resources: ["replicasets", "controllerrevisions"]
  verbs: ["list"]
{{- if $watch }}
# The workloads' pods: which digests they run, from one watch-fed copy of the namespace's pods
# (a list or watch of pods cannot be scoped by name or label). Read-only.
- apiGroups: [""]
  resources: ["pods"]
  verbs: ["list", "watch"]
{{- else }}
# The workload's pods, by label selector: which digests they run. Read-only.
- apiGroups: [""]
  resources: ["pods"]
  verbs: ["list"]
{{- end }}
{{- if $root.Values.prePull.enabled }}
# Pre-pull helper pods (prePull.enabled): one per node, deleted once it proved the pull. A create
# cannot be scoped by name; the ValidatingAdmissionPolicy <release namespace>-<fullname>-pre-pull
# admits only the helpers' shape, and deletes of the helpers only.
- apiGroups: [""]
  resources: ["pods"]
  verbs: ["create", "delete"]
{{- end }}
# The pod template's service account: its imagePullSecrets when the template names none.
- apiGroups: [""]
  resources: ["serviceaccounts"]
  verbs: ["get"]
{{- end -}}

{{/*
The pull secrets a target namespace's Role may read: `get` on exactly the names in
rbac.pullSecrets.names, nothing when it is empty (the default). Only ever rendered into a
namespaced Role: Secrets are never granted cluster-wide, and never list or watch, which would
expose every Secret's content.
*/}}
{{- define "imagerefresh.secretRules" -}}
{{- with .Values.rbac.pullSecrets.names }}
# Pull secrets named in rbac.pullSecrets.names, by name only: registry credentials for digest lookups.
- apiGroups: [""]
  resources: ["secrets"]
  resourceNames: {{ toJson (uniq . | sortAlpha) }}
  verbs: ["get"]
{{- end }}
{{- end -}}

{{/* The rules where policies live: the operator's own resources and kopf's. */}}
{{- define "imagerefresh.policyRules" -}}
{{- $root := . -}}
# Policies: kopf lists and watches them; a tick reads one. No patch: the operator's only kopf
# handler is a raw-event handler, which stores nothing on the policy (no finalizer, no progress
# or last-handled annotation); kopf patches a watched object only for those.
- apiGroups: ["images.tracebloc.io"]
  resources: ["imagerefreshpolicies"]
  verbs: ["get", "list", "watch"]
# Status is replaced (PUT) with the resourceVersion it was computed from.
- apiGroups: ["images.tracebloc.io"]
  resources: ["imagerefreshpolicies/status"]
  verbs: ["update"]
{{- end -}}

{{- define "imagerefresh.eventRules" -}}
# Events about policies and workloads (the operator's and kopf's warnings).
- apiGroups: [""]
  resources: ["events"]
  verbs: ["create"]
{{- end -}}

{{/*
The pre-pull helpers' user as `imagerefresh run --pre-pull-user` takes it: UID:GID, UID (the
image's group for that user) or `platform` (neither: the platform assigns them).
*/}}
{{- define "imagerefresh.prePullUser" -}}
{{- $uid := .Values.prePull.runAsUser -}}
{{- $gid := .Values.prePull.runAsGroup -}}
{{- if kindIs "invalid" $uid -}}
{{- if not (kindIs "invalid" $gid) -}}
{{- fail "prePull.runAsGroup needs prePull.runAsUser: with no user (null) the platform assigns both" -}}
{{- end -}}
platform
{{- else if kindIs "invalid" $gid -}}
{{- int64 $uid -}}
{{- else -}}
{{- printf "%d:%d" (int64 $uid) (int64 $gid) -}}
{{- end -}}
{{- end -}}

{{/* Fails on combinations the chart cannot run safely. */}}
{{- define "imagerefresh.validate" -}}
{{- if eq (int .Values.ports.metrics) (int .Values.ports.liveness) -}}
{{- fail "ports.metrics and ports.liveness must differ" -}}
{{- end -}}
{{- if and (gt (int .Values.replicaCount) 1) (not .Values.leaderElection.enabled) -}}
{{- fail "replicaCount above 1 needs leaderElection.enabled: without it every replica would act at once" -}}
{{- end -}}
{{- if and .Values.watch.allNamespaces .Values.watch.namespaces -}}
{{- fail "watch.namespaces and watch.allNamespaces exclude each other" -}}
{{- end -}}
{{- if and .Values.rbac.pullSecrets.names (include "imagerefresh.clusterwide" .) (not (include "imagerefresh.scoped" .)) -}}
{{- fail "rbac.pullSecrets.names: with watch.allNamespaces or a namespace pattern and no policies in values, the chart knows no target namespace to grant them in, and it never grants Secrets cluster-wide; declare the policies in values (rbac.scopeToPolicies: true), or grant get on those Secrets by name with a Role in each target namespace yourself" -}}
{{- end -}}
{{- $_ := include "imagerefresh.policies" . -}}
{{- end -}}
