//! Whether this guest has a paravirtual steal clock at all, asked before
//! the exact steal collector loads: a kernel built with the steal fields
//! (checked from BTF in [`crate::guest_steal`]) reads zero forever under a
//! hypervisor that publishes no steal clock, and the collector would report
//! 0 ns of steal as if it had measured none. Read from CPUID (the
//! hypervisor's signature and KVM's feature bits) and the kernel command
//! line, the two places the kernel itself decides it
//! (arch/x86/kernel/kvm.c `kvm_guest_init`, kernel/sched/core.c
//! `paravirt_steal_rq_enabled`).

use stealscope_readers::cpuid::CpuidFacts;

/// Hypervisors whose Linux guests register a steal clock
/// (`paravirt_set_steal_clock`): KVM with KVM_FEATURE_STEAL_TIME, Xen
/// (runstate area), VMware (its steal clock when the host offers it: the
/// guest cannot tell from CPUID, so it is given the benefit).
const STEAL_CLOCK_BY_SIGNATURE: &[&str] = &["Xen", "VMware"];

/// Why this guest's run queues never see steal, in one line; None when a
/// steal clock is there (or CPUID could not be read: not x86).
pub fn steal_clock_missing(cpuid: &CpuidFacts, cmdline: &str) -> Option<String> {
    if cmdline.split_whitespace().any(|w| w == "no-steal-acc") {
        return Some(
            "booted with no-steal-acc: steal is not taken out of run-queue time \
             (rq.prev_steal_time_rq stays 0); /proc/stat still counts it"
                .into(),
        );
    }
    // Not x86 (CPUID unread): nothing to say.
    cpuid.vendor.as_ref()?;
    let names: Vec<&str> = cpuid
        .hypervisors
        .iter()
        .map(|h| h.name.as_deref().unwrap_or(h.signature.as_str()))
        .collect();
    // KVM's leaf can sit above Hyper-V's (enlightenments): it decides.
    if let Some(kvm) = &cpuid.kvm {
        return (!kvm.steal_time).then(|| {
            "KVM without KVM_FEATURE_STEAL_TIME: the host publishes no steal clock, \
             steal reads 0 on every route"
                .into()
        });
    }
    if names.iter().any(|n| STEAL_CLOCK_BY_SIGNATURE.contains(n)) {
        return None;
    }
    Some(match names.first() {
        Some(name) => format!(
            "{name} publishes no steal clock a Linux guest reads: steal reads 0 on every route"
        ),
        None if cpuid.hypervisor_bit == Some(true) => {
            "a hypervisor without a signature leaf: no steal clock, steal reads 0 on every route"
                .into()
        }
        None => "not a virtual machine (CPUID shows no hypervisor): there is no steal".into(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use stealscope_readers::cpuid::{decode, read_live, HypervisorLeaf, KvmCpuid};

    fn facts(hv: &[&str], kvm_steal: Option<bool>) -> CpuidFacts {
        CpuidFacts {
            vendor: Some("AuthenticAMD".into()),
            hypervisor_bit: Some(!hv.is_empty()),
            hypervisors: hv
                .iter()
                .map(|n| HypervisorLeaf {
                    base: "0x40000000".into(),
                    signature: n.to_string(),
                    name: Some(n.to_string()),
                    max_leaf: "0x40000001".into(),
                })
                .collect(),
            kvm: kvm_steal.map(|steal_time| KvmCpuid {
                base: "0x40000000".into(),
                features_eax: "0x0".into(),
                hints_edx: "0x0".into(),
                features: Vec::new(),
                hints: Vec::new(),
                realtime_hint: false,
                poll_control: false,
                steal_time,
            }),
            ..Default::default()
        }
    }

    #[test]
    fn each_hypervisor_says_whether_it_has_a_steal_clock() {
        assert_eq!(steal_clock_missing(&facts(&["KVM"], Some(true)), ""), None);
        let no_st = steal_clock_missing(&facts(&["KVM"], Some(false)), "").unwrap();
        assert!(no_st.contains("KVM_FEATURE_STEAL_TIME"), "{no_st}");
        // Hyper-V enlightenments on KVM: KVM's bits decide.
        let both = facts(&["Hyper-V", "KVM"], Some(true));
        assert_eq!(steal_clock_missing(&both, ""), None);
        assert_eq!(steal_clock_missing(&facts(&["Xen"], None), ""), None);
        let hv = steal_clock_missing(&facts(&["Hyper-V"], None), "").unwrap();
        assert!(hv.starts_with("Hyper-V publishes no steal clock"), "{hv}");
        let metal = steal_clock_missing(&facts(&[], None), "").unwrap();
        assert!(metal.contains("not a virtual machine"), "{metal}");
        let off = steal_clock_missing(&facts(&["KVM"], Some(true)), "ro no-steal-acc quiet");
        assert!(off.unwrap().contains("no-steal-acc"));
        // Not x86: CPUID unread, nothing said.
        assert_eq!(steal_clock_missing(&CpuidFacts::default(), ""), None);
    }

    /// On the live machine: a guest whose /proc/stat has counted steal has
    /// a steal clock, whatever CPUID is decoded to.
    #[test]
    fn a_guest_that_counted_steal_has_a_steal_clock() {
        let steal: u64 = stealscope_testkit::proc_stat::steal_now().values().sum();
        let cmdline = std::fs::read_to_string("/proc/cmdline").unwrap();
        let said = steal_clock_missing(&decode(&read_live()), &cmdline);
        if steal > 0 {
            assert_eq!(said, None, "steal {steal} ticks since boot");
        } else {
            eprintln!("no steal counted since boot here; CPUID says {said:?}");
        }
    }
}
