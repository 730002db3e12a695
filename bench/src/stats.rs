//! Order statistics: exact percentiles of one run, medians across runs.

pub(crate) struct Percentiles {
    pub p50: f64,
    pub p99: f64,
    pub mean: f64,
    pub max: f64,
}

impl Percentiles {
    /// Nearest-rank percentiles; `None` for an empty set. Sorts `values`.
    pub(crate) fn of(values: &mut [f64]) -> Option<Self> {
        if values.is_empty() {
            return None;
        }
        values.sort_by(f64::total_cmp);
        let mean = values.iter().sum::<f64>() / values.len() as f64;
        Some(Self {
            p50: nearest_rank(values, 0.50)?,
            p99: nearest_rank(values, 0.99)?,
            mean,
            max: *values.last()?,
        })
    }
}

/// The smallest value with at least `q` of the sorted set at or below it.
fn nearest_rank(sorted: &[f64], q: f64) -> Option<f64> {
    let rank = (q * sorted.len() as f64).ceil() as usize;
    sorted.get(rank.saturating_sub(1)).copied()
}

/// Median, min and max of one figure over several runs.
#[derive(Clone, Copy, Debug, serde::Serialize)]
pub(crate) struct Spread {
    pub median: f64,
    pub min: f64,
    pub max: f64,
    pub runs: usize,
}

impl Spread {
    pub(crate) fn of(values: &[f64]) -> Option<Self> {
        let mut sorted = values.to_vec();
        sorted.sort_by(f64::total_cmp);
        let n = sorted.len();
        let median = match n {
            0 => return None,
            _ if n % 2 == 1 => sorted[n / 2],
            _ => (sorted[n / 2 - 1] + sorted[n / 2]) / 2.0,
        };
        Some(Self {
            median,
            min: sorted[0],
            max: sorted[n - 1],
            runs: n,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_use_nearest_rank() {
        let mut v: Vec<f64> = (1..=100).map(f64::from).collect();
        let p = Percentiles::of(&mut v).expect("non-empty");
        assert_eq!(p.p50, 50.0);
        assert_eq!(p.p99, 99.0);
        assert_eq!(p.max, 100.0);
        assert!(Percentiles::of(&mut []).is_none());
    }

    #[test]
    fn median_of_odd_and_even_runs() {
        let s = Spread::of(&[5.0, 1.0, 3.0]).expect("non-empty");
        assert_eq!((s.median, s.min, s.max, s.runs), (3.0, 1.0, 5.0, 3));
        assert_eq!(Spread::of(&[4.0, 2.0]).map(|s| s.median), Some(3.0));
        assert!(Spread::of(&[]).is_none());
    }
}
