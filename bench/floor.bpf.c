// Build: clang-14 -target bpf -mcpu=v3 -O2 -c bench/floor.bpf.c -o F.o
// and attach with crates/sched/examples/floor.rs.
// Empty programs on the collector's hooks: the floor that the kernel's
// bpf_stats accounting (two sched_clock reads around each run) and the
// dispatch cost put under any program here.
#define SEC(name) __attribute__((section(name), used))
SEC("tp_btf/sched_switch") int floor_switch(void *ctx) { return 0; }
SEC("tp_btf/sched_wakeup") int floor_wakeup(void *ctx) { return 0; }
SEC("tp_btf/sched_wakeup_new") int floor_wakeup_new(void *ctx) { return 0; }
SEC("tp_btf/sched_migrate_task") int floor_migrate(void *ctx) { return 0; }
SEC("tp_btf/hrtimer_expire_exit") int floor_hrtimer(void *ctx) { return 0; }
SEC("raw_tp/irq_handler_entry") int floor_hardirq_entry(void *ctx) { return 0; }
SEC("raw_tp/softirq_entry") int floor_softirq_entry(void *ctx) { return 0; }
char LICENSE[] SEC("license") = "GPL";
