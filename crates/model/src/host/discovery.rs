//! Which processes are VMs and which of their threads are vCPUs. Pure
//! functions over names, command lines and cgroup paths, so they are tested
//! without a host. Identity is pid + cgroup + name, never a name alone.

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum VmKind {
    QemuKvm,
    QemuTcg,
    /// QEMU whose vCPU threads are not named (no debug-threads=on) and no
    /// other source said which accelerator runs them.
    Qemu,
    Firecracker,
}

impl VmKind {
    pub fn as_str(self) -> &'static str {
        match self {
            VmKind::QemuKvm => "qemu-kvm",
            VmKind::QemuTcg => "qemu-tcg",
            VmKind::Qemu => "qemu",
            VmKind::Firecracker => "firecracker",
        }
    }
}

/// Cheap first filter on a process name: only these get their command
/// line read by [`vmm_of`].
pub fn vmm_comm(comm: &str) -> bool {
    comm.starts_with("qemu") || comm == "firecracker" || comm == "kvm"
}

/// What a process's name and command line say it is. An empty command
/// line is a VMM that has exited and not been reaped yet (a zombie keeps
/// its comm): no VM runs there. An init that reaps orphans late (this
/// test machine's, every ~2 s) leaves a stopped daemonized QEMU so.
pub fn vmm_of(comm: &str, cmdline: &[String]) -> Option<VmKind> {
    if cmdline.is_empty() {
        return None;
    }
    let exe = cmdline
        .first()
        .map(|a| a.rsplit('/').next().unwrap_or(a))
        .unwrap_or("");
    // Only the system emulators run VMs: qemu-img, qemu-nbd, qemu-pr-helper
    // and qemu-ga also start with "qemu" (comm is cut at 15 characters).
    if comm.starts_with("qemu-system")
        || comm == "qemu-kvm"
        || exe.starts_with("qemu-system")
        || exe == "qemu-kvm"
        || (exe == "kvm" && cmdline.len() > 1)
    {
        return Some(VmKind::Qemu);
    }
    if comm == "firecracker" || exe == "firecracker" {
        return Some(VmKind::Firecracker);
    }
    None
}

/// Role of a thread of a VMM process, from its name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "role", content = "index", rename_all = "snake_case")]
pub enum ThreadRole {
    Vcpu(u32),
    /// QEMU iothread ("IO <id>"), vhost worker, or similar I/O helper.
    Io,
    /// Main loop, RCU, workers, and anything else the emulator runs.
    Emulator,
}

/// "CPU 3/KVM" -> (3, Some("KVM")); "fc_vcpu 3" -> (3, None).
pub fn thread_role(comm: &str) -> (ThreadRole, Option<&str>) {
    if let Some(rest) = comm.strip_prefix("CPU ") {
        if let Some((n, accel)) = rest.split_once('/') {
            if let Ok(i) = n.parse() {
                return (ThreadRole::Vcpu(i), Some(accel));
            }
        }
    }
    if let Some(n) = comm.strip_prefix("fc_vcpu ") {
        if let Ok(i) = n.trim().parse() {
            return (ThreadRole::Vcpu(i), None);
        }
    }
    if comm.starts_with("IO ") || comm.starts_with("vhost") || comm == "fc_api" {
        return (ThreadRole::Io, None);
    }
    (ThreadRole::Emulator, None)
}

/// VM name: QEMU `-name [guest=]NAME[,...]`, Firecracker `--id ID`, else the
/// libvirt scope name, else "pid-N".
pub fn vm_name(kind: VmKind, cmdline: &[String], cgroup_paths: &[String], pid: u32) -> String {
    let arg_after = |flag: &str| {
        cmdline
            .iter()
            .position(|a| a == flag)
            .and_then(|i| cmdline.get(i + 1))
    };
    let from_cmd = match kind {
        VmKind::Firecracker => arg_after("--id").cloned(),
        _ => arg_after("-name").map(|v| {
            let first = v.split(',').next().unwrap_or(v);
            v.split(',')
                .find_map(|p| p.strip_prefix("guest="))
                .unwrap_or(first)
                .to_string()
        }),
    };
    from_cmd
        .filter(|s| !s.is_empty())
        .or_else(|| {
            cgroup_paths
                .iter()
                .find_map(|p| libvirt_scope(p).map(|(_, n)| n))
        })
        .unwrap_or_else(|| format!("pid-{pid}"))
}

/// libvirt machine scope in a cgroup path: systemd
/// "machine.slice/machine-qemu\x2d3\x2ddebian.scope" or non-systemd
/// "/machine/qemu-3-debian.libvirt-qemu". Returns (domain id, name).
pub fn libvirt_scope(path: &str) -> Option<(u32, String)> {
    for comp in path.split('/') {
        let unescaped = comp.replace("\\x2d", "-");
        let inner = unescaped
            .strip_prefix("machine-qemu-")
            .and_then(|s| s.strip_suffix(".scope"))
            .or_else(|| {
                unescaped
                    .strip_prefix("qemu-")
                    .and_then(|s| s.strip_suffix(".libvirt-qemu"))
            });
        if let Some(inner) = inner {
            let (id, name) = inner.split_once('-')?;
            return Some((id.parse().ok()?, name.to_string()));
        }
    }
    None
}

/// The libvirt machine scope that holds a VM's weight: the path up to and
/// including the scope component, above libvirt's own emulator/vcpuN groups
/// whose weights stay at the default.
pub fn libvirt_scope_path(path: &str) -> Option<String> {
    let mut out = String::new();
    for comp in path.split('/').filter(|c| !c.is_empty()) {
        out.push('/');
        out.push_str(comp);
        if libvirt_scope(comp).is_some() {
            return Some(out);
        }
    }
    None
}

/// The cpu group that holds a VM's weight, for the cgroup `path` of its
/// main thread: libvirt's machine scope when libvirt runs it (`virsh
/// schedinfo` sets cpu_shares there), else the path itself.
pub fn weight_group_path(path: &str) -> String {
    libvirt_scope_path(path).unwrap_or_else(|| path.to_string())
}

/// libvirt per-vCPU cgroup ("/.../libvirt/vcpu3" or the pre-7.1 "/.../vcpu3").
pub fn libvirt_vcpu_cgroup(path: &str) -> Option<u32> {
    path.rsplit('/').next()?.strip_prefix("vcpu")?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(s: &[&str]) -> Vec<String> {
        s.iter().map(|x| x.to_string()).collect()
    }

    #[test]
    fn qemu_and_firecracker() {
        assert_eq!(
            vmm_of(
                "qemu-system-x86",
                &v(&["/usr/bin/qemu-system-x86_64", "-name", "a"])
            ),
            Some(VmKind::Qemu)
        );
        assert_eq!(
            vmm_of("firecracker", &v(&["firecracker", "--id", "x"])),
            Some(VmKind::Firecracker)
        );
        assert_eq!(vmm_of("bash", &v(&["bash"])), None);
        // A zombie: its comm stays, its command line is gone.
        assert_eq!(vmm_of("qemu-system-x86", &[]), None);
        assert_eq!(
            vmm_of("qemu-img", &v(&["qemu-img", "convert", "a", "b"])),
            None
        );
        assert_eq!(
            vmm_of("qemu-nbd", &v(&["/usr/bin/qemu-nbd", "-c", "/dev/nbd0"])),
            None
        );
        assert_eq!(
            vmm_of("qemu-kvm", &v(&["/usr/libexec/qemu-kvm", "-name", "x"])),
            Some(VmKind::Qemu)
        );
        assert_eq!(
            libvirt_scope_path("/machine.slice/machine-qemu\\x2d1\\x2derp.scope/libvirt/emulator")
                .as_deref(),
            Some("/machine.slice/machine-qemu\\x2d1\\x2derp.scope")
        );
        assert_eq!(libvirt_scope_path("/user.slice/x"), None);
        assert_eq!(thread_role("CPU 1/KVM"), (ThreadRole::Vcpu(1), Some("KVM")));
        assert_eq!(
            thread_role("CPU 12/TCG"),
            (ThreadRole::Vcpu(12), Some("TCG"))
        );
        assert_eq!(thread_role("fc_vcpu 0"), (ThreadRole::Vcpu(0), None));
        assert_eq!(thread_role("IO mon_iothread").0, ThreadRole::Io);
        assert_eq!(thread_role("call_rcu").0, ThreadRole::Emulator);
    }

    #[test]
    fn names() {
        let cmd = v(&["qemu", "-name", "guest=web1,debug-threads=on"]);
        assert_eq!(vm_name(VmKind::Qemu, &cmd, &[], 5), "web1");
        assert_eq!(
            vm_name(
                VmKind::Qemu,
                &v(&["qemu", "-name", "db,debug-threads=on"]),
                &[],
                5
            ),
            "db"
        );
        assert_eq!(
            vm_name(
                VmKind::Firecracker,
                &v(&["firecracker", "--id", "fc7"]),
                &[],
                5
            ),
            "fc7"
        );
        let cg = vec![
            "/machine.slice/machine-qemu\\x2d3\\x2ddebian\\x2d12.scope/libvirt/vcpu0".to_string(),
        ];
        assert_eq!(vm_name(VmKind::Qemu, &v(&["qemu"]), &cg, 5), "debian-12");
        assert_eq!(
            libvirt_scope("/machine/qemu-4-win.libvirt-qemu/vcpu1"),
            Some((4, "win".into()))
        );
        assert_eq!(
            libvirt_vcpu_cgroup("/machine.slice/x.scope/libvirt/vcpu3"),
            Some(3)
        );
        assert_eq!(vm_name(VmKind::Qemu, &v(&["qemu"]), &[], 9), "pid-9");
    }

    /// libvirt 9.0 (Debian 12) without systemd on a hybrid host (cgroup v1
    /// controllers, v2 at /sys/fs/cgroup/unified): /proc/<pid>/cgroup of a
    /// transient domain's main thread and of its vCPU 1 thread, as read.
    const LIBVIRT_MAIN: &str = "9:name=systemd:/\n8:pids:/\n7:blkio:/machine/qemu-1-lvA.libvirt-qemu\n\
        6:freezer:/machine/qemu-1-lvA.libvirt-qemu\n5:devices:/\n4:memory:/machine/qemu-1-lvA.libvirt-qemu\n\
        3:cpuset:/machine/qemu-1-lvA.libvirt-qemu/emulator\n2:cpuacct:/\n\
        1:cpu:/machine/qemu-1-lvA.libvirt-qemu/emulator\n0::/machine/qemu-1-lvA.libvirt-qemu/emulator\n";
    const LIBVIRT_VCPU1: &str = "3:cpuset:/machine/qemu-1-lvA.libvirt-qemu/vcpu1\n\
        1:cpu:/machine/qemu-1-lvA.libvirt-qemu/vcpu1\n0::/machine/qemu-1-lvA.libvirt-qemu/vcpu1\n";

    #[test]
    fn libvirt_without_systemd() {
        let parse = |t| stealscope_readers::process::parse_cgroup(t, "cgroup").unwrap();
        let main = parse(LIBVIRT_MAIN);
        let cpu = main.iter().find(|c| c.controllers == ["cpu"]).unwrap();
        let v2 = main.iter().find(|c| c.hierarchy == 0).unwrap();
        for p in [&cpu.path, &v2.path] {
            assert_eq!(libvirt_scope(p), Some((1, "lvA".into())));
            assert_eq!(weight_group_path(p), "/machine/qemu-1-lvA.libvirt-qemu");
            assert_eq!(libvirt_vcpu_cgroup(p), None);
        }
        let paths: Vec<String> = main.iter().map(|c| c.path.clone()).collect();
        assert_eq!(vm_name(VmKind::Qemu, &v(&["qemu"]), &paths, 5), "lvA");
        assert!(parse(LIBVIRT_VCPU1)
            .iter()
            .all(|c| libvirt_vcpu_cgroup(&c.path) == Some(1)));
        // Names keep their dashes and dots; other groups are their own.
        assert_eq!(
            libvirt_scope("/machine/qemu-12-web-1.prod.libvirt-qemu/vcpu0"),
            Some((12, "web-1.prod".into()))
        );
        assert_eq!(weight_group_path("/user.slice/vm"), "/user.slice/vm");
    }
}
