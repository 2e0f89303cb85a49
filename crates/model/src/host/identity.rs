//! What a VMM's command line says of a VM beyond its name (discovery.rs):
//! its UUID and its memory size, for the fleet metrics (`stealscope_vm_info`,
//! `stealscope_vm_memory_bytes`). libvirt always passes `-uuid` and `-m`;
//! a hand-started QEMU may give neither, and Firecracker takes both through
//! its API, so `None` means "not on the command line", never zero.

/// QEMU `-uuid 6a4e...`: the SMBIOS UUID, which libvirt's domain UUID is.
pub fn vm_uuid(cmdline: &[String]) -> Option<String> {
    let i = cmdline.iter().position(|a| a == "-uuid")?;
    let v = cmdline.get(i + 1)?.trim();
    // 8-4-4-4-12 hex digits; anything else is not a UUID we can name.
    let ok = v.len() == 36
        && v.char_indices().all(|(k, c)| {
            if matches!(k, 8 | 13 | 18 | 23) {
                c == '-'
            } else {
                c.is_ascii_hexdigit()
            }
        });
    ok.then(|| v.to_ascii_lowercase())
}

/// QEMU `-m SIZE` or `-m size=SIZE[,slots=..,maxmem=..]`: the boot memory
/// in bytes. A bare number is MiB (QEMU's default unit); suffixes K, M, G,
/// T (either case) are binary multiples.
pub fn vm_memory_bytes(cmdline: &[String]) -> Option<u64> {
    let i = cmdline.iter().position(|a| a == "-m" || a == "--m")?;
    let arg = cmdline.get(i + 1)?;
    let size = arg
        .split(',')
        .find_map(|p| p.strip_prefix("size="))
        .or_else(|| arg.split(',').next().filter(|s| !s.contains('=')))?;
    parse_size(size.trim())
}

fn parse_size(s: &str) -> Option<u64> {
    let (num, mult) = match s.char_indices().last()? {
        (k, c) if c.is_ascii_alphabetic() => {
            let m: u64 = match c.to_ascii_uppercase() {
                'B' => 1,
                'K' => 1 << 10,
                'M' => 1 << 20,
                'G' => 1 << 30,
                'T' => 1 << 40,
                _ => return None,
            };
            (&s[..k], m)
        }
        _ => (s, 1 << 20),
    };
    let v: f64 = num.parse().ok()?;
    (v.is_finite() && v > 0.0).then(|| (v * mult as f64).round() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(s: &[&str]) -> Vec<String> {
        s.iter().map(|x| x.to_string()).collect()
    }

    #[test]
    fn libvirt_command_line() {
        // As libvirt 9 writes it (abridged).
        let cmd = v(&[
            "/usr/bin/qemu-system-x86_64",
            "-name",
            "guest=web1,debug-threads=on",
            "-m",
            "size=4194304k",
            "-uuid",
            "6A4E2F52-3C1B-4B8E-9B7A-0123456789AB",
        ]);
        assert_eq!(
            vm_uuid(&cmd).as_deref(),
            Some("6a4e2f52-3c1b-4b8e-9b7a-0123456789ab")
        );
        assert_eq!(vm_memory_bytes(&cmd), Some(4 << 30));
    }

    #[test]
    fn plain_qemu_sizes() {
        let m = |s: &str| vm_memory_bytes(&v(&["qemu", "-m", s]));
        assert_eq!(m("2048"), Some(2 << 30));
        assert_eq!(m("2G"), Some(2 << 30));
        assert_eq!(m("512M,slots=2,maxmem=4G"), Some(512 << 20));
        assert_eq!(m("1.5g"), Some(3 << 29));
        assert_eq!(m("lots"), None);
        assert_eq!(m("slots=2"), None);
        assert_eq!(vm_memory_bytes(&v(&["qemu"])), None);
        assert_eq!(vm_uuid(&v(&["qemu", "-uuid", "not-a-uuid"])), None);
        assert_eq!(vm_uuid(&v(&["firecracker", "--id", "x"])), None);
    }
}
