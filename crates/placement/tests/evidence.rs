//! Plan reasons cite who stole a VM's time when attribution ran, and the
//! plan is otherwise the same: attribution is evidence, not input.

use stealscope_placement::synthetic::{host, vm};
use stealscope_placement::{plan, Config, CulpritEvidence, History, WaitEvidence};
use stealscope_who::Kind;

fn culprit(kind: Kind, name: &str, pid: Option<u32>, share: f64) -> CulpritEvidence {
    CulpritEvidence {
        kind,
        name: name.into(),
        pid,
        share,
    }
}

#[test]
fn reasons_cite_the_culprits_and_nothing_else_changes() {
    let mut h = host(1, 4, false, 64 << 30, 0.5);
    h.vms = vec![vm(100, 2, 0.9, 1 << 30, 0, &[0, 1, 2, 3])];
    let cfg = Config::default();
    let without = plan(&h, &cfg, &History::default(), 0.0);
    h.vms[0].wait = Some(WaitEvidence {
        wait_share: 0.48,
        culprits: vec![
            culprit(Kind::HostProcess, "burn", Some(812), 0.97),
            culprit(Kind::HostKthread, "kworker", None, 0.02),
        ],
    });
    let with = plan(&h, &cfg, &History::default(), 0.0);
    let (a, b) = (&without.vms[0], &with.vms[0]);
    assert_eq!(a.vcpus, b.vcpus, "the same placement");
    assert_eq!(b.reasons.len(), a.reasons.len() + 1);
    assert_eq!(b.reasons[..a.reasons.len()], a.reasons[..]);
    assert_eq!(
        b.reasons.last().unwrap(),
        "its vCPUs waited 48% of the time, 97% of it behind host process `burn` (pid 812)"
    );
}

#[test]
fn small_waits_and_scattered_culprits_are_not_cited() {
    let low = WaitEvidence {
        wait_share: 0.02,
        culprits: vec![culprit(Kind::Vcpu, "vmB", Some(7), 1.0)],
    };
    assert_eq!(low.reason(), None);
    let scattered = WaitEvidence {
        wait_share: 0.3,
        culprits: vec![culprit(Kind::Irq, "irq", None, 0.05)],
    };
    assert_eq!(scattered.reason(), None);
    let two = WaitEvidence {
        wait_share: 0.3,
        culprits: vec![
            culprit(Kind::Vcpu, "vmB", Some(7), 0.6),
            culprit(Kind::HostKthread, "kworker", None, 0.3),
        ],
    };
    assert_eq!(
        two.reason().unwrap(),
        "its vCPUs waited 30% of the time, 60% of it behind VM vmB's vCPUs, 30% of it behind kernel threads `kworker`"
    );
}
