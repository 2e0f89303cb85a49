// SPDX-License-Identifier: GPL-2.0-only OR Apache-2.0
//
// guest_steal: inside a KVM guest, every advance of a CPU's paravirtual
// steal clock, in ns, charged to what that CPU had current while it
// accrued: a task (busy steal) or the idle task (idle steal: the vCPU was
// woken and waited on the host). The rule is crates/sched/src/
// guest_steal_fold.rs; this file mirrors it. Rebuild with
// scripts/build-bpf.sh (the object next to this file is committed).
//
// Self-contained like wait_by.bpf.c: minimal CO-RE structs, helper ids.

typedef unsigned char u8;
typedef unsigned int u32;
typedef unsigned long long u64;

#define SEC(name) __attribute__((section(name), used))
#define __always_inline inline __attribute__((always_inline))
#define __uint(name, val) int (*name)[val]
#define __type(name, val) typeof(val) *name

// Helper ids are kernel ABI (include/uapi/linux/bpf.h).
static void *(*bpf_map_lookup_elem)(void *map, const void *key) = (void *)1;
static long (*bpf_map_update_elem)(void *map, const void *key,
                                   const void *value, u64 flags) = (void *)2;
static u64 (*bpf_ktime_get_ns)(void) = (void *)5;
static u32 (*bpf_get_smp_processor_id)(void) = (void *)8;
static void *(*bpf_ringbuf_reserve)(void *ringbuf, u64 size,
                                    u64 flags) = (void *)131;
static void (*bpf_ringbuf_submit)(void *data, u64 flags) = (void *)132;
static void *(*bpf_this_cpu_ptr)(const void *percpu_ptr) = (void *)154;
static struct task_struct *(*bpf_get_current_task_btf)(void) = (void *)158;

// The per-CPU `runqueues` by BTF id, for kernels without
// CONFIG_FAIR_GROUP_SCHED (see wait_by.bpf.c and src/bpf_ksym.rs, which
// resolves RUNQUEUES_MARK the same way for both objects).
unsigned long long bpf_pseudo(unsigned long long type,
                              unsigned long long imm) asm("llvm.bpf.pseudo");
#define BPF_PSEUDO_BTF_ID 3
#define RUNQUEUES_MARK 0x52554e51 // "RUNQ"
#define BPF_FIELD_EXISTS 2

#define BPF_MAP_TYPE_PERCPU_ARRAY 6
#define BPF_MAP_TYPE_LRU_HASH 9
#define BPF_MAP_TYPE_RINGBUF 27
#define BPF_ANY 0
// Submit without waking a reader: user space drains the ring on its own
// schedule (at each read), so cost follows steal, not time.
#define BPF_RB_NO_WAKEUP 1

// Both fields follow paravirt_steal_clock(cpu), the hypervisor's steal
// time of this vCPU in ns (KVM writes it at each vCPU entry, so it only
// ever jumps when the vCPU comes back from the host):
// - prev_steal_time_rq (CONFIG_PARAVIRT_TIME_ACCOUNTING): set by
//   update_rq_clock_task() at every update_rq_clock of this rq: the tick,
//   every wake-up onto it and every __schedule, i.e. right before each
//   sched_switch. Since 6.13 it is the steal clock itself at that update
//   (before, `+= min(steal, delta)`, which can only lag, never lead).
// - prev_steal_time (CONFIG_PARAVIRT): /proc/stat's, set by
//   steal_account_process_time() at the tick and on idle exit only.
// The first is read: it is fresh at every switch, so an advance lands
// on the task that was current while it accrued; the second is the
// fallback when the first is absent or never moves (booted with
// no-steal-acc, which leaves paravirt_steal_rq_enabled off).
struct rq {
	u64 prev_steal_time;
	u64 prev_steal_time_rq;
} __attribute__((preserve_access_index));

// Only with CONFIG_FAIR_GROUP_SCHED (see rq_of).
struct cfs_rq {
	struct rq *rq;
} __attribute__((preserve_access_index));

struct sched_entity {
	struct cfs_rq *cfs_rq;
} __attribute__((preserve_access_index));

struct hrtimer {
	void *function;
} __attribute__((preserve_access_index));

struct task_struct {
	struct sched_entity se;
	int pid;
	int tgid;
	u64 start_time;
	char comm[16];
} __attribute__((preserve_access_index));

// Mirrors hist.rs: 8 sub-buckets per power of two, clamped at 2^36.
#define MAX_EXP 35
#define BUCKETS ((MAX_EXP - 1) * 8)

// Episodes of at least this many ns go to the ring (set by the loader).
const volatile u64 episode_threshold_ns = 100000;
// The scheduler tick's hrtimer callback (tick_nohz_handler, from
// /proc/kallsyms; set by the loader), or 0 to read after every hrtimer.
const volatile u64 tick_fn = 0;

// Per CPU; layout shared with src/guest_steal.rs.
struct steal_cpu {
	u64 primed; // `last` holds a reading (the first only sets it)
	u64 last; // steal clock at the last reading
	u64 runs; // hook runs on this CPU
	u64 busy_ns;
	u64 idle_ns;
	u64 busy_count;
	u64 idle_count;
	u64 max_ns;
	u64 over_1ms;
	u64 over_10ms;
	u64 ring_lost; // episodes over the threshold the ring had no room for
	u64 buckets[BUCKETS];
};

// A task as the kernel knows it: a reused tid has another start time.
struct task_key {
	u32 tid;
	u32 pad;
	u64 tstart;
};

struct task_steal {
	u64 ns;
	u64 count;
	u32 tgid;
	u32 pad;
	char comm[16]; // at its last charge (an exec renames it)
};

// One episode over the threshold, as user space decodes it.
struct steal_event {
	u64 mono_ns; // CLOCK_MONOTONIC when the advance was seen
	u64 ns;
	u64 tstart; // the victim's start_time (tid 0 is idle)
	u32 cpu;
	u32 tid; // 0: idle
	u32 tgid;
	u32 pad;
	char comm[16];
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, u32);
	__type(value, struct steal_cpu);
} steal_cpus SEC(".maps");

// Busy steal by task. Bound: 8,192 tasks; LRU, so a full map forgets the
// task charged least recently (a guest rarely has that many tasks stolen
// from between two reads; user space keeps no state that would be wrong
// after an eviction, an evicted task only reads lower).
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 8192);
	__type(key, struct task_key);
	__type(value, struct task_steal);
} steal_tasks SEC(".maps");

// 256 KiB: 4,096 episodes of 56 bytes (+8 header) between two drains.
struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 256 * 1024);
} steal_episodes SEC(".maps");

static __always_inline u32 msb(u64 x)
{
	u32 r = 0;
	if (x >> 32) { x >>= 32; r += 32; }
	if (x >> 16) { x >>= 16; r += 16; }
	if (x >> 8) { x >>= 8; r += 8; }
	if (x >> 4) { x >>= 4; r += 4; }
	if (x >> 2) { x >>= 2; r += 2; }
	if (x >> 1) { r += 1; }
	return r;
}

static __always_inline u32 bucket(u64 ns)
{
	if (ns < 8)
		return ns;
	u32 e = msb(ns);
	if (e > MAX_EXP)
		return BUCKETS - 1;
	return (e - 2) * 8 + ((ns >> (e - 3)) & 7);
}

// This CPU's run queue, through `p->se.cfs_rq->rq` (p current or just
// switched out here) where CONFIG_FAIR_GROUP_SCHED gives that field, else
// the per-CPU `runqueues` (a CO-RE existence check: the verifier never
// walks the dead branch).
static __always_inline struct rq *rq_of(struct task_struct *p)
{
	if (__builtin_preserve_field_info(p->se.cfs_rq, BPF_FIELD_EXISTS))
		return p->se.cfs_rq->rq;
	return bpf_this_cpu_ptr(
		(void *)bpf_pseudo(BPF_PSEUDO_BTF_ID, RUNQUEUES_MARK));
}

static __always_inline u64 steal_clock(struct rq *rq)
{
	u64 v = 0;
	if (__builtin_preserve_field_info(rq->prev_steal_time_rq,
	                                  BPF_FIELD_EXISTS))
		v = rq->prev_steal_time_rq;
	if (!v && __builtin_preserve_field_info(rq->prev_steal_time,
	                                        BPF_FIELD_EXISTS))
		v = rq->prev_steal_time;
	return v;
}

static __always_inline void charge_task(struct task_struct *p, u64 ns)
{
	struct task_key k = { .tid = p->pid, .tstart = p->start_time };
	struct task_steal *t = bpf_map_lookup_elem(&steal_tasks, &k);
	if (t) {
		t->ns += ns; // one CPU runs a task at a time: no race
		t->count++;
		__builtin_memcpy(t->comm, p->comm, sizeof(t->comm));
		return;
	}
	struct task_steal n = { .ns = ns, .count = 1, .tgid = p->tgid };
	__builtin_memcpy(n.comm, p->comm, sizeof(n.comm));
	bpf_map_update_elem(&steal_tasks, &k, &n, BPF_ANY);
}

static __always_inline void emit(struct steal_cpu *c, struct task_struct *p,
                                 u64 ns)
{
	struct steal_event *e =
		bpf_ringbuf_reserve(&steal_episodes, sizeof(*e), 0);
	if (!e) {
		c->ring_lost++;
		return;
	}
	e->mono_ns = bpf_ktime_get_ns();
	e->ns = ns;
	e->cpu = bpf_get_smp_processor_id();
	e->tstart = p->start_time;
	e->tid = p->pid;
	e->tgid = p->tgid;
	e->pad = 0;
	__builtin_memcpy(e->comm, p->comm, sizeof(e->comm));
	bpf_ringbuf_submit(e, BPF_RB_NO_WAKEUP);
}

// Charges the advance of this CPU's steal clock from the last reading to
// `now`, if any, to `p`, what the CPU had current meanwhile (pid 0: idle).
static __always_inline void advance_to(struct steal_cpu *c,
                                       struct task_struct *p, u64 now)
{
	if (!c->primed) { // steal before the collector started is not ours
		c->primed = 1;
		c->last = now;
		return;
	}
	if (now <= c->last)
		return;
	u64 ns = now - c->last;
	c->last = now;
	if (p->pid == 0) {
		c->idle_ns += ns;
		c->idle_count++;
	} else {
		c->busy_ns += ns;
		c->busy_count++;
		charge_task(p, ns);
	}
	u32 b = bucket(ns);
	if (b < BUCKETS)
		c->buckets[b]++;
	if (ns > c->max_ns)
		c->max_ns = ns;
	c->over_1ms += ns > 1000000;
	c->over_10ms += ns > 10000000;
	if (ns >= episode_threshold_ns)
		emit(c, p, ns);
}

static __always_inline struct steal_cpu *this_cpu_state(void)
{
	u32 zero = 0;
	struct steal_cpu *c = bpf_map_lookup_elem(&steal_cpus, &zero);
	if (c)
		c->runs++;
	return c;
}

// Reads this CPU's steal clock and charges any advance since the last
// reading to `p`. The common case, no advance, is a map lookup and three
// loads.
static __always_inline void observe(struct task_struct *p)
{
	struct steal_cpu *c = this_cpu_state();
	if (!c)
		return;
	struct rq *rq = rq_of(p);
	if (!rq)
		return;
	advance_to(c, p, steal_clock(rq));
}

// __schedule updated the rq clock (and with it the steal field) just
// before this tracepoint: what accrued since the last reading is prev's.
// Where __schedule skips that update (RQCF_ACT_SKIP, set by a wake-up
// preemption or a yield moments before) the field is as of that moment,
// and steal in the microseconds between goes to the next task.
SEC("tp_btf/sched_switch")
int steal_switch(u64 *ctx)
{
	observe((void *)ctx[1]);
	return 0;
}

// The tick, where the kernel can trace functions: account_steal_time()
// is called by steal_account_process_time() at every tick and when a CPU
// leaves nohz idle (account_idle_ticks), with `cputime` the steal clock's
// advance since rq->prev_steal_time, which it then adds. So the clock now
// is prev_steal_time + cputime: the same paravirt_steal_clock() that
// prev_steal_time_rq holds as of its last rq update (since 6.13 equal to
// it; before, that field could lag, and a lag only delays a charge to the
// next reading). A tick with no steal, nearly all of them, returns after
// one load from the trampoline's stack: no map, no task, no rq line, each
// of which is cold after the VM exit that delivered the tick (the old
// path below read them all: 212-217 ns a run beside spinners).
// Current is the interrupted task, or idle on the way out of nohz idle:
// idle steal. Loaded instead of steal_tick when fentry attaches.
SEC("fentry/account_steal_time")
int steal_account(u64 *ctx)
{
	u64 advance = ctx[0];
	if (!advance)
		return 0;
	struct steal_cpu *c = this_cpu_state();
	if (!c)
		return 0;
	struct task_struct *p = bpf_get_current_task_btf();
	struct rq *rq = rq_of(p);
	if (!rq || !__builtin_preserve_field_info(rq->prev_steal_time,
	                                          BPF_FIELD_EXISTS))
		return 0;
	advance_to(c, p, rq->prev_steal_time + advance);
	return 0;
}

// The fallback tick where fentry is unavailable (no BPF trampoline):
// after the scheduler tick's hrtimer callback. The tick updated the rq
// clock (sched_tick), so busy steal is seen within one tick, each episode
// near its own time, rather than merged until the running task next
// switches out. Current is the interrupted task (or idle). Other hrtimers
// return after one load: a run doing only the map lookup and the
// current-task helper here measured ~120 ns (a full tick run 125-146),
// and a sleeper's timer fires thousands of times a second; the switch it
// leads to reads the steal clock anyway.
// Where the tick's callback is unknown (tick_fn 0), every hrtimer reads.
// In low-resolution mode the tick is no hrtimer expiry (the clockevent
// calls the handler): then busy steal is seen at the next switch only,
// still charged to the task that was current.
// A soft hrtimer runs with interrupts on; a hard one landing inside it
// finds this program running and is skipped by the kernel
// (recursion_misses), which only leaves the advance to the next reading.
// No wake-up hook: a wake-up changes no CPU's current task, and the
// switch it leads to follows within microseconds. No power:cpu_idle
// hook: leaving idle moves neither field by itself; the wake-up that
// ends idle updates the rq, and the switch out of idle reads it.
SEC("tp_btf/hrtimer_expire_exit")
int steal_tick(u64 *ctx)
{
	struct hrtimer *t = (void *)ctx[0];
	if (tick_fn && (u64)t->function != tick_fn)
		return 0;
	observe(bpf_get_current_task_btf());
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
