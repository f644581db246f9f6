//! A lane's summary of its live members, kept in the lane's hash so that a sync reads
//! a few numbers instead of every member's entry: the sums of what got through of
//! their dispatches and of the attempts they made, their fingerprints (at most [`FINGERPRINTS`] distinct ones), and
//! their claims sorted and cut into at most [`GROUPS`] groups of (almost) equal size,
//! each a count, a sum and a maximum. Up to [`GROUPS`] members every claim is its own group, so the
//! fleet's max-min shares are exact; past that, each member within a group counts at
//! the group's mean claim, which moves the water level only where a group straddles it.
//!
//! The script in `store.rs` writes the summary (and `memory.rs` builds it for the
//! simulator) when the first sync finds it older than the refresh time while entries
//! changed, or the oldest entry it counted expired; every other sync only writes its
//! own entry. A member's answer is the summary less its own entry, if the summary
//! counted it, read into the lists `decide` and `unpaced_share` take: the others'
//! claims (each group's members at its mean) and the others' dispatch rates (their sum
//! in equal parts, all `unpaced_share` uses).

use std::collections::BTreeSet;

use super::demand::{self, Capped};
use super::learning::Shared;

/// Groups of claims a summary keeps: members beyond this many share a group.
pub const GROUPS: usize = 16;
/// Distinct fingerprints a summary keeps: enough to see that some differ.
pub const FINGERPRINTS: usize = 4;
/// The largest claim a summary sums: a claim of "as much as there is" (infinite)
/// counts as this, so that taking one member's claim out of a group's sum leaves the
/// others' (an infinite sum less an infinite claim would not).
pub const CLAIM_CAP: f64 = 1e300;

/// One lane's answer.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Answer {
    /// The lane's state after the merge; `None` while no member has proposed any.
    pub shared: Option<Shared>,
    /// What the other live members' demands claim (`demand::claim`), one per member;
    /// past `summary::GROUPS` members, each at its group's mean.
    pub others: Vec<f64>,
    /// What got through of the other live members' dispatches, per second
    /// (`demand::Used::through`): their sum in equal parts, one per member.
    pub others_through: Vec<f64>,
    /// The attempts the other live members made, per second, summed
    /// (`demand::Used::tried`).
    pub others_tried: f64,
    /// The learned concurrency caps the other live members share through the key,
    /// and what they want out, summed (`demand::Capped`).
    pub others_capped: Capped,
    /// The distinct fingerprints of the lane's live members, this one's included.
    pub fingerprints: Vec<String>,
    /// When the summary was written, by the store's clock, if it counted this
    /// member's entry; 0 if it did not.
    pub counted_in: u64,
    /// The fleet's progress through its schedule: the slots of the fleet interval
    /// gone by, counted at each interval in force while it was (by the store's
    /// clock); `None` while the lane is unpaced. Members place their slots by it
    /// (`fleet::Place`).
    pub progress: Option<f64>,
    /// The seat the store gave this member in the lane, when the member asked for one
    /// (`Report::seat`): 1 for the first member to ask, 2 for the next, ...
    pub seat: Option<u64>,
}

/// One group of claims.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Group {
    /// Members in the group.
    pub count: u32,
    /// Their claims' sum.
    pub sum: f64,
    /// The largest of their claims.
    pub max: f64,
}

/// A lane's live members, summarized.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Summary {
    /// When it was written, by the store's clock.
    pub at: u64,
    /// What got through of the members' dispatches, per second, summed (infinite
    /// ones left out).
    pub through: f64,
    /// The attempts the members made, per second, summed (infinite ones left out).
    /// The script keeps it in a field of its own (`a`, [`Summary::tried_from`]), so
    /// that a member that does not know it reads the summary as before.
    pub tried: f64,
    /// The members' learned concurrency caps and what they want out, summed; kept in
    /// `a` with the attempts.
    pub capped: Capped,
    /// The members' distinct non-empty fingerprints, sorted, at most [`FINGERPRINTS`].
    pub fingerprints: Vec<String>,
    /// The members' claims, ascending, in at most [`GROUPS`] groups.
    pub groups: Vec<Group>,
}

/// What an entry's text after its last-seen time (`demand::entry`) counts for.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Counted<'a> {
    /// Its claim, capped at [`CLAIM_CAP`].
    pub claim: f64,
    /// What got through of its dispatches, 0 if infinite.
    pub through: f64,
    /// The attempts it made, 0 if infinite.
    pub tried: f64,
    /// Its learned cap and what it wants out.
    pub capped: Capped,
    /// Its fingerprint.
    pub fingerprint: &'a str,
}

/// What an entry's text after its last-seen time counts for; `None` for an entry
/// whose demand cannot be read.
pub fn read(entry: &str) -> Option<Counted<'_>> {
    let read = demand::parse(entry)?;
    let finite = |x: f64| if x.is_finite() { x } else { 0.0 };
    Some(Counted {
        claim: read.claim.min(CLAIM_CAP),
        through: finite(read.through),
        tried: finite(read.tried),
        capped: read.capped,
        fingerprint: read.fingerprint,
    })
}

impl Summary {
    /// The summary, written `at`, of the members whose entries are `entries` (each
    /// the text after the last-seen time); unreadable ones are left out.
    pub fn of<'a>(at: u64, entries: impl IntoIterator<Item = &'a str>) -> Summary {
        let mut claims = Vec::new();
        let (mut through, mut tried) = (0.0, 0.0);
        let mut capped = Capped::default();
        let mut fingerprints = BTreeSet::new();
        for counted in entries.into_iter().filter_map(read) {
            claims.push(counted.claim);
            through += counted.through;
            tried += counted.tried;
            capped.cap += counted.capped.cap;
            capped.want += counted.capped.want;
            if !counted.fingerprint.is_empty() {
                fingerprints.insert(counted.fingerprint);
            }
        }
        claims.sort_by(f64::total_cmp);
        let n = claims.len();
        let groups = (0..GROUPS)
            .filter_map(|g| {
                let (lo, hi) = (g * n / GROUPS, (g + 1) * n / GROUPS);
                let part = claims.get(lo..hi).filter(|p| !p.is_empty())?;
                Some(Group {
                    count: u32::try_from(part.len()).unwrap_or(u32::MAX),
                    sum: part.iter().fold(0.0, |sum, c| sum + c),
                    max: part[part.len() - 1],
                })
            })
            .collect();
        Summary {
            at,
            through,
            tried,
            capped,
            fingerprints: fingerprints
                .into_iter()
                .take(FINGERPRINTS)
                .map(str::to_string)
                .collect(),
            groups,
        }
    }

    /// Reads the summary the script writes: `<written ms> <expires ms> <through>
    /// <fingerprints joined by commas, or -> <count> <sum> <max> ...`; `None` if it
    /// is unreadable. The attempts summed are what got through until
    /// [`Summary::tried_from`] reads them.
    pub fn parse(text: &str) -> Option<Summary> {
        let mut parts = text.split(' ');
        let at = parts.next()?.parse::<u64>().ok()?;
        parts.next()?;
        let through = parts.next()?.parse::<f64>().ok()?;
        let fingerprints = match parts.next()? {
            "-" => Vec::new(),
            listed => listed.split(',').map(str::to_string).collect(),
        };
        let mut groups = Vec::new();
        while let Some(count) = parts.next() {
            groups.push(Group {
                count: count.parse().ok()?,
                sum: parts.next()?.parse().ok()?,
                max: parts.next()?.parse().ok()?,
            });
        }
        Some(Summary {
            at,
            through,
            tried: through,
            capped: Capped::default(),
            fingerprints,
            groups,
        })
    }

    /// The summary with the attempts, caps and wants summed in `a`, the script's
    /// field `<written ms> <tried> <caps> <wants>` written with it; unchanged if `a`
    /// was written with another summary (by a member whose script does not know it)
    /// or is unreadable. Caps and wants a script did not sum are none.
    #[must_use]
    pub fn tried_from(self, a: &str) -> Summary {
        let mut parts = a.split(' ');
        let written = parts.next().and_then(|at| at.parse::<u64>().ok());
        let mut number = || {
            parts
                .next()
                .and_then(|t| t.parse::<f64>().ok())
                .filter(|t| t.is_finite() && *t >= 0.0)
        };
        let tried = number();
        let capped = Capped {
            cap: number().unwrap_or(0.0),
            want: number().unwrap_or(0.0),
        };
        match (written, tried) {
            (Some(at), Some(tried)) if at == self.at => Summary {
                tried,
                capped,
                ..self
            },
            _ => self,
        }
    }

    /// One member's answer: the lane's state `shared`, and the summary less `counted`,
    /// the member's own entry if the summary counted it.
    pub fn answer(&self, shared: Option<Shared>, counted: Option<&str>) -> Answer {
        let mut groups = self.groups.clone();
        let (mut through, mut tried, mut capped) = (self.through, self.tried, self.capped);
        if let Some(mine) = counted.and_then(read)
            && let Some(g) = groups
                .iter_mut()
                .find(|g| g.count > 0 && g.max >= mine.claim)
        {
            g.count -= 1;
            g.sum -= mine.claim;
            through -= mine.through;
            tried -= mine.tried;
            capped.cap -= mine.capped.cap;
            capped.want -= mine.capped.want;
        }
        let mut others = Vec::new();
        for g in groups.iter().filter(|g| g.count > 0) {
            let mean = (g.sum / f64::from(g.count)).max(0.0);
            others.extend(std::iter::repeat_n(mean, g.count as usize));
        }
        let each = if others.is_empty() {
            0.0
        } else {
            through.max(0.0) / others.len() as f64
        };
        Answer {
            shared,
            others_through: vec![each; others.len()],
            others_tried: if others.is_empty() {
                0.0
            } else {
                tried.max(0.0)
            },
            others_capped: if others.is_empty() {
                Capped::default()
            } else {
                Capped {
                    cap: capped.cap.max(0.0),
                    want: capped.want.max(0.0),
                }
            },
            others,
            fingerprints: self.fingerprints.clone(),
            counted_in: if counted.is_some() { self.at } else { 0 },
            progress: None,
            seat: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn up_to_sixteen_members_each_claim_is_its_own_group_and_is_given_back_exactly() {
        let entries = ["5 10 ab", "inf inf", "1 0.5 cd", "3 100"];
        let s = Summary::of(9, entries);
        assert_eq!(s.groups.len(), 4);
        assert_eq!((s.through, s.tried), (110.5, 110.5));
        assert_eq!(s.fingerprints, vec!["ab", "cd"]);
        // Member "3 100" asks: the others are 1 (0.5 x 2), 5 and the capped infinity.
        let a = s.answer(None, Some("3 100"));
        assert_eq!(a.others, vec![1.0, 5.0, CLAIM_CAP]);
        assert_eq!(a.others_through, vec![10.5 / 3.0; 3]);
        assert_eq!(a.others_tried, 10.5);
        assert_eq!(a.counted_in, 9);
        // A member the summary did not count yet sees every one of them.
        assert_eq!(s.answer(None, None).others.len(), 4);
    }

    #[test]
    fn past_sixteen_members_a_group_counts_at_its_mean() {
        let entries: Vec<String> = (0..32).map(|i| format!("{i} 1000")).collect();
        let s = Summary::of(9, entries.iter().map(String::as_str));
        assert_eq!(s.groups.len(), GROUPS);
        assert_eq!(
            s.groups[0],
            Group {
                count: 2,
                sum: 1.0,
                max: 1.0
            }
        );
        let a = s.answer(None, Some("31 1000"));
        assert_eq!(a.others.len(), 31);
        assert_eq!(a.others[0], 0.5);
        assert_eq!(a.others[30], 30.0);
        assert_eq!(a.others.iter().sum::<f64>(), (0..31).sum::<i32>() as f64);
    }

    #[test]
    fn the_script_s_text_reads_back() {
        let text = "1700000000000 1700000005000 12.5 ab,cd 1 3 3 2 9.5 7";
        assert_eq!(
            Summary::parse(text),
            Some(Summary {
                at: 1_700_000_000_000,
                through: 12.5,
                tried: 12.5,
                capped: Capped::default(),
                fingerprints: vec!["ab".to_string(), "cd".to_string()],
                groups: vec![
                    Group {
                        count: 1,
                        sum: 3.0,
                        max: 3.0
                    },
                    Group {
                        count: 2,
                        sum: 9.5,
                        max: 7.0
                    }
                ],
            })
        );
        let empty = Summary {
            at: 1,
            ..Summary::default()
        };
        assert_eq!(Summary::parse("1 2 0 -"), Some(empty));
        assert_eq!(Summary::parse("1 2 0 - 2 x 3"), None);
        // The attempts, from the field written with the summary only.
        let s = Summary::parse(text).unwrap();
        assert_eq!(s.clone().tried_from("1700000000000 20").tried, 20.0);
        assert_eq!(s.clone().tried_from("1699999999750 20").tried, 12.5);
        assert_eq!(s.clone().tried_from("1700000000000 x").tried, 12.5);
        assert_eq!(s.clone().tried_from("").tried, 12.5);
        // The caps and wants, from the same field; none where it does not say them.
        let capped = |cap, want| Capped { cap, want };
        let read = |a: &str| s.clone().tried_from(a).capped;
        assert_eq!(read("1700000000000 20 75.5 120"), capped(75.5, 120.0));
        assert_eq!(read("1700000000000 20"), Capped::default());
        assert_eq!(read("1700000000000 20 -1 inf"), Capped::default());
        assert_eq!(read("1699999999750 20 75.5 120"), Capped::default());
        assert_eq!(Summary::parse(""), None);
    }

    #[test]
    fn the_caps_shared_through_a_key_sum_and_a_member_sees_the_others() {
        let entries = ["5 10 - 10 10 25.5 40", "5 10 - 10 10 30 20", "5 10 - 10 10"];
        let s = Summary::of(9, entries);
        let capped = |cap, want| Capped { cap, want };
        assert_eq!(s.capped, capped(55.5, 60.0));
        assert_eq!(
            s.answer(None, Some("5 10 - 10 10 30 20")).others_capped,
            capped(25.5, 40.0)
        );
        // Not counted yet: every member's.
        assert_eq!(s.answer(None, None).others_capped, capped(55.5, 60.0));
        // Alone: none.
        let alone = Summary::of(9, ["5 10 - 10 10 30 20"]);
        assert_eq!(
            alone.answer(None, Some("5 10 - 10 10 30 20")).others_capped,
            Capped::default()
        );
    }
}
