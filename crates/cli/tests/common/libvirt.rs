//! libvirt for the tests (testenv/libvirt.sh): the daemons started without
//! systemd, transient TCG domains, and virsh on the same connection.

use super::repo;
use super::testenv::run_dir;
use std::fs::File;
use std::process::Command;

/// Whether this machine can run libvirt domains for the tests.
pub fn have_libvirt() -> bool {
    super::testenv::have_qemu()
        && ["libvirtd", "virsh", "virtlogd"].iter().all(|b| {
            Command::new("sh")
                .args(["-c", &format!("command -v {b}")])
                .output()
                .is_ok_and(|o| o.status.success())
        })
}

fn script(args: &[&str]) -> Result<String, String> {
    let out = Command::new(repo().join("testenv/libvirt.sh"))
        .args(args)
        .env("STEALSCOPE_TESTENV_RUN", run_dir())
        .output()
        .map_err(|e| format!("testenv/libvirt.sh: {e}"))?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
    } else {
        Err(format!(
            "testenv/libvirt.sh {args:?}: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

/// Running libvirt daemons (or the system's) and the URI that reaches them.
/// Dropping it destroys this run's domains and stops the daemons it started.
pub struct Libvirt {
    pub uri: String,
    /// One private libvirtd at a time: its qemu driver state is the system's.
    _lock: nix::fcntl::Flock<File>,
}

impl Libvirt {
    /// Waits for any other test run's libvirt to finish, then starts.
    pub fn start() -> Result<Libvirt, String> {
        let path = "/run/stealscope-libvirt-test.lock";
        let f = File::create(path).map_err(|e| format!("{path}: {e}"))?;
        let lock = nix::fcntl::Flock::lock(f, nix::fcntl::FlockArg::LockExclusive)
            .map_err(|(_, e)| format!("{path}: flock: {e}"))?;
        let uri = script(&["start"])?;
        Ok(Libvirt { uri, _lock: lock })
    }

    /// A transient domain (`virsh create`) of `vcpus` vCPUs running `busy`
    /// busy loops, once its guest is ready; its qemu pid.
    pub fn create(&self, name: &str, vcpus: u32, busy: u32) -> u64 {
        let pid = script(&[
            "create",
            name,
            &vcpus.to_string(),
            "--busy",
            &busy.to_string(),
        ])
        .unwrap_or_else(|e| panic!("{e}"));
        pid.parse()
            .unwrap_or_else(|_| panic!("libvirt.sh create {name}: pid {pid:?}"))
    }

    pub fn destroy(&self, name: &str) {
        script(&["destroy", name]).unwrap_or_else(|e| panic!("{e}"));
    }

    /// `virsh ARGS` on this connection; its stdout (panics on failure).
    pub fn virsh(&self, args: &[&str]) -> String {
        let out = Command::new("virsh")
            .args(args)
            .env("LIBVIRT_DEFAULT_URI", &self.uri)
            .output()
            .expect("run virsh");
        assert!(
            out.status.success(),
            "virsh {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }
}

impl Drop for Libvirt {
    fn drop(&mut self) {
        if let Err(e) = script(&["stop"]) {
            eprintln!("{e}");
        }
        if std::env::var_os("STEALSCOPE_TESTENV_RUN").is_none() {
            let _ = std::fs::remove_dir_all(run_dir());
        }
    }
}
