//! Summary statistics over per-connection figures.

/// Jain's fairness index of `xs`: (Σx)² / (n·Σx²); 1.0 when all are equal,
/// 1/n when one takes everything. `None` for an empty or all-zero set.
pub fn jain_fairness(xs: &[f64]) -> Option<f64> {
    if xs.is_empty() {
        return None;
    }
    let sum: f64 = xs.iter().sum();
    let sq: f64 = xs.iter().map(|x| x * x).sum();
    if sq == 0.0 {
        return None;
    }
    Some(sum * sum / (xs.len() as f64 * sq))
}

/// Bytes per second for `bytes` moved in `nanos` nanoseconds (0 when no time
/// passed).
pub fn bytes_per_second(bytes: u64, nanos: u64) -> f64 {
    if nanos == 0 {
        0.0
    } else {
        bytes as f64 * 1e9 / nanos as f64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fairness_bounds() {
        assert_eq!(jain_fairness(&[5.0, 5.0, 5.0, 5.0]), Some(1.0));
        assert_eq!(jain_fairness(&[8.0, 0.0, 0.0, 0.0]), Some(0.25));
        assert_eq!(jain_fairness(&[]), None);
        assert_eq!(jain_fairness(&[0.0]), None);
        let j = jain_fairness(&[1.0, 2.0]).unwrap();
        assert!((j - 0.9).abs() < 1e-12);
    }

    #[test]
    fn rate_from_bytes_and_time() {
        assert_eq!(bytes_per_second(1000, 1_000_000_000), 1000.0);
        assert_eq!(bytes_per_second(1000, 0), 0.0);
    }
}
