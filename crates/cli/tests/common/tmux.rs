//! A terminal for interactive commands: a detached tmux session of a fixed
//! size on a server of its own (so tests never touch a user's tmux), driven
//! with send-keys and read with capture-pane.

use std::process::Command;
use std::time::{Duration, Instant};

pub fn have_tmux() -> bool {
    Command::new("tmux")
        .arg("-V")
        .output()
        .is_ok_and(|o| o.status.success())
}

pub struct Tmux {
    socket: String,
}

impl Tmux {
    /// A session running a plain bash with prompt "$ ".
    pub fn start(width: u16, height: u16) -> Tmux {
        static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let socket = format!(
            "stealscope-test-{}-{}",
            std::process::id(),
            N.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
        );
        let t = Tmux { socket };
        t.tmux(&[
            "-f",
            "/dev/null",
            "new-session",
            "-d",
            "-s",
            "t",
            "-x",
            &width.to_string(),
            "-y",
            &height.to_string(),
            "env",
            "PS1=$ ",
            "bash",
            "--norc",
            "--noprofile",
        ]);
        t.wait_for("the shell prompt", Duration::from_secs(10), |s| {
            s.trim_end().ends_with('$')
        });
        t
    }

    fn tmux(&self, args: &[&str]) -> String {
        let out = Command::new("tmux")
            .args(["-L", &self.socket])
            .args(args)
            .output()
            .expect("tmux");
        assert!(
            out.status.success(),
            "tmux {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Types a command line and Enter.
    pub fn type_line(&self, line: &str) {
        self.tmux(&["send-keys", "-t", "t", "-l", line]);
        self.tmux(&["send-keys", "-t", "t", "Enter"]);
    }

    /// Sends keys as tmux names them ("q", "Escape", "C-c", "?").
    pub fn keys(&self, keys: &[&str]) {
        let mut a = vec!["send-keys", "-t", "t"];
        a.extend_from_slice(keys);
        self.tmux(&a);
    }

    /// The visible screen.
    pub fn screen(&self) -> String {
        self.tmux(&["capture-pane", "-p", "-t", "t"])
    }

    /// The pane shows the alternate screen (a full-screen program runs).
    pub fn alternate_on(&self) -> bool {
        self.tmux(&["display-message", "-p", "-t", "t", "#{alternate_on}"])
            .trim()
            == "1"
    }

    pub fn resize(&self, width: u16, height: u16) {
        self.tmux(&[
            "resize-window",
            "-t",
            "t",
            "-x",
            &width.to_string(),
            "-y",
            &height.to_string(),
        ]);
    }

    /// Pid of the pane's shell.
    pub fn shell_pid(&self) -> u32 {
        self.tmux(&["display-message", "-p", "-t", "t", "#{pane_pid}"])
            .trim()
            .parse()
            .unwrap()
    }

    /// Polls the screen until `ok` holds; panics with the last screen.
    pub fn wait_for(&self, what: &str, timeout: Duration, ok: impl Fn(&str) -> bool) -> String {
        let until = Instant::now() + timeout;
        loop {
            let s = self.screen();
            if ok(&s) {
                return s;
            }
            if Instant::now() > until {
                panic!("timed out waiting for {what}; screen:\n{s}");
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        self.kill_server();
    }
}

impl Tmux {
    /// Ends the server: every pane's terminal goes away (SIGHUP).
    pub fn kill_server(&self) {
        let _ = Command::new("tmux")
            .args(["-L", &self.socket, "kill-server"])
            .output();
    }
}

/// The children of `pid` named `comm`.
pub fn children_named(pid: u32, comm: &str) -> Vec<u32> {
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(child) = e.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{child}/stat")) else {
            continue;
        };
        // "pid (comm) state ppid ...": comm may hold spaces, so split after ')'.
        let Some((head, rest)) = stat.rsplit_once(')') else {
            continue;
        };
        let name = head.split_once('(').map_or("", |(_, n)| n);
        let ppid = rest.split_whitespace().nth(1).and_then(|p| p.parse().ok());
        if name == comm && ppid == Some(pid) {
            out.push(child);
        }
    }
    out
}
