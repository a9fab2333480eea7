#!/usr/bin/env python3
"""Write the committed seed corpora (fuzz/corpus/<target>/) from the repository's own fixtures and a few
hand-written examples of each format. Run from anywhere; rewrites only the seed-* files it owns, so inputs
committed after a finding (named after the bug) stay. Provenance: fuzz/README.md."""
import pathlib
import struct

ROOT = pathlib.Path(__file__).resolve().parent.parent
CORPUS = ROOT / "fuzz" / "corpus"


def put(target, name, data):
    d = CORPUS / target
    d.mkdir(parents=True, exist_ok=True)
    if isinstance(data, str):
        data = data.encode()
    (d / f"seed-{name}").write_bytes(data)


# --- protobuf, by hand (varint keys, length-delimited fields) -------------------------------------
def varint(n):
    out = bytearray()
    n &= (1 << 64) - 1
    while True:
        b = n & 0x7F
        n >>= 7
        out.append(b | (0x80 if n else 0))
        if not n:
            return bytes(out)


def ld(field, payload):
    if isinstance(payload, str):
        payload = payload.encode()
    return varint(field << 3 | 2) + varint(len(payload)) + payload


def vi(field, n):
    return varint(field << 3) + varint(n)


# counters CSV: the project's default and every dcgm-exporter CSV fixture
for p in [ROOT / "src/counters/default-counters.csv", *sorted((ROOT / "tests/fixtures").rglob("*.csv")),
          *sorted((ROOT / "src/source/sim/scenarios").glob("*.csv"))]:
    put("counters_csv", p.name, p.read_bytes()[:16384])
put("counters_csv", "quoted", 'DCGM_FI_DEV_GPU_TEMP, gauge, "a, quoted ""help"""\n# comment\n')

# -d / -s / -p
for i, s in enumerate(["f", "g", "i", "g:0,1+i:7,8", "g:0-3", "i:0-4095", "g+i", "g:1,2,2-5", ""]):
    put("device_selection", str(i), s)

# web config
put("web_config", "empty", "")
put("web_config", "full", (
    "tls_server_config:\n  cert_file: server.crt\n  key_file: /k/server.key\n"
    "  client_auth_type: RequireAndVerifyClientCert\n  client_ca_file: ca.crt\n  min_version: TLS13\n"
    "  cipher_suites: [TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256, TLS_AES_128_GCM_SHA256]\n"
    "  curve_preferences: [X25519, CurveP256]\n  prefer_server_cipher_suites: false\n"
    "http_server_config:\n  http2: false\n  headers:\n    X-Frame-Options: deny\n"
    "basic_auth_users:\n  prom: $2y$10$X0h1o5LdcY4l8v8eXW0W8uYQ3F5c1yD7dI2Nw1s9f3qX3p0V7bYkS\n"))
put("web_config", "inline-pem", "tls_server_config:\n  cert: |\n    -----BEGIN CERTIFICATE-----\n    AA==\n"
    "    -----END CERTIFICATE-----\n  key_file: k\n")

# scenarios: the built-in ones and the test fixture
for p in [*sorted((ROOT / "src/source/sim/scenarios").glob("*.yaml")), *sorted((ROOT / "tests/fixtures/scenarios").glob("*.yaml"))]:
    put("scenario_yaml", p.name, p.read_bytes())

# --config-file
put("config_file", "schema", (
    "version: 1\nmetrics:\n  fields:\n    - name: DCGM_FI_DEV_GPU_TEMP\n      prometheusType: gauge\n      help: t\n"
    "    - { name: DCGM_FI_DRIVER_VERSION, prometheusType: label, help: d }\ncollection:\n  interval: 1500ms\n"
    "  watchGroups:\n    - name: slow\n      interval: 5m\n      fields: [\"DCGM_FI_DEV_*\"]\n"))
put("config_file", "file", "version: 1\nmetrics: {file: x.csv}\n")

# pod-resources List reply: ContainerDevices(resource_name=1, device_ids=2, topology=3), container
# (name=1, devices=2, dynamic_resources=5: claim_name=2, claim_namespace=3, claim_resources=4: driver=2,
# pool=3, device=4), pod (name=1, namespace=2, containers=3), reply (pod_resources=1)
gpu = ld(1, "nvidia.com/gpu") + ld(2, "GPU-8f3a2c1e-0000-0000-0000-000000000001") + ld(2, "nvidia0")
mig = ld(1, "nvidia.com/mig-1g.10gb") + ld(2, "MIG-GPU-8f3a/1/0")
dra = ld(2, "claim-a") + ld(3, "ml") + ld(4, ld(2, "gpu.nvidia.com") + ld(3, "node-a") + ld(4, "gpu-0"))
container = ld(1, "main") + ld(2, gpu) + ld(2, mig) + ld(5, dra)
pod = ld(1, "trainer-0") + ld(2, "ml") + ld(3, container)
put("podresources_reply", "two-pods", ld(1, pod) + ld(1, ld(1, "idle") + ld(2, "default")))

# kubelet checkpoint
put("kubelet_checkpoint", "both-layouts", (
    '{"Data":{"PodDeviceEntries":[\n'
    '{"PodUID":"uid-a","ContainerName":"c","ResourceName":"nvidia.com/gpu","DeviceIDs":{"0":["GPU-1"],"1":["GPU-2"]},"AllocResp":"CiAKFk5WSURJQQ=="},\n'
    '{"PodUID":"uid-b","ContainerName":"d","ResourceName":"nvidia.com/mig-1g.10gb","DeviceIDs":["MIG-9"],"AllocResp":null}\n'
    '],"RegisteredDevices":{"nvidia.com/gpu":["GPU-1","GPU-2"]}},"Checksum":1234}'))
put("kubelet_checkpoint", "empty", '{"Data":{"PodDeviceEntries":null},"Checksum":1}')

# Kubernetes API: first byte even = watch stream cut into (byte >> 1)-byte frames, odd = a list page
pod_obj = ('{"metadata":{"name":"p","namespace":"ns","uid":"u-1","resourceVersion":"12",'
           '"labels":{"app":"train","team":"a"}},"spec":{"nodeName":"node-a"}}')
slice_obj = ('{"metadata":{"name":"node-a-gpu","resourceVersion":"13"},"spec":{"driver":"gpu.nvidia.com",'
             '"pool":{"name":"node-a"},"devices":[{"name":"gpu-0","attributes":{"type":{"string":"gpu"},'
             '"uuid":{"string":"GPU-1"}}},{"name":"mig-0","basic":{"attributes":{"type":{"string":"mig"},'
             '"parentUUID":{"string":"GPU-1"},"profile":{"string":"1g.10gb"}}}}]}}')
events = "\n".join([
    '{"type":"ADDED","object":%s}' % pod_obj,
    '{"type":"MODIFIED","object":%s}' % slice_obj,
    '{"type":"BOOKMARK","object":{"metadata":{"resourceVersion":"20"}}}',
    '{"type":"DELETED","object":%s}' % pod_obj,
    '{"type":"ERROR","object":{"kind":"Status","code":410,"message":"too old resource version"}}',
]) + "\n"
put("kubernetes_watch_stream", "events", b"\x0e" + events.encode())
put("kubernetes_watch_stream", "list", b"\x01" + ('{"kind":"PodList","metadata":{"resourceVersion":"10",'
    '"continue":"c2"},"items":[%s,%s]}' % (pod_obj, slice_obj)).encode())

# OTLP replies: 4 bytes (bit 0 of byte 0: 0 HTTP / 1 gRPC; bytes 1-2 status LE; byte 3: header length
# in the low 5 bits, bit 5: Retry-After present), then the header value, then the body
partial = ld(1, vi(1, 3) + ld(2, "3 points had no name"))
put("otlp_response", "http-partial", bytes([0, 200, 0, 0]) + partial)
status = vi(1, 8) + ld(2, "slow down") + ld(3, ld(1, "type.googleapis.com/google.rpc.RetryInfo")
                                             + ld(2, ld(1, vi(1, 3) + vi(2, 500_000_000))))
put("otlp_response", "http-503-retry-after", bytes([0, 0xF7, 0x01, 0x20 | 2]) + b"30" + status)
put("otlp_response", "http-429-retry-after-date",
    bytes([0, 0xAD, 0x01, 0x20 | 29]) + b"Sun, 06 Nov 1994 08:49:37 GMT" + b"busy")
put("otlp_response", "http-400-text", bytes([0, 0x90, 0x01, 0]) + b"bad request: unknown field")
put("otlp_response", "grpc-resource-exhausted", bytes([1, 8, 0, 4]) + b"busy" + status)
put("otlp_response", "grpc-unavailable", bytes([1, 14, 0, 0]))

# :9400 request heads
put("http_request", "metrics-gzip", "GET /metrics HTTP/1.1\r\nHost: a:9400\r\nAccept-Encoding: gzip;q=1, *;q=0\r\n\r\n")
put("http_request", "pipelined", "HEAD /health HTTP/1.1\r\nHost: a\r\n\r\nGET /ready HTTP/1.0\r\n\r\nGET / HTTP/1.1\r\nConnection: close\r\n\r\n")
put("http_request", "post-body", "POST /metrics HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\n\r\nabc")
put("http_request", "chunked", "GET /metrics HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n")
put("http_request", "auth", "GET /metrics HTTP/1.1\r\nAuthorization: Basic cHJvbTpzZWNyZXQ=\r\n\r\n")

# Authorization values
for i, s in enumerate(["Basic cHJvbTpzZWNyZXQ=", "basic  dTo= ", "BASIC Og==", "Bearer abc", "Basic ????",
                       "Basic " + "QUFB" * 250]):
    put("basic_auth_header", str(i), s)

# dcgmFieldValue_v2: version, entityGroupId, entityId, fieldId u16, fieldType u16, status i32, unused, ts,
# then the 4096-byte value union (only its start is given; the rest stays zero)
def value(field_type, status, payload, field=150):
    return struct.pack("<IIIHHiIq", 0x2001030, 1, 0, field, field_type, status, 0, 1_700_000_000_000_000) + payload

put("dcgm_values", "int", value(ord("i"), 0, struct.pack("<q", 42)))
put("dcgm_values", "int32-blank", value(ord("i"), 0, struct.pack("<q", 0x7FFFFFF0)))
put("dcgm_values", "int64-not-supported", value(ord("t"), 0, struct.pack("<q", 0x7FFFFFFFFFFFFFF2)))
put("dcgm_values", "double", value(ord("d"), 0, struct.pack("<d", 71.5)))
put("dcgm_values", "double-blank", value(ord("d"), 0, struct.pack("<d", 140737488355328.0)))
put("dcgm_values", "string", value(ord("s"), 0, b"535.104.05\0"))
put("dcgm_values", "string-no-nul", value(ord("s"), 0, b"x" * 300))
put("dcgm_values", "string-sentinel", value(ord("s"), 0, b"<<<NOT_SUPPORTED>>>\0"))
put("dcgm_values", "no-data", value(ord("i"), -14, struct.pack("<q", 5)))
put("dcgm_values", "binary", value(ord("b"), 0, b"\x01\x02"))
