//! Azure Resource Manager's `x-ms-ratelimit-remaining-*` (subscription and tenant
//! reads, writes, deletes): what is left, with no reset told; the least of them.
//! Its `x-ms-retry-after-ms` is a wait, read in `wait`.

use std::time::SystemTime;

use http::HeaderMap;

use super::Reading;
use super::values;

const PREFIX: &str = "x-ms-ratelimit-remaining-";

/// Reads the least count left into `reading`.
pub fn read(headers: &HeaderMap, _now: SystemTime, reading: &mut Reading<'_>) {
    let least = headers
        .iter()
        .filter(|(name, _)| name.as_str().starts_with(PREFIX))
        .filter_map(|(_, value)| values::count(value.to_str().ok()?.trim()))
        .min();
    if reading.left.is_none() {
        reading.left = least;
    }
}
