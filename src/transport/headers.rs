//! Hop-by-hop headers (RFC 9110 §7.6.1) stay on their own connection.

use http::header::{
    CONNECTION, HeaderMap, HeaderName, HeaderValue, PROXY_AUTHENTICATE, TE, TRAILER,
    TRANSFER_ENCODING, UPGRADE,
};

const KEEP_ALIVE: HeaderName = HeaderName::from_static("keep-alive");
const PROXY_CONNECTION: HeaderName = HeaderName::from_static("proxy-connection");

/// The hop-by-hop names, each removed only when present (in the order of the bits
/// `strip_hop_by_hop` sets).
static HOP_BY_HOP: [HeaderName; 7] = [
    CONNECTION,
    KEEP_ALIVE,
    PROXY_CONNECTION,
    PROXY_AUTHENTICATE,
    TRANSFER_ENCODING,
    TRAILER,
    UPGRADE,
];

/// Removes hop-by-hop headers and those the Connection header names, and a
/// Content-Length beside a Transfer-Encoding. `TE: trailers`
/// is kept: gRPC needs it end to end and HTTP/2 allows exactly that value.
pub fn strip_hop_by_hop(headers: &mut HeaderMap) {
    // One pass over the names finds which are present: most requests carry none, most
    // HTTP/1.1 answers only `Connection`, and comparing a name with a constant costs
    // less than a removal's hashing (see bench/instructions.sh).
    let mut present = 0u8;
    let mut te = false;
    for name in headers.keys() {
        // Names are lowercase; a match on the text tells most apart by length alone.
        let i = match name.as_str() {
            "connection" => 0,
            "keep-alive" => 1,
            "proxy-connection" => 2,
            "proxy-authenticate" => 3,
            "transfer-encoding" => 4,
            "trailer" => 5,
            "upgrade" => 6,
            "te" => {
                te = true;
                continue;
            }
            _ => continue,
        };
        present |= 1 << i;
    }
    if present & 1 != 0 {
        remove_connection_named(headers);
    }
    // RFC 9112 §6.3: with Transfer-Encoding the Content-Length is wrong, and passing it
    // on would frame the body by it (a truncated answer on a kept-alive connection).
    if present & (1 << 4) != 0 {
        headers.remove(http::header::CONTENT_LENGTH);
    }
    for (i, name) in HOP_BY_HOP.iter().enumerate() {
        if present & (1 << i) != 0 {
            headers.remove(name);
        }
    }
    if te && let Some(te) = headers.get(TE) {
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

/// Removes the headers the Connection header names (`keep-alive` on most HTTP/1.1
/// answers). A single Connection value, the usual case, is read from a cheap copy
/// of the value, so nothing is allocated.
fn remove_connection_named(headers: &mut HeaderMap) {
    let mut values = headers.get_all(CONNECTION).iter();
    let (Some(first), None) = (values.next(), values.next()) else {
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
        return;
    };
    // `keep-alive` names only a header removed with the other hop-by-hop ones, and
    // it is what nearly every HTTP/1.1 answer carries: nothing to parse.
    if first.as_bytes().eq_ignore_ascii_case(b"keep-alive") {
        return;
    }
    let first = first.clone();
    for token in first.to_str().unwrap_or_default().split(',') {
        let token = token.trim();
        if !token.is_empty() {
            headers.remove(token);
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
    fn content_length_beside_transfer_encoding_goes_alone_stays() {
        let mut h = HeaderMap::new();
        h.insert("transfer-encoding", HeaderValue::from_static("chunked"));
        h.insert("content-length", HeaderValue::from_static("3"));
        strip_hop_by_hop(&mut h);
        assert!(h.is_empty(), "{h:?}");
        let mut h = HeaderMap::new();
        h.insert("content-length", HeaderValue::from_static("3"));
        strip_hop_by_hop(&mut h);
        assert_eq!(h["content-length"], "3");
    }

    #[test]
    fn every_connection_header_value_names_headers_to_drop() {
        let mut h = HeaderMap::new();
        h.append("connection", HeaderValue::from_static("X-One"));
        h.append("connection", HeaderValue::from_static("x-two, close"));
        h.insert("x-one", HeaderValue::from_static("1"));
        h.insert("x-two", HeaderValue::from_static("2"));
        h.insert("x-three", HeaderValue::from_static("3"));
        strip_hop_by_hop(&mut h);
        assert_eq!(h.len(), 1);
        assert!(h.contains_key("x-three"));
    }

    #[test]
    fn headers_without_hop_by_hop_ones_stay_as_they_are() {
        let mut h = HeaderMap::new();
        h.insert("host", HeaderValue::from_static("example.com"));
        h.insert("content-length", HeaderValue::from_static("2"));
        let before = h.clone();
        strip_hop_by_hop(&mut h);
        assert_eq!(h, before);
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
