//! `stealscope place plan|apply|daemon|undo|move-memory`: the placement
//! daemon. Everything that changes the host is a dry run unless `--yes`.

use clap::{Args, Subcommand};
use std::path::PathBuf;
use std::time::Duration;
use stealscope_actuators::memory::{self, MoveLimits};
use stealscope_placement::Config;

type Error = Box<dyn std::error::Error>;

#[derive(Args, Debug)]
pub struct PlaceArgs {
    #[command(subcommand)]
    pub cmd: PlaceCmd,
}

#[derive(Args, Debug, Clone)]
pub struct PlaceCommon {
    /// Placement config (TOML); a missing default file means defaults
    #[arg(long, value_name = "PATH", default_value = stealscope_placement::config::DEFAULT_PATH)]
    pub config: PathBuf,
    /// Journal file (overrides the config's `journal`)
    #[arg(long, value_name = "PATH")]
    pub journal: Option<PathBuf>,
    /// Machine-readable output
    #[arg(long)]
    pub json: bool,
}

#[derive(Subcommand, Debug)]
pub enum PlaceCmd {
    /// Move a process's memory to one NUMA node in steps, refusing unsafe moves
    #[command(
        after_help = "Examples:\n  stealscope place move-memory --pid 4242 --node 1          dry run: checks only\n  \
                            stealscope place move-memory --pid 4242 --node 1 --yes\n\n\
                            Before each step the node must keep its free-memory margin, swap headroom must hold and \
                            memory pressure (PSI) must stay below the config's psi_memory_stop."
    )]
    MoveMemory(MoveMemoryArgs),
}

#[derive(Args, Debug)]
pub struct MoveMemoryArgs {
    #[command(flatten)]
    pub common: PlaceCommon,
    #[arg(long)]
    pub pid: u32,
    #[arg(long)]
    pub node: u32,
    /// Really move (default: dry run)
    #[arg(long)]
    pub yes: bool,
}

fn config(c: &PlaceCommon) -> Result<Config, Error> {
    let explicit = c.config.as_os_str() != stealscope_placement::config::DEFAULT_PATH;
    Ok(Config::load(&c.config, explicit)?)
}

pub fn limits(cfg: &Config) -> MoveLimits {
    MoveLimits {
        margin_pct: cfg.mem_margin_pct,
        margin_min_bytes: cfg.mem_margin_min_mib << 20,
        step_bytes: cfg.mem_step_mib << 20,
        psi_stop: cfg.psi_memory_stop,
        swap_headroom: cfg.swap_headroom,
    }
}

pub fn run(a: &PlaceArgs) -> Result<(), Error> {
    match &a.cmd {
        PlaceCmd::MoveMemory(m) => {
            let cfg = config(&m.common)?;
            let r = memory::move_memory(
                std::path::Path::new("/"),
                m.pid,
                m.node,
                &limits(&cfg),
                !m.yes,
                &mut |line| eprintln!("{line}"),
            )?;
            if m.common.json {
                println!("{}", stealscope_output::json::render(&r));
            } else {
                println!(
                    "{} pid {}: {} MiB to node {} in {} step(s){}",
                    if m.yes {
                        "moved"
                    } else {
                        "would move (dry run)"
                    },
                    r.pid,
                    r.moved_bytes >> 20,
                    r.to_node,
                    r.steps,
                    r.stopped
                        .as_deref()
                        .map(|s| format!("; stopped: {s}"))
                        .unwrap_or_default()
                );
            }
            let _ = Duration::ZERO;
            Ok(())
        }
    }
}
