//! Test helper for the two-node guest (crates/cli/tests/numa_memory.rs):
//! allocates and touches MIB MiB of anonymous memory on NODE, prints
//! "READY pid=<pid> node=<node> mib=<mib>" and sleeps until killed.
//!
//! Usage: numa_hog NODE MIB [keep-bind]
//!
//! The pages are placed with set_mempolicy(MPOL_BIND, {NODE}) while they
//! are touched (so they cannot land elsewhere), then the policy goes back to
//! the default: like a VM whose memory ended up on one node. With
//! `keep-bind` the binding stays (numa_maps then shows "bind:NODE"): like a
//! VM whose owner bound its memory (QEMU host-nodes, numactl --membind).

use std::io::Write;

fn set_policy(mode: libc::c_int, node: Option<u32>) -> std::io::Result<()> {
    let mask: libc::c_ulong = node.map_or(0, |n| 1 << n);
    // maxnode counts bits + 1 (mm/mempolicy.c get_nodes reads maxnode - 1 bits).
    let (ptr, maxnode) = match node {
        Some(_) => (
            &mask as *const libc::c_ulong,
            libc::c_ulong::BITS as libc::c_ulong + 1,
        ),
        None => (std::ptr::null(), 0),
    };
    // SAFETY: `mask` outlives the call; the kernel only reads it.
    let r = unsafe { libc::syscall(libc::SYS_set_mempolicy, mode, ptr, maxnode) };
    if r < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let parsed = (
        args.get(1).and_then(|v| v.parse::<u32>().ok()),
        args.get(2).and_then(|v| v.parse::<usize>().ok()),
    );
    let keep_bind = match args.get(3).map(String::as_str) {
        None => false,
        Some("keep-bind") => true,
        Some(other) => {
            eprintln!("numa_hog: unknown option {other:?} (only keep-bind)");
            std::process::exit(2);
        }
    };
    let (Some(node), Some(mib)) = parsed else {
        eprintln!("usage: numa_hog NODE MIB [keep-bind]");
        std::process::exit(2);
    };
    if node >= 64 {
        eprintln!("numa_hog: node {node}: only nodes 0-63");
        std::process::exit(2);
    }
    if let Err(e) = set_policy(libc::MPOL_BIND, Some(node)) {
        eprintln!("numa_hog: set_mempolicy(MPOL_BIND, node {node}): {e}");
        std::process::exit(1);
    }
    let len = mib << 20;
    // SAFETY: a fresh private anonymous mapping, never unmapped.
    let base = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    if base == libc::MAP_FAILED {
        eprintln!(
            "numa_hog: mmap {mib} MiB: {}",
            std::io::Error::last_os_error()
        );
        std::process::exit(1);
    }
    for off in (0..len).step_by(4096) {
        // SAFETY: inside the mapping.
        unsafe { (base as *mut u8).add(off).write_volatile(1) };
    }
    // With keep-bind the task policy stays, and numa_maps shows it.
    if !keep_bind {
        if let Err(e) = set_policy(libc::MPOL_DEFAULT, None) {
            eprintln!("numa_hog: set_mempolicy(MPOL_DEFAULT): {e}");
            std::process::exit(1);
        }
    }
    println!("READY pid={} node={node} mib={mib}", std::process::id());
    let _ = std::io::stdout().flush();
    loop {
        std::thread::sleep(std::time::Duration::from_secs(3600));
    }
}
