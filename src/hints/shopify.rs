//! Shopify's leaky bucket: `X-Shopify-Shop-Api-Call-Limit: 32/40` (used of size).
//! Every plan's bucket leaks its whole size in 20 s (40 at 2/s, 80 at 4/s, 400 at
//! 20/s), so what is used drains in `used / size × 20 s`.

use std::time::{Duration, SystemTime};

use http::HeaderMap;

use super::values::{self, text};
use super::{Quota, Reading};

const DRAIN: Duration = Duration::from_secs(20);

/// Reads the bucket into `reading`.
pub fn read(headers: &HeaderMap, _now: SystemTime, reading: &mut Reading) {
    if reading.requests.is_none() {
        reading.requests = bucket(headers);
    }
}

#[allow(
    clippy::cast_possible_truncation,
    clippy::cast_sign_loss,
    reason = "float to integer `as` saturates, as wanted here"
)]
fn bucket(headers: &HeaderMap) -> Option<Quota> {
    let (used, size) = text(headers, "x-shopify-shop-api-call-limit")?.split_once('/')?;
    let (used, size) = (values::count(used)?, values::count(size)?);
    if size == 0 {
        return None;
    }
    let used = used.min(size);
    let drain = DRAIN.as_millis() * u128::from(used) / u128::from(size);
    Some(Quota {
        remaining: size - used,
        // At most DRAIN: fits.
        reset: Duration::from_millis(drain as u64),
        limit: Some(size),
        refills: true,
    })
}
