//! Options for what only a live KVM host can answer (QMP, the kvm:kvm_exit
//! sample), shared by `host` and `doctor`.

use clap::Args;
use std::time::Duration;
use stealscope_engine::host::HostLiveOptions;

#[derive(Args, Debug, Clone)]
#[command(next_help_heading = "KVM host")]
pub struct HostArgs {
    /// QMP socket of a VM, by the VM's name (repeatable); sockets declared on
    /// QEMU command lines (-qmp unix:..., -chardev socket + -mon mode=control)
    /// are used without it
    #[arg(long, value_name = "NAME=PATH", value_parser = parse_qmp)]
    pub qmp: Vec<(String, String)>,
    /// Length of the kvm:kvm_exit sample taken during the interval (at most
    /// 10s; 0 = none)
    #[arg(long, value_name = "DURATION", default_value = "1s", value_parser = parse_sample)]
    pub exit_sample: Duration,
}

impl HostArgs {
    pub fn live(&self) -> HostLiveOptions {
        HostLiveOptions {
            qmp: self.qmp.clone(),
            exit_sample: self.exit_sample,
            attribution: true,
            ..HostLiveOptions::default()
        }
    }
}

fn parse_qmp(s: &str) -> Result<(String, String), String> {
    match s.split_once('=') {
        Some((name, path)) if !name.is_empty() && !path.is_empty() => {
            Ok((name.to_string(), path.to_string()))
        }
        _ => Err(format!(
            "{s:?} is not NAME=PATH (a VM name and its QMP socket)"
        )),
    }
}

fn parse_sample(s: &str) -> Result<Duration, String> {
    if s.trim() == "0" {
        return Ok(Duration::ZERO);
    }
    let d = crate::parse::parse_duration(s)?;
    if d > stealscope_readers::kvm_exits::MAX_SAMPLE {
        return Err(format!("{s:?}: the exit sample is at most 10s"));
    }
    Ok(d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn qmp_and_sample_values() {
        assert_eq!(
            parse_qmp("vmA=/run/x/qmp.sock").unwrap(),
            ("vmA".to_string(), "/run/x/qmp.sock".to_string())
        );
        assert!(parse_qmp("/run/x/qmp.sock").is_err());
        assert!(parse_qmp("vmA=").is_err());
        assert_eq!(parse_sample("0").unwrap(), Duration::ZERO);
        assert_eq!(parse_sample("250ms").unwrap(), Duration::from_millis(250));
        assert!(parse_sample("11s").is_err());
    }
}
