// SPDX-License-Identifier: GPL-2.0-only OR Apache-2.0
//
// wait_by: for every watched thread, its run-queue wait split by what was
// current on its CPU while it waited, aggregated in the kernel. The rules
// are crates/sched/src/aggregate.rs; this file mirrors them. Rebuild with
// scripts/build-bpf.sh (the object next to this file is committed).
//
// Self-contained on purpose: minimal CO-RE structs instead of a vmlinux.h,
// helper ids instead of libbpf headers, so the build needs only clang.

typedef unsigned char u8;
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

#define BPF_MAP_TYPE_HASH 1
#define BPF_MAP_TYPE_ARRAY 2
#define BPF_MAP_TYPE_PERCPU_ARRAY 6
#define BPF_NOEXIST 1
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
	char comm[16];
} __attribute__((preserve_access_index));

// Mirrors hist.rs: 8 sub-buckets per power of two, clamped at 2^36.
#define MAX_EXP 35
#define BUCKETS ((MAX_EXP - 1) * 8)
// Stretches kept per CPU (a power of two).
#define RING 256

enum { ST_UNKNOWN = 0, ST_RUNNING = 1, ST_QUEUED = 2, ST_SLEEPING = 3 };

// One stretch of a CPU: from `start` until the next record, `tid` was
// current. irq_start is the CPU's irq_ns counter at `start`.
struct rec {
	u64 start;
	u64 irq_start;
	u32 tid;
	u32 tgid;
	u32 kthread;
	u32 stale; // a switch away from it was never seen: blame no one
	char comm[16];
};

struct cpu_state {
	u64 events;
	u64 lost;
	u64 overflows;
	u64 missed; // arrivals of watched threads the program did not see
	s64 nq; // watched threads queued on this CPU (any CPU may change it)
	u64 irq_ns; // hard + soft irq time on this CPU so far
	u64 irq_since; // entry of the outermost irq in progress
	u64 irq_depth;
	u64 head; // records written so far
	struct rec ring[RING];
};

// Per watched thread: its state and cumulative counters (user space reads
// and zero-fills these; layout shared with src/bpf.rs).
struct victim {
	u64 since; // queued on `cpu` since (this stretch)
	u64 ep_kd; // kdelay() at the episode's start
	u64 irq0; // irq_ns of `cpu` at `since`
	u64 st_kd; // kdelay() at the stretch's start
	u64 acct; // kdelay() when last in step with the kernel
	u64 pcount; // the kernel's pcount then (0: never in step yet)
	u32 cpu;
	u32 state;
	u64 irq_ns;
	u64 idle_ns;
	u64 unknown_ns;
	u64 count;
	u64 sum_ns;
	u64 max_ns;
	u64 over_1ms;
	u64 over_10ms;
	u64 buckets[BUCKETS];
};

struct charge_key {
	u32 victim;
	u32 tid;
};

struct charge {
	u64 ns;
	u32 tgid;
	u32 kthread;
	char comm[16];
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, u32);
	__type(value, struct cpu_state);
} cpus SEC(".maps");

// gate[0] = number of watched threads; 0 makes every program return at once.
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, u32);
	__type(value, u64);
} gate SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1024);
	__type(key, u32);
	__type(value, struct victim);
} watched SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 16384);
	__type(key, struct charge_key);
	__type(value, struct charge);
} charges SEC(".maps");

// One bit per tid below 2^22 (the kernel's PID_MAX_LIMIT), set for the
// watched ones: most switches involve no watched thread, and an array
// lookup (inlined by the verifier) is far cheaper than a hash lookup.
#define TID_WORDS (1 << 16)
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, TID_WORDS);
	__type(key, u32);
	__type(value, u64);
} tidbits SEC(".maps");

static __always_inline struct victim *watched_victim(u32 tid)
{
	if (!tid)
		return 0;
	u32 w = tid >> 6;
	u64 *bits = bpf_map_lookup_elem(&tidbits, &w);
	if (bits && !((*bits >> (tid & 63)) & 1))
		return 0;
	return bpf_map_lookup_elem(&watched, &tid); // also past the bitmap
}

static __always_inline struct cpu_state *this_cpu(void)
{
	u32 zero = 0;
	return bpf_map_lookup_elem(&cpus, &zero);
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

// The kernel's wait of `p` so far, including the part it will add when the
// current stretch ends: run_delay + rq->clock - last_queued. Exact at the
// points it is read: at sched_switch the rq clock is the one
// sched_info_arrive uses next (context_switch runs after the tracepoint,
// with no clock update between); at a wake-up last_queued was just set
// from the same clock; at a migration the dequeue already settled it.
// se.cfs_rq is set for every class (set_task_rq), so ->rq is p's runqueue.
static __always_inline u64 kdelay(struct task_struct *p)
{
	u64 d = p->sched_info.run_delay;
	u64 lq = p->sched_info.last_queued;
	if (lq) {
		u64 clock = p->se.cfs_rq->rq->clock;
		if (clock > lq)
			d += clock - lq;
	}
	return d;
}

// The clock of p's run queue (sched_clock, updated at every __schedule,
// enqueue and wake-up under the rq lock): where stretches start and end.
// A load, not a clock read, and the clock of kdelay's lengths. Reading
// bpf_ktime_get_ns instead (kvm-clock in this VM) cost ~70 ns of the
// ~150 ns a switch took where a watched thread waits (BENCHMARKS.md).
// At a migration p's rq is still the origin's: its stretch ends on that
// clock, and the new one starts on it too.
static __always_inline u64 rq_now(struct task_struct *p)
{
	return p->se.cfs_rq->rq->clock;
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
	r.f = mm ? (kk << 20) / mm : 0;
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
static __always_inline void resync(struct victim *v, u64 kd, u64 pc,
                                   struct cpu_state *me)
{
	if (v->pcount) {
		u64 gap = pc > v->pcount ? pc - v->pcount : 0;
		if (kd > v->acct) {
			v->unknown_ns += kd - v->acct;
			gap += !gap;
		}
		me->missed += gap;
	}
	v->acct = kd;
	v->pcount = pc;
}

static __always_inline void add_culprit(struct victim *v, u32 vtid,
                                        struct rec *r, u64 ns,
                                        struct cpu_state *me)
{
	if (!ns)
		return;
	if (r->tid == 0) {
		v->idle_ns += ns;
		return;
	}
	struct charge_key k = { .victim = vtid, .tid = r->tid };
	struct charge *c = bpf_map_lookup_elem(&charges, &k);
	if (c) {
		__sync_fetch_and_add(&c->ns, ns);
		return;
	}
	struct charge n = { .ns = ns, .tgid = r->tgid, .kthread = r->kthread };
	__builtin_memcpy(n.comm, r->comm, 16);
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
	struct cpu_state *me;
	struct ratio rt;
	u64 t0, t1, head, end, irq_end;
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
	struct rec *r = &w->cs->ring[(w->head - 1 - i) & (RING - 1)];
	u64 s = r->start, t0 = w->t0, t1 = w->t1, end = w->end;
	if (s >= end) { // written after t1 (a remote CPU moved on)
		w->irq_end = r->irq_start;
		return 0;
	}
	u64 lo = s > t0 ? s : t0;
	u64 irq_lo = s > t0 ? r->irq_start : v->irq0;
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

// Charges the kernel's length `k` of the stretch [v->since, t1) on CPU
// `cpu`, split like the measured time: walks that CPU's stretches
// backwards from the newest, each piece scaled from the measured m = t1 -
// since onto k (the rq clock skips its update at a switch right after a
// wake-up preemption, so m and k differ by a little).
static __always_inline void charge(struct victim *v, u32 vtid, u32 cpu,
                                   u64 t1, u64 k, struct cpu_state *me)
{
	u64 t0 = v->since;
	if (t1 <= t0) {
		v->unknown_ns += k;
		return;
	}
	u32 zero = 0;
	struct cpu_state *cs = bpf_map_lookup_percpu_elem(&cpus, &zero, cpu);
	if (!cs) {
		v->unknown_ns += k;
		return;
	}
	struct walk w = {
		.v = v,
		.cs = cs,
		.me = me,
		.rt = stretch_ratio(t1 - t0, k),
		.t0 = t0,
		.t1 = t1,
		.head = cs->head,
		.end = t1,
		.irq_end = cs->irq_ns,
		.vtid = vtid,
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
static __always_inline void leave_queue(struct victim *v)
{
	if (v->state != ST_QUEUED)
		return;
	u32 zero = 0;
	u32 cpu = v->cpu;
	struct cpu_state *cs = bpf_map_lookup_percpu_elem(&cpus, &zero, cpu);
	if (cs)
		__sync_fetch_and_add(&cs->nq, -1);
}

static __always_inline void queue_on(struct victim *v, u32 cpu, u64 now,
                                    u64 kd)
{
	u32 zero = 0;
	struct cpu_state *cs = bpf_map_lookup_percpu_elem(&cpus, &zero, cpu);
	v->state = ST_QUEUED;
	v->since = now;
	v->st_kd = kd;
	v->cpu = cpu;
	v->irq0 = cs ? cs->irq_ns : 0;
	if (cs)
		__sync_fetch_and_add(&cs->nq, 1);
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
	// The rq clock is read only when a watched thread is involved or
	// queued here: most switches on a host concern no one watched.
	u64 now = 0;
	u32 ntid = next->pid, ptid = prev->pid;
	u64 h = me->head;
	// The switch away from the last record's thread was not seen (on
	// this 6.18 VM, every switch away from two threads of PID 1, about 1
	// in 1,500, reaches neither tracefs nor BPF): it ran only part of its
	// stretch, so its share of any wait there is unknown, not its own.
	struct rec *last = &me->ring[(h - 1) & (RING - 1)];
	if (h && last->tid != ptid && !last->stale) {
		last->stale = 1;
		me->missed++;
	}

	struct victim *v = watched_victim(ntid);
	if (v) {
		now = rq_now(next);
		u32 cpu = bpf_get_smp_processor_id();
		u64 kd = kdelay(next);
		u64 lq = next->sched_info.last_queued;
		u64 pc = next->sched_info.pcount;
		if (v->state == ST_QUEUED && v->pcount) {
			// Lengths are the kernel's: the wait sched_info_arrive
			// adds to run_delay right after this tracepoint.
			u64 k = kd > v->st_kd ? kd - v->st_kd : 0;
			charge(v, ntid, v->cpu, now, k, me);
			v->acct += k;
			u64 ep = kd > v->ep_kd ? kd - v->ep_kd : 0;
			// Counted when the kernel counts it (pcount grows only
			// for a task it saw queued).
			if (lq) {
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
		}
		resync(v, kd, pc, me);
		v->pcount = pc + !!lq; // after sched_info_arrive
		leave_queue(v);
		v->state = ST_RUNNING;
		v->cpu = cpu;
	}
	v = watched_victim(ptid);
	if (v) {
		// Still running in the kernel's eyes: last_queued is set from
		// this same rq clock right after.
		if (!now)
			now = rq_now(prev);
		u64 kd = kdelay(prev);
		resync(v, kd, prev->sched_info.pcount, me);
		leave_queue(v); // a switch-in it missed
		if (preempt || prev_state == 0) {
			v->ep_kd = kd;
			queue_on(v, bpf_get_smp_processor_id(), now, kd);
		} else {
			v->state = ST_SLEEPING;
		}
	}

	// With nothing watched queued here, a record's start and irq time
	// never matter: a thread queued later charges it from its own start
	// (the walk stops at the first record not after it), so 0 will do.
	struct rec *r = &me->ring[h & (RING - 1)];
	if (me->nq > 0) {
		r->start = now ? now : rq_now(next);
		r->irq_start = me->irq_ns;
	} else {
		r->start = 0;
		r->irq_start = 0;
	}
	r->tid = ntid;
	r->tgid = next->tgid;
	r->kthread = !!(next->flags & PF_KTHREAD);
	r->stale = 0;
	// Direct loads: a tp_btf argument is a trusted BTF pointer, cheaper
	// to read than through the probe-read helper.
	__builtin_memcpy(r->comm, next->comm, sizeof(r->comm));
	me->head = h + 1;
	return 0;
}

static __always_inline int on_wakeup(struct task_struct *p)
{
	struct cpu_state *me = this_cpu();
	if (!me)
		return 0;
	me->events++;
	if (gated())
		return 0;
	u32 tid = p->pid;
	struct victim *v = watched_victim(tid);
	if (!v || v->state == ST_RUNNING || v->state == ST_QUEUED)
		return 0;
	u64 now = rq_now(p);
	u64 kd = kdelay(p);
	resync(v, kd, p->sched_info.pcount, me);
	v->ep_kd = kd;
	queue_on(v, p->thread_info.cpu, now, kd);
	return 0;
}

SEC("tp_btf/sched_wakeup")
int handle_wakeup(u64 *ctx)
{
	return on_wakeup((void *)ctx[0]);
}

SEC("tp_btf/sched_wakeup_new")
int handle_wakeup_new(u64 *ctx)
{
	return on_wakeup((void *)ctx[0]);
}

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
	struct victim *v = watched_victim(tid);
	if (!v || v->state != ST_QUEUED || !v->pcount)
		return 0;
	u64 now = rq_now(p);
	u64 kd = kdelay(p);
	u64 k = kd > v->st_kd ? kd - v->st_kd : 0;
	charge(v, tid, v->cpu, now, k, me);
	v->acct += k;
	resync(v, kd, p->sched_info.pcount, me);
	leave_queue(v);
	queue_on(v, dest, now, kd);
	return 0;
}

// Interrupt time, nested or not, counted once per outermost handler. Only
// entries are gated, so an exit always matches an entry it saw. One program
// each for entry and exit, attached to both irq_handler_* and softirq_*
// (raw_tp: they read no argument, and a tp_btf program fits one
// tracepoint only).
SEC("raw_tp")
int handle_irq_entry(void *ctx)
{
	struct cpu_state *me = this_cpu();
	if (!me || gated())
		return 0;
	// Timed only while a watched thread is queued here: irq time matters
	// only inside a wait (the stretch records and queue_on take irq_ns
	// only then). One woken inside this handler charges its remainder to
	// the culprit, a few µs at most.
	if (me->irq_depth++ == 0)
		me->irq_since = me->nq > 0 ? bpf_ktime_get_ns() : 0;
	return 0;
}

SEC("raw_tp")
int handle_irq_exit(void *ctx)
{
	struct cpu_state *me = this_cpu();
	if (!me || me->irq_depth == 0)
		return 0;
	if (--me->irq_depth == 0 && me->irq_since)
		me->irq_ns += bpf_ktime_get_ns() - me->irq_since;
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
