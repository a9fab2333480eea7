/*
 * A stand-in for the driver's libcuda.so.1, for the hardware check without a GPU: the offline tests
 * (tests/hardware/test_hwcheck.py) and the rehearsal (tests/hardware/rehearse.sh) load it in place of
 * the real library to run tests/hardware/cuda_load.py's ctypes binding for real.
 *
 * It exports the driver-API calls cuda_load.py makes, with the prototypes of NVIDIA's cuda.h, and checks
 * what can be checked without a GPU: the PTX image is NUL-terminated text with `.version`, `.target
 * sm_NN` (NN <= 90, the device here is an sm_90) and `.address_size 64` lines; cuModuleGetFunction names
 * an `.entry` of it; cuLaunchKernel's kernelParams, read with the sizes of that entry's `.param` list,
 * are the allocation's address, an element count that fits the allocation and a non-zero iteration
 * count, and the grid covers the elements. A failed check prints one line on stderr and answers
 * CUDA_ERROR_INVALID_VALUE (1) / CUDA_ERROR_INVALID_IMAGE (200) / CUDA_ERROR_NOT_FOUND (500).
 *
 * Each cuCtxSynchronize sleeps 20 ms (a kernel's worth). With FAKE_CUDA_SCENARIO set, the first launch
 * writes that file as a fake libnvidia-ml scenario: a busy H100 whose process list has this process
 * with its allocation plus 512 MiB of context (what NVML shows of a real one), so that the fake NVML
 * and the fake nvidia-smi see the load as the real ones see the real load.
 *
 * Build: cc -shared -fPIC -o DIR/libcuda.so.1 tests/hardware/fake-libcuda.c
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

typedef int CUresult;
typedef int CUdevice;
typedef unsigned long long CUdeviceptr;
typedef void *CUcontext;
typedef void *CUmodule;
typedef void *CUfunction;
typedef void *CUstream;
typedef int CUjit_option;

#define OK 0
#define INVALID_VALUE 1
#define NOT_INITIALIZED 3
#define INVALID_DEVICE 101
#define INVALID_IMAGE 200
#define NOT_FOUND 500

static int initialised;
static CUdeviceptr alloc_ptr;
static size_t alloc_bytes;
static char entry_name[64];
static char entry_params[8][8];
static int entry_nparams;
static int launched;
static int ctx_made;
static int fake_ctx, fake_module, fake_function;

static CUresult fail(CUresult rc, const char *fn, const char *why) {
    fprintf(stderr, "fake-libcuda: %s: %s\n", fn, why);
    return rc;
}

CUresult cuGetErrorName(CUresult error, const char **pStr) {
    switch (error) {
    case OK: *pStr = "CUDA_SUCCESS"; return OK;
    case INVALID_VALUE: *pStr = "CUDA_ERROR_INVALID_VALUE"; return OK;
    case NOT_INITIALIZED: *pStr = "CUDA_ERROR_NOT_INITIALIZED"; return OK;
    case INVALID_DEVICE: *pStr = "CUDA_ERROR_INVALID_DEVICE"; return OK;
    case INVALID_IMAGE: *pStr = "CUDA_ERROR_INVALID_IMAGE"; return OK;
    case NOT_FOUND: *pStr = "CUDA_ERROR_NOT_FOUND"; return OK;
    default: *pStr = 0; return INVALID_VALUE;
    }
}

CUresult cuInit(unsigned int flags) {
    if (flags != 0) return fail(INVALID_VALUE, "cuInit", "flags must be 0");
    initialised = 1;
    return OK;
}

CUresult cuDeviceGet(CUdevice *device, int ordinal) {
    if (!initialised) return NOT_INITIALIZED;
    if (ordinal != 0) return fail(INVALID_DEVICE, "cuDeviceGet", "the fake has device 0 only");
    *device = 0;
    return OK;
}

CUresult cuDeviceGetName(char *name, int len, CUdevice dev) {
    if (dev != 0 || len < 1) return INVALID_VALUE;
    snprintf(name, (size_t)len, "NVIDIA H100 80GB HBM3 (fake libcuda)");
    return OK;
}

CUresult cuCtxCreate_v2(CUcontext *pctx, unsigned int flags, CUdevice dev) {
    if (!initialised) return NOT_INITIALIZED;
    if (dev != 0) return fail(INVALID_DEVICE, "cuCtxCreate_v2", "no such device");
    (void)flags;
    *pctx = &fake_ctx;
    ctx_made = 1;
    return OK;
}

CUresult cuCtxDestroy_v2(CUcontext ctx) {
    if (ctx != &fake_ctx) return fail(INVALID_VALUE, "cuCtxDestroy_v2", "not the context made");
    ctx_made = 0;
    return OK;
}

CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytesize) {
    if (!ctx_made) return fail(INVALID_VALUE, "cuMemAlloc_v2", "no current context");
    if (bytesize == 0) return fail(INVALID_VALUE, "cuMemAlloc_v2", "size 0");
    alloc_ptr = 0x7f0000000000ULL;
    alloc_bytes = bytesize;
    *dptr = alloc_ptr;
    return OK;
}

CUresult cuMemsetD32_v2(CUdeviceptr dst, unsigned int value, size_t n) {
    (void)value;
    if (dst != alloc_ptr || n * 4 > alloc_bytes)
        return fail(INVALID_VALUE, "cuMemsetD32_v2", "outside the allocation");
    return OK;
}

CUresult cuMemFree_v2(CUdeviceptr dptr) {
    if (dptr != alloc_ptr) return fail(INVALID_VALUE, "cuMemFree_v2", "not the allocation");
    alloc_ptr = 0;
    return OK;
}

/* The `.entry NAME(` of the image and the types of its `.param` list. */
static int parse_entry(const char *ptx) {
    const char *e = strstr(ptx, ".entry ");
    if (!e) return 0;
    e += 7;
    while (*e == ' ' || *e == '\t') e++;
    size_t n = strcspn(e, " \t\n(");
    if (n == 0 || n >= sizeof entry_name) return 0;
    memcpy(entry_name, e, n);
    entry_name[n] = 0;
    const char *open = strchr(e, '('), *close = open ? strchr(open, ')') : 0;
    if (!close) return 0;
    entry_nparams = 0;
    for (const char *p = open; (p = strstr(p, ".param")) && p < close; p += 6) {
        const char *t = strchr(p + 6, '.');
        if (!t || t > close || entry_nparams == 8) return 0;
        size_t tn = strcspn(t + 1, " \t\n");
        if (tn >= sizeof entry_params[0]) return 0;
        memcpy(entry_params[entry_nparams], t + 1, tn);
        entry_params[entry_nparams][tn] = 0;
        entry_nparams++;
    }
    return 1;
}

CUresult cuModuleLoadDataEx(CUmodule *module, const void *image, unsigned int numOptions,
                            CUjit_option *options, void **optionValues) {
    const char *ptx = image;
    if (!ctx_made) return fail(INVALID_VALUE, "cuModuleLoadDataEx", "no current context");
    if (numOptions && (!options || !optionValues))
        return fail(INVALID_VALUE, "cuModuleLoadDataEx", "options without values");
    if (!memchr(ptx, 0, 1 << 20)) return fail(INVALID_IMAGE, "cuModuleLoadDataEx", "image not NUL-terminated");
    int sm = 0;
    const char *t = strstr(ptx, "\n.target sm_");
    if (!strstr(ptx, "\n.version ") || !t || !strstr(ptx, "\n.address_size 64"))
        return fail(INVALID_IMAGE, "cuModuleLoadDataEx", "missing .version / .target sm_NN / .address_size 64");
    sm = atoi(t + 12);
    if (sm < 50 || sm > 90) return fail(INVALID_IMAGE, "cuModuleLoadDataEx", "target above sm_90");
    if (!parse_entry(ptx)) return fail(INVALID_IMAGE, "cuModuleLoadDataEx", "no .entry with a parameter list");
    *module = &fake_module;
    return OK;
}

CUresult cuModuleGetFunction(CUfunction *hfunc, CUmodule hmod, const char *name) {
    if (hmod != &fake_module) return fail(INVALID_VALUE, "cuModuleGetFunction", "not the module loaded");
    if (strcmp(name, entry_name) != 0) return fail(NOT_FOUND, "cuModuleGetFunction", "no entry of that name");
    *hfunc = &fake_function;
    return OK;
}

CUresult cuModuleUnload(CUmodule hmod) {
    return hmod == &fake_module ? OK : fail(INVALID_VALUE, "cuModuleUnload", "not the module loaded");
}

static void write_scenario(void) {
    const char *path = getenv("FAKE_CUDA_SCENARIO");
    if (!path || !*path) return;
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *f = fopen(tmp, "w");
    if (!f) return;
    fprintf(f,
            "description: hardware-check rehearsal (GPU 0 busy with the load generator)\n"
            "driver_version: \"580.95.05\"\n"
            "gpus:\n  - { model: H100-SXM5-80GB, load: training }\n"
            "processes:\n"
            "  - { pid: %d, name: python3, gpu: 0, memory_mib: %zu, sm_utilization: 97 }\n",
            (int)getpid(), alloc_bytes / (1 << 20) + 512);
    fclose(f);
    rename(tmp, path);
}

CUresult cuLaunchKernel(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz, unsigned int bx,
                        unsigned int by, unsigned int bz, unsigned int shared, CUstream stream,
                        void **params, void **extra) {
    (void)stream;
    if (f != &fake_function) return fail(INVALID_VALUE, "cuLaunchKernel", "not a function of the module");
    if (gy != 1 || gz != 1 || by != 1 || bz != 1 || bx == 0 || bx > 1024 || shared != 0 || extra)
        return fail(INVALID_VALUE, "cuLaunchKernel", "launch shape");
    if (!params) return fail(INVALID_VALUE, "cuLaunchKernel", "no kernelParams");
    /* The entry's parameters by their PTX types: (buffer, element count, iterations). */
    if (entry_nparams != 3 || strcmp(entry_params[0], "u64") || strcmp(entry_params[1], "u32") ||
        strcmp(entry_params[2], "u32"))
        return fail(INVALID_VALUE, "cuLaunchKernel", "the entry does not take (u64, u32, u32)");
    uint64_t buf = *(uint64_t *)params[0];
    uint32_t n = *(uint32_t *)params[1], iters = *(uint32_t *)params[2];
    if (buf != alloc_ptr) return fail(INVALID_VALUE, "cuLaunchKernel", "buffer is not the allocation");
    if ((uint64_t)n * 4 > alloc_bytes || n == 0) return fail(INVALID_VALUE, "cuLaunchKernel", "count outside the allocation");
    if ((uint64_t)gx * bx < n) return fail(INVALID_VALUE, "cuLaunchKernel", "grid does not cover the elements");
    if (iters == 0) return fail(INVALID_VALUE, "cuLaunchKernel", "zero iterations");
    if (!launched++) write_scenario();
    return OK;
}

CUresult cuCtxSynchronize(void) {
    struct timespec ts = {0, 20 * 1000 * 1000};
    nanosleep(&ts, 0);
    return ctx_made ? OK : fail(INVALID_VALUE, "cuCtxSynchronize", "no current context");
}
