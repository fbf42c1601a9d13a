//! The HTML report: one self-contained file (no network asset) with SVG charts.
//! (Being written: see the report issue.)

use crate::report::ReportData;
use crate::sweep::SweepSummary;

/// One run's HTML report.
pub fn html(data: &ReportData) -> String {
    format!("<!doctype html><title>{}</title>", data.title)
}

/// A sweep's HTML summary.
pub fn sweep_html(summary: &SweepSummary) -> String {
    format!(
        "<!doctype html><title>sweep of {}</title>",
        summary.axis.as_str()
    )
}
