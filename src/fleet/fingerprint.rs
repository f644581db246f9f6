//! A fingerprint of the upstream settings the members of a lane must agree on, written
//! with each member's entry so that a group shared by two configurations (two
//! Deployments with one `group` and different upstream settings) shows: the members
//! would share one interval and split one rate while they pace different things.

use crate::config::UpstreamSettings;

/// 16 hex digits of FNV-1a over the settings that decide what a lane paces and how:
/// the upstream's URL, preset, sleeper, throttle rules and lanes. Stable across runs
/// and processes (unlike `std`'s hasher); its input is the settings' `Debug` text, so
/// two easeoff versions that print them differently differ too.
pub fn fingerprint(settings: &UpstreamSettings) -> String {
    let text = format!(
        "{:?}",
        (
            &settings.url,
            &settings.preset,
            &settings.sleeper,
            &settings.throttle,
            &settings.lanes
        )
    );
    format!("{:016x}", fnv1a(text.as_bytes()))
}

fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// Whether `others` (the other live members' fingerprints, empty where a member
/// wrote none) include one that differs from `mine`; a member without one (`mine`
/// empty) judges nothing.
pub fn differs(mine: &str, others: &[String]) -> bool {
    !mine.is_empty() && others.iter().any(|o| !o.is_empty() && o != mine)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fnv1a_matches_its_reference_values() {
        assert_eq!(fnv1a(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a(b"a"), 0xaf63_dc4c_8601_ec8c);
    }

    #[test]
    fn only_a_different_fingerprint_differs() {
        let o = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert!(!differs("ab", &o(&["ab", "", "ab"])));
        assert!(differs("ab", &o(&["ab", "cd"])));
        assert!(!differs("", &o(&["cd"])));
        assert!(!differs("ab", &[]));
    }
}
