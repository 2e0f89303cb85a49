//! tracefs for measurements that need the kernel's own events (the preempt
//! probe, the kvm:kvm_exit sample): a private tracing instance (so the global
//! buffer, and anyone using it, is not disturbed), mounted on demand, removed
//! and unmounted on drop; and the parser of the text trace format.
//!
//! Mounting is shared by every instance of this process: tracefs is mounted
//! when the first instance needs it and unmounted when the last one that
//! needed it is gone, never when someone else had mounted it.

use std::fs::File;
use std::io::{ErrorKind, Read};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Mutex;

const TRACEFS: &str = "/sys/kernel/tracing";
const DEBUGFS_TRACING: &str = "/sys/kernel/debug/tracing";

static SEQ: AtomicU32 = AtomicU32::new(0);

/// Instances alive in this process that rely on our mount, and whether we
/// mounted tracefs.
static MOUNT: Mutex<(u32, bool)> = Mutex::new((0, false));

fn tracing_root() -> Option<PathBuf> {
    [TRACEFS, DEBUGFS_TRACING]
        .iter()
        .map(PathBuf::from)
        .find(|p| p.join("instances").is_dir())
}

/// Why tracefs cannot be used without mounting it: None when it may simply be
/// unmounted, Some(reason) when it is there but not ours to use.
fn access_problem() -> Option<String> {
    match std::fs::read_dir(TRACEFS) {
        Err(e) if e.kind() == ErrorKind::PermissionDenied => {
            Some(format!("{TRACEFS}: permission denied (needs root)"))
        }
        _ => None,
    }
}

/// A hold on a usable tracefs root; mounts it if nothing is mounted and
/// `allow_mount`, and unmounts it when the last hold of this process drops.
struct Root {
    path: PathBuf,
    counted: bool,
}

impl Root {
    fn acquire(allow_mount: bool) -> Result<Root, String> {
        let mut state = MOUNT.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(path) = tracing_root() {
            // Counted only when it is our mount, so it stays until we are done.
            let counted = state.1;
            if counted {
                state.0 += 1;
            }
            return Ok(Root { path, counted });
        }
        if let Some(p) = access_problem() {
            return Err(p);
        }
        if !allow_mount {
            return Err("tracefs is not mounted".into());
        }
        nix::mount::mount(
            Some("nodev"),
            TRACEFS,
            Some("tracefs"),
            nix::mount::MsFlags::empty(),
            None::<&str>,
        )
        .map_err(|e| format!("tracefs not mounted and mount failed: {e}"))?;
        if !Path::new(TRACEFS).join("instances").is_dir() {
            let _ = nix::mount::umount(TRACEFS);
            return Err("tracefs has no instances/ directory".into());
        }
        *state = (state.0 + 1, true);
        Ok(Root {
            path: PathBuf::from(TRACEFS),
            counted: true,
        })
    }
}

impl Drop for Root {
    fn drop(&mut self) {
        if !self.counted {
            return;
        }
        let mut state = MOUNT.lock().unwrap_or_else(|e| e.into_inner());
        state.0 = state.0.saturating_sub(1);
        if state.0 == 0 && state.1 {
            let _ = nix::mount::umount(self.path.as_path());
            state.1 = false;
        }
    }
}

fn pid_alive(pid: i32) -> bool {
    Path::new(&format!("/proc/{pid}")).exists()
}

/// Removes instances with `prefix` that earlier runs left behind when they
/// were killed with SIGKILL (their pid no longer exists).
fn remove_stale_instances(root: &Path, prefix: &str) {
    let Ok(dir) = std::fs::read_dir(root.join("instances")) else {
        return;
    };
    for e in dir.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let Some(rest) = name.strip_prefix(prefix) else {
            continue;
        };
        let pid = rest.split('-').next().and_then(|p| p.parse::<i32>().ok());
        if pid.is_some_and(|p| !pid_alive(p)) {
            let _ = std::fs::remove_dir(e.path());
        }
    }
}

/// A private tracing instance "<prefix><pid>-<seq>". Drop stops it, closes
/// its pipe, removes it and releases the mount.
pub struct Instance {
    dir: PathBuf,
    pipe: Option<File>,
    partial: Vec<u8>,
    buf: Vec<u8>,
    // Dropped after the instance is removed (field order).
    _root: Root,
}

impl Instance {
    /// Creates the instance (tracing off). `allow_mount`: mount tracefs on
    /// /sys/kernel/tracing if nothing is mounted there. The error is a reason
    /// for a report's notes.
    pub fn create(prefix: &str, allow_mount: bool) -> Result<Instance, String> {
        let root = Root::acquire(allow_mount)?;
        remove_stale_instances(&root.path, prefix);
        let name = format!(
            "{prefix}{}-{}",
            std::process::id(),
            SEQ.fetch_add(1, Ordering::Relaxed)
        );
        let dir = root.path.join("instances").join(name);
        std::fs::create_dir(&dir)
            .map_err(|e| format!("cannot create tracing instance {}: {e}", dir.display()))?;
        let inst = Instance {
            dir,
            pipe: None,
            partial: Vec::new(),
            buf: vec![0; 1 << 16],
            _root: root,
        };
        inst.write("tracing_on", "0")?;
        Ok(inst)
    }

    pub fn path(&self) -> &Path {
        &self.dir
    }

    /// Writes a control file of the instance ("trace_clock", "events/x/y/enable").
    pub fn write(&self, rel: &str, value: &str) -> Result<(), String> {
        let p = self.dir.join(rel);
        std::fs::write(&p, value).map_err(|e| format!("{}: {e}", p.display()))
    }

    /// Whether the instance has this event ("kvm/kvm_exit").
    pub fn has_event(&self, event: &str) -> bool {
        self.dir.join("events").join(event).join("enable").exists()
    }

    /// Opens trace_pipe (non-blocking) and turns tracing on.
    pub fn start(&mut self) -> Result<(), String> {
        let pipe = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NONBLOCK | libc::O_CLOEXEC)
            .open(self.dir.join("trace_pipe"))
            .map_err(|e| format!("{}/trace_pipe: {e}", self.dir.display()))?;
        self.pipe = Some(pipe);
        self.write("tracing_on", "1")
    }

    /// Turns tracing off (what is buffered can still be drained).
    pub fn stop(&self) {
        let _ = self.write("tracing_on", "0");
    }

    /// Feeds every complete line the pipe holds now to `line` (never blocks).
    pub fn drain(&mut self, mut line: impl FnMut(&str)) {
        let Some(pipe) = self.pipe.as_mut() else {
            return;
        };
        loop {
            match pipe.read(&mut self.buf) {
                Ok(0) => break,
                Ok(n) => {
                    self.partial.extend_from_slice(&self.buf[..n]);
                    let mut start = 0;
                    while let Some(nl) = self.partial[start..].iter().position(|&b| b == b'\n') {
                        line(&String::from_utf8_lossy(&self.partial[start..start + nl]));
                        start += nl + 1;
                    }
                    self.partial.drain(..start);
                }
                Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                Err(_) => break, // WouldBlock: empty for now
            }
        }
    }
}

impl Drop for Instance {
    fn drop(&mut self) {
        // The open trace_pipe holds a reference: close it before rmdir.
        drop(self.pipe.take());
        let _ = self.write("tracing_on", "0");
        let _ = std::fs::remove_dir(&self.dir);
    }
}

/// Instances with `prefix` that exist now (tests: none may be left behind).
pub fn leftover_instances(prefix: &str) -> Vec<String> {
    let Some(root) = tracing_root() else {
        return Vec::new();
    };
    std::fs::read_dir(root.join("instances"))
        .map(|d| {
            d.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.starts_with(prefix))
                .collect()
        })
        .unwrap_or_default()
}

/// Whether a tracefs is mounted now (tests: a sample must leave the mount
/// state as it found it).
pub fn is_mounted() -> bool {
    tracing_root().is_some()
}

/// One event line of the text trace format.
#[derive(Debug, PartialEq, Eq)]
pub struct TraceLine<'a> {
    /// The task's comm as the trace shows it (may hold spaces).
    pub task: &'a str,
    /// Thread id of the task (common_pid).
    pub pid: Option<i32>,
    pub cpu: u32,
    /// ns of the instance's trace clock.
    pub ts: u64,
    pub name: &'a str,
    pub fields: &'a str,
}

/// "1107.667837" -> ns. The text output has µs resolution.
pub fn parse_ts(s: &str) -> Option<u64> {
    let (sec, frac) = s.split_once('.')?;
    if sec.is_empty() || frac.is_empty() || frac.len() > 9 {
        return None;
    }
    if !sec.bytes().all(|b| b.is_ascii_digit()) || !frac.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let sec: u64 = sec.parse().ok()?;
    let f: u64 = frac.parse().ok()?;
    Some(sec * 1_000_000_000 + f * 10u64.pow(9 - frac.len() as u32))
}

/// "CPU:1 [LOST 12 EVENTS]" -> 12.
pub fn lost_events(line: &str) -> Option<u64> {
    let i = line.find("[LOST ")?;
    line[i + 6..]
        .split_ascii_whitespace()
        .next()
        .and_then(|n| n.parse().ok())
}

/// `  TASK-PID  [CPU] flags  TIMESTAMP: event: fields`. TASK may contain
/// spaces and brackets, so the CPU field is the first `[digits]` followed by
/// a timestamp token.
pub fn parse_line(line: &str) -> Option<TraceLine<'_>> {
    let mut from = 0;
    while let Some(open) = line[from..].find('[').map(|i| i + from) {
        from = open + 1;
        let close = line[open..].find(']').map(|i| i + open)?;
        let digits = &line[open + 1..close];
        if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
            continue;
        }
        let Ok(cpu) = digits.parse::<u32>() else {
            continue;
        };
        // Tokens after "]": optional flags, then "TS:", then "event:".
        let mut rest = &line[close + 1..];
        let mut ts = None;
        for _ in 0..3 {
            rest = rest.trim_start();
            let end = rest.find(char::is_whitespace).unwrap_or(rest.len());
            let tok = &rest[..end];
            rest = &rest[end..];
            if let Some(t) = tok.strip_suffix(':').and_then(parse_ts) {
                ts = Some(t);
                break;
            }
        }
        let Some(ts) = ts else { continue };
        let rest = rest.trim_start();
        let colon = rest.find(':')?;
        let name = &rest[..colon];
        if name.is_empty() || name.contains(char::is_whitespace) {
            return None;
        }
        let head = line[..open].trim();
        let (task, pid) = match head.rsplit_once('-') {
            Some((t, p)) if p.bytes().all(|b| b.is_ascii_digit()) => (t, p.parse().ok()),
            _ => (head, None),
        };
        return Some(TraceLine {
            task,
            pid,
            cpu,
            ts,
            name,
            fields: rest[colon + 1..].trim(),
        });
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_with_odd_comms_and_ns_timestamps() {
        let e =
            parse_line("  weird [7] name-12  [003] ....  55.123456789: sched_switch: x").unwrap();
        assert_eq!(e.cpu, 3);
        assert_eq!(e.ts, 55_123_456_789);
        assert_eq!(e.name, "sched_switch");
        assert_eq!((e.task, e.pid), ("weird [7] name", Some(12)));
        let e = parse_line(
            "       CPU 0/KVM-10241   [000] d..1.  6382.360544: kvm_exit: vcpu 0 reason HLT rip 0x0",
        )
        .unwrap();
        assert_eq!((e.task, e.pid, e.cpu), ("CPU 0/KVM", Some(10241), 0));
        assert_eq!(e.fields, "vcpu 0 reason HLT rip 0x0");
        // The pid column is "<...>" when the comm cache lost the task.
        let e = parse_line("  <...>-99 [001] .... 1.000001: kvm_exit: reason HLT").unwrap();
        assert_eq!((e.task, e.pid), ("<...>", Some(99)));
        assert!(parse_line("garbage").is_none());
        assert!(parse_line("a [001] nots: x").is_none());
        assert_eq!(lost_events("CPU:1 [LOST 12 EVENTS]"), Some(12));
        assert_eq!(parse_ts("1.5"), Some(1_500_000_000));
        assert_eq!(parse_ts("1."), None);
    }

    proptest::proptest! {
        #[test]
        fn never_panics(s in "\\PC{0,200}") {
            let _ = parse_line(&s);
            let _ = lost_events(&s);
        }
    }
}
