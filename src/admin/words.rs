//! Why a lane is slow, in a sentence for `/status` and the status page: a throttle's
//! signal or the upstream's own reason, and the header behind a pause.

use crate::route::dynamodb::{Access, Limit, ResourceType, parse_reason};

/// The last throttle's reason (and resource) as a sentence.
pub fn throttle(reason: &str, resource: Option<&str>) -> String {
    let on = resource
        .filter(|r| !r.is_empty())
        .map(|r| format!(" ({r})"))
        .unwrap_or_default();
    if let (Some(kind), Some(access), Some(limit)) = parse_reason(reason) {
        let what = match access {
            Access::Read => "reads",
            Access::Write => "writes",
            Access::Control => "control-plane calls",
        };
        let of = match kind {
            ResourceType::Table => "the table",
            ResourceType::Index => "an index",
        };
        let why = match limit {
            Limit::ProvisionedThroughputExceeded => "above its provisioned capacity",
            Limit::AccountLimitExceeded => "above the account's per-table quota",
            Limit::KeyRangeThroughputExceeded => "above one partition's limit (a hot key)",
            Limit::MaxOnDemandThroughputExceeded => "above its on-demand maximum throughput",
        };
        return format!("DynamoDB throttled {what} of {of}{on}: {why} ({reason})");
    }
    let signal = match reason {
        "status" => "a throttling status (429 or 503)",
        "header" => "a throttling error code in a header",
        "body" => "a throttling error code in the body",
        "grpc" => "a gRPC RESOURCE_EXHAUSTED status",
        "partial" => "a batch answer that left items unprocessed",
        "ratelimit" => "a rate-limit quota with nothing left",
        other => return format!("throttled: {other}{on}"),
    };
    format!("throttled by {signal}{on}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dynamodb_reasons_read_as_what_was_throttled_and_why() {
        assert_eq!(
            throttle(
                "TableWriteKeyRangeThroughputExceeded",
                Some("arn:aws:dynamodb:us-east-1:1:table/orders")
            ),
            "DynamoDB throttled writes of the table (arn:aws:dynamodb:us-east-1:1:table/orders): \
             above one partition's limit (a hot key) (TableWriteKeyRangeThroughputExceeded)"
        );
        assert_eq!(
            throttle("status", None),
            "throttled by a throttling status (429 or 503)"
        );
        assert_eq!(throttle("Whatever", Some("")), "throttled: Whatever");
    }
}
