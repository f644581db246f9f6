//! Hop-by-hop headers (RFC 9110 §7.6.1) stay on their own connection.

use http::header::{CONNECTION, HeaderMap, HeaderName, HeaderValue, TE};

const HOP_BY_HOP: [&str; 7] = [
    "connection",
    "keep-alive",
    "proxy-connection",
    "proxy-authenticate",
    "transfer-encoding",
    "trailer",
    "upgrade",
];

/// Removes hop-by-hop headers and those the Connection header names. `TE: trailers`
/// is kept: gRPC needs it end to end and HTTP/2 allows exactly that value.
pub fn strip_hop_by_hop(headers: &mut HeaderMap) {
    if headers.contains_key(CONNECTION) {
        // Rare on keep-alive traffic, so the small allocation is fine here.
        let named: Vec<HeaderName> = headers
            .get_all(CONNECTION)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(','))
            .filter_map(|token| HeaderName::from_bytes(token.trim().as_bytes()).ok())
            .collect();
        for name in named {
            headers.remove(name);
        }
    }
    for name in HOP_BY_HOP {
        headers.remove(name);
    }
    if let Some(te) = headers.get(TE) {
        let trailers = te.to_str().is_ok_and(|v| {
            v.split(',')
                .any(|t| t.trim().eq_ignore_ascii_case("trailers"))
        });
        if trailers {
            headers.insert(TE, HeaderValue::from_static("trailers"));
        } else {
            headers.remove(TE);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hop_by_hop_and_connection_named_headers_go() {
        let mut h = HeaderMap::new();
        h.insert(
            "connection",
            HeaderValue::from_static("keep-alive, x-private"),
        );
        h.insert("keep-alive", HeaderValue::from_static("timeout=5"));
        h.insert("x-private", HeaderValue::from_static("1"));
        h.insert("transfer-encoding", HeaderValue::from_static("chunked"));
        h.insert("upgrade", HeaderValue::from_static("h2c"));
        h.insert(
            "x-amz-target",
            HeaderValue::from_static("DynamoDB_20120810.PutItem"),
        );
        strip_hop_by_hop(&mut h);
        assert_eq!(h.len(), 1);
        assert!(h.contains_key("x-amz-target"));
    }

    #[test]
    fn te_trailers_survives_for_grpc() {
        let mut h = HeaderMap::new();
        h.insert("te", HeaderValue::from_static("trailers, deflate"));
        strip_hop_by_hop(&mut h);
        assert_eq!(h.get("te").unwrap(), "trailers");
        h.insert("te", HeaderValue::from_static("gzip"));
        strip_hop_by_hop(&mut h);
        assert!(!h.contains_key("te"));
    }
}
