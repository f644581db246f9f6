//! What a request costs in the units its upstream limits, before it goes and after it
//! is answered: DynamoDB's capacity units by item size (`dynamodb`), an LLM API's
//! tokens from the prompt and the answer's `usage` (`llm`). Pure functions of body
//! bytes; a body they cannot read costs what the caller assumes for an unknown one.
//!
//! Estimates are made before sending, so they are what a careful client could know:
//! a DynamoDB write's item is in the request, a read's is not (a read is costed at one
//! item); a prompt's tokens are about its characters over four (its images by their
//! size, its sounds and files a fixed figure), the answer's at most its
//! `max_tokens`. What the upstream reports settles them.

use http::HeaderMap;

/// A cost of one unit (one request, when a lane counts requests): costs are in
/// thousandths, so half a read capacity unit is 500.
pub const ONE: u64 = 1000;

pub mod answer;
pub mod dynamodb;
pub mod llm;
mod shape;

crate::spelled::spelled! {
    fn name;
    /// What a lane paces in (config `[upstream.lanes] cost`).
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub enum Unit {
        /// Every request is one unit.
        Requests = "requests",
        /// An LLM API's tokens; the interval is per 1,000 tokens.
        Tokens = "tokens",
        /// DynamoDB's read or write capacity units; the interval is per unit.
        Capacity = "capacity",
    }
}

impl Unit {
    /// The most one request is reserved or settled at, in thousandths: two million
    /// tokens (the largest context window sold), or 16,384 capacity units (a 16 MiB
    /// request, DynamoDB's largest, written at a unit a KiB). An estimate or an
    /// answer's count past it is a client's or an upstream's mistake, not a cost.
    pub fn most(self) -> u64 {
        match self {
            Unit::Requests => ONE,
            Unit::Tokens => 2_000_000,
            Unit::Capacity => 16_384 * ONE,
        }
    }

    /// Thousandths of this unit as the lane's own units (tokens, capacity units).
    #[allow(clippy::cast_precision_loss, reason = "counts for metrics")]
    pub fn count(self, thousandths: u64) -> f64 {
        match self {
            Unit::Tokens => thousandths as f64,
            Unit::Requests | Unit::Capacity => thousandths as f64 / ONE as f64,
        }
    }
}

/// A request's cost in a lane that counts `unit`, before it goes, in thousandths of a
/// unit (for tokens, one thousandth is one token): from its body as far as it is held
/// (`body`; for tokens, the rest at the tokens a byte of what was read, bounded),
/// else from its length (for tokens, at most [`llm::UNREAD_TOKENS`]). `table` is the
/// lane's DynamoDB table, for a request that spans several. A request that cannot be
/// read is never refused for it: it costs what its length suggests, or one unit.
pub fn reserve(unit: Unit, headers: &HeaderMap, body: Option<&[u8]>, table: Option<&str>) -> u64 {
    let length = headers
        .get(http::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    match unit {
        Unit::Requests => ONE,
        Unit::Tokens => body
            .and_then(|body| llm::estimate_held(body, length))
            .map(llm::Tokens::total)
            .or_else(|| length.map(|n| n.div_ceil(llm::CHARS_PER_TOKEN).min(llm::UNREAD_TOKENS)))
            .unwrap_or(ONE)
            .max(1),
        Unit::Capacity => capacity(headers, body, table, length),
    }
}

/// Whether the answer to a request can say what it cost, so is worth reading: an LLM
/// call's `usage`; a DynamoDB request's `ConsumedCapacity` only when the request asked
/// for it (or its body was not read to tell).
pub fn settles(unit: Unit, body: Option<&[u8]>) -> bool {
    match unit {
        Unit::Requests => false,
        Unit::Tokens => true,
        Unit::Capacity => body.is_none_or(crate::route::dynamodb::asks_consumed_capacity),
    }
}

/// A DynamoDB request's capacity units (thousandths) by the developer guide's rules;
/// one unit per KiB of its length for a write that cannot be read, one for the rest.
fn capacity(
    headers: &HeaderMap,
    body: Option<&[u8]>,
    table: Option<&str>,
    length: Option<u64>,
) -> u64 {
    let operation = headers
        .get("x-amz-target")
        .and_then(|v| crate::route::dynamodb::operation_in(v.as_bytes()));
    let Some((operation, access)) = operation else {
        return ONE;
    };
    let units = body.and_then(|body| dynamodb::estimate_units(operation, body, table));
    match units {
        Some(units) => thousandths(units),
        None if access == crate::route::dynamodb::Access::Write => {
            length.map_or(ONE, |n| n.div_ceil(1024).max(1) * ONE)
        }
        None => ONE,
    }
}

/// Units as thousandths, rounded up.
#[allow(
    clippy::cast_possible_truncation,
    clippy::cast_sign_loss,
    reason = "float to integer `as` saturates, and the value is clamped at 0 first"
)]
pub fn thousandths(units: f64) -> u64 {
    if units.is_finite() {
        (units.max(0.0) * ONE as f64).ceil() as u64
    } else {
        ONE
    }
}
