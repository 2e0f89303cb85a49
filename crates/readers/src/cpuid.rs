//! CPUID, read with the instruction itself (no /proc/cpuinfo, no `cpuid`
//! module): the hypervisor signature, the KVM paravirtual feature bits and
//! hints, and the few bits that say whether APERF/MPERF and a PMU exist.
//!
//! The live capture stores the raw registers ([`CpuidDump`], `cpuid.json` in
//! a snapshot) and [`decode`] turns them into [`CpuidFacts`], so a snapshot
//! analysed offline decodes exactly what the machine returned.

use serde::{Deserialize, Serialize};

/// First hypervisor leaf; the kernel scans bases up to 0x4000FF00 in steps
/// of 0x100 (`hypervisor_cpuid_base`, arch/x86/include/asm/cpuid/api.h),
/// because another signature (Hyper-V enlightenments) may sit at 0x40000000
/// and move KVM's to 0x40000100.
pub const HYPERVISOR_BASE_FIRST: u32 = 0x4000_0000;
pub const HYPERVISOR_BASE_LAST: u32 = 0x4000_FF00;
pub const HYPERVISOR_BASE_STEP: u32 = 0x100;

/// Signatures in EBX:ECX:EDX of a hypervisor base leaf. Firecracker, QEMU/KVM
/// and Cloud Hypervisor pass KVM's own leaf through, so they read as KVM
/// (Firecracker's CPUID normalization leaves 0x40000000 alone).
pub const SIGNATURES: &[(&[u8; 12], &str)] = &[
    (b"KVMKVMKVM\0\0\0", "KVM"),
    (b"XenVMMXenVMM", "Xen"),
    (b"Microsoft Hv", "Hyper-V"),
    (b"VMwareVMware", "VMware"),
    (b"TCGTCGTCGTCG", "QEMU TCG"),
    (b"VBoxVBoxVBox", "VirtualBox"),
    (b"bhyve bhyve ", "bhyve"),
];

/// KVM_CPUID_FEATURES (base + 1) EAX bits, names and numbers from the
/// kernel's arch/x86/include/uapi/asm/kvm_para.h.
pub const KVM_FEATURES: &[(u32, &str)] = &[
    (0, "KVM_FEATURE_CLOCKSOURCE"),
    (1, "KVM_FEATURE_NOP_IO_DELAY"),
    (2, "KVM_FEATURE_MMU_OP"),
    (3, "KVM_FEATURE_CLOCKSOURCE2"),
    (4, "KVM_FEATURE_ASYNC_PF"),
    (5, "KVM_FEATURE_STEAL_TIME"),
    (6, "KVM_FEATURE_PV_EOI"),
    (7, "KVM_FEATURE_PV_UNHALT"),
    (9, "KVM_FEATURE_PV_TLB_FLUSH"),
    (10, "KVM_FEATURE_ASYNC_PF_VMEXIT"),
    (11, "KVM_FEATURE_PV_SEND_IPI"),
    (12, "KVM_FEATURE_POLL_CONTROL"),
    (13, "KVM_FEATURE_PV_SCHED_YIELD"),
    (14, "KVM_FEATURE_ASYNC_PF_INT"),
    (15, "KVM_FEATURE_MSI_EXT_DEST_ID"),
    (16, "KVM_FEATURE_HC_MAP_GPA_RANGE"),
    (17, "KVM_FEATURE_MIGRATION_CONTROL"),
    (24, "KVM_FEATURE_CLOCKSOURCE_STABLE_BIT"),
];
/// KVM_CPUID_FEATURES EDX: performance hints.
pub const KVM_HINTS: &[(u32, &str)] = &[(0, "KVM_HINTS_REALTIME")];

pub const KVM_FEATURE_POLL_CONTROL: u32 = 12;
pub const KVM_HINTS_REALTIME: u32 = 0;

/// One CPUID result as the instruction returned it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Leaf {
    pub leaf: u32,
    #[serde(default)]
    pub subleaf: u32,
    pub eax: u32,
    pub ebx: u32,
    pub ecx: u32,
    pub edx: u32,
}

/// The raw registers a capture read (`cpuid.json` in a snapshot).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CpuidDump {
    /// `std::env::consts::ARCH` of the machine that captured it.
    pub arch: String,
    pub leaves: Vec<Leaf>,
}

impl CpuidDump {
    pub fn get(&self, leaf: u32) -> Option<&Leaf> {
        self.leaves
            .iter()
            .find(|l| l.leaf == leaf && l.subleaf == 0)
    }
}

/// Executes CPUID on the CPU this thread runs on. Every CPU of a VM gets the
/// same hypervisor leaves, so one CPU speaks for all.
#[cfg(target_arch = "x86_64")]
fn cpuid(leaf: u32) -> Leaf {
    // SAFETY: CPUID exists on every x86_64 CPU and has no side effects
    // (the intrinsic is safe from Rust 1.87; unsafe for older toolchains).
    #[allow(unused_unsafe)]
    let r = unsafe { core::arch::x86_64::__cpuid_count(leaf, 0) };
    Leaf {
        leaf,
        subleaf: 0,
        eax: r.eax,
        ebx: r.ebx,
        ecx: r.ecx,
        edx: r.edx,
    }
}

fn signature(l: &Leaf) -> [u8; 12] {
    let mut s = [0u8; 12];
    s[..4].copy_from_slice(&l.ebx.to_le_bytes());
    s[4..8].copy_from_slice(&l.ecx.to_le_bytes());
    s[8..].copy_from_slice(&l.edx.to_le_bytes());
    s
}

/// A base leaf holds a signature when its 12 bytes are printable ASCII padded
/// with NULs (CPUs answer out-of-range leaves with other leaves' data).
fn is_signature(sig: &[u8; 12]) -> bool {
    let text_len = sig.iter().position(|b| *b == 0).unwrap_or(12);
    text_len > 0
        && sig[..text_len]
            .iter()
            .all(|b| b.is_ascii_graphic() || *b == b' ')
        && sig[text_len..].iter().all(|b| *b == 0)
}

/// Reads the leaves [`decode`] needs. On other architectures the dump is
/// empty and names the architecture.
pub fn read_live() -> CpuidDump {
    #[cfg(target_arch = "x86_64")]
    {
        let mut leaves = Vec::new();
        let basic = cpuid(0);
        leaves.push(basic);
        for leaf in [1u32, 6, 0xA] {
            if leaf <= basic.eax {
                leaves.push(cpuid(leaf));
            }
        }
        let ext = cpuid(0x8000_0000);
        leaves.push(ext);
        if ext.eax >= 0x8000_0001 {
            leaves.push(cpuid(0x8000_0001));
        }
        // Hypervisor leaves answer only when CPUID.1:ECX[31] says one is present.
        // Each CPUID exits to the hypervisor (~3 µs here), so the scan ends
        // at the first base without a signature after one with: the bases a
        // hypervisor fills are contiguous from the first (Hyper-V's
        // enlightenments at 0x40000000, its own at 0x40000100). Where none
        // is at the first, every base is tried, as the kernel does.
        if leaves.iter().any(|l| l.leaf == 1 && l.ecx & (1 << 31) != 0) {
            let mut base = HYPERVISOR_BASE_FIRST;
            while base <= HYPERVISOR_BASE_LAST {
                let l = cpuid(base);
                if is_signature(&signature(&l)) {
                    leaves.push(l);
                    leaves.push(cpuid(base + 1));
                } else if leaves
                    .iter()
                    .any(|l| l.leaf >= HYPERVISOR_BASE_FIRST && l.leaf < 0x8000_0000)
                {
                    break;
                }
                base += HYPERVISOR_BASE_STEP;
            }
        }
        CpuidDump {
            arch: std::env::consts::ARCH.to_string(),
            leaves,
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        CpuidDump {
            arch: std::env::consts::ARCH.to_string(),
            leaves: Vec::new(),
        }
    }
}

/// One hypervisor signature found in the 0x40000000 range.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct HypervisorLeaf {
    /// Base leaf, e.g. "0x40000000".
    pub base: String,
    /// Text of EBX:ECX:EDX without the NUL padding.
    pub signature: String,
    /// Known name ("KVM", "Hyper-V", ...), None for an unknown signature.
    pub name: Option<String>,
    /// Highest leaf of this range (EAX of the base).
    pub max_leaf: String,
}

/// KVM's paravirtual features as advertised by the host.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct KvmCpuid {
    pub base: String,
    /// EAX and EDX of base + 1, in hex.
    pub features_eax: String,
    pub hints_edx: String,
    /// Names of the set bits (kvm_para.h); unknown bits as "bit N".
    pub features: Vec<String>,
    pub hints: Vec<String>,
    pub realtime_hint: bool,
    pub poll_control: bool,
    pub steal_time: bool,
}

/// What the CPUID dump says, decoded.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct CpuidFacts {
    pub arch: String,
    /// CPUID.0 vendor ("GenuineIntel", "AuthenticAMD").
    pub vendor: Option<String>,
    /// CPUID.1:ECX[31]: some hypervisor is present.
    pub hypervisor_bit: Option<bool>,
    pub hypervisors: Vec<HypervisorLeaf>,
    pub kvm: Option<KvmCpuid>,
    /// CPUID.6:ECX[0]: APERF/MPERF exist.
    pub aperfmperf: Option<bool>,
    /// Intel architectural PMU version (CPUID.0xA:EAX[7:0]); 0 = none.
    pub arch_perfmon_version: Option<u32>,
    /// AMD core performance counter extensions (CPUID.0x80000001:ECX[23]).
    pub amd_perfctr_core: Option<bool>,
}

fn hex(v: u32) -> String {
    format!("{v:#x}")
}

fn names(bits: u32, table: &[(u32, &str)]) -> Vec<String> {
    (0..32)
        .filter(|b| bits & (1 << b) != 0)
        .map(|b| {
            table
                .iter()
                .find(|(n, _)| *n == b)
                .map_or_else(|| format!("bit {b}"), |(_, name)| name.to_string())
        })
        .collect()
}

pub fn decode(d: &CpuidDump) -> CpuidFacts {
    let mut f = CpuidFacts {
        arch: d.arch.clone(),
        ..Default::default()
    };
    if let Some(l) = d.get(0) {
        let mut v = Vec::with_capacity(12);
        v.extend_from_slice(&l.ebx.to_le_bytes());
        v.extend_from_slice(&l.edx.to_le_bytes());
        v.extend_from_slice(&l.ecx.to_le_bytes());
        f.vendor = Some(
            String::from_utf8_lossy(&v)
                .trim_end_matches('\0')
                .to_string(),
        );
    }
    f.hypervisor_bit = d.get(1).map(|l| l.ecx & (1 << 31) != 0);
    f.aperfmperf = d.get(6).map(|l| l.ecx & 1 != 0);
    f.arch_perfmon_version = d.get(0xA).map(|l| l.eax & 0xff);
    f.amd_perfctr_core = d.get(0x8000_0001).map(|l| l.ecx & (1 << 23) != 0);
    let mut base = HYPERVISOR_BASE_FIRST;
    while base <= HYPERVISOR_BASE_LAST {
        if let Some(l) = d.get(base) {
            let sig = signature(l);
            if is_signature(&sig) {
                let name = SIGNATURES
                    .iter()
                    .find(|(s, _)| **s == sig)
                    .map(|(_, n)| n.to_string());
                let text = String::from_utf8_lossy(&sig)
                    .trim_end_matches('\0')
                    .to_string();
                if name.as_deref() == Some("KVM") && f.kvm.is_none() {
                    // As the kernel's kvm_cpuid_base(): the first KVM signature wins.
                    if let Some(feat) = d.get(base + 1) {
                        f.kvm = Some(KvmCpuid {
                            base: hex(base),
                            features_eax: hex(feat.eax),
                            hints_edx: hex(feat.edx),
                            features: names(feat.eax, KVM_FEATURES),
                            hints: names(feat.edx, KVM_HINTS),
                            realtime_hint: feat.edx & (1 << KVM_HINTS_REALTIME) != 0,
                            poll_control: feat.eax & (1 << KVM_FEATURE_POLL_CONTROL) != 0,
                            steal_time: feat.eax & (1 << 5) != 0,
                        });
                    }
                }
                f.hypervisors.push(HypervisorLeaf {
                    base: hex(base),
                    signature: text,
                    name,
                    max_leaf: hex(l.eax),
                });
            }
        }
        base += HYPERVISOR_BASE_STEP;
    }
    f
}

#[cfg(test)]
mod tests {
    use super::*;

    fn leaf(leaf: u32, eax: u32, ebx: u32, ecx: u32, edx: u32) -> Leaf {
        Leaf {
            leaf,
            subleaf: 0,
            eax,
            ebx,
            ecx,
            edx,
        }
    }

    fn regs(sig: &[u8; 12]) -> (u32, u32, u32) {
        let w = |i: usize| u32::from_le_bytes(sig[i..i + 4].try_into().unwrap());
        (w(0), w(4), w(8))
    }

    #[test]
    fn kvm_behind_hyperv_enlightenments_is_found_at_its_own_base() {
        let (hb, hc, hd) = regs(b"Microsoft Hv");
        let (kb, kc, kd) = regs(b"KVMKVMKVM\0\0\0");
        let poll_and_steal = (1 << 12) | (1 << 5) | (1 << 14);
        let d = CpuidDump {
            arch: "x86_64".into(),
            leaves: vec![
                leaf(1, 0, 0, 1 << 31, 0),
                leaf(0x4000_0000, 0x4000_000b, hb, hc, hd),
                leaf(0x4000_0001, 0x31237648, 0, 0, 0),
                leaf(0x4000_0100, 0x4000_0101, kb, kc, kd),
                leaf(0x4000_0101, poll_and_steal, 0, 0, 1),
            ],
        };
        let f = decode(&d);
        assert_eq!(f.hypervisor_bit, Some(true));
        let names: Vec<_> = f.hypervisors.iter().map(|h| h.name.clone()).collect();
        assert_eq!(
            names,
            vec![Some("Hyper-V".to_string()), Some("KVM".to_string())]
        );
        let kvm = f.kvm.unwrap();
        assert_eq!(kvm.base, "0x40000100");
        assert!(kvm.poll_control && kvm.realtime_hint && kvm.steal_time);
        assert_eq!(
            kvm.features,
            vec![
                "KVM_FEATURE_STEAL_TIME",
                "KVM_FEATURE_POLL_CONTROL",
                "KVM_FEATURE_ASYNC_PF_INT"
            ]
        );
        assert_eq!(kvm.hints, vec!["KVM_HINTS_REALTIME"]);
    }

    #[test]
    fn unknown_bits_and_signatures_are_kept_by_number_and_text() {
        let (b, c, d) = regs(b"ACRNACRNACRN");
        let (kb, kc, kd) = regs(b"KVMKVMKVM\0\0\0");
        let dump = CpuidDump {
            arch: "x86_64".into(),
            leaves: vec![
                leaf(0x4000_0000, 0x4000_0001, b, c, d),
                leaf(0x4000_0200, 0x4000_0201, kb, kc, kd),
                leaf(0x4000_0201, 1 << 30 | 1 << 8, 0, 0, 1 << 3),
            ],
        };
        let f = decode(&dump);
        assert_eq!(f.hypervisors[0].signature, "ACRNACRNACRN");
        assert_eq!(f.hypervisors[0].name, None);
        let kvm = f.kvm.unwrap();
        assert_eq!(kvm.features, vec!["bit 8", "bit 30"]);
        assert_eq!(kvm.hints, vec!["bit 3"]);
        assert!(!kvm.realtime_hint && !kvm.poll_control);
        // No basic leaves in the dump: those facts are unknown, not false.
        assert_eq!(f.hypervisor_bit, None);
        assert_eq!(f.aperfmperf, None);
    }

    #[test]
    fn garbage_in_a_base_leaf_is_not_a_signature() {
        let d = CpuidDump {
            arch: "x86_64".into(),
            leaves: vec![leaf(0x4000_0000, 7, 0xffff_ffff, 0x0102_0304, 0)],
        };
        assert!(decode(&d).hypervisors.is_empty());
        assert!(!is_signature(&[0; 12]));
    }

    #[test]
    fn vendor_is_ebx_edx_ecx() {
        let (b, c, d) = regs(b"AuthenticAMD");
        // CPUID.0 orders the vendor EBX, EDX, ECX.
        let f = decode(&CpuidDump {
            arch: "x86_64".into(),
            leaves: vec![leaf(0, 0x10, b, d, c)],
        });
        assert_eq!(f.vendor.as_deref(), Some("AuthenticAMD"));
    }

    #[cfg(target_arch = "x86_64")]
    #[test]
    fn live_dump_decodes_the_vendor_and_matches_proc_cpuinfo_hypervisor_flag() {
        let f = decode(&read_live());
        let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap();
        let vendor = cpuinfo
            .lines()
            .find_map(|l| l.strip_prefix("vendor_id"))
            .map(|v| v.trim_start_matches([' ', '\t', ':']).trim().to_string());
        assert_eq!(f.vendor, vendor);
        let flags = cpuinfo
            .lines()
            .find_map(|l| l.strip_prefix("flags"))
            .unwrap_or("");
        let has_hv = flags.split_whitespace().any(|w| w == "hypervisor");
        assert_eq!(f.hypervisor_bit, Some(has_hv));
        assert_eq!(!f.hypervisors.is_empty(), has_hv);
        // /proc/cpuinfo's aperfmperf flag is CPUID.6:ECX[0].
        let aperf = flags.split_whitespace().any(|w| w == "aperfmperf");
        assert_eq!(f.aperfmperf.unwrap_or(false), aperf);
    }

    /// The scan that stops after the filled bases finds every signature
    /// that trying all 256 bases finds.
    #[cfg(target_arch = "x86_64")]
    #[test]
    fn the_short_scan_finds_what_the_full_one_does() {
        let full: Vec<u32> = (0..=255u32)
            .map(|i| HYPERVISOR_BASE_FIRST + i * HYPERVISOR_BASE_STEP)
            .filter(|&b| is_signature(&signature(&cpuid(b))))
            .collect();
        let short: Vec<u32> = read_live()
            .leaves
            .iter()
            .map(|l| l.leaf)
            .filter(|&l| (HYPERVISOR_BASE_FIRST..0x8000_0000).contains(&l) && l & 0xFF == 0)
            .collect();
        assert_eq!(short, full);
    }

    proptest::proptest! {
        #[test]
        fn decode_never_panics(raw in proptest::collection::vec((0u32..8, proptest::num::u32::ANY, proptest::num::u32::ANY, proptest::num::u32::ANY, proptest::num::u32::ANY), 0..20)) {
            let leaves = raw.into_iter().map(|(i, a, b, c, d)| {
                let l = [0, 1, 6, 0xA, 0x8000_0001, 0x4000_0000, 0x4000_0001, 0x4000_0100][i as usize];
                leaf(l, a, b, c, d)
            }).collect();
            let _ = decode(&CpuidDump { arch: "x86_64".into(), leaves });
        }
    }
}
