//! Summary statistics over repeated measurements (e.g. the TTI of N boots), as used by the
//! benchmarks: count, median, extremes, mean and sample standard deviation.

use serde::{Deserialize, Serialize};
use std::fmt;

/// Statistics of a set of samples (seconds, usually). Non-finite samples are ignored.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Stats {
    /// Number of (finite) samples, at least 1.
    pub n: usize,
    /// Median (mean of the middle two for an even count).
    pub median: f64,
    /// Smallest sample.
    pub min: f64,
    /// Largest sample.
    pub max: f64,
    /// Arithmetic mean.
    pub mean: f64,
    /// Sample standard deviation (divisor n − 1); 0 for a single sample.
    pub stddev: f64,
}

impl Stats {
    /// Computes the statistics of the finite values in `samples`; `None` if there are none.
    pub fn from_samples(samples: &[f64]) -> Option<Self> {
        let mut v: Vec<f64> = samples.iter().copied().filter(|x| x.is_finite()).collect();
        if v.is_empty() {
            return None;
        }
        v.sort_by(f64::total_cmp);
        let n = v.len();
        let median = if n % 2 == 1 {
            v[n / 2]
        } else {
            (v[n / 2 - 1] + v[n / 2]) / 2.0
        };
        let mean = v.iter().sum::<f64>() / n as f64;
        let stddev = if n > 1 {
            let ss: f64 = v.iter().map(|x| (x - mean) * (x - mean)).sum();
            (ss / (n - 1) as f64).sqrt()
        } else {
            0.0
        };
        Some(Self {
            n,
            median,
            min: v[0],
            max: v[n - 1],
            mean,
            stddev,
        })
    }
}

impl fmt::Display for Stats {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "median {:.3} s (min {:.3}, max {:.3}, mean {:.3} ± {:.3}, n={})",
            self.median, self.min, self.max, self.mean, self.stddev, self.n
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_and_non_finite() {
        assert_eq!(Stats::from_samples(&[]), None);
        assert_eq!(Stats::from_samples(&[f64::NAN, f64::INFINITY]), None);
    }

    #[test]
    fn single_sample() {
        let s = Stats::from_samples(&[1.5]).expect("one sample");
        assert_eq!(
            (s.n, s.median, s.min, s.max, s.mean, s.stddev),
            (1, 1.5, 1.5, 1.5, 1.5, 0.0)
        );
    }

    #[test]
    fn odd_and_even() {
        let s = Stats::from_samples(&[3.0, 1.0, 2.0, f64::NAN]).expect("samples");
        assert_eq!(
            (s.n, s.median, s.min, s.max, s.mean),
            (3, 2.0, 1.0, 3.0, 2.0)
        );
        assert!((s.stddev - 1.0).abs() < 1e-12);
        let s = Stats::from_samples(&[4.0, 1.0, 2.0, 3.0]).expect("samples");
        assert_eq!(s.median, 2.5);
        assert!((s.stddev - (5.0f64 / 3.0).sqrt()).abs() < 1e-12);
        assert_eq!(
            s.to_string(),
            "median 2.500 s (min 1.000, max 4.000, mean 2.500 ± 1.291, n=4)"
        );
    }

    #[test]
    fn serde_roundtrip() {
        let s = Stats::from_samples(&[1.0, 2.0]).expect("samples");
        let json = serde_json::to_string(&s).expect("serialize");
        assert!(json.starts_with(r#"{"n":2,"median":1.5,"#), "{json}");
        let back: Stats = serde_json::from_str(&json).expect("deserialize");
        assert_eq!(back, s);
    }
}
