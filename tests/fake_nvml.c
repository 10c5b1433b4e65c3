/* A fake NVML with the functions scalesweep/train/common/energy.py calls, for tests without a GPU
 * (compiled by tests/test_energy.py; loaded through SCALESWEEP_NVML_LIBRARY like the real
 * libnvidia-ml.so.1).
 *
 * Device i draws (100 + 10 i) W: its total-energy counter is that power x CLOCK_MONOTONIC seconds,
 * in millijoules, so a test can predict any window's energy from time.perf_counter() (the same
 * clock on Linux). Knobs (environment):
 *   FAKE_NVML_DEVICES=N          devices (default 8)
 *   FAKE_NVML_WRAP_AFTER=K       reads after the K-th find the counter wrapped: it restarts from 0
 *   FAKE_NVML_FAIL_AFTER=K       energy reads after the K-th fail with NVML_ERROR_UNKNOWN (999)
 *   FAKE_NVML_NOT_SUPPORTED=1    the counter is missing: NVML_ERROR_NOT_SUPPORTED (3), as pre-Volta
 *   FAKE_NVML_NO_INIT=1          nvmlInit_v2 fails with NVML_ERROR_DRIVER_NOT_LOADED (9)
 */
#include <stdlib.h>
#include <time.h>

typedef struct { int index; } fake_device;
static fake_device devices[64];
static long reads = 0;
static double wrapped_at = -1.0;  /* CLOCK_MONOTONIC seconds of the wrap */

static long env_long(const char *name, long fallback) {
    const char *value = getenv(name);
    return value && *value ? atol(value) : fallback;
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

int nvmlInit_v2(void) { return env_long("FAKE_NVML_NO_INIT", 0) ? 9 : 0; }

int nvmlShutdown(void) { return 0; }

const char *nvmlErrorString(int result) {
    switch (result) {
    case 0: return "Success";
    case 2: return "Invalid Argument";
    case 3: return "Not Supported";
    case 9: return "Driver Not Loaded";
    default: return "Unknown Error";
    }
}

int nvmlDeviceGetCount_v2(unsigned int *count) {
    *count = (unsigned int)env_long("FAKE_NVML_DEVICES", 8);
    return 0;
}

int nvmlDeviceGetHandleByIndex_v2(unsigned int index, void **device) {
    if (index >= (unsigned int)env_long("FAKE_NVML_DEVICES", 8) || index >= 64) return 2;
    devices[index].index = (int)index;
    *device = &devices[index];
    return 0;
}

int nvmlDeviceGetTotalEnergyConsumption(void *device, unsigned long long *energy) {
    long fail_after = env_long("FAKE_NVML_FAIL_AFTER", -1);
    long wrap_after = env_long("FAKE_NVML_WRAP_AFTER", -1);
    if (env_long("FAKE_NVML_NOT_SUPPORTED", 0)) return 3;
    if (fail_after >= 0 && reads >= fail_after) return 999;
    double now = now_s();
    if (wrap_after >= 0 && reads == wrap_after) wrapped_at = now;
    reads++;
    double watts = 100.0 + 10.0 * ((fake_device *)device)->index;
    *energy = (unsigned long long)(watts * (wrapped_at >= 0 ? now - wrapped_at : now) * 1000.0);
    return 0;
}
