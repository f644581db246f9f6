//! What an image, a sound or a file in a prompt costs: the vendors count images by
//! their size in pixels, not by their bytes (a 700 KB base64 image is 85 to 1,600
//! tokens, not 175,000), and neither documents a rule a request's bytes give for
//! audio or files, so those cost a fixed figure the answer's `usage` then settles.
//! An image's size is read from the first bytes of its base64 (PNG, GIF, JPEG,
//! WebP), decoded where they are needed, never whole.

/// A sound (`input_audio`): a fixed figure, about 100 s of speech at the 10 tokens a
/// second OpenAI's audio models report; the answer's usage settles the rest.
pub const AUDIO_TOKENS: u64 = 1_000;

/// A file (`file_data`, a `document` block, a `file_id`): a fixed figure, one page at
/// the most Anthropic documents for a PDF page (1,500 to 3,000); the answer's usage
/// settles the rest.
pub const FILE_TOKENS: u64 = 3_000;

/// OpenAI: a low-detail image, and the base of a high-detail one.
const OPENAI_BASE: u64 = 85;
/// OpenAI: each 512-pixel tile of a high-detail image.
const OPENAI_TILE: u64 = 170;
/// OpenAI: a high-detail image of unknown size is reckoned at the most the tile rule
/// gives, a 2048 × 768 image's 8 tiles.
const OPENAI_UNKNOWN: u64 = OPENAI_BASE + 8 * OPENAI_TILE;
/// Anthropic: the most an image costs (a larger one is scaled down first).
const ANTHROPIC_MOST: u64 = 1_600;
/// Anthropic: an image's long edge is scaled down to this many pixels.
const ANTHROPIC_EDGE: u64 = 1_568;

/// What a piece of media in a prompt is, as far as its request tells.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// An image in an OpenAI request (`image_url`, `input_image`), or a `data:` URL's.
    OpenAiImage,
    /// An image block of Anthropic's Messages API.
    AnthropicImage,
    Audio,
    File,
    /// Binary data nothing has told the kind of yet.
    Unknown,
}

/// One piece of media, costed once its part has said what it is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Media {
    pub kind: Kind,
    /// Width and height in pixels, when its bytes say.
    pub size: Option<(u32, u32)>,
    /// OpenAI's `detail`: `low`, or not (`high`, `auto`, unset).
    pub low: Option<bool>,
}

impl Media {
    /// Media of `kind` whose bytes are not in the request (a link, a file id).
    pub fn of(kind: Kind) -> Media {
        Media {
            kind,
            size: None,
            low: None,
        }
    }

    /// Base64 data: an image if its first bytes are one (with its size), else of a kind
    /// still to be told.
    pub fn data(base64: &[u8]) -> Media {
        let size = image_size(&Base64(base64));
        Media {
            kind: if size.is_some() {
                Kind::OpenAiImage
            } else {
                Kind::Unknown
            },
            size,
            low: None,
        }
    }

    /// A `data:` URL (`data:image/png;base64,...`): its media type gives its kind;
    /// `None` for any other text.
    pub fn url(text: &[u8]) -> Option<Media> {
        let rest = text.strip_prefix(b"data:")?;
        let comma = rest.iter().position(|&b| b == b',')?;
        let (header, data) = (&rest[..comma], &rest[comma + 1..]);
        let mut media = Media::data(data);
        media.kind = match kind_of_type(header) {
            Some(Kind::OpenAiImage) | None if media.size.is_some() => Kind::OpenAiImage,
            Some(kind) => kind,
            None => Kind::File,
        };
        Some(media)
    }

    /// Tokens, by the vendor's rule for its kind.
    pub fn tokens(self) -> u64 {
        match self.kind {
            Kind::OpenAiImage if self.low == Some(true) => OPENAI_BASE,
            Kind::OpenAiImage => self.size.map_or(OPENAI_UNKNOWN, openai_tiles),
            Kind::AnthropicImage => self.size.map_or(ANTHROPIC_MOST, anthropic_pixels),
            Kind::Audio => AUDIO_TOKENS,
            Kind::File | Kind::Unknown => FILE_TOKENS,
        }
    }
}

/// The kind a media type (`image/png`, `audio/wav`, `text/plain`) names; `None` for
/// text, which is prompt.
pub fn kind_of_type(media_type: &[u8]) -> Option<Kind> {
    let starts = |prefix: &[u8]| {
        media_type.len() >= prefix.len() && media_type[..prefix.len()].eq_ignore_ascii_case(prefix)
    };
    if starts(b"image/") {
        Some(Kind::OpenAiImage)
    } else if starts(b"audio/") {
        Some(Kind::Audio)
    } else if starts(b"text/") {
        None
    } else {
        Some(Kind::File)
    }
}

/// OpenAI's high-detail rule (GPT-4o and its kin): scaled to fit 2048 × 2048, then so
/// that its short side is at most 768, 85 tokens and 170 per 512-pixel tile.
#[allow(
    clippy::cast_possible_truncation,
    clippy::cast_sign_loss,
    reason = "sizes in pixels, below 2^32, and positive"
)]
fn openai_tiles((width, height): (u32, u32)) -> u64 {
    let (mut w, mut h) = (f64::from(width), f64::from(height));
    let long = w.max(h);
    if long > 2048.0 {
        w *= 2048.0 / long;
        h *= 2048.0 / long;
    }
    let short = w.min(h);
    if short > 768.0 {
        w *= 768.0 / short;
        h *= 768.0 / short;
    }
    let tiles = (w / 512.0).ceil() as u64 * (h / 512.0).ceil() as u64;
    OPENAI_BASE + OPENAI_TILE * tiles
}

/// Anthropic's rule: about width × height / 750 tokens, the long edge scaled down to
/// 1,568 pixels first, 1,600 at most.
fn anthropic_pixels((width, height): (u32, u32)) -> u64 {
    let (w, h) = (u64::from(width), u64::from(height));
    let long = w.max(h).max(1);
    let pixels = if long > ANTHROPIC_EDGE {
        // Both edges scaled by EDGE / long: pixels by its square.
        (w * h).saturating_mul(ANTHROPIC_EDGE * ANTHROPIC_EDGE) / (long * long)
    } else {
        w * h
    };
    pixels.div_ceil(750).min(ANTHROPIC_MOST)
}

/// Base64 text (standard or URL-safe alphabet), decoded a byte at a time where asked.
struct Base64<'a>(&'a [u8]);

impl Base64<'_> {
    /// The decoded byte at `at`; `None` past the end or at a character that is not
    /// base64 (a line break, a space: then the size is not read).
    fn byte(&self, at: usize) -> Option<u8> {
        let start = at / 3 * 4;
        let quad = self.0.get(start..(start + 4).min(self.0.len()))?;
        let mut bits = 0u32;
        for i in 0..4 {
            let value = match quad.get(i) {
                Some(&c) => sextet(c)?,
                None => 0,
            };
            bits = bits << 6 | value;
        }
        let [_, a, b, c] = bits.to_be_bytes();
        [a, b, c].get(at % 3).copied()
    }

    fn bytes<const N: usize>(&self, at: usize) -> Option<[u8; N]> {
        let mut out = [0; N];
        for (i, byte) in out.iter_mut().enumerate() {
            *byte = self.byte(at + i)?;
        }
        Some(out)
    }
}

/// A base64 character's value; padding counts as zero bits.
fn sextet(c: u8) -> Option<u32> {
    Some(u32::from(match c {
        b'A'..=b'Z' => c - b'A',
        b'a'..=b'z' => c - b'a' + 26,
        b'0'..=b'9' => c - b'0' + 52,
        b'+' | b'-' => 62,
        b'/' | b'_' => 63,
        b'=' => 0,
        _ => return None,
    }))
}

/// Width and height of a PNG, GIF, JPEG or WebP image from its first bytes.
fn image_size(data: &Base64<'_>) -> Option<(u32, u32)> {
    let magic: [u8; 4] = data.bytes(0)?;
    match magic {
        [0x89, b'P', b'N', b'G'] => {
            let [w0, w1, w2, w3, h0, h1, h2, h3] = data.bytes(16)?;
            Some((
                u32::from_be_bytes([w0, w1, w2, w3]),
                u32::from_be_bytes([h0, h1, h2, h3]),
            ))
        }
        [b'G', b'I', b'F', b'8'] => {
            let [w0, w1, h0, h1] = data.bytes(6)?;
            Some((
                u32::from(u16::from_le_bytes([w0, w1])),
                u32::from(u16::from_le_bytes([h0, h1])),
            ))
        }
        [0xff, 0xd8, _, _] => jpeg_size(data),
        [b'R', b'I', b'F', b'F'] => webp_size(data),
        _ => None,
    }
}

/// A JPEG's size, from its first start-of-frame segment, skipping the segments before
/// it by their lengths (an Exif block can be 64 KiB; at most 64 segments are read).
fn jpeg_size(data: &Base64<'_>) -> Option<(u32, u32)> {
    let mut at = 2;
    for _ in 0..64 {
        let [mark, kind] = data.bytes(at)?;
        if mark != 0xff {
            return None;
        }
        match kind {
            // Fill, and markers without a length.
            0xff => at += 1,
            0x01 | 0xd0..=0xd8 => at += 2,
            0xc0..=0xcf if !matches!(kind, 0xc4 | 0xc8 | 0xcc) => {
                let [h0, h1, w0, w1] = data.bytes(at + 5)?;
                let size = |a, b| u32::from(u16::from_be_bytes([a, b]));
                return Some((size(w0, w1), size(h0, h1)));
            }
            _ => {
                let [l0, l1] = data.bytes(at + 2)?;
                at += 2 + usize::from(u16::from_be_bytes([l0, l1]));
            }
        }
    }
    None
}

/// A WebP's size, from its first chunk (lossy, lossless or extended).
fn webp_size(data: &Base64<'_>) -> Option<(u32, u32)> {
    if data.bytes::<4>(8)? != *b"WEBP" {
        return None;
    }
    match &data.bytes::<4>(12)? {
        b"VP8 " => {
            let [w0, w1, h0, h1] = data.bytes(26)?;
            let edge = |a, b| u32::from(u16::from_le_bytes([a, b]) & 0x3fff);
            Some((edge(w0, w1), edge(h0, h1)))
        }
        b"VP8L" => {
            let bits = u32::from_le_bytes(data.bytes(21)?);
            Some(((bits & 0x3fff) + 1, ((bits >> 14) & 0x3fff) + 1))
        }
        b"VP8X" => {
            let [w0, w1, w2, h0, h1, h2] = data.bytes(24)?;
            let edge = |a, b, c| u32::from_le_bytes([a, b, c, 0]) + 1;
            Some((edge(w0, w1, w2), edge(h0, h1, h2)))
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn size_of(bytes: &[u8]) -> Option<(u32, u32)> {
        let text = super::super::tests::base64(bytes);
        image_size(&Base64(text.as_bytes()))
    }

    #[test]
    fn each_format_tells_its_size_from_its_first_bytes() {
        let mut gif = b"GIF89a".to_vec();
        gif.extend_from_slice(&[0x20, 0x03, 0x58, 0x02, 0, 0]);
        assert_eq!(size_of(&gif), Some((800, 600)));
        // A JPEG with an APP1 segment of 1,000 bytes before its SOF0.
        let mut jpeg = vec![0xff, 0xd8, 0xff, 0xe1, 0x03, 0xe8];
        jpeg.resize(4 + 1000, 0);
        jpeg.extend_from_slice(&[0xff, 0xc0, 0, 17, 8, 0x01, 0xe0, 0x02, 0x80, 3]);
        assert_eq!(size_of(&jpeg), Some((640, 480)));
        let mut lossless = b"RIFF\0\0\0\0WEBPVP8L\0\0\0\0\x2f".to_vec();
        // 1 + 399 and 1 + 299, 14 bits each.
        lossless.extend_from_slice(&(399u32 | 299 << 14).to_le_bytes());
        assert_eq!(size_of(&lossless), Some((400, 300)));
        let mut extended = b"RIFF\0\0\0\0WEBPVP8X\0\0\0\0\0\0\0\0".to_vec();
        extended.extend_from_slice(&[0x1f, 0x03, 0x00, 0x57, 0x02, 0x00]);
        assert_eq!(size_of(&extended), Some((800, 600)));
        assert_eq!(size_of(b"not an image at all"), None);
        assert_eq!(image_size(&Base64(b"iVBO RwOK")), None);
    }

    #[test]
    fn a_data_url_is_told_by_its_media_type() {
        let kind = |url: &[u8]| Media::url(url).map(|m| m.kind);
        assert_eq!(
            kind(b"data:image/jpeg;base64,AAAA"),
            Some(Kind::OpenAiImage)
        );
        assert_eq!(kind(b"data:audio/wav;base64,AAAA"), Some(Kind::Audio));
        assert_eq!(kind(b"data:application/pdf;base64,AAAA"), Some(Kind::File));
        assert_eq!(kind(b"https://example.com/a.png"), None);
    }
}
