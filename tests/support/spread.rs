//! Median and range of repeated measurements, for the benchmarks' tables.

/// Median and min–max of `values` (not empty).
pub fn summary(mut values: Vec<f64>) -> (f64, f64, f64) {
    values.sort_by(f64::total_cmp);
    let n = values.len();
    let median = if n % 2 == 1 {
        values[n / 2]
    } else {
        (values[n / 2 - 1] + values[n / 2]) / 2.0
    };
    (median, values[0], values[n - 1])
}
