//! Server-requested delays: how long the upstream asked us to hold off. Pure: headers
//! and the wall-clock time in, a duration out. The proxy turns it into a pause of the
//! whole upstream, capped by `max_interval`.

use std::time::{Duration, SystemTime};

use http::HeaderMap;

/// The delay a throttle response asks for: `Retry-After` (delay-seconds or HTTP-date,
/// RFC 9110 §10.2.3), else `x-amz-retry-after` (milliseconds). `None` when there is
/// none, it does not parse, or it lies in the past.
pub fn retry_after(headers: &HeaderMap, now: SystemTime) -> Option<Duration> {
    if let Some(value) = headers.get(http::header::RETRY_AFTER) {
        let text = value.to_str().ok()?.trim();
        let delay = match text.parse::<u64>() {
            Ok(seconds) => Duration::from_secs(seconds),
            Err(_) => httpdate::parse_http_date(text)
                .ok()?
                .duration_since(now)
                .ok()?,
        };
        return nonzero(delay);
    }
    let millis = headers
        .get("x-amz-retry-after")?
        .to_str()
        .ok()?
        .trim()
        .parse::<u64>()
        .ok()?;
    nonzero(Duration::from_millis(millis))
}

fn nonzero(d: Duration) -> Option<Duration> {
    (!d.is_zero()).then_some(d)
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;

    fn with(name: &'static str, value: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(name, HeaderValue::from_str(value).unwrap());
        h
    }

    fn now() -> SystemTime {
        // Sun, 06 Nov 1994 08:49:37 GMT, RFC 9110's example date.
        SystemTime::UNIX_EPOCH + Duration::from_secs(784_111_777)
    }

    #[test]
    fn retry_after_in_seconds() {
        assert_eq!(
            retry_after(&with("retry-after", "2"), now()),
            Some(Duration::from_secs(2))
        );
        assert_eq!(
            retry_after(&with("retry-after", " 120 "), now()),
            Some(Duration::from_secs(120))
        );
    }

    #[test]
    fn retry_after_as_an_http_date() {
        let h = with("retry-after", "Sun, 06 Nov 1994 08:49:40 GMT");
        assert_eq!(retry_after(&h, now()), Some(Duration::from_secs(3)));
    }

    #[test]
    fn retry_after_in_the_past_or_zero_means_no_pause() {
        assert_eq!(
            retry_after(&with("retry-after", "Sun, 06 Nov 1994 08:49:00 GMT"), now()),
            None
        );
        assert_eq!(retry_after(&with("retry-after", "0"), now()), None);
    }

    #[test]
    fn unparsable_retry_after_means_no_pause() {
        for bad in ["soon", "-1", "1.5", "Sun, 06 Nov 1994"] {
            assert_eq!(retry_after(&with("retry-after", bad), now()), None, "{bad}");
        }
    }

    #[test]
    fn x_amz_retry_after_is_in_milliseconds() {
        assert_eq!(
            retry_after(&with("x-amz-retry-after", "1500"), now()),
            Some(Duration::from_millis(1500))
        );
        assert_eq!(retry_after(&HeaderMap::new(), now()), None);
    }
}
