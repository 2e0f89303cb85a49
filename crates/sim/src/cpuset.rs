//! A set of CPU numbers as a bitmap (hosts of up to 1024 CPUs).

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct CpuSet(Vec<u64>);

impl CpuSet {
    pub fn all(n: usize) -> CpuSet {
        CpuSet::from_cpus(&(0..n as u32).collect::<Vec<_>>())
    }

    pub fn from_cpus(cpus: &[u32]) -> CpuSet {
        let words = cpus.iter().max().map_or(0, |m| *m as usize / 64 + 1);
        let mut v = vec![0u64; words];
        for c in cpus {
            v[*c as usize / 64] |= 1 << (c % 64);
        }
        CpuSet(v)
    }

    pub fn contains(&self, cpu: usize) -> bool {
        self.0
            .get(cpu / 64)
            .is_some_and(|w| w & (1 << (cpu % 64)) != 0)
    }

    pub fn iter(&self) -> impl Iterator<Item = usize> + '_ {
        self.0.iter().enumerate().flat_map(|(i, w)| {
            let mut w = *w;
            std::iter::from_fn(move || {
                if w == 0 {
                    return None;
                }
                let b = w.trailing_zeros() as usize;
                w &= w - 1;
                Some(i * 64 + b)
            })
        })
    }

    pub fn to_vec(&self) -> Vec<u32> {
        self.iter().map(|c| c as u32).collect()
    }

    pub fn len(&self) -> usize {
        self.0.iter().map(|w| w.count_ones() as usize).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.0.iter().all(|w| *w == 0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip() {
        let s = CpuSet::from_cpus(&[0, 3, 64, 130]);
        assert_eq!(s.to_vec(), vec![0, 3, 64, 130]);
        assert!(s.contains(64) && !s.contains(65) && !s.contains(5000));
        assert_eq!(s.len(), 4);
        assert_eq!(CpuSet::all(3).to_vec(), vec![0, 1, 2]);
    }
}
