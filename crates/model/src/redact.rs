//! `snapshot --redact`: the same snapshot with the host name, VM names and
//! command lines replaced by stable placeholders ("host", "vm1", "vm2"... in
//! pid order), every figure kept. What changes (docs/snapshot.md):
//! - the host name (meta.json, /proc/sys/kernel/hostname) becomes "host";
//! - each VM's name becomes vmN wherever a name is read from: cgroup paths
//!   (libvirt scopes, also in their systemd-escaped form), /proc/PID/cgroup
//!   and numa_maps, the string values of the stored QMP and KVM answers
//!   under /stealscope/ (whose QMP socket path becomes /redacted), the kept
//!   kernel messages;
//! - each VMM's command line becomes `EXE -name vmN` (`--id vmN` for
//!   Firecracker); any other process's becomes its program's name;
//! - numa_maps's mapped file paths become /redacted;
//! - /proc/cmdline keeps only the parameters the rules read
//!   (kernel::RULE_PARAMS).

use crate::MachineModel;
use stealscope_readers::snapshot::Snapshot;
use stealscope_readers::{kernel, MemFs, ReadError};

/// (original, placeholder), longest original first so a name that holds
/// another ("web-2" and "web") is replaced whole.
struct Names(Vec<(String, String)>);

fn is_word(c: char) -> bool {
    c.is_alphanumeric() || c == '_'
}

/// Replaces `from` where it stands as a whole word: neither side touches a
/// letter, digit or '_' (a systemd escape `\x2d` before or after counts as
/// a separator).
fn replace_word(text: &str, from: &str, to: &str) -> String {
    if from.is_empty() || !text.contains(from) {
        return text.to_string();
    }
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(i) = rest.find(from) {
        let (before, after) = (&rest[..i], &rest[i + from.len()..]);
        out.push_str(before);
        let ok_left = out.ends_with("\\x2d") || !out.chars().next_back().is_some_and(is_word);
        let ok_right = after.starts_with("\\x2d") || !after.chars().next().is_some_and(is_word);
        out.push_str(if ok_left && ok_right { to } else { from });
        rest = after;
    }
    out.push_str(rest);
    out
}

impl Names {
    fn apply(&self, text: &str) -> String {
        let mut t = text.to_string();
        for (from, to) in &self.0 {
            t = replace_word(&t, from, to);
            // systemd escapes '-' in unit names (machine-qemu\x2d1\x2dweb\x2d2.scope).
            if from.contains('-') {
                t = replace_word(&t, &from.replace('-', "\\x2d"), to);
            }
        }
        t
    }
}

/// Files whose text may hold a name (figures files are never touched: a
/// VM named "cpu" must not rename /proc/stat's rows).
fn holds_names(path: &str) -> bool {
    path == stealscope_readers::kmsg::PATH
        || path.ends_with("/cgroup")
        || path.ends_with("/mountinfo")
}

/// Paths that may hold a VM's name: cgroup directories (libvirt scopes).
fn path_holds_names(path: &str) -> bool {
    path.starts_with("/sys/fs/cgroup/")
}

/// The stored live answers (QMP, KVM stats, exit sample): names in string
/// values only (never in keys), and the QMP socket path (from the command
/// line) replaced.
fn redact_json(v: &mut serde_json::Value, names: &Names) {
    use serde_json::Value;
    match v {
        Value::String(s) => *s = names.apply(s),
        Value::Array(a) => a.iter_mut().for_each(|x| redact_json(x, names)),
        Value::Object(o) => {
            for (k, x) in o.iter_mut() {
                if k == "socket" && x.is_string() {
                    *x = Value::from("/redacted");
                } else {
                    redact_json(x, names);
                }
            }
        }
        _ => {}
    }
}

/// numa_maps names the files mapped (disk images, kernels, sockets):
/// `file=PATH` becomes `file=/redacted` (the rules read the node counts and
/// the policy, not the path).
fn hide_files(text: &str) -> String {
    text.lines()
        .map(|l| {
            l.split(' ')
                .map(|w| match w.strip_prefix("file=") {
                    Some(_) => "file=/redacted",
                    None => w,
                })
                .collect::<Vec<_>>()
                .join(" ")
        })
        .collect::<Vec<_>>()
        .join("\n")
        + "\n"
}

/// The pid of a /proc/PID/cmdline path.
fn cmdline_pid(path: &str) -> Option<u32> {
    path.strip_prefix("/proc/")?
        .strip_suffix("/cmdline")?
        .parse()
        .ok()
}

fn nul_joined(args: &[&str]) -> Vec<u8> {
    let mut b = Vec::new();
    for a in args {
        b.extend_from_slice(a.as_bytes());
        b.push(0);
    }
    b
}

fn redact_side(fs: &MemFs, names: &Names, vmms: &[(u32, bool, String)]) -> MemFs {
    let mut out = MemFs::new(&fs.name);
    for (path, bytes) in &fs.files {
        let new_path = if path_holds_names(path) {
            names.apply(path)
        } else {
            path.clone()
        };
        let data = if path == "/proc/sys/kernel/hostname" {
            b"host\n".to_vec()
        } else if path == kernel::CMDLINE {
            let text = String::from_utf8_lossy(bytes);
            let kept: Vec<String> = kernel::split_cmdline(&text)
                .into_iter()
                .filter(|p| {
                    let name = p.split('=').next().unwrap_or(p);
                    kernel::RULE_PARAMS.contains(&name)
                })
                .collect();
            format!("{}\n", kept.join(" ")).into_bytes()
        } else if let Some(pid) = cmdline_pid(path) {
            let args: Vec<&[u8]> = bytes.split(|b| *b == 0).collect();
            let exe = String::from_utf8_lossy(args[0]);
            let exe = exe.rsplit('/').next().unwrap_or("").to_string();
            match vmms.iter().find(|(p, _, _)| *p == pid) {
                Some((_, fc, name)) => {
                    nul_joined(&[&exe, if *fc { "--id" } else { "-name" }, name])
                }
                None => nul_joined(&[&exe]),
            }
        } else if path.ends_with("/numa_maps") {
            let t = String::from_utf8_lossy(bytes);
            names.apply(&hide_files(&t)).into_bytes()
        } else if path.starts_with("/stealscope/") {
            match serde_json::from_slice::<serde_json::Value>(bytes) {
                Ok(mut v) => {
                    redact_json(&mut v, names);
                    serde_json::to_vec_pretty(&v).unwrap_or_else(|_| bytes.clone())
                }
                Err(_) => names.apply(&String::from_utf8_lossy(bytes)).into_bytes(),
            }
        } else if holds_names(path) {
            match std::str::from_utf8(bytes) {
                Ok(t) => names.apply(t).into_bytes(),
                Err(_) => bytes.clone(),
            }
        } else {
            bytes.clone()
        };
        out.files.insert(new_path, data);
    }
    out
}

/// The snapshot with names and command lines replaced; how many names.
pub fn redact(snap: &Snapshot) -> Result<(Snapshot, usize), ReadError> {
    let m = MachineModel::build(snap)?;
    let mut vms: Vec<(u32, String, bool)> = Vec::new();
    for vm in m.t0.host.vms.iter().chain(&m.t1.host.vms) {
        if !vms.iter().any(|(p, _, _)| *p == vm.pid) {
            let fc = matches!(vm.kind, crate::host::VmKind::Firecracker);
            vms.push((vm.pid, vm.name.clone(), fc));
        }
    }
    vms.sort();
    let mut names: Vec<(String, String)> = Vec::new();
    let mut vmms = Vec::new();
    for (pid, name, fc) in &vms {
        let ph = match names.iter().find(|(n, _)| n == name) {
            Some((_, ph)) => ph.clone(),
            None => {
                let ph = format!("vm{}", names.len() + 1);
                names.push((name.clone(), ph.clone()));
                ph
            }
        };
        vmms.push((*pid, *fc, ph));
    }
    // The host name is only read from meta.json and the hostname file, both
    // replaced whole: as a word elsewhere it could be anything ("vm").
    let hostnames = usize::from(snap.meta.hostname.is_some());
    names.sort_by(|a, b| b.0.len().cmp(&a.0.len()).then(a.0.cmp(&b.0)));
    let count = names.len() + hostnames;
    let names = Names(names);
    let mut meta = snap.meta.clone();
    meta.hostname = meta.hostname.map(|_| "host".to_string());
    Ok((
        Snapshot {
            meta,
            t0: redact_side(&snap.t0, &names, &vmms),
            t1: redact_side(&snap.t1, &names, &vmms),
            samples: snap.samples.clone(),
            hardware: snap.hardware.clone(),
            damage: snap.damage.clone(),
        },
        count,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn whole_words_and_systemd_escapes_only() {
        let n = Names(vec![
            ("web-2".into(), "vm2".into()),
            ("web".into(), "vm1".into()),
        ]);
        assert_eq!(
            n.apply(
                "/machine.slice/machine-qemu\\x2d1\\x2dweb\\x2d2.scope/vcpu0 web webster web-2"
            ),
            "/machine.slice/machine-qemu\\x2d1\\x2dvm2.scope/vcpu0 vm1 webster vm2"
        );
    }
}
