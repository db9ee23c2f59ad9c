# shellcheck shell=bash
# A real Kubernetes control plane (etcd, kube-apiserver, kube-controller-manager) on loopback,
# plus tracehouse-node-agent, the local "kubelet" that runs pods from the images in local image
# storage (e2e/lib/images.sh builds them from the current build), and the operator installed
# with `helm upgrade --install` of charts/tracehouse, as users install it.
# kube-apiserver and kube-controller-manager are built from k8s.io/kubernetes by the Go tool
# module in e2e/k8s (see e2e/k8s/README.md); etcd is Debian's etcd-server, run by us.

source "$E2E_DIR/lib/images.sh"
source "$E2E_DIR/lib/helm.sh"

K8S_VERSION=1.36.3
K8S_DATA="$TRACEHOUSE_STATE/k8s"
K8S_PKI="$K8S_DATA/pki"
K8S_NODE_NAME="${TRACEHOUSE_NODE_NAME:-tracehouse-node}"
# Fixed loopback ports; override with the environment when they clash.
ETCD_PORT="${TRACEHOUSE_ETCD_PORT:-12379}"
ETCD_PEER_PORT="${TRACEHOUSE_ETCD_PEER_PORT:-12380}"
APISERVER_PORT="${TRACEHOUSE_APISERVER_PORT:-16443}"
KCM_PORT="${TRACEHOUSE_KCM_PORT:-16444}"
NODE_AGENT_PORT="${TRACEHOUSE_NODE_AGENT_PORT:-16445}"
# The node agent's kubelet port (HTTPS: what the API server calls for `kubectl port-forward`),
# published in the Node's status.daemonEndpoints.kubeletEndpoint.
KUBELET_PORT="${TRACEHOUSE_KUBELET_PORT:-16446}"
# The Service network exists only as API objects: nothing routes it on this machine.
K8S_SERVICE_CIDR="${TRACEHOUSE_SERVICE_CIDR:-10.96.0.0/16}"
# Where `cargo build` leaves the node agent (and the binaries the images are built from).
CARGO_BIN_DIR="${CARGO_TARGET_DIR:-$REPO_DIR/target}/debug"
# The operator's Helm release on the stack, and the stack's values on top of the chart's.
OPERATOR_RELEASE=tracehouse
OPERATOR_NAMESPACE=tracehouse-system
OPERATOR_VALUES="$REPO_DIR/config/local/values.yaml"
# Process groups of pod containers, one file each, written by the node agent (see k8s_kill_pods).
K8S_POD_PIDS="$K8S_DATA/node/pids"

# The build is keyed by the Kubernetes version and a hash of the module files, so editing
# go.mod/go.sum or a main.go rebuilds and everything else reuses the cached binaries.
k8s_bin_dir() {
  local h
  h="$(cat "$E2E_DIR/k8s/go.mod" "$E2E_DIR/k8s/go.sum" "$E2E_DIR"/k8s/cmd/*/main.go | sha256sum | cut -c1-12)"
  echo "$TRACEHOUSE_CACHE/k8s-$K8S_VERSION-$h"
}

k8s_install() {
  command -v etcd >/dev/null || apt_ensure etcd-server
  command -v openssl >/dev/null || apt_ensure openssl
  command -v curl >/dev/null || apt_ensure curl
  command -v unshare >/dev/null || apt_ensure util-linux
  images_install
  helm_install
  local dir; dir="$(k8s_bin_dir)"
  [[ -x "$dir/kube-apiserver" && -x "$dir/kube-controller-manager" ]] && return 0
  command -v go >/dev/null || die "k8s: Go (>= 1.26) is needed to build kube-apiserver; install it first"
  say "k8s: building kube-apiserver and kube-controller-manager $K8S_VERSION into $dir (5-10 min cold, cached after)"
  local v="k8s.io/component-base/version" tmp="$dir.tmp.$$" start=$SECONDS
  rm -rf "$tmp"; mkdir -p "$tmp"
  (cd "$E2E_DIR/k8s" && go build -trimpath -o "$tmp/" \
    -ldflags "-s -w -X $v.gitVersion=v$K8S_VERSION -X $v.gitMajor=${K8S_VERSION%%.*} -X $v.gitMinor=$(cut -d. -f2 <<<"$K8S_VERSION") -X $v.gitTreeState=clean" \
    ./cmd/kube-apiserver ./cmd/kube-controller-manager) >"$LOG_DIR/k8s-install.log" 2>&1 \
    || { rm -rf "$tmp"; die "k8s: go build failed; log: $LOG_DIR/k8s-install.log"; }
  rm -rf "$dir"; mv "$tmp" "$dir"
  say "k8s: built in $((SECONDS - start))s"
}

# The node agent, and the collector and operator binaries the images are built from, are built
# together (incremental: seconds when nothing changed), then the images (skipped when they hold
# these binaries already), and the previous release's collector image (its binary built once
# into the cache). TRACEHOUSE_SKIP_CARGO_BUILD=1 skips the cargo build when the caller has just
# built them.
k8s_build_agents() {
  if [[ "${TRACEHOUSE_SKIP_CARGO_BUILD:-0}" != 1 ]]; then
    say "k8s: cargo build of tracehouse-node-agent, -collector and -operator"
    (cd "$REPO_DIR" && cargo build -q -p tracehouse-node-agent -p tracehouse-collector -p tracehouse-operator) \
      >"$LOG_DIR/node-agent-build.log" 2>&1 \
      || { tail -n 30 "$LOG_DIR/node-agent-build.log" >&2; die "k8s: cargo build failed; log: $LOG_DIR/node-agent-build.log"; }
  fi
  images_build debug
  images_previous_collector
}

# k8s_token NAME: a random bearer token, generated once per state directory.
k8s_token() {
  local f="$K8S_PKI/$1.token"
  [[ -s "$f" ]] || (umask 077; head -c 24 /dev/urandom | base64 | tr -dc 'A-Za-z0-9' >"$f")
  cat "$f"
}

# k8s_kubeconfig FILE USER TOKEN: a kubeconfig for USER that trusts our CA.
k8s_kubeconfig() {
  (umask 077; cat >"$1" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: tracehouse
  cluster:
    server: https://127.0.0.1:$APISERVER_PORT
    certificate-authority-data: $(base64 -w0 "$K8S_PKI/ca.crt")
users:
- name: $2
  user:
    token: $3
contexts:
- name: tracehouse
  context:
    cluster: tracehouse
    user: $2
    namespace: default
current-context: tracehouse
EOF
  )
}

# Certificates, keys, tokens and kubeconfigs; made once per state directory.
k8s_pki() {
  mkdir -p "$K8S_PKI"
  local log="$LOG_DIR/k8s-pki.log"
  if [[ ! -s "$K8S_PKI/ca.crt" ]]; then
    say "k8s: generating CA, serving certificate and service-account key in $K8S_PKI"
    (
      set -e; cd "$K8S_PKI"; umask 077
      openssl req -x509 -newkey rsa:2048 -nodes -days 3650 -keyout ca.key -out ca.crt \
        -subj "/CN=tracehouse-e2e-ca" -addext "basicConstraints=critical,CA:TRUE" \
        -addext "keyUsage=critical,keyCertSign,cRLSign"
      openssl req -new -newkey rsa:2048 -nodes -keyout apiserver.key -out apiserver.csr -subj "/CN=kube-apiserver"
      # 10.96.0.1 is the first address of the Service range: the `kubernetes` Service's ClusterIP.
      printf '%s\n' "basicConstraints=CA:FALSE" "keyUsage=critical,digitalSignature,keyEncipherment" \
        "extendedKeyUsage=serverAuth" \
        "subjectAltName=IP:127.0.0.1,DNS:localhost,IP:10.96.0.1,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local" \
        >apiserver.ext
      openssl x509 -req -in apiserver.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 3650 \
        -extfile apiserver.ext -out apiserver.crt
      openssl genrsa -out sa.key 2048
      openssl rsa -in sa.key -pubout -out sa.pub
      rm -f apiserver.csr apiserver.ext
    ) >"$log" 2>&1 || die "k8s: certificate generation failed; log: $log"
  fi
  # The kubelet port, wired as in a cluster: the node agent serves with a certificate of our CA
  # for the node's address, and the API server calls it with its kubelet client certificate,
  # which the agent requires (and which has no other use). ECDSA P-256: quick to make.
  if [[ ! -s "$K8S_PKI/kubelet.crt" || ! -s "$K8S_PKI/apiserver-kubelet-client.crt" ]]; then
    say "k8s: generating the node agent's kubelet serving and the API server's kubelet client certificates"
    (
      set -e; cd "$K8S_PKI"; umask 077
      k8s_sign() { # NAME SUBJECT EXTENSIONS...
        local name="$1" subj="$2"; shift 2
        openssl req -new -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes \
          -keyout "$name.key" -out "$name.csr" -subj "$subj"
        printf '%s\n' "basicConstraints=CA:FALSE" "keyUsage=critical,digitalSignature" "$@" >"$name.ext"
        openssl x509 -req -in "$name.csr" -CA ca.crt -CAkey ca.key -CAcreateserial -days 3650 \
          -extfile "$name.ext" -out "$name.crt"
        rm -f "$name.csr" "$name.ext"
      }
      k8s_sign kubelet "/O=system:nodes/CN=system:node:$K8S_NODE_NAME" \
        "extendedKeyUsage=serverAuth" "subjectAltName=IP:127.0.0.1,DNS:$K8S_NODE_NAME,DNS:localhost"
      k8s_sign apiserver-kubelet-client "/O=system:masters/CN=kube-apiserver-kubelet-client" \
        "extendedKeyUsage=clientAuth"
    ) >>"$log" 2>&1 || die "k8s: certificate generation failed; log: $log"
  fi
  # Static tokens: the admin (tests, the KUBECONFIG of `e2e/stack env`), the controller-manager
  # (its own RBAC role, not an admin), and the node agent (kubelet and scheduler in one: admin).
  local admin kcm agent
  admin="$(k8s_token admin)"; kcm="$(k8s_token controller-manager)"; agent="$(k8s_token node-agent)"
  (umask 077; cat >"$K8S_PKI/tokens.csv" <<EOF
$admin,tracehouse-admin,uid-admin,"system:masters"
$kcm,system:kube-controller-manager,uid-kcm
$agent,tracehouse-node-agent,uid-node-agent,"system:masters"
EOF
  )
  k8s_kubeconfig "$K8S_DATA/admin.kubeconfig" tracehouse-admin "$admin"
  k8s_kubeconfig "$K8S_DATA/controller-manager.kubeconfig" system:kube-controller-manager "$kcm"
  k8s_kubeconfig "$K8S_DATA/node-agent.kubeconfig" tracehouse-node-agent "$agent"
}

k8s_etcd_ready() { curl -fsS "http://127.0.0.1:$ETCD_PORT/health" 2>/dev/null | grep -q '"health":"true"'; }
k8s_api_ready() {
  [[ "$(curl -fsS --cacert "$K8S_PKI/ca.crt" -H "Authorization: Bearer $(k8s_token admin)" \
    "https://127.0.0.1:$APISERVER_PORT/readyz" 2>/dev/null)" == ok ]]
}
k8s_kcm_ready() { [[ "$(curl -fsSk "https://127.0.0.1:$KCM_PORT/healthz" 2>/dev/null)" == ok ]]; }
# The node agent answers once its Node is registered and Ready.
k8s_agent_ready() { [[ "$(curl -fsS "http://127.0.0.1:$NODE_AGENT_PORT/readyz" 2>/dev/null)" == ok ]]; }

k8s_up() {
  k8s_install
  k8s_build_agents
  k8s_pki
  local bin; bin="$(k8s_bin_dir)"
  mkdir -p "$K8S_DATA/etcd" "$K8S_DATA/node" "$LOG_DIR/pods"
  chmod 700 "$K8S_DATA/etcd"  # etcd warns about anything more open

  if ! pid_alive etcd; then
    start_bg etcd "$ETCD_PORT" etcd --name tracehouse --data-dir "$K8S_DATA/etcd" \
      --listen-client-urls "http://127.0.0.1:$ETCD_PORT" --advertise-client-urls "http://127.0.0.1:$ETCD_PORT" \
      --listen-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" \
      --initial-advertise-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" \
      --initial-cluster "tracehouse=http://127.0.0.1:$ETCD_PEER_PORT" \
      --logger zap --log-level warn
  fi
  wait_until etcd 60 k8s_etcd_ready

  # Processes started by an older k8s.sh, without the kubelet-port wiring, are restarted.
  k8s_restart_if_without kube-apiserver --kubelet-client-certificate 30
  k8s_apiserver_up "$bin"

  if ! pid_alive kube-controller-manager; then
    local kc="$K8S_DATA/controller-manager.kubeconfig"
    # Controllers the operator's objects need: Deployments down to Pods, garbage collection of
    # owned objects, namespaces and their service accounts (+ the root CA ConfigMap pods mount),
    # Services' EndpointSlices, PodDisruptionBudgets, Jobs.
    start_bg kube-controller-manager "$KCM_PORT" "$bin/kube-controller-manager" \
      --kubeconfig "$kc" --authentication-kubeconfig "$kc" --authorization-kubeconfig "$kc" \
      --bind-address 127.0.0.1 --secure-port "$KCM_PORT" \
      --leader-elect=false \
      --use-service-account-credentials=true \
      --service-account-private-key-file "$K8S_PKI/sa.key" \
      --root-ca-file "$K8S_PKI/ca.crt" \
      --service-cluster-ip-range "$K8S_SERVICE_CIDR" \
      --controllers "deployment-controller,replicaset-controller,garbage-collector-controller,namespace-controller,serviceaccount-controller,serviceaccount-token-controller,root-ca-certificate-publisher-controller,endpointslice-controller,disruption-controller,job-controller,ttl-after-finished-controller,statefulset-controller,clusterrole-aggregation-controller"
  fi
  wait_until kube-controller-manager 60 k8s_kcm_ready

  k8s_restart_if_without node-agent --kubelet-port 40
  k8s_agent_up
  k8s_operator_up
}

# k8s_apiserver_up BIN_DIR: kube-apiserver, unless it runs.
k8s_apiserver_up() {
  local bin="$1"
  if ! pid_alive kube-apiserver; then
    # --kubelet-*: the API server reaches the node agent's kubelet port (port-forward) at the
    # Node's InternalIP (its Hostname does not resolve), verifying its serving certificate.
    # --endpoint-reconciler-type=none: the `kubernetes` Endpoints would point at 127.0.0.1,
    # which Endpoints validation rejects; nothing here routes Service IPs anyway.
    # --requestheader-*: the controller-manager's delegated authentication reads this CA from the
    # extension-apiserver-authentication ConfigMap and logs errors without it. No front-proxy
    # client certificate is ever issued, so the header path is closed in practice.
    start_bg kube-apiserver "$APISERVER_PORT" "$bin/kube-apiserver" \
      --etcd-servers "http://127.0.0.1:$ETCD_PORT" \
      --bind-address 127.0.0.1 --advertise-address 127.0.0.1 --secure-port "$APISERVER_PORT" \
      --tls-cert-file "$K8S_PKI/apiserver.crt" --tls-private-key-file "$K8S_PKI/apiserver.key" \
      --client-ca-file "$K8S_PKI/ca.crt" \
      --requestheader-client-ca-file "$K8S_PKI/ca.crt" --requestheader-allowed-names front-proxy-client \
      --requestheader-username-headers X-Remote-User --requestheader-group-headers X-Remote-Group \
      --requestheader-extra-headers-prefix X-Remote-Extra- \
      --token-auth-file "$K8S_PKI/tokens.csv" \
      --service-account-issuer https://kubernetes.default.svc.cluster.local \
      --service-account-key-file "$K8S_PKI/sa.pub" \
      --service-account-signing-key-file "$K8S_PKI/sa.key" \
      --authorization-mode Node,RBAC \
      --kubelet-client-certificate "$K8S_PKI/apiserver-kubelet-client.crt" \
      --kubelet-client-key "$K8S_PKI/apiserver-kubelet-client.key" \
      --kubelet-certificate-authority "$K8S_PKI/ca.crt" \
      --kubelet-preferred-address-types InternalIP \
      --service-cluster-ip-range "$K8S_SERVICE_CIDR" \
      --endpoint-reconciler-type none \
      --allow-privileged=true --profiling=false
  fi
  wait_until kube-apiserver 120 k8s_api_ready
}

# The node agent (kubelet port: HTTPS with the stack's CA, client certificates required).
k8s_agent_up() {
  if ! pid_alive node-agent; then
    port_taken "$KUBELET_PORT" \
      && die "node-agent: kubelet port $KUBELET_PORT is taken (TRACEHOUSE_KUBELET_PORT overrides it)"
    start_bg node-agent "$NODE_AGENT_PORT" "$CARGO_BIN_DIR/tracehouse-node-agent" \
      --kubeconfig "$K8S_DATA/node-agent.kubeconfig" \
      --node-name "$K8S_NODE_NAME" \
      --state-dir "$K8S_DATA/node" --log-dir "$LOG_DIR/pods" \
      --image-store "$IMAGES_STORE" \
      --health-addr "127.0.0.1:$NODE_AGENT_PORT" \
      --kubelet-port "$KUBELET_PORT" \
      --tls-cert-file "$K8S_PKI/kubelet.crt" --tls-private-key-file "$K8S_PKI/kubelet.key" \
      --client-ca-file "$K8S_PKI/ca.crt"
  fi
  wait_until node-agent 60 k8s_agent_ready
}

# k8s_restart_if_without NAME FLAG GRACE: stop NAME when it runs without FLAG on its command
# line (started by an older k8s.sh); the caller starts it again.
k8s_restart_if_without() {
  pid_alive "$1" || return 0
  local pid; pid="$(cat "$PID_DIR/$1.pid")"
  if ! tr '\0' '\n' <"/proc/$pid/cmdline" 2>/dev/null | grep -qx -- "$2"; then
    say "k8s: restarting $1 (started without $2)"
    stop_bg "$1" "$3"
  fi
}

# The tracehouse operator, as users install it: `helm upgrade --install` of charts/tracehouse
# (CRD, RBAC, the two-replica Deployment) with the stack's values (config/local/values.yaml),
# its pods run by the node agent from the image tracehouse/operator:<version> built from the
# current build. Plus the Secret the local sample (config/samples/local/tracepipeline.yaml)
# references: the stack's ClickHouse credentials.
k8s_operator_up() {
  command -v kubectl >/dev/null || die "k8s: kubectl is needed (the Secret of the local sample, rollout status)"
  local kc="$K8S_DATA/admin.kubeconfig" log="$LOG_DIR/operator-install.log"
  # The image id goes into a pod annotation, so a rebuilt image rolls the operator (same tag).
  local image_id; image_id="$(th_podman image inspect --format '{{.Id}}' "$IMAGES_OPERATOR" | cut -c1-16)"
  (
    set -e
    k() { kubectl --kubeconfig "$kc" "$@"; }
    k create secret generic tracehouse-clickhouse -n default --from-literal=username="$CLICKHOUSE_USER_NAME" \
      --from-literal=password="$(clickhouse_password)" --dry-run=client -o yaml | k apply --server-side -f -
    k8s_adopt_kubectl_install
    # The chart's copies of crds/ and config/rbac/role.yaml follow their sources (a regenerated
    # CRD reaches the stack at once; e2e/test's `charts/gen --check` says what to commit).
    "$REPO_DIR/charts/gen"
    helm_ upgrade --install "$OPERATOR_RELEASE" "$CHART_DIR" --namespace "$OPERATOR_NAMESPACE" --create-namespace \
      -f "$OPERATOR_VALUES" --set-string "podAnnotations.tracehouse\.dev/image-id=$image_id" \
      --wait --timeout 180s
    k -n "$OPERATOR_NAMESPACE" rollout status deployment/tracehouse-operator --timeout=120s
  ) >"$log" 2>&1 || { tail -n 20 "$log" >&2; die "k8s: installing the operator (helm) failed; log: $log"; }
  say "operator ready (helm release $OPERATOR_NAMESPACE/$OPERATOR_RELEASE, image $IMAGES_OPERATOR ${image_id})"
}

# Stacks made before the chart had the operator from `kubectl apply` of config/: the CRD is
# handed over to the release (labels and annotations Helm adopts by; never deleted, it holds
# every TracePipeline), the rest is deleted for the release to create.
k8s_adopt_kubectl_install() {
  local kc="$K8S_DATA/admin.kubeconfig"
  k() { kubectl --kubeconfig "$kc" "$@"; }
  if k get crd tracepipelines.tracehouse.dev >/dev/null 2>&1 \
     && [[ -z "$(k get crd tracepipelines.tracehouse.dev -o jsonpath='{.metadata.annotations.meta\.helm\.sh/release-name}')" ]]; then
    say "k8s: handing the CRD installed by kubectl over to the helm release"
    k label --overwrite crd tracepipelines.tracehouse.dev app.kubernetes.io/managed-by=Helm
    k annotate --overwrite crd tracepipelines.tracehouse.dev meta.helm.sh/release-name="$OPERATOR_RELEASE" \
      meta.helm.sh/release-namespace="$OPERATOR_NAMESPACE"
  fi
  if k -n "$OPERATOR_NAMESPACE" get deployment tracehouse-operator >/dev/null 2>&1 \
     && [[ -z "$(k -n "$OPERATOR_NAMESPACE" get deployment tracehouse-operator -o jsonpath='{.metadata.annotations.meta\.helm\.sh/release-name}')" ]]; then
    say "k8s: replacing the operator installed by kubectl apply with the helm release"
    k -n "$OPERATOR_NAMESPACE" delete deployment/tracehouse-operator serviceaccount/tracehouse-operator \
      role/tracehouse-operator-leader-election rolebinding/tracehouse-operator-leader-election --ignore-not-found --wait
    k delete clusterrole/tracehouse-operator clusterrolebinding/tracehouse-operator --ignore-not-found
  fi
}

# k8s_kill_pods: kill pod processes a node agent left behind (it was SIGKILLed or crashed).
# Each file holds "PGID EXE"; the group is only killed while its leader still runs EXE (or
# EXE since replaced by a rebuild, which the kernel shows as "EXE (deleted)"), so a recycled pid
# is never hit.
k8s_kill_pods() {
  [[ -d "$K8S_POD_PIDS" ]] || return 0
  local f pgid exe running
  for f in "$K8S_POD_PIDS"/*.pid; do
    [[ -f "$f" ]] || continue
    read -r pgid exe <"$f" || true
    running="$(readlink "/proc/${pgid:-0}/exe" 2>/dev/null || true)"
    if [[ -n "${pgid:-}" && ( "$running" == "$exe" || "$running" == "$exe (deleted)" ) ]]; then
      say "k8s: killing leftover pod process group $pgid ($exe)"
      kill -KILL -- "-$pgid" 2>/dev/null || true
    fi
    rm -f "$f"
  done
}

k8s_down() {
  # The node agent stops its pods' processes (SIGTERM, grace, SIGKILL) before it exits.
  stop_bg node-agent 40
  k8s_kill_pods
  stop_bg kube-controller-manager 20
  stop_bg kube-apiserver 30
  stop_bg etcd 20
}

k8s_rss() { awk '/^VmRSS/ {printf "%d MiB", $2 / 1024}' "/proc/$(cat "$PID_DIR/$1.pid")/status" 2>/dev/null; }

k8s_status() {
  local name addr
  for name in etcd kube-apiserver kube-controller-manager node-agent; do
    case "$name" in
      etcd) addr="http://127.0.0.1:$ETCD_PORT" ;;
      kube-apiserver) addr="https://127.0.0.1:$APISERVER_PORT" ;;
      kube-controller-manager) addr="https://127.0.0.1:$KCM_PORT" ;;
      node-agent) addr="node $K8S_NODE_NAME, http://127.0.0.1:$NODE_AGENT_PORT" ;;
    esac
    if pid_alive "$name"; then
      printf '%-24s running  pid %s  %s  rss %s  log %s\n' "$name" "$(cat "$PID_DIR/$name.pid")" "$addr" \
        "$(k8s_rss "$name")" "$LOG_DIR/$name.log"
    else
      printf '%-24s stopped\n' "$name"
    fi
  done
}

k8s_env() {
  echo "export KUBECONFIG=$K8S_DATA/admin.kubeconfig"
  # Container logs of pods run by the node agent: <namespace>_<pod>_<container>.log
  echo "export TRACEHOUSE_POD_LOGS=$LOG_DIR/pods"
  # The images pods run (built from the current build into the node's image storage).
  echo "export TRACEHOUSE_COLLECTOR_IMAGE=$IMAGES_COLLECTOR"
  echo "export TRACEHOUSE_OPERATOR_IMAGE=$IMAGES_OPERATOR"
  echo "export TRACEHOUSE_HELM=$HELM"
}
