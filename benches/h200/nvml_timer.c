/*
 * nvml_timer: a stand-in libnvidia-ml that forwards every call to the real
 * library and counts, per function, the calls and the wall and thread-CPU
 * time spent in them (issue 21: where each microsecond of an idle poll
 * goes). gpumemd loads it like the real library (`--nvml-lib`); it measures
 * and must not change a result: each function returns exactly what the
 * real one returned.
 *
 * Every NVML function gpumemd calls takes at most six integer or pointer
 * arguments and returns an integer or a pointer, so on x86-64 (System V)
 * one forwarder that passes six 64-bit registers through serves them all.
 * The names are those the stand-in (tests/fake-nvml) exports, the set the
 * tier-3 tests run the daemon on.
 *
 * Environment: NVML_TIMER_REAL (default libnvidia-ml.so.1), NVML_TIMER_OUT
 * (a file, best on tmpfs, holding one 72-byte record per function: a
 * 48-byte name, then calls, wall ns and thread-CPU ns as native u64s;
 * read it twice and diff for a window: scripts/h200/nvml_timer_read.py).
 *
 * Build: gcc -O2 -shared -fPIC -o libnvml_timer.so nvml_timer.c -ldl -lpthread
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

typedef uint64_t u64;
typedef u64 (*fn6)(u64, u64, u64, u64, u64, u64);

#define FUNCS \
  X(nvmlInit_v2) X(nvmlInitWithFlags) X(nvmlShutdown) X(nvmlErrorString) \
  X(nvmlSystemGetDriverVersion) X(nvmlSystemGetNVMLVersion) \
  X(nvmlSystemGetCudaDriverVersion) X(nvmlSystemGetCudaDriverVersion_v2) \
  X(nvmlDeviceGetCount_v2) X(nvmlDeviceGetHandleByIndex_v2) X(nvmlDeviceGetHandleByUUID) \
  X(nvmlDeviceGetIndex) X(nvmlDeviceGetName) X(nvmlDeviceGetUUID) X(nvmlDeviceGetPciInfo_v3) \
  X(nvmlDeviceGetMemoryInfo) X(nvmlDeviceGetMemoryInfo_v2) \
  X(nvmlDeviceGetComputeRunningProcesses_v3) X(nvmlDeviceGetGraphicsRunningProcesses_v3) \
  X(nvmlDeviceGetMPSComputeRunningProcesses_v3) X(nvmlDeviceGetProcessUtilization) \
  X(nvmlDeviceGetUtilizationRates) \
  X(nvmlDeviceGetMigMode) X(nvmlDeviceGetMaxMigDeviceCount) X(nvmlDeviceGetMigDeviceHandleByIndex) \
  X(nvmlDeviceIsMigDeviceHandle) X(nvmlDeviceGetDeviceHandleFromMigDeviceHandle) \
  X(nvmlDeviceGetEccMode) X(nvmlDeviceGetTotalEccErrors) X(nvmlDeviceGetRemappedRows) \
  X(nvmlDeviceGetRetiredPages) X(nvmlDeviceGetRetiredPages_v2) \
  X(nvmlDeviceGetRetiredPagesPendingStatus) X(nvmlDeviceGetFieldValues) \
  X(nvmlDeviceGetSupportedEventTypes) X(nvmlDeviceRegisterEvents) \
  X(nvmlEventSetCreate) X(nvmlEventSetFree) X(nvmlEventSetWait_v2)

enum {
#define X(n) I_##n,
  FUNCS
#undef X
  N_FUNCS
};

struct entry {
  const char *name;
  fn6 real;
};

static struct entry table[N_FUNCS] = {
#define X(n) {#n, 0},
    FUNCS
#undef X
};

static pthread_once_t once = PTHREAD_ONCE_INIT;

/* One record per function in a file mapped shared (NVML_TIMER_OUT), so the
 * counters are read from outside at any time and a call never makes a
 * system call of its own (a file rewritten from the poll thread showed up
 * as ext4 work in that thread's profile). */
struct record {
  char name[48];
  u64 calls, wall_ns, cpu_ns;
};
static struct record *records;

static u64 clock_ns(clockid_t c) {
  struct timespec ts;
  clock_gettime(c, &ts);
  return (u64)ts.tv_sec * 1000000000ull + (u64)ts.tv_nsec;
}

static void map_records(void) {
  const char *out = getenv("NVML_TIMER_OUT");
  if (!out) return;
  int fd = open(out, O_RDWR | O_CREAT | O_TRUNC, 0644);
  size_t size = sizeof(struct record) * N_FUNCS;
  if (fd < 0 || ftruncate(fd, (off_t)size) != 0) {
    perror("nvml_timer: NVML_TIMER_OUT");
    if (fd >= 0) close(fd);
    return;
  }
  void *m = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (m == MAP_FAILED) return;
  records = m;
  for (int i = 0; i < N_FUNCS; i++) snprintf(records[i].name, sizeof records[i].name, "%s", table[i].name);
}

static void load(void) {
  map_records();
  const char *path = getenv("NVML_TIMER_REAL");
  void *lib = dlopen(path ? path : "libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    fprintf(stderr, "nvml_timer: %s\n", dlerror());
    return;
  }
  for (int i = 0; i < N_FUNCS; i++) table[i].real = (fn6)dlsym(lib, table[i].name);
}

static u64 forward(int i, u64 a, u64 b, u64 c, u64 d, u64 e, u64 f) {
  pthread_once(&once, load);
  struct entry *t = &table[i];
  if (!t->real) return 13; /* NVML_ERROR_FUNCTION_NOT_FOUND */
  u64 w0 = clock_ns(CLOCK_MONOTONIC), c0 = clock_ns(CLOCK_THREAD_CPUTIME_ID);
  u64 r = t->real(a, b, c, d, e, f);
  u64 c1 = clock_ns(CLOCK_THREAD_CPUTIME_ID), w1 = clock_ns(CLOCK_MONOTONIC);
  if (records) {
    struct record *rec = &records[i];
    __atomic_add_fetch(&rec->calls, 1, __ATOMIC_RELAXED);
    __atomic_add_fetch(&rec->wall_ns, w1 - w0, __ATOMIC_RELAXED);
    __atomic_add_fetch(&rec->cpu_ns, c1 - c0, __ATOMIC_RELAXED);
  }
  return r;
}

#define X(n) \
  u64 n(u64 a, u64 b, u64 c, u64 d, u64 e, u64 f) { return forward(I_##n, a, b, c, d, e, f); }
FUNCS
#undef X
