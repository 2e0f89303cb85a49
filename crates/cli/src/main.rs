//! The `stealscope` binary: parses arguments, calls the engine (what a
//! command does) and output (how it reads). Errors are one line on
//! stderr, exit 2.

mod args;
mod fleet_cmd;
#[cfg(test)]
mod help_refs;
mod host_args;
mod parse;
mod place_cmd;
mod probe_cmd;
mod progress;
mod record_cmd;
mod report_cmd;
mod serve_cmd;
mod sim_cmd;
mod top_cmd;

use args::{Cli, ColorChoice, Command, DoctorArgs, DoctorCmd, SampleArgs};
use clap::{CommandFactory, Parser};
use std::io::Write;
use std::process::ExitCode;
use stealscope_engine::capture::CaptureOptions;
use stealscope_output::json::or_text;
use stealscope_readers::snapshot;

type Error = Box<dyn std::error::Error>;

fn capture_opts(a: &SampleArgs) -> CaptureOptions {
    CaptureOptions {
        root: a.root.clone(),
        interval: a.interval,
        sample_hz: a.rate,
    }
}

fn text_opts(a: &DoctorArgs) -> stealscope_output::text::TextOpts {
    let color = match a.color {
        ColorChoice::Always => Some(true),
        ColorChoice::Never => Some(false),
        ColorChoice::Auto => None,
    };
    stealscope_output::text::TextOpts::for_stdout(color, a.verbose)
}

/// Opens a snapshot or captures one (showing progress) and builds the
/// full report from it.
fn report(a: &DoctorArgs) -> Result<stealscope_analysis::DoctorReport, Error> {
    let show = a.snapshot.is_none() && progress::wanted(a.json);
    progress::shown(show, a.sample.interval, |tick| {
        stealscope_engine::report::doctor(
            a.snapshot.as_deref(),
            &capture_opts(&a.sample),
            &a.host.live(),
            a.save_snapshot.as_deref(),
            tick,
        )
    })
}

fn doctor(cmd: &DoctorCmd) -> Result<(), Error> {
    let a = &cmd.report;
    let mut r = report(a)?;
    // Ctrl-C during the interval asked for a report now, not the probes.
    let cut_short = r
        .notes
        .iter()
        .any(|n| n.starts_with("sampling ended early"));
    if cmd.probe && !cut_short {
        stealscope_engine::doctor_probe::add_to(&mut r, cmd.probe_duration)?;
    }
    cut_off(r.damage.is_some());
    let text = or_text(a.json, &r, || {
        stealscope_output::text::doctor(&r, &text_opts(a))
    });
    write_stdout(&text)
}

/// The input was cut off: the report is printed, and the exit status is
/// [`EXIT_CUT_OFF`] so that a script does not take it for a whole one.
static CUT_OFF: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
const EXIT_CUT_OFF: u8 = 3;

pub(crate) fn cut_off(yes: bool) {
    if yes {
        CUT_OFF.store(true, std::sync::atomic::Ordering::Relaxed);
    }
}

fn host(a: &DoctorArgs) -> Result<(), Error> {
    let r = stealscope_analysis::host_report(report(a)?);
    cut_off(r.damage.is_some());
    let text = or_text(a.json, &r, || {
        stealscope_output::text::host(&r, &text_opts(a))
    });
    write_stdout(&text)
}

/// Prints a report; a closed pipe (`| head`) ends it quietly.
pub(crate) fn write_stdout(text: &str) -> Result<(), Error> {
    let mut out = std::io::stdout().lock();
    match writeln!(out, "{}", text.trim_end()).and_then(|_| out.flush()) {
        // A closed pipe (| head) is not an error worth a message.
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        r => r.map_err(Into::into),
    }
}

fn snapshot_cmd(a: &args::SnapshotArgs) -> Result<(), Error> {
    let s = match &a.from {
        Some(p) => stealscope_model::recording::open_snapshot(p)?.0,
        None => {
            let c = progress::shown(progress::wanted(false), a.sample.interval, |tick| {
                stealscope_engine::report::capture(
                    &capture_opts(&a.sample),
                    &Default::default(),
                    tick,
                )
            })?;
            if let Some(n) = c.note(a.sample.interval) {
                eprintln!("{n}");
            }
            c.snapshot
        }
    };
    let s = if a.redact {
        let (r, n) = stealscope_model::redact::redact(&s)?;
        eprintln!("redacted: {n} names replaced (host, vm1, vm2...), command lines cut");
        r
    } else {
        s
    };
    snapshot::write(&s, &a.output)?;
    eprintln!(
        "wrote {} ({} files at t0, {} at t1, {} samples)",
        a.output.display(),
        s.t0.files.len(),
        s.t1.files.len(),
        s.samples.len()
    );
    Ok(())
}

/// Commands that run for hours or weeks run without transparent huge
/// pages: mimalloc advises its arenas huge (MADV_HUGEPAGE), and with them
/// `serve`'s RSS in a 10-minute soak at 10,000 threads was ~20 MiB higher
/// (issue 29; BENCHMARKS.md, "Where serve's memory grows"). Short commands
/// keep them. The setting passes to children (a `virsh` the daemon runs),
/// which costs them nothing that matters.
fn runs_for_long(c: &Command) -> bool {
    matches!(c, Command::Serve(_) | Command::Top(_) | Command::Record(_))
        || matches!(c, Command::Place(p) if matches!(p.cmd, place_cmd::PlaceCmd::Daemon(_)))
}

fn run(cli: Cli) -> Result<(), Error> {
    match cli.command {
        Command::Doctor(c) => doctor(&c),
        Command::Host(a) => host(&a),
        Command::Snapshot(a) => snapshot_cmd(&a),
        Command::Completions { shell } => {
            let mut cmd = Cli::command();
            clap_complete::generate(shell, &mut cmd, "stealscope", &mut std::io::stdout());
            Ok(())
        }
        Command::Probe(a) => probe_cmd::run(&a),
        Command::Record(a) => record_cmd::run(&a),
        Command::Place(a) => place_cmd::run(&a),
        Command::Serve(a) => serve_cmd::run(&a),
        Command::Sim(a) => sim_cmd::run(&a),
        Command::Fleet(a) => fleet_cmd::run(&a),
        Command::Report(a) => report_cmd::run(&a),
        Command::Top(a) => top_cmd::run(&a),
        Command::Man { dir } => {
            std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
            clap_mangen::generate_to(Cli::command(), &dir)
                .map_err(|e| format!("{}: {e}", dir.display()))?;
            Ok(())
        }
    }
}

/// `serve` runs for weeks and rebuilds per-thread tables of a 10,000-thread
/// host every second from several threads: glibc's per-thread arenas kept
/// the freed pages (RSS grew ~0.5 MB/s with a flat live heap, issue 29);
/// mimalloc returns them (with huge pages off: [`runs_for_long`]).
#[cfg(feature = "mimalloc")]
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    let cli = Cli::parse();
    if runs_for_long(&cli.command) {
        // An old kernel without the call keeps huge pages: not an error.
        let _ = nix::sys::prctl::set_thp_disable(true);
    }
    match run(cli) {
        Ok(()) if CUT_OFF.load(std::sync::atomic::Ordering::Relaxed) => {
            ExitCode::from(EXIT_CUT_OFF)
        }
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            // One line: the error already names the file and the problem.
            let msg = e.to_string().replace('\n', " ");
            eprintln!("stealscope: {msg}");
            ExitCode::from(2)
        }
    }
}
