//! How much of a pool's demand its CPUs cannot serve, on average, when
//! the threads want CPU at independent moments: the expected excess of
//! the number of threads runnable at once over the pool's CPUs,
//! E[max(K - c, 0)], with K the sum of one Bernoulli variable per thread
//! (a vCPU that wants a share u of a CPU is runnable at a random moment
//! with chance u). This is what a work-conserving scheduler over the pool
//! leaves waiting: the kernel's wake-up placement and idle pulls keep a
//! node's CPUs close to that. K is taken as normal with the sum's mean and
//! variance (exact enough for pools of more than a few threads, and O(1)
//! from two running sums); with no variance it is the fluid overcommit,
//! max(load - c, 0), the planner's measure before.
//!
//! Why it matters: two 16-CPU nodes each at 75 % leave more unserved than
//! one 32-CPU pool at 75 %, and a node at 75 % beside one at 50 % more than
//! both at 62 %. The planner's old rule, "a node at or below one CPU of
//! demand per CPU holds it", saw none of that and left nodes imbalanced.
//! Hand-written: a few lines over `libm`'s erfc; no crate offers it.

/// Variance of the runnable count a thread wanting `u` of a CPU adds.
pub fn thread_spread(u: f64) -> f64 {
    let u = u.clamp(0.0, 1.0);
    u * (1.0 - u)
}

/// The runnable-count variance assumed per CPU of demand of the host's
/// own work, whose threads are not known one by one: threads wanting half
/// a CPU each (the largest variance per unit of demand a thread can add is
/// 1, at u -> 0; 0.5 sits between the busy and the sleepy).
pub const HOST_WORK_SPREAD: f64 = 0.5;

/// CPUs of demand a pool of `cpus` CPUs leaves unserved on average, with
/// `load` CPUs of demand whose runnable count has variance `spread`.
pub fn unserved(load: f64, spread: f64, cpus: f64) -> f64 {
    let excess = load - cpus;
    if spread <= 1e-12 {
        return excess.max(0.0);
    }
    let sd = spread.sqrt();
    let z = excess / sd;
    // E[max(X, 0)] for X ~ N(excess, sd²): sd·φ(z) + excess·Φ(z).
    let pdf = (-0.5 * z * z).exp() / (2.0 * std::f64::consts::PI).sqrt();
    let cdf = 0.5 * libm::erfc(-z / std::f64::consts::SQRT_2);
    (sd * pdf + excess * cdf).max(excess.max(0.0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn without_variance_it_is_the_fluid_overcommit() {
        assert_eq!(unserved(12.0, 0.0, 16.0), 0.0);
        assert!((unserved(20.0, 0.0, 16.0) - 4.0).abs() < 1e-12);
    }

    #[test]
    fn it_grows_with_load_and_variance_and_shrinks_with_pooling() {
        let v = |n: f64, u: f64| n * thread_spread(u);
        // 16 threads at 0.75 on 16 CPUs against 12 on 16.
        assert!(unserved(12.0, v(16.0, 0.75), 16.0) > unserved(9.0, v(12.0, 0.75), 16.0));
        assert!(unserved(12.0, v(24.0, 0.5), 16.0) > unserved(12.0, v(16.0, 0.75), 16.0));
        // Two 16-CPU nodes at 75 % leave more than one 32-CPU pool at 75 %.
        let one = unserved(24.0, v(48.0, 0.5), 32.0);
        let two = 2.0 * unserved(12.0, v(24.0, 0.5), 16.0);
        assert!(two > one, "{two} vs {one}");
        // And an imbalanced pair more than a balanced one.
        let bal = 2.0 * unserved(10.0, v(20.0, 0.5), 16.0);
        let imb = unserved(12.0, v(24.0, 0.5), 16.0) + unserved(8.0, v(16.0, 0.5), 16.0);
        assert!(imb > bal, "{imb} vs {bal}");
    }

    #[test]
    fn matches_the_exact_sum_of_bernoullis() {
        // 24 threads at u = 0.5 on 16 CPUs: K is binomial(24, 0.5).
        let (n, c) = (24u32, 16i64);
        let mut exact = 0.0;
        let mut comb = 1.0f64;
        for k in 0..=n {
            if k > 0 {
                comb = comb * (n - k + 1) as f64 / k as f64;
            }
            exact += comb * 0.5f64.powi(n as i32) * ((k as i64 - c).max(0) as f64);
        }
        let approx = unserved(12.0, 24.0 * 0.25, 16.0);
        assert!((approx - exact).abs() < 0.02, "{approx} vs {exact}");
    }
}
