//! The fleet as `read` would assemble it from a synthetic fleet's step
//! runs (no culprits): shared by the compare and scale examples.

use stealscope_fleet::model::{Fleet, Host, HostKey, NodeMem, Vm};
use stealscope_fleet::want::want;
use stealscope_sim::measured::{summarize, HostRun};
use stealscope_sim::openmetrics::SynthHost;

const GIB: f64 = (1u64 << 30) as f64;

/// A host from its step runs: per VM its demand history, mean run and
/// wait; busy steal split step by step.
pub fn host_of(h: &SynthHost, r: &[HostRun]) -> Host {
    let secs: f64 = r.iter().map(|x| x.secs).sum();
    let per = |g: &dyn Fn(&HostRun) -> f64| r.iter().map(g).collect::<Vec<_>>();
    let vms = h
        .vms
        .iter()
        .enumerate()
        .map(|(i, v)| Vm {
            name: v.vm.name.clone(),
            uuid: v.uuid.clone(),
            vcpus: v.vm.vcpus,
            memory_bytes: Some((v.vm.mem_gib * GIB) as u64),
            demand: want(
                &per(&|x| x.vm_run[i] / x.secs),
                &per(&|x| (x.vm_run[i] + x.vm_wait[i]) / x.secs),
                v.vm.vcpus,
            ),
            wait: r.iter().map(|x| x.vm_wait[i]).sum::<f64>() / secs,
            run: r.iter().map(|x| x.vm_run[i]).sum::<f64>() / secs,
        })
        .collect();
    let used = h.vms.iter().map(|v| v.vm.mem_gib).sum::<f64>() / h.nodes as f64;
    let free = ((h.mem_gib_per_node - used).max(0.0) * GIB) as u64;
    Host {
        key: HostKey {
            instance: h.instance(),
            job: "stealscope".into(),
        },
        name: h.name.clone(),
        cpus: h.cpus,
        nodes: (0..h.nodes)
            .map(|node| NodeMem {
                node,
                free_bytes: free,
            })
            .collect(),
        vms,
        busy: summarize(r).busy_steal,
        culprits: Vec::new(),
    }
}

/// A fleet of `hosts` read over `steps` steps of `step_s`, none unseen.
pub fn fleet(hosts: Vec<Host>, step_s: f64, steps: usize) -> Fleet {
    Fleet {
        window_s: step_s * steps as f64,
        step_s,
        hosts,
        unseen: Vec::new(),
    }
}
