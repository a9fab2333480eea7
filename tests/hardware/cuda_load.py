#!/usr/bin/env python3
"""A GPU load that needs nothing but the NVIDIA driver: the hardware check's load generator.

It talks to `libcuda.so.1` (the driver API, shipped with every driver) through ctypes: cuInit, a context
on one device, cuMemAlloc of a known size, cuModuleLoadDataEx of the PTX text below (the driver's JIT
compiles it, so no CUDA toolkit is needed), then cuLaunchKernel in a loop until the time is up. Each
launch reads, updates and writes every float of the allocation a number of times (`--iterations`): the
SMs and the memory are busy, so GPU utilization, power and the framebuffer move.

Output: one JSON line on stdout when the load is running (`"state": "running"`, pid, device, bytes),
written to `--ready-file` too, and one at the end (`"state": "done"`, launches, seconds). Errors: one
line on stderr naming the driver call and its CUDA error name, exit code 1; bad arguments exit code 2.

Without a GPU, `--library` loads the stand-in `tests/hardware/fake-libcuda.c` (the offline tests and
tests/hardware/rehearse.sh build it): it checks each call's arguments as far as that is possible without
a GPU (the launch's parameters against the PTX's entry) and makes the fake libnvidia-ml see this process.
"""

import argparse
import ctypes
import json
import os
import re
import signal
import sys
import time

# The kernel: `burn(float *buf, u32 n, u32 iters)`; thread i updates buf[i] `iters` times with a fused
# multiply-add and writes it back. PTX ISA 7.0, target sm_80: Ampere or newer (the check runs on
# H100/H200, sm_90); the driver JIT-compiles it for the device it runs on.
ENTRY = "burn"
# The kernel's parameters in order, as the launch passes them (ctypes type of each).
PARAMS = (("buf", "u64"), ("n", "u32"), ("iters", "u32"))
BLOCK = 256

PTX = r"""//
// dcgm-otel hardware check: a busy loop over a buffer (tests/hardware/cuda_load.py)
//
.version 7.0
.target sm_80
.address_size 64

.visible .entry burn(
	.param .u64 burn_param_buf,
	.param .u32 burn_param_n,
	.param .u32 burn_param_iters
)
{
	.reg .pred 	%p<3>;
	.reg .b32 	%r<9>;
	.reg .f32 	%f<3>;
	.reg .b64 	%rd<5>;

	ld.param.u64 	%rd1, [burn_param_buf];
	ld.param.u32 	%r1, [burn_param_n];
	ld.param.u32 	%r2, [burn_param_iters];
	mov.u32 	%r3, %ctaid.x;
	mov.u32 	%r4, %ntid.x;
	mov.u32 	%r5, %tid.x;
	mad.lo.s32 	%r6, %r3, %r4, %r5;
	setp.ge.u32 	%p1, %r6, %r1;
	@%p1 bra 	DONE;
	cvta.to.global.u64 	%rd2, %rd1;
	mul.wide.u32 	%rd3, %r6, 4;
	add.s64 	%rd4, %rd2, %rd3;
	ld.global.f32 	%f1, [%rd4];
	mov.f32 	%f2, 0f3F800000;
	mov.u32 	%r7, 0;
LOOP:
	fma.rn.f32 	%f1, %f1, 0f3F7FFFEF, %f2;
	add.u32 	%r7, %r7, 1;
	setp.lt.u32 	%p2, %r7, %r2;
	@%p2 bra 	LOOP;
	st.global.f32 	[%rd4], %f1;
DONE:
	ret;
}
"""

CUDA_SUCCESS = 0
CU_JIT_INFO_LOG_BUFFER = 3
CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES = 4
CU_JIT_ERROR_LOG_BUFFER = 5
CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES = 6
MIB = 1 << 20


class DriverError(Exception):
    """A driver call that failed: the call, its CUDA error name and text, and the JIT log if any."""


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seconds", type=float, default=30.0, help="how long to run (default 30)")
    p.add_argument("--mib", type=int, default=2048, help="device memory to allocate, MiB (default 2048)")
    p.add_argument("--device", type=int, default=0, help="CUDA device ordinal (default 0)")
    p.add_argument("--iterations", type=int, default=200, help="FMAs per element per launch (default 200)")
    p.add_argument("--ready-file", help="write the 'running' line here too")
    p.add_argument("--library", default="libcuda.so.1", help="the driver library (default libcuda.so.1)")
    a = p.parse_args(argv)
    if not 0 < a.seconds <= 3600:
        p.error(f"--seconds {a.seconds}: must be in (0, 3600]")
    if not 1 <= a.mib <= 1 << 20:
        p.error(f"--mib {a.mib}: must be 1..1048576")
    if a.mib * MIB // 4 >= 1 << 32:
        p.error(f"--mib {a.mib}: more floats than a u32 element count holds (max 16383)")
    if not 1 <= a.iterations <= 1 << 20:
        p.error(f"--iterations {a.iterations}: must be 1..1048576")
    if a.device < 0:
        p.error(f"--device {a.device}: must be >= 0")
    return a


def launch_shape(nbytes):
    """Element count and grid size for a buffer of `nbytes`: one thread per float, BLOCK per block."""
    n = nbytes // 4
    return n, (n + BLOCK - 1) // BLOCK


def kernel_args(dptr, n, iters):
    """The ctypes values of the launch, in PARAMS order."""
    kinds = {"u64": ctypes.c_uint64, "u32": ctypes.c_uint32}
    values = {"buf": dptr, "n": n, "iters": iters}
    return [kinds[kind](values[name]) for name, kind in PARAMS]


class Driver:
    """libcuda.so.1 through ctypes: the calls the load makes, each checked (DriverError on failure)."""

    def __init__(self, library):
        try:
            self.lib = ctypes.CDLL(library)
        except OSError as e:
            raise DriverError(f"cannot load {library}: {e}") from e

    def _name(self, rc):
        s = ctypes.c_char_p()
        if getattr(self.lib, "cuGetErrorName", None) and self.lib.cuGetErrorName(rc, ctypes.byref(s)) == 0 and s.value:
            return s.value.decode(errors="replace")
        return f"CUDA error {rc}"

    def _call(self, fn, *args):
        f = getattr(self.lib, fn, None)
        if f is None:
            raise DriverError(f"{fn}: not in the driver library")
        rc = f(*args)
        if rc != CUDA_SUCCESS:
            raise DriverError(f"{fn}: {self._name(rc)}")

    def has(self, fn):
        return getattr(self.lib, fn, None) is not None

    def init(self, ordinal):
        self._call("cuInit", ctypes.c_uint(0))
        dev = ctypes.c_int()
        self._call("cuDeviceGet", ctypes.byref(dev), ctypes.c_int(ordinal))
        name = ctypes.create_string_buffer(256)
        self._call("cuDeviceGetName", name, ctypes.c_int(256), dev)
        self.ctx = ctypes.c_void_p()
        self.primary = None
        try:
            self._call("cuCtxCreate_v2", ctypes.byref(self.ctx), ctypes.c_uint(0), dev)
        except DriverError as e:  # a driver without (or refusing) it: the device's primary context
            print(f"cuda_load: {e}; using the primary context", file=sys.stderr, flush=True)
            self._call("cuDevicePrimaryCtxRetain", ctypes.byref(self.ctx), dev)
            self._call("cuCtxSetCurrent", self.ctx)
            self.primary = dev
        return name.value.decode(errors="replace")

    def alloc(self, nbytes):
        dptr = ctypes.c_uint64()
        self._call("cuMemAlloc_v2", ctypes.byref(dptr), ctypes.c_size_t(nbytes))
        self._call("cuMemsetD32_v2", dptr, ctypes.c_uint(0), ctypes.c_size_t(nbytes // 4))
        return dptr.value

    def load(self, ptx, entry):
        log = ctypes.create_string_buffer(8192)
        opts = (ctypes.c_int * 2)(CU_JIT_ERROR_LOG_BUFFER, CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES)
        vals = (ctypes.c_void_p * 2)(ctypes.cast(log, ctypes.c_void_p), ctypes.c_void_p(8192))
        self.module = ctypes.c_void_p()
        image = ctypes.c_char_p(ptx.encode() + b"\0")
        try:
            self._call("cuModuleLoadDataEx", ctypes.byref(self.module), image, ctypes.c_uint(2), opts, vals)
        except DriverError as e:
            raise DriverError(f"{e}; JIT log: {log.value.decode(errors='replace').strip()}") from None
        fn = ctypes.c_void_p()
        self._call("cuModuleGetFunction", ctypes.byref(fn), self.module, entry.encode())
        return fn

    def launch(self, fn, grid, args):
        ptrs = (ctypes.c_void_p * len(args))(*[ctypes.cast(ctypes.byref(a), ctypes.c_void_p) for a in args])
        self._call(
            "cuLaunchKernel", fn,
            ctypes.c_uint(grid), ctypes.c_uint(1), ctypes.c_uint(1),
            ctypes.c_uint(BLOCK), ctypes.c_uint(1), ctypes.c_uint(1),
            ctypes.c_uint(0), ctypes.c_void_p(0), ptrs, ctypes.c_void_p(0),
        )
        self._call("cuCtxSynchronize")

    def close(self, dptr):
        """Best effort: the process exit frees everything anyway."""
        for fn, args in (
            ("cuMemFree_v2", (ctypes.c_uint64(dptr),)),
            ("cuModuleUnload", (self.module,)),
        ):
            if self.has(fn):
                getattr(self.lib, fn)(*args)
        if self.primary is None and self.has("cuCtxDestroy_v2"):
            self.lib.cuCtxDestroy_v2(self.ctx)
        elif self.primary is not None and self.has("cuDevicePrimaryCtxRelease_v2"):
            self.lib.cuDevicePrimaryCtxRelease_v2(self.primary)


def ptx_entries(ptx):
    """Each `.entry` of a PTX text with its parameter types in order, e.g. {'burn': ['u64', 'u32', 'u32']}."""
    out = {}
    for m in re.finditer(r"\.entry\s+(\w+)\s*\(([^)]*)\)", ptx):
        out[m.group(1)] = re.findall(r"\.param\s+\.(\w+)\s+\w+", m.group(2))
    return out


def emit(obj, ready_file=None):
    line = json.dumps(obj, sort_keys=True)
    print(line, flush=True)
    if ready_file:
        tmp = ready_file + ".tmp"
        with open(tmp, "w") as f:
            f.write(line + "\n")
        os.replace(tmp, ready_file)


def run(a, driver):
    stop = {"now": False}
    signal.signal(signal.SIGTERM, lambda *_: stop.update(now=True))
    signal.signal(signal.SIGINT, lambda *_: stop.update(now=True))
    nbytes = a.mib * MIB
    name = driver.init(a.device)
    dptr = driver.alloc(nbytes)
    fn = driver.load(PTX, ENTRY)
    n, grid = launch_shape(nbytes)
    args = kernel_args(dptr, n, a.iterations)
    start = time.monotonic()
    driver.launch(fn, grid, args)  # the first launch: JIT and context are proven before "running"
    first = time.monotonic() - start
    launches = 1
    emit({"state": "running", "pid": os.getpid(), "device": a.device, "name": name, "bytes": nbytes,
          "first_launch_s": round(first, 3)}, a.ready_file)
    deadline = start + a.seconds
    while not stop["now"] and time.monotonic() < deadline:
        driver.launch(fn, grid, args)
        launches += 1
    secs = time.monotonic() - start
    driver.close(dptr)
    emit({"state": "done", "pid": os.getpid(), "launches": launches, "seconds": round(secs, 3),
          "stopped_by_signal": stop["now"]})


def main(argv=None):
    a = parse_args(sys.argv[1:] if argv is None else argv)
    try:
        run(a, Driver(a.library))
    except DriverError as e:
        print(f"cuda_load: {e}", file=sys.stderr, flush=True)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
