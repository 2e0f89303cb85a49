//! The commands an operator runs to carry out a move; stealscope runs
//! none of them. The VM is named by its UUID where the host knows one
//! (libvirt and OpenStack accept it), else by its name.

use serde::Serialize;

#[derive(Debug, Clone, Serialize)]
pub struct Commands {
    /// libvirt: a live migration over SSH, kept defined on the target.
    pub virsh: String,
    /// OpenStack: a live migration to a named compute host (admin).
    pub openstack: String,
    /// KubeVirt: a VirtualMachineInstanceMigration (YAML), pinned to the
    /// target node through `addedNodeSelector` (KubeVirt 1.5 and later;
    /// older releases let the scheduler pick the node).
    pub kubevirt: String,
}

/// Safe to put in a shell word as it is (names and hostnames usually are).
fn sh(s: &str) -> String {
    if !s.is_empty()
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_.:/@+=".contains(c))
    {
        s.to_string()
    } else {
        format!("'{}'", s.replace('\'', "'\\''"))
    }
}

/// A Kubernetes object name: lower case, digits and dashes, at most 63.
fn k8s_name(s: &str) -> String {
    let mut out: String = s
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_lowercase()
            } else {
                '-'
            }
        })
        .collect();
    out.truncate(52);
    out.trim_matches('-').to_string()
}

pub fn commands(vm: &str, uuid: &str, to_host: &str, index: usize) -> Commands {
    let id = if uuid.is_empty() { vm } else { uuid };
    Commands {
        virsh: format!(
            "virsh migrate --live --persistent --undefinesource --verbose {} qemu+ssh://{}/system",
            sh(id),
            sh(to_host)
        ),
        openstack: format!(
            "openstack server migrate --live-migration --host {} --wait {}",
            sh(to_host),
            sh(id)
        ),
        kubevirt: format!(
            "apiVersion: kubevirt.io/v1\nkind: VirtualMachineInstanceMigration\nmetadata:\n  name: stealscope-{}-{index}\nspec:\n  vmiName: {}\n  addedNodeSelector:\n    kubernetes.io/hostname: {}\n",
            k8s_name(vm),
            serde_json::to_string(vm).unwrap_or_default(),
            serde_json::to_string(to_host).unwrap_or_default(),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_quoted_for_the_shell_and_kubernetes() {
        let c = commands("web 1", "", "hv-2.example", 3);
        assert_eq!(
            c.virsh,
            "virsh migrate --live --persistent --undefinesource --verbose 'web 1' qemu+ssh://hv-2.example/system"
        );
        assert!(c.openstack.ends_with("--host hv-2.example --wait 'web 1'"));
        assert!(c.kubevirt.contains("name: stealscope-web-1-3\n"));
        assert!(c.kubevirt.contains("vmiName: \"web 1\"\n"));
        let u = commands("db", "6a4e2f52-3c1b-4b8e-9b7a-0123456789ab", "hv", 1);
        assert!(u.virsh.contains(" 6a4e2f52-3c1b-4b8e-9b7a-0123456789ab "));
    }
}
