//! Is this upstream answer a throttle? Pure: response parts in, verdict out.
//!
//! Classification runs in two steps so the proxy reads a body only when it must:
//! [`Classifier::classify_head`] decides from status and headers or asks for the body;
//! [`Classifier::classify_body`] finishes with at most [`MAX_ERROR_BODY`] bytes of it.
//! Pauses from `Retry-After` and friends are `hints.rs`'s business.

mod aws;
mod partial;
mod shared;

use http::{HeaderMap, HeaderName, StatusCode};

use crate::hints::TokenWindow;

pub use aws::{THROTTLING_CODES, X_AMZ_TARGET};
pub use partial::{UnprocessedScan, is_batch};
pub use shared::headers_say_so as rate_limited;

/// Error bodies up to this size are read for codes; larger ones stream untouched.
pub const MAX_ERROR_BODY: usize = 64 * 1024;

crate::spelled::spelled! {
    fn name;
    /// Which upstream family's conventions to apply (config `preset`).
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub enum Preset {
        None = "none",
        /// AWS error codes from `x-amzn-ErrorType` or the JSON/XML body.
        Aws = "aws",
        /// `aws`, plus DynamoDB's error format for easeoff's own shed answers.
        DynamoDb = "dynamodb",
        /// `grpc-status: 8` (RESOURCE_EXHAUSTED).
        Grpc = "grpc",
        /// OpenAI and Azure OpenAI: 429, and 503 overload.
        OpenAi = "openai",
        /// Anthropic: 429, and 529 or 503 overload.
        Anthropic = "anthropic",
        /// GitHub: 429, and 403 when it says rate limit; `x-ratelimit-resource` names the
        /// lane, and a spent hourly quota may pause for up to an hour.
        GitHub = "github",
        /// A self-hosted model server (TGI, vLLM, Ollama, llama.cpp's server): 429 and
        /// 503 say its slots or its queue are full.
        ModelServer = "model-server",
    }
}

impl Preset {
    /// Speaks AWS error codes.
    pub fn is_aws(self) -> bool {
        matches!(self, Preset::Aws | Preset::DynamoDb)
    }

    /// Whether the vendor documents a refusal's `Retry-After` as the caller's, not
    /// the request's: GitHub's secondary limits ask the integration to stop for that
    /// long, and may ban one that does not.
    pub fn pause_is_callers(self) -> bool {
        self == Preset::GitHub
    }

    /// How the vendor's token window counts a lane's requests.
    pub fn token_window(self) -> TokenWindow {
        match self {
            Preset::OpenAi => TokenWindow::OPENAI,
            Preset::Anthropic => TokenWindow::ANTHROPIC,
            _ => TokenWindow::USED,
        }
    }
}

crate::spelled::spelled! {
    fn as_str;
    /// What gave a throttle away; the `signal` label of `easeoff_throttles_total`.
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
    pub enum Signal {
        Status = "status",
        Header = "header",
        Body = "body",
        Grpc = "grpc",
        Partial = "partial",
        RateLimit = "ratelimit",
        /// 529, or a 503 that says "overloaded": retried with backoff, never learned as
        /// a quota.
        Overload = "overload",
        /// A server whose slots are full (a model server's 429 or 503, a 503 that says
        /// "busy"): moves a learned `max_in_flight`, not the rate.
        Busy = "busy",
    }
}

/// The classification of one attempt's answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Below 500 and not a throttle: counts toward lowering the interval.
    Success,
    /// The upstream asks us to slow down.
    Throttle(Signal),
    /// A 5xx that is not a throttle: leaves the sleeper alone.
    Failure,
}

/// The first step's answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Head {
    Decided(Verdict),
    /// Read up to [`MAX_ERROR_BODY`] bytes and call [`Classifier::classify_body`].
    NeedsBody,
}

/// User rules added to the preset's (config `[upstream.throttle]`).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Rules {
    pub statuses: Vec<u16>,
    /// Substrings looked for in small error bodies.
    pub body_codes: Vec<String>,
    /// A header whose value contains one of the substrings marks a throttle.
    pub headers: Vec<(HeaderName, Vec<String>)>,
}

/// Classifies one upstream's answers.
#[derive(Clone, Debug)]
pub struct Classifier {
    preset: Preset,
    rules: Rules,
}

const GRPC_STATUS: http::HeaderName = http::HeaderName::from_static("grpc-status");
/// gRPC's RESOURCE_EXHAUSTED.
const GRPC_RESOURCE_EXHAUSTED: &[u8] = b"8";

impl Classifier {
    pub fn new(preset: Preset, rules: Rules) -> Classifier {
        Classifier { preset, rules }
    }

    /// Decides from status and headers, or asks for the body.
    pub fn classify_head(&self, status: StatusCode, headers: &HeaderMap) -> Head {
        if self.preset == Preset::Grpc
            && headers.get(GRPC_STATUS).map(|v| v.as_bytes()) == Some(GRPC_RESOURCE_EXHAUSTED)
        {
            return Head::Decided(Verdict::Throttle(Signal::Grpc));
        }
        // An AWS error code comes with an error status; a success is not looked up.
        if self.preset.is_aws()
            && status.as_u16() >= 400
            && aws::header_code(headers).is_some_and(aws::is_throttling)
        {
            return Head::Decided(Verdict::Throttle(Signal::Header));
        }
        if self.matches_header_rule(headers) {
            return Head::Decided(Verdict::Throttle(Signal::Header));
        }
        let code = status.as_u16();
        if self.preset == Preset::ModelServer
            && matches!(code, 429 | 503)
            && self.rules.statuses.contains(&code)
        {
            return Head::Decided(Verdict::Throttle(Signal::Busy));
        }
        if self.rules.statuses.contains(&code) {
            return match shared::head(code, headers) {
                Some(verdict) => Head::Decided(verdict),
                None if body_is_small(headers) => Head::NeedsBody,
                None => Head::Decided(shared::unread(code)),
            };
        }
        if status.as_u16() >= 400 && self.wants_body(headers) && body_is_small(headers) {
            return Head::NeedsBody;
        }
        Head::Decided(base_verdict(status))
    }

    /// Finishes a classification that needed the (complete, small) body.
    pub fn classify_body(&self, status: StatusCode, headers: &HeaderMap, body: &[u8]) -> Verdict {
        if self.preset.is_aws()
            && aws::header_code(headers).is_none()
            && aws::body_code(body).is_some_and(aws::is_throttling)
        {
            return Verdict::Throttle(Signal::Body);
        }
        if self
            .rules
            .body_codes
            .iter()
            .any(|code| contains(body, code.as_bytes()))
        {
            return Verdict::Throttle(Signal::Body);
        }
        let code = status.as_u16();
        if self.rules.statuses.contains(&code)
            && let Some(verdict) = shared::by_body(code, body)
        {
            return verdict;
        }
        base_verdict(status)
    }

    fn wants_body(&self, headers: &HeaderMap) -> bool {
        (self.preset.is_aws() && aws::header_code(headers).is_none())
            || !self.rules.body_codes.is_empty()
    }

    fn matches_header_rule(&self, headers: &HeaderMap) -> bool {
        self.rules.headers.iter().any(|(name, needles)| {
            headers
                .get_all(name)
                .iter()
                .any(|v| needles.iter().any(|n| contains(v.as_bytes(), n.as_bytes())))
        })
    }
}

fn base_verdict(status: StatusCode) -> Verdict {
    if status.is_server_error() {
        Verdict::Failure
    } else {
        Verdict::Success
    }
}

/// A body announced larger than [`MAX_ERROR_BODY`] is not worth reading.
fn body_is_small(headers: &HeaderMap) -> bool {
    headers
        .get(http::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<usize>().ok())
        .is_none_or(|len| len <= MAX_ERROR_BODY)
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    needle.is_empty() || haystack.windows(needle.len()).any(|w| w == needle)
}

#[cfg(test)]
mod tests;
