//! Shared by the serve tests: a running `serve`, a raw HTTP client, an
//! exposition parser, /proc/stat read independently, tool checks.

use crate::common::*;
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// A running `serve`; SIGTERM and reaped on drop. Its stderr is kept.
pub struct Serve {
    child: Child,
    pub addr: SocketAddr,
    pub stderr: Arc<Mutex<String>>,
}

impl Serve {
    pub fn start(args: &[&str]) -> Serve {
        Self::spawn(bin(), args)
    }

    pub fn spawn(mut cmd: Command, args: &[&str]) -> Serve {
        let mut child = cmd
            .args(["serve", "--listen", "127.0.0.1:0"])
            .args(args)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start serve");
        let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
        let stderr = Arc::new(Mutex::new(String::new()));
        let mut addr = None;
        for line in lines.by_ref() {
            let line = line.unwrap();
            stderr.lock().unwrap().push_str(&format!("{line}\n"));
            if let Some(rest) = line.strip_prefix("stealscope serve: listening on http://") {
                addr = Some(rest.trim_end_matches("/metrics").parse().unwrap());
                break;
            }
        }
        let Some(addr) = addr else {
            let _ = child.kill();
            panic!("serve did not start: {}", stderr.lock().unwrap());
        };
        let keep = stderr.clone();
        std::thread::spawn(move || {
            for line in lines.map_while(Result::ok) {
                keep.lock().unwrap().push_str(&format!("{line}\n"));
            }
        });
        Serve {
            child,
            addr,
            stderr,
        }
    }

    pub fn metrics(&self) -> Exposition {
        let r = get(self.addr, "/metrics", None);
        assert_eq!(r.status, 200, "{}", r.body);
        Exposition::parse(&r.body)
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for Serve {
    fn drop(&mut self) {
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        let end = Instant::now() + Duration::from_secs(5);
        while Instant::now() < end {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub struct Resp {
    pub status: u16,
    pub head: String,
    pub body: String,
}

/// One request over a fresh connection, read until the server closes it.
pub fn request(addr: SocketAddr, raw: &str) -> Resp {
    try_request(addr, raw).unwrap_or_else(|e| panic!("{addr}: {e}"))
}

pub fn try_request(addr: SocketAddr, raw: &str) -> std::io::Result<Resp> {
    let mut s = TcpStream::connect(addr)?;
    s.set_read_timeout(Some(Duration::from_secs(10)))?;
    s.write_all(raw.as_bytes())?;
    let mut buf = Vec::new();
    let _ = s.read_to_end(&mut buf);
    let text = String::from_utf8_lossy(&buf).to_string();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    Ok(Resp {
        status,
        head: head.to_ascii_lowercase(),
        body: body.to_string(),
    })
}

pub fn get_request(path: &str, accept: Option<&str>) -> String {
    let accept = accept.map_or(String::new(), |a| format!("Accept: {a}\r\n"));
    // HTTP/1.0: a whole body, never chunked.
    format!("GET {path} HTTP/1.0\r\nHost: x\r\n{accept}\r\n")
}

pub fn get(addr: SocketAddr, path: &str, accept: Option<&str>) -> Resp {
    request(addr, &get_request(path, accept))
}

/// None while nothing listens yet.
pub fn try_get(addr: SocketAddr, path: &str) -> Option<Resp> {
    try_request(addr, &get_request(path, None)).ok()
}

/// Samples of a text exposition: `name{labels}` -> value.
pub struct Exposition(BTreeMap<String, f64>);

impl Exposition {
    pub fn parse(text: &str) -> Exposition {
        let mut m = BTreeMap::new();
        for line in text
            .lines()
            .filter(|l| !l.starts_with('#') && !l.is_empty())
        {
            let (k, v) = line.rsplit_once(' ').unwrap();
            let v = match v {
                "+Inf" => f64::INFINITY,
                v => v.parse().unwrap_or_else(|_| panic!("bad value in {line}")),
            };
            m.insert(k.to_string(), v);
        }
        Exposition(m)
    }

    pub fn get(&self, key: &str) -> Option<f64> {
        self.0.get(key).copied()
    }

    pub fn starting(&self, prefix: &str) -> Vec<(&str, f64)> {
        self.0
            .iter()
            .filter(|(k, _)| k.starts_with(prefix))
            .map(|(k, v)| (k.as_str(), *v))
            .collect()
    }

    /// How many samples (series) it has.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Metric names (before the labels).
    pub fn names(&self) -> BTreeSet<String> {
        self.0
            .keys()
            .map(|k| k.split('{').next().unwrap().to_string())
            .collect()
    }
}

/// A --root with one CPU whose /proc/stat the test rewrites: in place and at
/// one length, so that no concurrent read sees half a number.
pub struct RewrittenStat {
    pub dir: tempfile::TempDir,
}

impl RewrittenStat {
    /// The root, with /proc/stat at `steal` and `idle` ticks.
    pub fn new(steal: u64, idle: u64) -> RewrittenStat {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("proc")).unwrap();
        let r = RewrittenStat { dir };
        r.write(steal, idle);
        r
    }

    pub fn write(&self, steal: u64, idle: u64) {
        let row = format!("0000000100 0 0000000050 {idle:010} 0 0 0 {steal:010} 0 0");
        let text = format!("cpu  {row}\ncpu0 {row}\nintr 0\nctxt 0\nbtime 0\n");
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(false)
            .open(self.dir.path().join("proc/stat"))
            .unwrap();
        f.write_all(text.as_bytes()).unwrap();
    }

    pub fn root(&self) -> &Path {
        self.dir.path()
    }

    /// `serve --root` on it at `rate`, once its first sample (of `steal`
    /// ticks, as written last) is exported.
    pub fn serve(&self, rate: &str, steal: u64) -> Serve {
        let s = Serve::start(&["--root", self.root().to_str().unwrap(), "--rate", rate]);
        wait_for("serve's first sample", Duration::from_secs(5), || {
            (steal_seconds(&s) == Some(steal as f64 / clk_tck())).then_some(())
        });
        s
    }
}

/// cpu0's exported steal, seconds.
pub fn steal_seconds(s: &Serve) -> Option<f64> {
    s.metrics()
        .get("stealscope_cpu_seconds_total{cpu=\"0\",mode=\"steal\"}")
}

pub fn clk_tck() -> f64 {
    unsafe { libc::sysconf(libc::_SC_CLK_TCK) as f64 }
}

/// cpu -> the 8 mode columns of /proc/stat, in seconds.
pub fn proc_stat(root: &Path) -> BTreeMap<u32, [f64; 8]> {
    let text = std::fs::read_to_string(root.join("proc/stat")).unwrap();
    text.lines()
        .filter(|l| l.starts_with("cpu") && !l.starts_with("cpu "))
        .map(|l| {
            let mut f = l.split_whitespace();
            let cpu = f.next().unwrap()[3..].parse().unwrap();
            let mut v = [0.0; 8];
            for (i, x) in f.take(8).enumerate() {
                v[i] = x.parse::<f64>().unwrap() / clk_tck();
            }
            (cpu, v)
        })
        .collect()
}

pub const MODES: [&str; 8] = [
    "user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal",
];

pub fn have(cmd: &str) -> bool {
    Command::new("sh")
        .args(["-c", &format!("command -v {cmd}")])
        .output()
        .is_ok_and(|o| o.status.success())
}

pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

pub fn wait_for<T>(what: &str, timeout: Duration, mut f: impl FnMut() -> Option<T>) -> T {
    let end = Instant::now() + timeout;
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(Instant::now() < end, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

pub fn promtool_check_metrics(text: &str) {
    let mut p = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("promtool");
    p.stdin.take().unwrap().write_all(text.as_bytes()).unwrap();
    let out = p.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "promtool check metrics: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

pub struct Reaped(pub Child);
impl Drop for Reaped {
    fn drop(&mut self) {
        unsafe { libc::kill(self.0.id() as i32, libc::SIGTERM) };
        let _ = self.0.wait();
    }
}

pub fn dashboard() -> Value {
    let text = std::fs::read_to_string(repo().join("deploy/grafana/dashboard.json")).unwrap();
    serde_json::from_str(&text).expect("dashboard.json is valid JSON")
}

/// Every PromQL expression in the dashboard (panels, nested rows,
/// annotations, template queries).
pub fn dashboard_exprs(v: &Value, out: &mut Vec<String>) {
    match v {
        Value::Object(m) => {
            for (k, x) in m {
                match (k.as_str(), x) {
                    ("expr", Value::String(s)) => out.push(s.clone()),
                    ("query", Value::String(s)) if s.contains('(') => out.push(s.clone()),
                    _ => dashboard_exprs(x, out),
                }
            }
        }
        Value::Array(a) => a.iter().for_each(|x| dashboard_exprs(x, out)),
        _ => {}
    }
}

/// The serve tests that start VMs share one testenv run dir, and each
/// stops every VM of it when done: they take turns.
pub fn vm_turn() -> std::sync::MutexGuard<'static, ()> {
    static TURN: Mutex<()> = Mutex::new(());
    TURN.lock().unwrap_or_else(|e| e.into_inner())
}
