//! QEMU Machine Protocol (docs/interop/qmp-spec.rst) over a unix socket:
//! one JSON object per line; after the greeting `{"QMP": {...}}` the client
//! sends `qmp_capabilities`, then commands; asynchronous `{"event": ...}`
//! messages may come before a reply and are skipped. Every read and write has
//! a deadline: a monitor that another client holds (libvirt) accepts the
//! connection but never greets.
//!
//! Also: which QMP sockets a QEMU command line declares.

use serde_json::{json, Value};
use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::time::{Duration, Instant};

/// A reply line longer than this is not QMP (query-stats of a 256-vCPU VM is ~2 MiB).
const MAX_LINE: usize = 64 << 20;

#[derive(Debug, thiserror::Error)]
pub enum QmpError {
    #[error("{path}: cannot connect: {source}")]
    Connect {
        path: String,
        source: std::io::Error,
    },
    #[error("{path}: no reply within {timeout:?} ({what}; another client may hold the monitor)")]
    Timeout {
        path: String,
        timeout: Duration,
        what: String,
    },
    #[error("{path}: {what}: {source}")]
    Io {
        path: String,
        what: String,
        source: std::io::Error,
    },
    #[error("{path}: {msg}")]
    Protocol { path: String, msg: String },
    /// The command ran and QEMU answered with an error object.
    #[error("{path}: {command}: {class}: {desc}")]
    Command {
        path: String,
        command: String,
        class: String,
        desc: String,
    },
}

pub struct Qmp {
    path: String,
    timeout: Duration,
    stream: UnixStream,
    reader: BufReader<UnixStream>,
    /// QEMU's version from the greeting ("10.0.2").
    pub version: Option<String>,
}

impl Qmp {
    /// Connects, reads the greeting and negotiates capabilities; each step
    /// must complete within `timeout`.
    pub fn connect(path: &str, timeout: Duration) -> Result<Qmp, QmpError> {
        let stream = UnixStream::connect(path).map_err(|source| QmpError::Connect {
            path: path.to_string(),
            source,
        })?;
        let io = |what: &str| {
            let (path, what) = (path.to_string(), what.to_string());
            move |source| QmpError::Io { path, what, source }
        };
        stream
            .set_write_timeout(Some(timeout))
            .map_err(io("set timeout"))?;
        let reader = BufReader::new(stream.try_clone().map_err(io("clone socket"))?);
        let mut q = Qmp {
            path: path.to_string(),
            timeout,
            stream,
            reader,
            version: None,
        };
        let greeting = q.read_message("greeting")?;
        let Some(g) = greeting.get("QMP") else {
            return Err(q.protocol(format!("expected a QMP greeting, got {greeting}")));
        };
        q.version = g["version"]["qemu"].as_object().map(|v| {
            format!(
                "{}.{}.{}",
                v.get("major").and_then(Value::as_u64).unwrap_or(0),
                v.get("minor").and_then(Value::as_u64).unwrap_or(0),
                v.get("micro").and_then(Value::as_u64).unwrap_or(0)
            )
        });
        q.execute("qmp_capabilities", None)?;
        Ok(q)
    }

    fn protocol(&self, msg: String) -> QmpError {
        QmpError::Protocol {
            path: self.path.clone(),
            msg,
        }
    }

    /// Reads one message within the deadline, whatever its kind.
    fn read_message(&mut self, what: &str) -> Result<Value, QmpError> {
        let deadline = Instant::now() + self.timeout;
        let mut line = Vec::new();
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(self.timeout_err(what));
            }
            self.reader
                .get_ref()
                .set_read_timeout(Some(left))
                .map_err(|source| QmpError::Io {
                    path: self.path.clone(),
                    what: "set timeout".into(),
                    source,
                })?;
            match self.reader.read_until(b'\n', &mut line) {
                Ok(0) => return Err(self.protocol(format!("connection closed ({what})"))),
                Ok(_) if line.ends_with(b"\n") => break,
                Ok(_) => {}
                Err(e)
                    if matches!(
                        e.kind(),
                        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                    ) =>
                {
                    return Err(self.timeout_err(what))
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(source) => {
                    return Err(QmpError::Io {
                        path: self.path.clone(),
                        what: what.to_string(),
                        source,
                    })
                }
            }
            if line.len() > MAX_LINE {
                return Err(self.protocol(format!("a message longer than {MAX_LINE} bytes")));
            }
        }
        serde_json::from_slice(&line).map_err(|e| self.protocol(format!("not JSON ({what}): {e}")))
    }

    fn timeout_err(&self, what: &str) -> QmpError {
        QmpError::Timeout {
            path: self.path.clone(),
            timeout: self.timeout,
            what: what.to_string(),
        }
    }

    /// Runs a command and returns its `return` value; events are skipped.
    pub fn execute(&mut self, command: &str, args: Option<Value>) -> Result<Value, QmpError> {
        let mut msg = json!({ "execute": command });
        if let Some(a) = args {
            msg["arguments"] = a;
        }
        let mut bytes = msg.to_string().into_bytes();
        bytes.push(b'\n');
        self.stream
            .write_all(&bytes)
            .map_err(|source| QmpError::Io {
                path: self.path.clone(),
                what: format!("sending {command}"),
                source,
            })?;
        loop {
            let reply = self.read_message(command)?;
            if reply.get("event").is_some() {
                continue;
            }
            if let Some(r) = reply.get("return") {
                return Ok(r.clone());
            }
            if let Some(e) = reply.get("error") {
                return Err(QmpError::Command {
                    path: self.path.clone(),
                    command: command.to_string(),
                    class: e["class"].as_str().unwrap_or("?").to_string(),
                    desc: e["desc"].as_str().unwrap_or("").to_string(),
                });
            }
            return Err(self.protocol(format!("unexpected reply to {command}: {reply}")));
        }
    }
}

/// A QMP socket and where we learnt of it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QmpSocket {
    pub path: String,
    /// "-qmp", "-chardev/-mon" or "--qmp" (given by the user).
    pub origin: String,
}

/// QEMU option values: comma-separated, ",," is a literal comma; the first
/// element may be the value of the option's implied key.
fn qemu_opts(v: &str) -> Vec<String> {
    let mut out = vec![String::new()];
    let mut chars = v.chars().peekable();
    while let Some(c) = chars.next() {
        if c == ',' {
            if chars.peek() == Some(&',') {
                chars.next();
                out.last_mut().unwrap_or(&mut String::new()).push(',');
            } else {
                out.push(String::new());
            }
        } else if let Some(last) = out.last_mut() {
            last.push(c);
        }
    }
    out
}

fn opt<'a>(opts: &'a [String], key: &str) -> Option<&'a str> {
    opts.iter()
        .find_map(|o| o.strip_prefix(key).and_then(|r| r.strip_prefix('=')))
}

/// "server", "server=on" and the old "server,nowait" mean QEMU listens.
fn is_server(opts: &[String]) -> bool {
    opts.iter().any(|o| {
        matches!(
            o.as_str(),
            "server" | "server=on" | "server=yes" | "server=true"
        )
    })
}

/// The QMP unix sockets a QEMU command line listens on, and notes on the
/// monitors that cannot be used (TCP, client mode, fd passed by libvirt).
pub fn sockets_from_cmdline(cmdline: &[String]) -> (Vec<QmpSocket>, Vec<String>) {
    let mut sockets = Vec::new();
    let mut notes = Vec::new();
    let mut chardevs: Vec<(String, Vec<String>)> = Vec::new();
    let mut mons: Vec<Vec<String>> = Vec::new();
    let mut i = 0;
    while i + 1 < cmdline.len() {
        // QEMU takes "-opt" and "--opt".
        let flag = cmdline[i]
            .strip_prefix('-')
            .map(|f| f.strip_prefix('-').unwrap_or(f));
        let val = &cmdline[i + 1];
        match flag.unwrap_or("") {
            "qmp" | "qmp-pretty" => {
                let opts = qemu_opts(val);
                match opts[0].strip_prefix("unix:") {
                    Some(path) if is_server(&opts) => sockets.push(QmpSocket {
                        path: path.to_string(),
                        origin: "-qmp".into(),
                    }),
                    Some(path) => notes.push(format!(
                        "QMP socket {path} is a client connection (no server=on): not used"
                    )),
                    None => {
                        notes.push(format!("QMP at {} is not a unix socket: not used", opts[0]))
                    }
                }
            }
            "chardev" => {
                let opts = qemu_opts(val);
                if let Some(id) = opt(&opts, "id") {
                    chardevs.push((id.to_string(), opts.clone()));
                }
            }
            "mon" => mons.push(qemu_opts(val)),
            _ => {
                i += 1;
                continue;
            }
        }
        i += 2;
    }
    for m in mons {
        if opt(&m, "mode") != Some("control") {
            continue; // a human monitor (HMP)
        }
        let id = opt(&m, "chardev")
            .or_else(|| m.first().filter(|s| !s.contains('=')).map(String::as_str));
        let Some((_, c)) = id.and_then(|id| chardevs.iter().find(|(cid, _)| cid == id)) else {
            continue;
        };
        let backend = c.first().map(String::as_str).unwrap_or("");
        if backend != "socket" && opt(c, "backend") != Some("socket") {
            continue;
        }
        match (opt(c, "path"), opt(c, "fd")) {
            (Some(path), _) if is_server(c) => sockets.push(QmpSocket {
                path: path.to_string(),
                origin: "-chardev/-mon".into(),
            }),
            (Some(path), _) => notes.push(format!(
                "QMP socket {path} is a client connection (no server=on): not used"
            )),
            (None, Some(fd)) => notes.push(format!(
                "QMP monitor is a socket passed as fd {fd} (libvirt holds it; use `virsh qemu-monitor-command`)"
            )),
            _ => notes.push("QMP monitor on a TCP socket: not used".to_string()),
        }
    }
    (sockets, notes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::net::UnixListener;

    fn v(s: &[&str]) -> Vec<String> {
        s.iter().map(|x| x.to_string()).collect()
    }

    #[test]
    fn sockets_in_command_lines() {
        // testenv/start-vm.sh
        let (s, n) = sockets_from_cmdline(&v(&[
            "qemu-system-x86_64",
            "-name",
            "vmA,debug-threads=on",
            "-qmp",
            "unix:/run/x/vmA/qmp.sock,server=on,wait=off",
        ]));
        assert_eq!(
            s,
            vec![QmpSocket {
                path: "/run/x/vmA/qmp.sock".into(),
                origin: "-qmp".into()
            }]
        );
        assert!(n.is_empty());
        // The old spelling, and a path with an escaped comma.
        let (s, _) =
            sockets_from_cmdline(&v(&["qemu", "--qmp", "unix:/tmp/a,,b.sock,server,nowait"]));
        assert_eq!(s[0].path, "/tmp/a,b.sock");
        // -chardev + -mon mode=control; an HMP monitor next to it is ignored.
        let (s, n) = sockets_from_cmdline(&v(&[
            "qemu",
            "-chardev",
            "socket,id=mon0,path=/var/run/q.qmp,server=on,wait=off",
            "-mon",
            "chardev=mon0,mode=control,pretty=on",
            "-chardev",
            "socket,id=hmp,path=/var/run/q.hmp,server=on,wait=off",
            "-mon",
            "chardev=hmp",
        ]));
        assert_eq!(
            s,
            vec![QmpSocket {
                path: "/var/run/q.qmp".into(),
                origin: "-chardev/-mon".into()
            }]
        );
        assert!(n.is_empty());
        // libvirt passes the listening socket as an fd; TCP and client mode.
        let (s, n) = sockets_from_cmdline(&v(&[
            "qemu",
            "-chardev",
            "socket,id=charmonitor,fd=34,server=on,wait=off",
            "-mon",
            "chardev=charmonitor,id=monitor,mode=control",
            "-qmp",
            "tcp:127.0.0.1:4444,server=on",
            "-qmp",
            "unix:/tmp/client.sock",
        ]));
        assert!(s.is_empty());
        assert_eq!(n.len(), 3, "{n:?}");
        assert!(n[0].contains("not a unix socket"));
        assert!(n[1].contains("client connection"));
        assert!(n[2].contains("fd 34"));
    }

    /// A QMP peer speaking the protocol as QEMU does (greeting, capabilities
    /// negotiation, an event before a reply, an error reply).
    fn serve(l: UnixListener, script: Vec<&'static str>) -> std::thread::JoinHandle<Vec<String>> {
        std::thread::spawn(move || {
            let (mut s, _) = l.accept().unwrap();
            let mut r = BufReader::new(s.try_clone().unwrap());
            let mut got = Vec::new();
            s.write_all(b"{\"QMP\": {\"version\": {\"qemu\": {\"micro\": 2, \"minor\": 0, \"major\": 10}, \"package\": \"\"}, \"capabilities\": [\"oob\"]}}\r\n").unwrap();
            for reply in script {
                let mut line = String::new();
                if r.read_line(&mut line).unwrap() == 0 {
                    break;
                }
                got.push(line.trim().to_string());
                s.write_all(reply.as_bytes()).unwrap();
            }
            got
        })
    }

    #[test]
    fn protocol_round_trip_events_and_errors() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("q.sock");
        let h = serve(
            UnixListener::bind(&p).unwrap(),
            vec![
                "{\"return\": {}}\r\n",
                "{\"timestamp\": {\"seconds\": 1, \"microseconds\": 2}, \"event\": \"RESUME\"}\r\n{\"return\": [{\"cpu-index\": 0, \"thread-id\": 4242}]}\r\n",
                "{\"error\": {\"class\": \"CommandNotFound\", \"desc\": \"The command query-stats has not been found\"}}\r\n",
            ],
        );
        let mut q = Qmp::connect(p.to_str().unwrap(), Duration::from_secs(2)).unwrap();
        assert_eq!(q.version.as_deref(), Some("10.0.2"));
        let r = q.execute("query-cpus-fast", None).unwrap();
        assert_eq!(r[0]["thread-id"], 4242);
        let e = q
            .execute("query-stats", Some(json!({"target": "vm"})))
            .unwrap_err();
        assert!(e.to_string().contains("CommandNotFound"), "{e}");
        drop(q);
        let sent = h.join().unwrap();
        assert_eq!(sent[0], "{\"execute\":\"qmp_capabilities\"}");
        assert_eq!(
            sent[2],
            "{\"arguments\":{\"target\":\"vm\"},\"execute\":\"query-stats\"}"
        );
    }

    #[test]
    fn silent_stale_and_missing_sockets_are_errors_not_hangs() {
        let dir = tempfile::tempdir().unwrap();
        // Accepts (backlog) but never greets: a monitor held by another client.
        let p = dir.path().join("held.sock");
        let _l = UnixListener::bind(&p).unwrap();
        let t = Instant::now();
        let e = Qmp::connect(p.to_str().unwrap(), Duration::from_millis(200))
            .err()
            .unwrap();
        assert!(matches!(e, QmpError::Timeout { .. }), "{e}");
        assert!(t.elapsed() < Duration::from_secs(2));
        // A socket file whose server is gone: connection refused.
        let stale = dir.path().join("stale.sock");
        drop(UnixListener::bind(&stale).unwrap());
        let e = Qmp::connect(stale.to_str().unwrap(), Duration::from_millis(200))
            .err()
            .unwrap();
        assert!(
            matches!(e, QmpError::Connect { .. }) && e.to_string().contains("stale.sock"),
            "{e}"
        );
        let e = Qmp::connect("/nonexistent/q.sock", Duration::from_millis(200))
            .err()
            .unwrap();
        assert!(
            e.to_string()
                .starts_with("/nonexistent/q.sock: cannot connect"),
            "{e}"
        );
    }
}
