//! `bench-stats`: percentiles and distribution summaries, below both `bench-report` and
//! `bench-telemetry` so that each uses the one method ([`percentile`]: linear interpolation,
//! NumPy's default).

use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};

/// Percentile of already sorted (ascending) values by linear interpolation between closest ranks
/// (Hyndman & Fan type 7, NumPy's default): with `h = (n − 1) q`, the value is
/// `x[⌊h⌋] + (h − ⌊h⌋)(x[⌊h⌋+1] − x[⌊h⌋])`.
///
/// `q` is a fraction in `[0, 1]` (clamped); `None` when `sorted` is empty or `q` is NaN. The
/// result always lies between the two ranks it interpolates, so it is monotone in `q` and within
/// `[min, max]`.
pub fn percentile(sorted: &[f64], q: f64) -> Option<f64> {
    if sorted.is_empty() || q.is_nan() {
        return None;
    }
    let q = q.clamp(0.0, 1.0);
    let last = sorted.len() - 1;
    let h = last as f64 * q;
    let lo = (h.floor() as usize).min(last);
    let a = sorted[lo];
    if lo == last {
        return Some(a);
    }
    let b = sorted[lo + 1];
    if a == b {
        return Some(a);
    }
    let v = a + (h - lo as f64) * (b - a);
    // Rounding can step one ulp outside [a, b]; clamping keeps monotonicity across ranks.
    let (min, max) = if a <= b { (a, b) } else { (b, a) };
    Some(v.clamp(min, max))
}

/// Sorts finite values ascending (non-finite values are dropped).
pub fn sorted_finite(values: impl IntoIterator<Item = f64>) -> Vec<f64> {
    let mut v: Vec<f64> = values.into_iter().filter(|x| x.is_finite()).collect();
    v.sort_by(f64::total_cmp);
    v
}

/// Mean of values (`None` when empty).
pub fn mean(values: &[f64]) -> Option<f64> {
    if values.is_empty() {
        None
    } else {
        Some(values.iter().sum::<f64>() / values.len() as f64)
    }
}

/// Pooled distributions with more samples than this are summarized with an HDR histogram
/// (microsecond resolution, 3 significant digits); at most this many are sorted exactly.
pub const ITL_EXACT_LIMIT: usize = 1_000_000;

/// Summary of a pooled distribution that can hold millions of samples (chunk gaps), ms.
///
/// Exact ([`percentile`] on the sorted samples) up to [`ITL_EXACT_LIMIT`] samples; above it the
/// percentiles come from an HDR histogram of microseconds with 3 significant digits (quantized to
/// 0.1 %) and `quantized` is `true`. `mean` and `max` are always exact.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct PooledDist {
    /// Number of samples.
    pub count: u64,
    /// Median.
    pub p50: Option<f64>,
    /// 90th percentile.
    pub p90: Option<f64>,
    /// 95th percentile.
    pub p95: Option<f64>,
    /// 99th percentile.
    pub p99: Option<f64>,
    /// Largest sample.
    pub max: Option<f64>,
    /// Arithmetic mean.
    pub mean: Option<f64>,
    /// `true` when the percentiles come from the HDR histogram rather than exact sorting.
    pub quantized: bool,
}

impl PooledDist {
    /// Summarizes `values` (non-finite ones dropped), exactly when there are at most `exact_limit`
    /// of them, else through an HDR histogram.
    pub fn from_values(values: &[f64], exact_limit: usize) -> Self {
        let n_finite = values.iter().filter(|x| x.is_finite()).count();
        if n_finite <= exact_limit {
            let sorted = sorted_finite(values.iter().copied());
            return Self {
                count: sorted.len() as u64,
                p50: percentile(&sorted, 0.50),
                p90: percentile(&sorted, 0.90),
                p95: percentile(&sorted, 0.95),
                p99: percentile(&sorted, 0.99),
                max: sorted.last().copied(),
                mean: mean(&sorted),
                quantized: false,
            };
        }
        let mut hist = match Histogram::<u64>::new(3) {
            Ok(h) => h,
            // Unreachable for 3 significant digits; fall back to exact rather than panic.
            Err(_) => return Self::from_values(values, usize::MAX),
        };
        let (mut sum, mut max, mut count) = (0.0_f64, f64::NEG_INFINITY, 0_u64);
        for &v in values.iter().filter(|x| x.is_finite()) {
            sum += v;
            max = max.max(v);
            count += 1;
            // Microseconds; negative gaps (clock anomalies) are recorded as 0.
            let us = (v * 1000.0).round().max(0.0) as u64;
            // Auto-resizing; only a value beyond what the histogram can ever track is clamped.
            if hist.record(us).is_err() {
                hist.saturating_record(us);
            }
        }
        let q = |q: f64| Some(hist.value_at_quantile(q) as f64 / 1000.0);
        Self {
            count,
            p50: q(0.50),
            p90: q(0.90),
            p95: q(0.95),
            p99: q(0.99),
            max: Some(max),
            mean: Some(sum / count as f64),
            quantized: true,
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn hdr_path_close_to_exact() {
        let values: Vec<f64> = (1..=10_000).map(|i| i as f64 * 0.01).collect();
        let exact = PooledDist::from_values(&values, usize::MAX);
        let hdr = PooledDist::from_values(&values, 10);
        assert!(!exact.quantized);
        assert!(hdr.quantized);
        assert_eq!(hdr.count, 10_000);
        assert_eq!(hdr.max, exact.max);
        for (a, b) in [
            (exact.p50, hdr.p50),
            (exact.p90, hdr.p90),
            (exact.p99, hdr.p99),
        ] {
            let (a, b) = (a.unwrap(), b.unwrap());
            assert!((a - b).abs() / a < 2e-3, "{a} vs {b}");
        }
        assert!((exact.mean.unwrap() - hdr.mean.unwrap()).abs() < 1e-9);
    }

    #[test]
    fn empty_pooled_is_null() {
        let d = PooledDist::from_values(&[], 10);
        assert_eq!(d.count, 0);
        assert_eq!(d.p50, None);
        assert_eq!(d.max, None);
        assert_eq!(d.mean, None);
    }
}
