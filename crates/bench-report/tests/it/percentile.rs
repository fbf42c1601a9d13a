//! The percentile method (type 7) on hand-computed values, and its properties.

use bench_report::percentile;
use proptest::prelude::*;

use crate::common::some_close;

#[test]
fn hand_computed() {
    let x = [1.0, 2.0, 3.0, 4.0];
    some_close(percentile(&x, 0.5), 2.5);
    // h = 3 × 0.9 = 2.7 → 3 + 0.7 × (4 − 3)
    some_close(percentile(&x, 0.9), 3.7);
    some_close(percentile(&x, 0.0), 1.0);
    some_close(percentile(&x, 1.0), 4.0);
    // h = 3 × 0.25 = 0.75 → 1.75 (NumPy: np.percentile([1,2,3,4], 25) == 1.75)
    some_close(percentile(&x, 0.25), 1.75);
    // h = 4 × 0.99 = 3.96 → 40 + 0.96 × 10
    some_close(percentile(&[10.0, 20.0, 30.0, 40.0, 50.0], 0.99), 49.6);
}

#[test]
fn single_and_empty() {
    some_close(percentile(&[7.0], 0.0), 7.0);
    some_close(percentile(&[7.0], 0.5), 7.0);
    some_close(percentile(&[7.0], 0.99), 7.0);
    assert_eq!(percentile(&[], 0.5), None);
    assert_eq!(percentile(&[1.0], f64::NAN), None);
}

#[test]
fn q_is_clamped() {
    some_close(percentile(&[1.0, 2.0], -1.0), 1.0);
    some_close(percentile(&[1.0, 2.0], 2.0), 2.0);
}

proptest! {
    #[test]
    fn monotone_and_bounded(
        mut v in prop::collection::vec(-1e9f64..1e9, 1..200),
        qa in 0.0f64..=1.0,
        qb in 0.0f64..=1.0,
    ) {
        v.sort_by(f64::total_cmp);
        let (lo, hi) = if qa <= qb { (qa, qb) } else { (qb, qa) };
        let a = percentile(&v, lo).unwrap();
        let b = percentile(&v, hi).unwrap();
        prop_assert!(a <= b, "p({lo}) = {a} > p({hi}) = {b}");
        let (min, max) = (v[0], v[v.len() - 1]);
        prop_assert!(a >= min && a <= max);
        prop_assert!(b >= min && b <= max);
    }
}
