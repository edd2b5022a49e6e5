// SPDX-License-Identifier: (MIT OR GPL-2.0-only)
//
// gpumemd's driver-call ledger: uprobes on libcuda's allocation and free
// calls. Each call that returns an allocation, each failed allocation and
// each free becomes one 32-byte event on the EVENTS ring buffer; the daemon's
// reader thread keeps the per-process books (src/collect/ledger/). Nothing is
// summed here: the kernel side only stashes a call's arguments between
// entry and return, so its maps stay a fixed size whatever the process does.
//
// Built by scripts/build-bpf.sh into bpf/ledger.bpf.o, which is checked in
// so that building gpumemd needs only the Rust toolchain. The license is
// dual because bpf_probe_read_user is a GPL-only helper.

#include <linux/bpf.h>
#include <linux/ptrace.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

char LICENSE[] SEC("license") = "Dual MIT/GPL";

// Which call an event comes from (src/collect/ledger/event.rs reads the same values).
enum call {
	CALL_ALLOC = 1,      // cuMemAlloc_v2
	CALL_PITCH = 2,      // cuMemAllocPitch_v2
	CALL_MANAGED = 3,    // cuMemAllocManaged
	CALL_ASYNC = 4,      // cuMemAllocAsync
	CALL_POOL = 5,       // cuMemAllocFromPoolAsync
	CALL_CREATE = 6,     // cuMemCreate (a handle, not an address)
	CALL_FREE = 7,       // cuMemFree_v2
	CALL_FREE_ASYNC = 8, // cuMemFreeAsync
	CALL_RELEASE = 9,    // cuMemRelease
};

enum kind {
	KIND_ALLOC = 1,
	KIND_FAIL = 2,
	KIND_FREE = 3,
};

struct event {
	__u32 pid;
	__u8 kind;
	__u8 call;
	__u16 pad;
	__s32 code;
	__u32 pad2;
	__u64 addr; // device pointer or generic allocation handle
	__u64 size; // bytes asked for (or pitch times height)
};

// A call between its entry and its return, by thread.
struct pending {
	__u64 out;   // where the driver writes the pointer or handle
	__u64 size;  // bytes asked for; the width in bytes for a pitched call
	__u64 pitch; // where the driver writes the pitch (pitched calls only)
	__u64 height;
	__u32 call;
	__u32 pad;
};

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 1 << 20); // the loader sets it from [ebpf] ring_buffer
} EVENTS SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 16384); // threads inside an allocation call at once
	__type(key, __u64);
	__type(value, struct pending);
} PENDING SEC(".maps");

// [0]: events lost because the ring buffer was full.
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} DROPPED SEC(".maps");

static __always_inline void dropped(void)
{
	__u32 zero = 0;
	__u64 *n = bpf_map_lookup_elem(&DROPPED, &zero);
	if (n)
		__sync_fetch_and_add(n, 1);
}

static __always_inline int emit(__u8 kind, __u8 call, __s32 code, __u64 addr, __u64 size)
{
	struct event *e = bpf_ringbuf_reserve(&EVENTS, sizeof(*e), 0);
	if (!e) {
		dropped();
		return 0;
	}
	e->pid = bpf_get_current_pid_tgid() >> 32;
	e->kind = kind;
	e->call = call;
	e->pad = 0;
	e->code = code;
	e->pad2 = 0;
	e->addr = addr;
	e->size = size;
	// No wake-up per record: the reader drains on its own period, so a
	// traced call never pays for waking it (docs/ebpf.md: the cost).
	bpf_ringbuf_submit(e, BPF_RB_NO_WAKEUP);
	return 0;
}

static __always_inline int stash(__u32 call, __u64 out, __u64 size, __u64 pitch, __u64 height)
{
	__u64 id = bpf_get_current_pid_tgid();
	struct pending p = {.out = out, .size = size, .pitch = pitch, .height = height, .call = call};
	bpf_map_update_elem(&PENDING, &id, &p, BPF_ANY);
	return 0;
}

// (out, size, ...): cuMemAlloc_v2, cuMemAllocManaged, cuMemAllocAsync,
// cuMemAllocFromPoolAsync and cuMemCreate all start alike.
SEC("uprobe")
int BPF_KPROBE(enter_alloc, void *out, __u64 size) { return stash(CALL_ALLOC, (__u64)out, size, 0, 0); }
SEC("uprobe")
int BPF_KPROBE(enter_managed, void *out, __u64 size) { return stash(CALL_MANAGED, (__u64)out, size, 0, 0); }
SEC("uprobe")
int BPF_KPROBE(enter_async, void *out, __u64 size) { return stash(CALL_ASYNC, (__u64)out, size, 0, 0); }
SEC("uprobe")
int BPF_KPROBE(enter_pool, void *out, __u64 size) { return stash(CALL_POOL, (__u64)out, size, 0, 0); }
SEC("uprobe")
int BPF_KPROBE(enter_create, void *out, __u64 size) { return stash(CALL_CREATE, (__u64)out, size, 0, 0); }

// cuMemAllocPitch_v2(dptr, pPitch, WidthInBytes, Height, ElementSizeBytes).
SEC("uprobe")
int BPF_KPROBE(enter_pitch, void *out, void *pitch, __u64 width, __u64 height)
{
	return stash(CALL_PITCH, (__u64)out, width, (__u64)pitch, height);
}

// The return of any of the calls above.
SEC("uretprobe")
int BPF_KRETPROBE(leave_alloc, int rc)
{
	__u64 id = bpf_get_current_pid_tgid();
	struct pending *p = bpf_map_lookup_elem(&PENDING, &id);
	if (!p)
		return 0;
	struct pending c = *p;
	bpf_map_delete_elem(&PENDING, &id);
	__u64 size = c.size;
	if (c.call == CALL_PITCH && rc == 0) {
		__u64 pitch = 0;
		if (bpf_probe_read_user(&pitch, sizeof(pitch), (void *)c.pitch) == 0)
			size = pitch * c.height;
	} else if (c.call == CALL_PITCH) {
		size = c.size * c.height;
	}
	if (rc != 0)
		return emit(KIND_FAIL, c.call, rc, 0, size);
	__u64 addr = 0;
	if (bpf_probe_read_user(&addr, sizeof(addr), (void *)c.out) != 0)
		return 0;
	return emit(KIND_ALLOC, c.call, 0, addr, size);
}

// Frees are taken at entry: the driver rejects only pointers it never
// gave, which the books do not hold either.
SEC("uprobe")
int BPF_KPROBE(enter_free, __u64 addr) { return emit(KIND_FREE, CALL_FREE, 0, addr, 0); }
SEC("uprobe")
int BPF_KPROBE(enter_free_async, __u64 addr) { return emit(KIND_FREE, CALL_FREE_ASYNC, 0, addr, 0); }
SEC("uprobe")
int BPF_KPROBE(enter_release, __u64 handle) { return emit(KIND_FREE, CALL_RELEASE, 0, handle, 0); }
