//! Kernel variables the BPF program addresses by BTF id (`ld_imm64` with
//! BPF_PSEUDO_BTF_ID, what libbpf emits for a `__ksym`): aya 0.14 does not
//! resolve `__ksym` externs, so the program carries a marker in the
//! instruction's immediate and this module writes the variable's vmlinux
//! BTF id over it before the object is loaded.

use aya::Btf;
use aya_obj::btf::BtfKind;

/// The marker `RUNQUEUES_MARK` in bpf/wait_by.bpf.c ("RUNQ").
const RUNQUEUES_MARK: u32 = 0x5255_4e51;
const BPF_PSEUDO_BTF_ID: u8 = 3;

/// How the program reaches a task's run queue (see `rq_now` in
/// bpf/wait_by.bpf.c): the branch the kernel's BTF leaves alive decides,
/// and the loader resolves the BTF-id loads for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RqPath {
    /// `p->se.cfs_rq->rq` (CONFIG_FAIR_GROUP_SCHED): the `runqueues`
    /// loads are dead code and become plain loads of 0.
    CfsRq,
    /// The per-CPU `runqueues`, by BTF id (needs CONFIG_KALLSYMS_ALL).
    Runqueues,
}

impl RqPath {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            RqPath::CfsRq => "run queue through se.cfs_rq->rq",
            RqPath::Runqueues => "run queue through per-CPU runqueues",
        }
    }
}

/// The object with every `ld_imm64 rX, BTF_ID(runqueues)` resolved for
/// `path` against `btf`, as 8-byte aligned words (the ELF parser wants the
/// alignment `include_bytes_aligned!` gave the original). Errs when the
/// running kernel's BTF has no `runqueues` variable or the object carries
/// no marker.
pub(crate) fn resolve_runqueues(
    object: &[u8],
    btf: &Btf,
    path: RqPath,
) -> Result<Vec<u64>, String> {
    let id = match path {
        RqPath::CfsRq => None,
        RqPath::Runqueues => Some(
            btf.id_by_type_name_kind("runqueues", BtfKind::Var)
                .map_err(|e| format!("vmlinux BTF has no per-CPU variable `runqueues`: {e}"))?,
        ),
    };
    let mut bytes = object.to_vec();
    let n = patch(&mut bytes, RUNQUEUES_MARK, id);
    if n == 0 {
        return Err("the BPF object has no `runqueues` reference to resolve".into());
    }
    let mut words = vec![0u64; bytes.len().div_ceil(8)];
    for (w, chunk) in words.iter_mut().zip(bytes.chunks(8)) {
        let mut b = [0u8; 8];
        b[..chunk.len()].copy_from_slice(chunk);
        *w = u64::from_ne_bytes(b);
    }
    Ok(words)
}

/// The bytes of `words`, `len` long.
pub(crate) fn as_bytes(words: &[u64], len: usize) -> &[u8] {
    // SAFETY: u64 has no padding; the slice covers memory `words` owns.
    let all = unsafe { std::slice::from_raw_parts(words.as_ptr().cast::<u8>(), words.len() * 8) };
    &all[..len]
}

/// Overwrites the immediate of each `ld_imm64 rX, src=BTF_ID, mark` (16
/// bytes: opcode 0x18, src register in the high nibble, zero offset, the
/// mark, then a zero second half) with `id`, or with None makes it a plain
/// `ld_imm64 rX, 0`; how many it found. Programs are 8-byte aligned in
/// their sections, so only aligned starts are instructions.
fn patch(bytes: &mut [u8], mark: u32, id: Option<u32>) -> usize {
    let mut n = 0;
    let mut i = 0;
    while i + 16 <= bytes.len() {
        let insn = &bytes[i..i + 16];
        if insn[0] == 0x18
            && insn[1] >> 4 == BPF_PSEUDO_BTF_ID
            && insn[2..4] == [0, 0]
            && insn[4..8] == mark.to_le_bytes()
            && insn[8..16] == [0; 8]
        {
            if id.is_none() {
                bytes[i + 1] &= 0x0f;
            }
            bytes[i + 4..i + 8].copy_from_slice(&id.unwrap_or(0).to_le_bytes());
            n += 1;
            i += 16;
        } else {
            i += 8;
        }
    }
    n
}

/// The address of the first of `names` that /proc/kallsyms lists as a
/// kernel text symbol (`t`/`T`, no module), or None (absent, or hidden:
/// addresses read as 0 unless kptr_restrict lets this process see them).
/// Function symbols are listed without CONFIG_KALLSYMS_ALL.
pub(crate) fn text_symbol(names: &[&str]) -> Option<u64> {
    let f = std::fs::File::open("/proc/kallsyms").ok()?;
    find_text_symbol(std::io::BufReader::new(f), names)
}

fn find_text_symbol(r: impl std::io::BufRead, names: &[&str]) -> Option<u64> {
    let mut found: Vec<Option<u64>> = vec![None; names.len()];
    for line in r.lines().map_while(std::result::Result::ok) {
        let mut f = line.split_whitespace();
        let (Some(addr), Some(kind), Some(name), None) = (f.next(), f.next(), f.next(), f.next())
        else {
            continue;
        };
        if !matches!(kind, "t" | "T") {
            continue;
        }
        if let Some(i) = names.iter().position(|&n| n == name) {
            found[i] = u64::from_str_radix(addr, 16).ok().filter(|&a| a != 0);
        }
    }
    found.into_iter().flatten().next()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_text_symbol_is_found_by_the_first_name_listed() {
        let text = "ffffffff81000000 T _stext\n\
                    ffffffff814437d0 t tick_nohz_handler\n\
                    ffffffff81400000 t tick_sched_timer\n\
                    ffffffffc0000000 t tick_nohz_handler\t[kvm]\n\
                    0000000000000000 t hidden\n\
                    ffffffff82000000 d tick_data\n";
        let find = |n: &[&str]| find_text_symbol(text.as_bytes(), n);
        assert_eq!(
            find(&["tick_nohz_handler", "tick_sched_timer"]),
            Some(0xffff_ffff_8144_37d0)
        );
        assert_eq!(
            find(&["nope", "tick_sched_timer"]),
            Some(0xffff_ffff_8140_0000)
        );
        assert_eq!(find(&["hidden"]), None, "kptr_restrict zeroes");
        assert_eq!(find(&["tick_data"]), None, "not text");
    }

    #[test]
    fn every_marked_load_of_the_committed_object_is_patched_and_nothing_else() {
        let object = include_bytes!("../bpf/wait_by.bpf.o");
        let mut bytes = object.to_vec();
        let n = patch(&mut bytes, RUNQUEUES_MARK, Some(0x0102_0304));
        assert!(n >= 3, "switch, wake-up and migration read the rq: {n}");
        let changed = object.iter().zip(&bytes).filter(|(a, b)| a != b).count();
        assert!(changed <= 4 * n, "{changed} bytes changed for {n} loads");
        assert_eq!(patch(&mut bytes, RUNQUEUES_MARK, Some(1)), 0, "none left");
        let mut plain = object.to_vec();
        assert_eq!(patch(&mut plain, RUNQUEUES_MARK, None), n);
        let changed = object.iter().zip(&plain).filter(|(a, b)| a != b).count();
        assert!(changed <= 5 * n, "{changed} bytes changed for {n} loads");
    }

    #[test]
    fn a_mark_outside_a_btf_id_load_is_left_alone() {
        // Same immediate, plain ld_imm64 (src 0): not ours.
        let mut b = [
            0x18, 0x01, 0, 0, 0x51, 0x4e, 0x55, 0x52, 0, 0, 0, 0, 0, 0, 0, 0,
        ];
        assert_eq!(patch(&mut b, RUNQUEUES_MARK, Some(7)), 0);
        b[1] = 0x31;
        assert_eq!(patch(&mut b, RUNQUEUES_MARK, Some(7)), 1);
        assert_eq!(b[4..8], 7u32.to_le_bytes());
        b[1] = 0x31;
        b[4..8].copy_from_slice(&RUNQUEUES_MARK.to_le_bytes());
        assert_eq!(patch(&mut b, RUNQUEUES_MARK, None), 1);
        assert_eq!((b[1], &b[4..8]), (0x01, &[0u8; 4][..]), "ld_imm64 r1, 0");
    }
}
