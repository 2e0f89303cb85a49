use super::super::testing::*;
use super::*;

fn cols(r: &str) -> Vec<String> {
    r.split_whitespace().map(String::from).collect()
}

#[test]
fn rows_follow_the_sort_order() {
    let vms = [
        vm("a", 1, Some(5.0), Some(90.0)),
        vm("b", 4, Some(30.0), Some(10.0)),
        vm("c", 2, None, None),
    ];
    let names = |by| -> Vec<&str> { sorted(&vms, by).iter().map(|v| v.vm.as_str()).collect() };
    assert_eq!(names(VmSort::Wait), ["b", "a", "c"]);
    assert_eq!(names(VmSort::Run), ["a", "b", "c"]);
    assert_eq!(names(VmSort::Name), ["a", "b", "c"]);
    assert_eq!(names(VmSort::Vcpus), ["b", "c", "a"]);
    let mut s = VmSort::Wait;
    for _ in 0..4 {
        s = s.next();
    }
    assert_eq!(s, VmSort::Wait);
}

#[test]
fn vm_and_vcpu_rows_with_placement_and_culprits() {
    let mut web = vm("web", 2, Some(12.5), Some(40.0));
    web.culprits = Some(vec![
        wait_by(Kind::HostProcess, "hog", Some(42), 0.8),
        wait_by(Kind::Vcpu, "db", None, 0.195),
        wait_by(Kind::Irq, "irq", None, 0.005),
    ]);
    web.vcpus[1].culprits = Some(vec![wait_by(Kind::HostKthread, "kworker", None, 1.0)]);
    let mut db = vm("db", 1, Some(1.0), None);
    // A vCPU that hardly waited names nobody.
    db.vcpus[0].wait_pct = Some(0.2);
    db.vcpus[0].culprits = Some(vec![wait_by(Kind::Vmm, "db", None, 1.0)]);
    let vms = [web, db];
    let rows = screen(80, 7, |f| {
        render(f, f.area(), &vms, VmSort::Wait, "culprits: tracefs route")
    });
    assert_eq!(
        rows[0].trim_end(),
        "VMs 2 running, by wait (s: sort)  culprits: tracefs route"
    );
    assert_eq!(
        cols(&rows[1]),
        [
            "VM", "/", "vCPU", "tid", "CPU", "affinity", "wait", "run", "who", "ran", "while",
            "it", "waited"
        ]
    );
    assert_eq!(
        cols(&rows[2]),
        ["web", "12.5%", "40.0%", "process", "hog[42]", "80%,", "vCPU", "db", "20%"]
    );
    assert_eq!(
        cols(&rows[3]),
        ["vCPU", "0", "100", "0", "0-1", "12.5%", "40.0%", "n/a"]
    );
    assert_eq!(
        cols(&rows[4]),
        ["vCPU", "1", "101", "1", "0-1", "12.5%", "40.0%", "kthread", "kworker", "100%"]
    );
    assert_eq!(cols(&rows[5]), ["db", "1.0%", "n/a", "n/a"]);
    assert_eq!(cols(&rows[6])[5..], ["0.2%", "n/a", "-"]);
    // Narrow: placement columns go, the culprits stay.
    let rows = screen(40, 4, |f| render(f, f.area(), &vms, VmSort::Wait, ""));
    assert_eq!(cols(&rows[1])[..4], ["VM", "/", "vCPU", "wait"]);
    assert!(rows[2].contains("hog 80%"), "{rows:?}");
}

#[test]
fn short_tables_keep_every_vm_and_drop_vcpu_rows() {
    let vms = [vm("a", 3, Some(9.0), None), vm("b", 1, Some(1.0), None)];
    // Two rows for the table body: the VMs only.
    let rows = screen(80, 4, |f| render(f, f.area(), &vms, VmSort::Wait, ""));
    assert!(
        rows[2].starts_with("a ") && rows[3].starts_with("b "),
        "{rows:?}"
    );
    // Four: b's vCPU fits after a's three do not.
    let rows = screen(80, 6, |f| render(f, f.area(), &vms, VmSort::Wait, ""));
    let firsts: Vec<String> = rows[2..]
        .iter()
        .map(|r| cols(r).first().cloned().unwrap_or_default())
        .collect();
    assert_eq!(firsts, ["a", "b", "vCPU", ""], "{rows:?}");
}

#[test]
fn culprit_text_fits_its_width() {
    let c = vec![
        wait_by(Kind::HostProcess, "hog", Some(42), 0.6),
        wait_by(Kind::Vmm, "web", None, 0.3),
        wait_by(Kind::Unknown, "idle", None, 0.1),
    ];
    assert_eq!(
        culprits_text(Some(&c), 80),
        "process hog[42] 60%, VMM web 30%, idle (wake-up) 10%"
    );
    // Too narrow for two full labels: names alone.
    assert_eq!(culprits_text(Some(&c), 24), "hog 60%, VMM web 30%");
    assert_eq!(culprits_text(Some(&c), 8), "hog 60%");
    assert_eq!(culprits_text(Some(&c), 5), "hog 6");
    assert_eq!(culprits_text(Some(&[]), 8), "-");
    // Two processes of one name read as one when names stand alone.
    let two = vec![
        wait_by(Kind::HostProcess, "rustc", Some(1), 0.3),
        wait_by(Kind::Vmm, "web", None, 0.4),
        wait_by(Kind::HostProcess, "rustc", Some(2), 0.2),
    ];
    assert_eq!(culprits_text(Some(&two), 24), "rustc 50%, VMM web 40%");
    assert_eq!(culprits_text(None, 8), "n/a");
}

#[test]
fn a_long_reason_is_cut_and_points_to_the_help() {
    let vms = [vm("web", 1, None, None)];
    let why = "culprits n/a: no scheduler events: tracefs: permission denied";
    let rows = screen(60, 4, |f| render(f, f.area(), &vms, VmSort::Wait, why));
    assert!(rows[0].trim_end().ends_with("… ? why"), "{rows:?}");
    assert!(rows[0].trim_end().chars().count() <= 60, "{rows:?}");
    assert!(rows[0].contains("culprits n/a: no…"), "{rows:?}");
}
