// SPDX-License-Identifier: GPL-2.0-only OR Apache-2.0
//
// wait_by: for every watched thread, its run-queue wait split by what was
// current on its CPU while it waited, aggregated in the kernel, by the
// attribution rules of docs/who-stole.md, section "Rules" (R1-R9, cited by
// number below; the tracefs route applies the same ones in
// crates/sched/src/aggregate.rs, and tests/two_routes.rs compares the two
// live). Rebuild with scripts/build-bpf.sh (the object next to this file
// is committed).
//
// Self-contained on purpose: minimal CO-RE structs instead of a vmlinux.h,
// helper ids instead of libbpf headers, so the build needs only clang.

typedef unsigned char u8;
typedef unsigned short u16;
typedef unsigned int u32;
typedef int s32;
typedef unsigned long long u64;
typedef long long s64;

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
static void *(*bpf_map_lookup_percpu_elem)(void *map, const void *key,
                                           u32 cpu) = (void *)195;
static long (*bpf_loop)(u32 nr_loops, void *callback_fn, void *callback_ctx,
                        u64 flags) = (void *)181;
static void *(*bpf_per_cpu_ptr)(const void *percpu_ptr, u32 cpu) = (void *)153;

// `ld_imm64 dst, src=type, imm` (LLVM's BPF pseudo intrinsic, as BCC uses):
// with BPF_PSEUDO_BTF_ID it loads the address of a kernel variable named by
// its vmlinux BTF id, what libbpf emits for a `__ksym`, which aya 0.14
// does not resolve. The loader (src/bpf_ksym.rs) writes the id of the
// per-CPU `runqueues` over RUNQUEUES_MARK, or, on a kernel where the
// branch using it is dead, a plain load of 0 (the kernel resolves every
// BTF-id load before it prunes dead code, and resolving `runqueues` needs
// CONFIG_KALLSYMS_ALL).
unsigned long long bpf_pseudo(unsigned long long type,
                              unsigned long long imm) asm("llvm.bpf.pseudo");
#define BPF_PSEUDO_BTF_ID 3
#define RUNQUEUES_MARK 0x52554e51 // "RUNQ"
#define BPF_FIELD_EXISTS 2

#define BPF_MAP_TYPE_HASH 1
#define BPF_MAP_TYPE_ARRAY 2
#define BPF_MAP_TYPE_PERCPU_ARRAY 6
#define BPF_NOEXIST 1
#define BPF_F_NO_PREALLOC 1
#define PF_KTHREAD 0x00200000

// Only the fields read; CO-RE relocates their offsets against the running
// kernel's BTF at load time.
struct thread_info {
	u32 cpu;
} __attribute__((preserve_access_index));

// The kernel's own wait accounting (kernel/sched/stats.h): run_delay grows
// by rq->clock - last_queued when a queued task arrives on its CPU or is
// dequeued to migrate. rq->clock is sched_clock (one clock for all CPUs
// when sched_clock_stable(), as with kvm-clock or an invariant TSC).
struct sched_info {
	unsigned long pcount;
	u64 run_delay;
	u64 last_queued;
} __attribute__((preserve_access_index));

struct rq {
	u64 clock;
} __attribute__((preserve_access_index));

// Only with CONFIG_FAIR_GROUP_SCHED (see rq_now).
struct cfs_rq {
	struct rq *rq;
} __attribute__((preserve_access_index));

struct sched_entity {
	struct cfs_rq *cfs_rq;
} __attribute__((preserve_access_index));

struct task_struct {
	struct thread_info thread_info;
	unsigned int flags;
	struct sched_entity se;
	struct sched_info sched_info;
	int pid;
	int tgid;
	u64 start_time;
	char comm[16];
} __attribute__((preserve_access_index));

// Mirrors hist.rs: 8 sub-buckets per power of two, clamped at 2^36.
#define MAX_EXP 35
#define BUCKETS ((MAX_EXP - 1) * 8)
// Stretches kept per CPU (a power of two): 4,096 cover ~35 ms at 115,000
// switches a second on one CPU, the ping-pong beside O_DIRECT reads in
// bpf_route's test (1,024 covered 9 ms there and lost 3-6 % of a waiter's
// time to `unknown`; the waits lost are always the longest). 224 KiB per
// CPU. A walk stops at the record its wait began in, so a deeper ring
// costs memory, not time per event.
#define RING 4096

enum { ST_UNKNOWN = 0, ST_RUNNING = 1, ST_QUEUED = 2, ST_SLEEPING = 3 };

// One stretch of a CPU: from `start` until the next record, `tid` was
// current. irq_start is the CPU's irq_ns() at `start`.
struct rec {
	u64 start;
	u64 irq_start;
	u64 tstart; // the thread's start_time (its identity with tid and comm)
	u32 tid;
	u32 tgid;
	u32 kthread;
	u16 stale; // a switch away from it was never seen: blame no one (R6)
	// R6: a thread woken onto this idle CPU while a watched thread waited
	// here, current provisionally: the CPU's next switch resolves it to
	// this thread, to idle, or to stale. Charged as idle until then.
	u16 woken;
	char comm[16];
};

// Provisional records kept per idle stretch (R6): wake-ups of more
// distinct threads onto one idle CPU before it switches are not noted.
#define MAX_WOKEN 8

struct cpu_state {
	u64 events;
	u64 lost;
	u64 overflows;
	u64 missed; // arrivals of watched threads the program did not see
	s64 nq; // watched threads queued on this CPU (any CPU may change it)
	// Interrupt time, hard and soft apart: each kind has its own programs
	// and fields, since a hardirq lands inside a softirq (softirqs run
	// with interrupts on) but neither nests in itself. A `since` of 0
	// means not timing; an exit always clears it, so a lost entry or exit
	// never leaves a CPU stuck (one shared depth counter did).
	u64 hard_ns; // hardirq time so far
	u64 hard_since;
	u64 soft_ns; // softirq time so far, less the hardirqs inside
	u64 soft_since;
	u64 soft_hard0; // hard_ns at soft_since
	u64 head; // records written so far (in `rings`)
};

// A CPU's stretch records: in an array map indexed by CPU (max_entries set
// by the loader), since a per-CPU value is limited to 32 KiB.
struct ring {
	struct rec r[RING];
};

// One culprit's charges to a victim, in the victim itself: a walk adds to
// it after a short scan on the key rather than a `charges` hash update
// (~40 ns a stretch record, BENCHMARKS.md). Written once: the key, ns,
// then `sum`, a digest of the key, which publishes it (0: free); user
// space takes a slot whose digest matches (a read torn by a copy racing
// the fill does not) and reads `ns` as a running total.
struct cslot {
	u64 ns;
	u64 tstart;
	char comm[16];
	u32 tid;
	u32 tgid;
	u32 kthread;
	u32 sum;
};

// Culprits a victim keeps in its own slots; later ones go to `charges`.
// The slots stay their first culprits' for as long as the victim is
// watched (a vCPU's culprits are mostly the same few threads).
#define NSLOT 4

// Per watched thread, its cumulative counters (user space reads them and
// writes each zeroed; layout shared with src/bpf.rs), in `fast` at the
// thread's slot when the slot is below that array's size, else in the
// `watched` hash. Looked up only where a wait is charged: a switch-in or
// migration of a queued thread, or a resync that finds a gap.
struct victim {
	u64 irq_ns;
	u64 idle_ns;
	u64 unknown_ns;
	u64 count;
	u64 sum_ns;
	u64 max_ns;
	u64 over_1ms;
	u64 over_10ms;
	struct cslot slots[NSLOT];
	u64 buckets[BUCKETS];
};

// Per watched thread, the state the programs keep between its events (one
// cache line; layout shared with src/bpf.rs, which zeroes it when it
// watches the thread: ST_UNKNOWN, the first event tells the truth). In an
// array at the thread's slot, found by two array loads the verifier
// inlines (a hash lookup costs ~25 ns here, BENCHMARKS.md), so that a
// switch or wake-up that ends no wait touches no hash.
struct vstate {
	u64 since; // queued on `cpu` since (this stretch)
	u64 ep_kd; // kdelay() at the episode's start
	u64 irq0; // irq_ns() of `cpu` at `since`
	u64 st_kd; // kdelay() at the stretch's start
	u64 acct; // kdelay() when last in step with the kernel
	u64 pcount; // the kernel's pcount then (0: never in step yet)
	u32 cpu;
	u32 state;
	u32 tid; // the watched thread (its key in `watched`)
	u32 slot; // its index here (and in `fast`, if below its size)
};

// A culprit is a thread as the kernel knows it at that moment: a reused
// tid has another start time, an exec another comm, so either is a new
// culprit with its own name and tgid (keyed by tid alone, the first
// charge's comm and tgid stuck for good: a dead VM's reused "CPU n/KVM"
// tid was named as the host process that got it).
struct charge_key {
	u32 victim;
	u32 tid;
	u64 tstart; // task_struct.start_time (monotonic ns at fork)
	char comm[16];
};

struct charge {
	u64 ns;
	u32 tgid;
	u32 kthread;
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, u32);
	__type(value, struct cpu_state);
} cpus SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1); // the loader sets the number of possible CPUs
	__type(key, u32);
	__type(value, struct ring);
} rings SEC(".maps");

// gate[0] = number of watched threads; 0 makes every program return at once.
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, u32);
	__type(value, u64);
} gate SEC(".maps");

// The watched threads' states, at the slots user space gives them (sized
// by the loader like `watched`; 64 bytes each, preallocated: 8 MiB at
// 131,072).
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, u32);
	__type(value, struct vstate);
} vstates SEC(".maps");

// The victims of the first slots (the loader sizes it: 16 per CPU, at
// least 1,024, 2.4 MiB), preallocated and found by an array index the
// verifier inlines: a hash lookup was ~15 ns of the ~178 a switch took
// where a watched wait ends (BENCHMARKS.md). Slots are given lowest first,
// so a host that never watches more threads at once never uses the hash.
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, u32);
	__type(value, struct victim);
} fast SEC(".maps");

// The victims of slots past `fast`. Sizes are the loader's (src/bpf.rs,
// from the host's CPU count; at least 131,072 watched threads). Allocated
// when user space inserts them, not up front: one is 2.5 KiB, and 131,072
// preallocated would be 330 MiB. Run-time allocation is safe in tracing
// programs from kernel 6.1 (bpf_mem_alloc), which the loader requires.
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 65536);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, u32);
	__type(value, struct victim);
} watched SEC(".maps");

// The charges of culprits past a victim's slots (NSLOT). Pruned by user
// space after each read (entries that did not grow since the previous
// read), so it holds the pairs active in about one interval.
// Preallocated: the program inserts here, inside sched_switch, and a
// run-time allocation there fails whenever a walk meets more new culprits
// than the allocator's per-CPU cache holds (15 lost in a 2 s test).
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 65536);
	__type(key, struct charge_key);
	__type(value, struct charge);
} charges SEC(".maps");

// Per tid below 2^22 (the kernel's PID_MAX_LIMIT, whatever pid_max
// becomes; the loader sizes it: 16 MiB), its slot in `vstates` plus one,
// 0 for a thread nobody watches: most switches involve none, and this
// lookup is inlined.
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, u32);
	__type(value, u32);
} slots SEC(".maps");

// The state of thread `tid` if it is watched, else 0.
static __always_inline struct vstate *watched_state(u32 tid)
{
	if (!tid)
		return 0;
	u32 *slot = bpf_map_lookup_elem(&slots, &tid);
	if (!slot || !*slot)
		return 0;
	u32 i = *slot - 1;
	struct vstate *s = bpf_map_lookup_elem(&vstates, &i);
	// The slot's owner: another while user space moves slots (R8: its
	// events are missed, resync counts them).
	return s && s->tid == tid ? s : 0;
}

// The counters of the watched thread whose state is `s`: in `fast` (NULL
// past its end) or else in the hash.
static __always_inline struct victim *victim_of(struct vstate *s)
{
	u32 i = s->slot;
	struct victim *v = bpf_map_lookup_elem(&fast, &i);
	return v ? v : bpf_map_lookup_elem(&watched, &s->tid);
}

static __always_inline struct cpu_state *this_cpu(void)
{
	u32 zero = 0;
	return bpf_map_lookup_elem(&cpus, &zero);
}

// CPU `cpu`'s state; `me` (this CPU's, already looked up) when it is this
// one: the remote lookup is a helper call, the local one is not.
static __always_inline struct cpu_state *cpu_state_of(u32 cpu,
                                                      struct cpu_state *me)
{
	u32 zero = 0;
	if (cpu == bpf_get_smp_processor_id())
		return me;
	return bpf_map_lookup_percpu_elem(&cpus, &zero, cpu);
}

// Interrupt time on a CPU so far (hard and soft apart, see cpu_state).
static __always_inline u64 irq_ns(struct cpu_state *cs)
{
	return cs->hard_ns + cs->soft_ns;
}

static __always_inline int gated(void)
{
	u32 zero = 0;
	u64 *g = bpf_map_lookup_elem(&gate, &zero);
	return !g || !*g;
}

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

// The clock of p's run queue (sched_clock, updated at every __schedule,
// enqueue and wake-up under the rq lock): where stretches start and end.
// A load, not a clock read, and the clock of kdelay's lengths. Reading
// bpf_ktime_get_ns instead (kvm-clock in this VM) cost ~70 ns of the
// ~150 ns a switch took where a watched thread waits (BENCHMARKS.md).
// At a migration p's rq is still the origin's (task_cpu(p) changes right
// after the tracepoint): its stretch ends on that clock, and the new one
// starts on it too. The rq is reached through `p->se.cfs_rq->rq` (set for
// every class by set_task_rq; three loads) where that field exists, which
// is CONFIG_FAIR_GROUP_SCHED; elsewhere through the per-CPU `runqueues` of
// task_cpu(p) (BTF-id load, resolved by the loader). The field check is a
// CO-RE relocation, so the verifier sees a constant and never walks the
// other branch (whose field relocation may be poisoned).
static __always_inline u64 rq_now(struct task_struct *p)
{
	if (__builtin_preserve_field_info(p->se.cfs_rq, BPF_FIELD_EXISTS))
		return p->se.cfs_rq->rq->clock;
	struct rq *rq = bpf_per_cpu_ptr(
		(void *)bpf_pseudo(BPF_PSEUDO_BTF_ID, RUNQUEUES_MARK),
		p->thread_info.cpu);
	return rq ? rq->clock : 0;
}

// The kernel's wait of `p` so far, including the part it will add when the
// current stretch ends: run_delay + now - last_queued, `now` being
// rq_now(p). Exact at the points it is read: at sched_switch the rq clock
// is the one sched_info_arrive uses next (context_switch runs after the
// tracepoint, with no clock update between); at a wake-up last_queued was
// just set from the same clock; at a migration the dequeue already settled
// it.
static __always_inline u64 kdelay(struct task_struct *p, u64 now)
{
	u64 d = p->sched_info.run_delay;
	u64 lq = p->sched_info.last_queued;
	if (lq && now > lq)
		d += now - lq;
	return d;
}

// The kernel's length k of a stretch measured as m ns, as a ratio in
// 2^-20 units applied to x >> sh (x < m). sh keeps x >> sh below 2^32 and
// f is capped at 16 (k < 16 m always but for a clock oddity), so x * f
// stays below 2^56. One division per stretch, none per piece.
struct ratio {
	u64 m, k, f, sh;
};

static __always_inline struct ratio stretch_ratio(u64 m, u64 k)
{
	struct ratio r = { .m = m, .k = k, .sh = 0 };
	u64 mm = m, kk = k;
	if (m >> 32) { // a wait over 4.3 s: 4 µs steps are fine
		r.sh = 12;
		mm >>= 12;
		kk >>= 12;
	}
	if (kk >= (mm << 4))
		kk = mm << 4;
	// Most stretches have k == m: no division then.
	r.f = kk == mm ? 1 << 20 : mm ? (kk << 20) / mm : 0;
	return r;
}

// x ns of the measured stretch onto the kernel's length: monotonic in x and
// exactly k at x = m, so the pieces of a stretch sum to k.
static __always_inline u64 scale(u64 x, struct ratio *r)
{
	if (x >= r->m)
		return r->k;
	return (((x >> r->sh) * r->f) >> 20) << r->sh;
}

// Brings the victim in step with the kernel's counters: wait the kernel
// added that the program did not charge (an event it did not see; rare,
// counted in `missed`) is `unknown`, so sums stay the kernel's. The first
// call only takes the kernel's values as the starting point.
static __always_inline void resync(struct vstate *s, u64 kd, u64 pc,
                                   struct cpu_state *me)
{
	if (s->pcount) {
		u64 gap = pc > s->pcount ? pc - s->pcount : 0;
		if (kd > s->acct) {
			struct victim *v = victim_of(s);
			if (v)
				v->unknown_ns += kd - s->acct;
			gap += !gap;
		}
		me->missed += gap;
	}
	s->acct = kd;
	s->pcount = pc;
}

// The digest that publishes a filled slot (FNV-1a over its key's words;
// src/bpf_charges.rs computes the same). Never 0, which means free.
static __always_inline u32 slot_sum(u32 tid, u32 tgid, u32 kthread,
                                    u64 tstart, u64 c0, u64 c1)
{
	u32 w[9] = { tid, tgid, kthread, (u32)tstart, (u32)(tstart >> 32),
		     (u32)c0, (u32)(c0 >> 32), (u32)c1, (u32)(c1 >> 32) };
	u32 h = 2166136261u;
	for (int i = 0; i < 9; i++)
		h = (h ^ w[i]) * 16777619u;
	return h | 1;
}

// Charges `ns` to culprit `r` in victim `v`'s slots, or in `charges` once
// they are full. Only the victim's own events charge it (a switch-in or
// migration, both under its run queue's lock), so plain adds will do.
static __always_inline void add_culprit(struct victim *v, u32 vtid,
                                        struct rec *r, u64 ns,
                                        struct cpu_state *me)
{
	if (!ns)
		return;
	if (r->tid == 0 || r->woken) {
		v->idle_ns += ns;
		return;
	}
	u64 c0 = *(u64 *)r->comm, c1 = *(u64 *)(r->comm + 8);
	for (int i = 0; i < NSLOT; i++) {
		struct cslot *s = &v->slots[i];
		if (!s->sum) { // slots fill in order: no match after a free one
			s->ns = ns;
			s->tstart = r->tstart;
			*(u64 *)s->comm = c0;
			*(u64 *)(s->comm + 8) = c1;
			s->tid = r->tid;
			s->tgid = r->tgid;
			s->kthread = r->kthread;
			asm volatile("" ::: "memory"); // the key before its digest
			s->sum = slot_sum(r->tid, r->tgid, r->kthread, r->tstart,
					  c0, c1);
			return;
		}
		if (s->tid == r->tid && s->tstart == r->tstart &&
		    *(u64 *)s->comm == c0 && *(u64 *)(s->comm + 8) == c1) {
			s->ns += ns;
			return;
		}
	}
	struct charge_key k = { .victim = vtid, .tid = r->tid, .tstart = r->tstart };
	__builtin_memcpy(k.comm, r->comm, 16);
	struct charge *c = bpf_map_lookup_elem(&charges, &k);
	if (c) {
		__sync_fetch_and_add(&c->ns, ns);
		return;
	}
	struct charge n = { .ns = ns, .tgid = r->tgid, .kthread = r->kthread };
	if (bpf_map_update_elem(&charges, &k, &n, BPF_NOEXIST) == 0)
		return;
	c = bpf_map_lookup_elem(&charges, &k); // lost a race with another CPU
	if (c) {
		__sync_fetch_and_add(&c->ns, ns);
		return;
	}
	v->unknown_ns += ns; // map full: the time stays counted, the loss too
	me->lost++;
}

// One walk over a CPU's stretch records (the state of `charge`'s loop).
struct walk {
	struct victim *v;
	struct cpu_state *cs;
	struct ring *rg;
	struct cpu_state *me;
	struct ratio rt;
	u64 t0, t1, head, end, irq_end, irq0;
	u64 done; // k charged so far: scale(t1 - end)
	u32 vtid;
	u32 covered; // reached a record that starts at or before t0
	u32 ran_out; // no older record was ever written
};

// The i-th record back from the newest. A bpf_loop callback: the verifier
// checks it once rather than each of RING iterations of an inline loop,
// which took ~0.45 s of CPU at every load.
static long walk_one(u64 i, struct walk *w)
{
	if (i >= w->head) {
		w->ran_out = 1;
		return 1;
	}
	struct victim *v = w->v;
	struct rec *r = &w->rg->r[(w->head - 1 - i) & (RING - 1)];
	u64 s = r->start, t0 = w->t0, t1 = w->t1, end = w->end;
	if (s >= end) { // written after t1 (a remote CPU moved on)
		w->irq_end = r->irq_start;
		return 0;
	}
	u64 lo = s > t0 ? s : t0;
	u64 irq_lo = s > t0 ? r->irq_start : w->irq0;
	u64 dur = end - lo;
	u64 irq = w->irq_end > irq_lo ? w->irq_end - irq_lo : 0;
	if (irq > dur)
		irq = dur;
	u64 mid = scale(t1 - end + irq, &w->rt);
	u64 upto = scale(t1 - lo, &w->rt);
	v->irq_ns += mid - w->done;
	if (r->stale)
		v->unknown_ns += upto - mid;
	else
		add_culprit(v, w->vtid, r, upto - mid, w->me);
	w->done = upto;
	if (s <= t0) {
		w->covered = 1;
		return 1;
	}
	w->end = s;
	w->irq_end = r->irq_start;
	return 0;
}

// R4, R7: charges the kernel's length `k` of the stretch [v->since, t1) on
// CPU `cpu`, split like the measured time: walks that CPU's stretches
// backwards from the newest, each piece scaled from the measured m = t1 -
// since onto k (the rq clock skips its update at a switch right after a
// wake-up preemption, so m and k differ by a little).
static __always_inline void charge(struct vstate *vs, struct victim *v,
                                   u64 t1, u64 k, struct cpu_state *me)
{
	u64 t0 = vs->since;
	u32 cpu = vs->cpu;
	if (t1 <= t0) {
		v->unknown_ns += k;
		return;
	}
	struct cpu_state *cs = cpu_state_of(cpu, me);
	struct ring *rg = bpf_map_lookup_elem(&rings, &cpu);
	if (!cs || !rg) {
		v->unknown_ns += k;
		return;
	}
	struct walk w = {
		.v = v,
		.cs = cs,
		.rg = rg,
		.me = me,
		.rt = stretch_ratio(t1 - t0, k),
		.t0 = t0,
		.t1 = t1,
		.head = cs->head,
		.end = t1,
		.irq_end = irq_ns(cs),
		.irq0 = vs->irq0,
		.vtid = vs->tid,
	};
	bpf_loop(RING, walk_one, &w, 0);
	if (!w.covered && k > w.done) {
		v->unknown_ns += k - w.done;
		if (!w.ran_out)
			me->overflows++;
	}
}

// A victim leaves the queue of v->cpu (switched in, migrated, or found
// out of step).
static __always_inline void leave_queue(struct vstate *v,
                                        struct cpu_state *me)
{
	if (v->state != ST_QUEUED)
		return;
	struct cpu_state *cs = cpu_state_of(v->cpu, me);
	if (cs)
		__sync_fetch_and_add(&cs->nq, -1);
}

static __always_inline void queue_on(struct vstate *v, u32 cpu, u64 now,
                                    u64 kd, struct cpu_state *me)
{
	struct cpu_state *cs = cpu_state_of(cpu, me);
	v->state = ST_QUEUED;
	v->since = now;
	v->st_kd = kd;
	v->cpu = cpu;
	v->irq0 = cs ? irq_ns(cs) : 0;
	if (cs)
		__sync_fetch_and_add(&cs->nq, 1);
}

// R6: the first switch after provisional records on this CPU decides
// them: prev is the idle task (the switch away from idle was traced): all
// idle; prev was woken here: idle before its first wake-up, prev's from
// it on; anyone else: the whole stretch since the last traced switch is
// stale (the idle record before them too), one missed switch.
static __always_inline void resolve_woken(struct ring *rg, u64 h,
                                          struct task_struct *prev, u32 ptid,
                                          struct cpu_state *me)
{
	u32 n = 0, at = 0;
	for (u32 j = 1; j <= MAX_WOKEN; j++) {
		if (j > h)
			break;
		struct rec *r = &rg->r[(h - j) & (RING - 1)];
		if (!r->woken)
			break;
		n = j;
		if (r->tid == ptid)
			at = j; // going back: the last one met is the earliest
	}
	if (!n)
		return;
	u32 missed = ptid && !at;
	for (u32 j = 1; j <= MAX_WOKEN + 1; j++) {
		if (j > n + missed || j > h)
			break;
		struct rec *r = &rg->r[(h - j) & (RING - 1)];
		r->woken = 0;
		if (missed) {
			r->stale = 1;
		} else if (!ptid || j > at) {
			r->tid = 0;
		} else {
			r->tid = ptid;
			r->tgid = prev->tgid;
			r->tstart = prev->start_time;
			r->kthread = !!(prev->flags & PF_KTHREAD);
			__builtin_memcpy(r->comm, prev->comm, sizeof(r->comm));
		}
	}
	me->missed += missed;
}

// One wait episode of `ep` ns (the kernel's length) to v's histogram.
static __always_inline void count_episode(struct victim *v, u64 ep)
{
	u32 b = bucket(ep);
	if (b < BUCKETS)
		v->buckets[b] += 1;
	v->count++;
	v->sum_ns += ep;
	if (ep > v->max_ns)
		v->max_ns = ep;
	v->over_1ms += ep > 1000000;
	v->over_10ms += ep > 10000000;
}

// A watched thread switched in on `cpu` at rq clock `now` (R2, R4, R7):
// the stretch since it was queued is charged and its episode counted.
static __always_inline void switch_in(struct vstate *s,
                                      struct task_struct *next, u64 now,
                                      u32 cpu, struct cpu_state *me)
{
	u64 kd = kdelay(next, now);
	u64 lq = next->sched_info.last_queued;
	u64 pc = next->sched_info.pcount;
	struct victim *v;
	if (s->state == ST_QUEUED && s->pcount && (v = victim_of(s))) {
		// Lengths are the kernel's: the wait sched_info_arrive adds
		// to run_delay right after this tracepoint.
		u64 k = kd > s->st_kd ? kd - s->st_kd : 0;
		charge(s, v, now, k, me);
		s->acct += k;
		// Counted when the kernel counts it (pcount grows only for a
		// task it saw queued).
		if (lq)
			count_episode(v, kd > s->ep_kd ? kd - s->ep_kd : 0);
	} else if (!s->pcount && lq && now > lq && (v = victim_of(s))) {
		// R1: a wait under way when the thread was first watched. The
		// kernel adds it to run_delay whole now (schedstat's interval
		// holds all of it); who ran before the watch is unrecorded.
		v->unknown_ns += now - lq;
		count_episode(v, now - lq);
	}
	resync(s, kd, pc, me);
	s->pcount = pc + !!lq; // after sched_info_arrive
	leave_queue(s, me);
	s->state = ST_RUNNING;
	s->cpu = cpu;
}

SEC("tp_btf/sched_switch")
int handle_switch(u64 *ctx)
{
	int preempt = (u8)ctx[0];
	struct task_struct *prev = (void *)ctx[1];
	struct task_struct *next = (void *)ctx[2];
	u32 prev_state = (u32)ctx[3];
	struct cpu_state *me = this_cpu();
	if (!me)
		return 0;
	me->events++;
	if (gated())
		return 0;
	u32 this = bpf_get_smp_processor_id();
	struct ring *rg = bpf_map_lookup_elem(&rings, &this);
	if (!rg)
		return 0;
	// The rq clock is read only when a watched thread is involved or
	// queued here: most switches on a host concern no one watched.
	u64 now = 0;
	u32 ntid = next->pid, ptid = prev->pid;
	u64 h = me->head;
	// The switch away from the last record's thread was not seen (on
	// this 6.18 VM, every switch away from two threads of PID 1, about 1
	// in 1,500, reaches neither tracefs nor BPF): it ran only part of its
	// stretch, so its share of any wait there is unknown, not its own.
	resolve_woken(rg, h, prev, ptid, me);
	struct rec *last = &rg->r[(h - 1) & (RING - 1)];
	if (h && last->tid != ptid && !last->stale) {
		last->stale = 1;
		me->missed++;
	}

	struct vstate *s = watched_state(ntid);
	if (s) {
		now = rq_now(next);
		switch_in(s, next, now, this, me);
	}
	s = watched_state(ptid);
	if (s) {
		// Still running in the kernel's eyes: last_queued is set from
		// this same rq clock right after.
		if (!now)
			now = rq_now(prev);
		u64 kd = kdelay(prev, now);
		resync(s, kd, prev->sched_info.pcount, me);
		leave_queue(s, me); // a switch-in it missed
		if (preempt || prev_state == 0) {
			s->ep_kd = kd;
			queue_on(s, this, now, kd, me);
		} else {
			s->state = ST_SLEEPING;
		}
	}

	// With nothing watched queued here, a record's start and irq time
	// never matter: a thread queued later charges it from its own start
	// (the walk stops at the first record not after it), so 0 will do.
	struct rec *r = &rg->r[h & (RING - 1)];
	if (me->nq > 0) {
		r->start = now ? now : rq_now(next);
		r->irq_start = irq_ns(me);
	} else {
		r->start = 0;
		r->irq_start = 0;
	}
	r->tid = ntid;
	r->tgid = next->tgid;
	r->tstart = next->start_time;
	r->kthread = !!(next->flags & PF_KTHREAD);
	r->stale = 0;
	r->woken = 0;
	// Direct loads: a tp_btf argument is a trusted BTF pointer, cheaper
	// to read than through the probe-read helper.
	__builtin_memcpy(r->comm, next->comm, sizeof(r->comm));
	me->head = h + 1;
	return 0;
}

// R6: a thread woken onto an idle CPU where a watched thread is queued
// becomes that CPU's provisional current, unless woken there since its
// last switch already. sched_wakeup runs under the target's rq lock, as
// that CPU's sched_switch does, so the two never write its ring at once.
static __always_inline void note_woken(struct task_struct *p, u32 tid,
                                       struct cpu_state *me)
{
	u32 cpu = p->thread_info.cpu;
	struct cpu_state *cs = cpu_state_of(cpu, me);
	if (!cs || cs->nq <= 0)
		return;
	struct ring *rg = bpf_map_lookup_elem(&rings, &cpu);
	u64 h = cs->head;
	if (!rg || !h)
		return;
	for (u32 j = 1; j <= MAX_WOKEN; j++) {
		if (j > h)
			return;
		struct rec *r = &rg->r[(h - j) & (RING - 1)];
		if (!r->woken) {
			if (r->tid)
				return; // not idle
			break;
		}
		if (r->tid == tid || j == MAX_WOKEN)
			return; // noted already, or as many as kept
	}
	struct rec *r = &rg->r[h & (RING - 1)];
	r->start = rq_now(p);
	r->irq_start = irq_ns(cs);
	r->tid = tid;
	r->tgid = p->tgid;
	r->tstart = p->start_time;
	r->kthread = !!(p->flags & PF_KTHREAD);
	r->stale = 0;
	r->woken = 1;
	__builtin_memcpy(r->comm, p->comm, sizeof(r->comm));
	cs->head = h + 1;
}

// `fresh`: sched_wakeup_new, a thread that never ran. Its state is not
// looked up (a new tid's `slots` line, cold, was ~160 ns of the ~310 this
// program took, BENCHMARKS.md): the kernel has counted no wait of it yet
// (pcount 0), so its first switch-in charges nothing and takes the
// kernel's counters as its start (resync) whether or not it was queued
// here. R6 still applies to it.
static __always_inline int on_wakeup(struct task_struct *p, int fresh)
{
	struct cpu_state *me = this_cpu();
	if (!me)
		return 0;
	me->events++;
	if (gated())
		return 0;
	u32 tid = p->pid;
	note_woken(p, tid, me); // before this thread's own queue_on, as in R6
	if (fresh)
		return 0;
	// R1: a wake-up of a thread running or queued changes nothing.
	struct vstate *v = watched_state(tid);
	if (!v || v->state == ST_RUNNING || v->state == ST_QUEUED)
		return 0;
	u64 now = rq_now(p);
	u64 kd = kdelay(p, now);
	resync(v, kd, p->sched_info.pcount, me);
	v->ep_kd = kd;
	queue_on(v, p->thread_info.cpu, now, kd, me);
	return 0;
}

SEC("tp_btf/sched_wakeup")
int handle_wakeup(u64 *ctx)
{
	return on_wakeup((void *)ctx[0], 0);
}

SEC("tp_btf/sched_wakeup_new")
int handle_wakeup_new(u64 *ctx)
{
	return on_wakeup((void *)ctx[0], 1);
}

// R3: a queued thread's stretch so far is charged on the CPU it leaves.
SEC("tp_btf/sched_migrate_task")
int handle_migrate(u64 *ctx)
{
	struct task_struct *p = (void *)ctx[0];
	u32 dest = (u32)ctx[1];
	struct cpu_state *me = this_cpu();
	if (!me)
		return 0;
	me->events++;
	if (gated())
		return 0;
	u32 tid = p->pid;
	struct vstate *v = watched_state(tid);
	if (!v || v->state != ST_QUEUED || !v->pcount)
		return 0;
	u64 now = rq_now(p);
	u64 kd = kdelay(p, now);
	u64 k = kd > v->st_kd ? kd - v->st_kd : 0;
	struct victim *c = victim_of(v);
	if (c)
		charge(v, c, now, k, me);
	v->acct += k;
	resync(v, kd, p->sched_info.pcount, me);
	leave_queue(v, me);
	queue_on(v, dest, now, kd, me);
	return 0;
}

// Interrupt time: hardirqs and softirqs each by their own raw_tp programs
// (they read no argument). A hardirq can land inside a softirq; a program
// running when the same program fires again on its CPU is skipped by the
// kernel (counted in its recursion_misses, which src/bpf.rs reads), so
// one program for both lost the hardirq's entry or exit and left a shared
// depth counter stuck. Now no program can be re-entered: hardirq programs
// run with interrupts off, softirqs never nest, and the sched programs
// run under the rq or pi lock with interrupts off.
// R5: timed from an entry seen while a watched thread is queued here
// (the stretch records and queue_on take irq_ns() only then): one woken
// inside this handler charges its remainder to the current task, a few
// µs at most, rather than every interrupt on the host paying two clock
// reads. Only entries are gated. R7: bpf_ktime_get_ns is
// ktime_get_mono_fast_ns, the tracefs route's trace clock `mono`: both
// routes time interrupts on one clock (the rq clock does not move inside
// an interrupt), and only lengths are used.
SEC("raw_tp")
int handle_hardirq_entry(void *ctx)
{
	struct cpu_state *me = this_cpu();
	if (!me)
		return 0;
	me->hard_since = !gated() && me->nq > 0 ? bpf_ktime_get_ns() : 0;
	return 0;
}

SEC("raw_tp")
int handle_hardirq_exit(void *ctx)
{
	struct cpu_state *me = this_cpu();
	if (!me || !me->hard_since)
		return 0;
	u64 now = bpf_ktime_get_ns();
	if (now > me->hard_since)
		me->hard_ns += now - me->hard_since;
	me->hard_since = 0;
	return 0;
}

SEC("raw_tp")
int handle_softirq_entry(void *ctx)
{
	struct cpu_state *me = this_cpu();
	if (!me)
		return 0;
	me->soft_hard0 = me->hard_ns;
	me->soft_since = !gated() && me->nq > 0 ? bpf_ktime_get_ns() : 0;
	return 0;
}

// A softirq's time less the hardirqs inside it (counted by their own
// programs in hard_ns; an interrupt may update hard_ns while this runs,
// which only moves its time from this softirq's to the next one's).
SEC("raw_tp")
int handle_softirq_exit(void *ctx)
{
	struct cpu_state *me = this_cpu();
	if (!me || !me->soft_since)
		return 0;
	u64 now = bpf_ktime_get_ns();
	u64 hard = me->hard_ns - me->soft_hard0;
	u64 dur = now > me->soft_since ? now - me->soft_since : 0;
	if (dur > hard)
		me->soft_ns += dur - hard;
	me->soft_since = 0;
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
