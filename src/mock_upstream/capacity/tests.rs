//! The capacity's verdicts in injected time.

use super::*;

const MS: Duration = Duration::from_millis(1);

fn rate(table: &str, access: Option<Access>, rate: f64) -> TableRate {
    TableRate {
        table: table.into(),
        access,
        rate,
    }
}

fn capacity(tables: &[TableRate], key_rate: Option<f64>, t0: Instant) -> Capacity {
    Capacity::new(Bucket::new(1000.0, 100, None, t0), tables, key_rate, t0)
}

fn write<'a>(tables: &'a [&'a str], key: Option<u64>) -> Demand<'a> {
    Demand {
        access: Access::Write,
        tables,
        key,
        partial: false,
        units: 1.0,
    }
}

fn throttled(table: &str, access: Access, limit: Limit) -> Exhausted {
    Exhausted {
        table: table.into(),
        access,
        limit,
    }
}

#[test]
fn table_rates_parse_with_and_without_an_access_kind() {
    assert_eq!(parse_table_rate("slow=20"), Ok(rate("slow", None, 20.0)));
    assert_eq!(
        parse_table_rate("t:write=2.5"),
        Ok(rate("t", Some(Access::Write), 2.5))
    );
    assert_eq!(
        parse_table_rate("t:read=7"),
        Ok(rate("t", Some(Access::Read), 7.0))
    );
    for bad in ["slow", "=5", "t:scan=5", "t=0", "t=-1", "t=x", "t=inf"] {
        let err = parse_table_rate(bad).unwrap_err();
        assert!(err.contains(bad), "{bad}: {err}");
    }
}

#[test]
fn tables_with_their_own_rate_throttle_independently() {
    let t0 = Instant::now();
    let mut c = capacity(
        &[rate("slow", None, 20.0), rate("fast", None, 500.0)],
        None,
        t0,
    );
    // Bursts: 2 for slow, 50 for fast.
    let (mut slow_ok, mut fast_ok) = (0, 0);
    for _ in 0..100 {
        slow_ok += i32::from(c.decide(&write(&["slow"], None), t0) == Verdict::Ok);
        fast_ok += i32::from(c.decide(&write(&["fast"], None), t0) == Verdict::Ok);
    }
    assert_eq!((slow_ok, fast_ok), (2, 50));
    assert_eq!(
        c.decide(&write(&["slow"], None), t0),
        Verdict::Throttled {
            wait: Duration::from_millis(50),
            reasons: vec![throttled(
                "slow",
                Access::Write,
                Limit::ProvisionedThroughputExceeded
            )],
        }
    );
    // 50 ms later slow has one token again; fast 25.
    assert_eq!(c.decide(&write(&["slow"], None), t0 + 50 * MS), Verdict::Ok);
}

#[test]
fn reads_and_writes_of_a_table_have_separate_buckets() {
    let t0 = Instant::now();
    let mut c = capacity(
        &[
            rate("t", Some(Access::Write), 10.0),
            rate("t", Some(Access::Read), 1000.0),
        ],
        None,
        t0,
    );
    assert_eq!(c.decide(&write(&["t"], None), t0), Verdict::Ok);
    assert!(matches!(
        c.decide(&write(&["t"], None), t0),
        Verdict::Throttled { .. }
    ));
    let read = Demand {
        access: Access::Read,
        ..write(&["t"], None)
    };
    for _ in 0..100 {
        assert_eq!(c.decide(&read, t0), Verdict::Ok);
    }
}

#[test]
fn tables_without_a_rate_and_control_requests_share_the_rate() {
    let t0 = Instant::now();
    let mut c = Capacity::new(Bucket::new(10.0, 2, None, t0), &[], None, t0);
    let control = Demand {
        access: Access::Control,
        tables: &["t"],
        key: None,
        partial: false,
        units: 1.0,
    };
    assert_eq!(c.decide(&control, t0), Verdict::Ok);
    assert_eq!(c.decide(&write(&["other"], None), t0), Verdict::Ok);
    assert_eq!(
        c.decide(&write(&[], None), t0),
        Verdict::Throttled {
            wait: Duration::from_millis(100),
            reasons: Vec::new()
        }
    );
}

#[test]
fn a_transaction_takes_a_token_from_every_table_or_none() {
    let t0 = Instant::now();
    let mut c = capacity(&[rate("a", None, 10.0), rate("b", None, 20.0)], None, t0);
    // b has 2 tokens, a 1: the second transaction fails on a and takes nothing from b.
    assert_eq!(c.decide(&write(&["a", "b"], None), t0), Verdict::Ok);
    assert_eq!(
        c.decide(&write(&["a", "b"], None), t0),
        Verdict::Throttled {
            wait: Duration::from_millis(100),
            reasons: vec![throttled(
                "a",
                Access::Write,
                Limit::ProvisionedThroughputExceeded
            )],
        }
    );
    assert_eq!(c.decide(&write(&["b"], None), t0), Verdict::Ok);
}

#[test]
fn a_batch_leaves_only_the_throttled_tables_unprocessed() {
    let t0 = Instant::now();
    let mut c = capacity(&[rate("slow", None, 10.0)], None, t0);
    let batch = Demand {
        partial: true,
        units: 1.0,
        ..write(&["fast", "slow"], None)
    };
    assert_eq!(c.decide(&batch, t0), Verdict::Ok);
    assert_eq!(
        c.decide(&batch, t0),
        Verdict::Partial {
            unprocessed: vec!["slow".into()]
        }
    );
    let only_slow = Demand {
        partial: true,
        units: 1.0,
        ..write(&["slow"], None)
    };
    assert!(matches!(
        c.decide(&only_slow, t0),
        Verdict::Throttled { reasons, .. } if reasons.len() == 1
    ));
}

#[test]
fn a_hot_key_throttles_while_other_keys_pass() {
    let t0 = Instant::now();
    let mut c = capacity(&[rate("t", None, 1000.0)], Some(10.0), t0);
    assert_eq!(c.decide(&write(&["t"], Some(1)), t0), Verdict::Ok);
    assert_eq!(
        c.decide(&write(&["t"], Some(1)), t0),
        Verdict::Throttled {
            wait: Duration::from_millis(100),
            reasons: vec![throttled(
                "t",
                Access::Write,
                Limit::KeyRangeThroughputExceeded
            )],
        }
    );
    for key in 2..50 {
        assert_eq!(c.decide(&write(&["t"], Some(key)), t0), Verdict::Ok);
    }
    // The same key value in another table, or read instead of written, is another bucket.
    assert_eq!(c.decide(&write(&["u"], Some(1)), t0), Verdict::Ok);
    let read = Demand {
        access: Access::Read,
        ..write(&["t"], Some(1))
    };
    assert_eq!(c.decide(&read, t0), Verdict::Ok);
    assert_eq!(
        c.decide(&write(&["t"], Some(1)), t0 + 100 * MS),
        Verdict::Ok
    );
}

#[test]
fn key_buckets_stay_bounded() {
    let t0 = Instant::now();
    let mut c = capacity(&[rate("t", None, 1e6)], Some(1.0), t0);
    c.max_keys = 100;
    for key in 0..1000 {
        assert_eq!(c.decide(&write(&["t"], Some(key)), t0), Verdict::Ok);
        assert!(c.keys.len() <= 100);
    }
    // Refilled buckets are dropped first, so a recently throttled key keeps its state.
    c.keys.clear();
    for key in 0..99 {
        let _ = c.decide(&write(&["t"], Some(key)), t0);
    }
    let later = t0 + Duration::from_secs(2);
    assert_eq!(c.decide(&write(&["t"], Some(7_000)), later), Verdict::Ok);
    assert_eq!(c.keys.len(), 100);
    assert_eq!(c.decide(&write(&["t"], Some(8_000)), later), Verdict::Ok);
    assert_eq!(c.keys.len(), 2);
    assert!(matches!(
        c.decide(&write(&["t"], Some(7_000)), later + 10 * MS),
        Verdict::Throttled { .. }
    ));
}

#[test]
fn the_partition_write_cap_throttles_one_keys_writes_and_not_its_reads() {
    let t0 = Instant::now();
    let mut c = capacity(&[rate("t", None, 1e6)], None, t0);
    c.set_partition_wcu(Some(1000.0));
    let big = |key| Demand {
        units: 100.0,
        ..write(&["t"], Some(key))
    };
    // A key's bucket holds a tenth of a second, 100 units: one 100-unit write, then
    // a hot partition until 100 ms have passed.
    assert_eq!(c.decide(&big(1), t0), Verdict::Ok);
    assert_eq!(
        c.decide(&big(1), t0),
        Verdict::Throttled {
            wait: Duration::from_millis(100),
            reasons: vec![throttled(
                "t",
                Access::Write,
                Limit::KeyRangeThroughputExceeded
            )],
        }
    );
    assert_eq!(c.decide(&big(2), t0), Verdict::Ok);
    let read = Demand {
        access: Access::Read,
        ..big(1)
    };
    assert_eq!(c.decide(&read, t0), Verdict::Ok);
    assert_eq!(c.decide(&read, t0), Verdict::Ok);
    assert_eq!(c.decide(&big(1), t0 + 100 * MS), Verdict::Ok);
    // A lower --key-rate wins.
    let mut c = capacity(&[rate("t", None, 1e6)], Some(10.0), t0);
    c.set_partition_wcu(Some(1000.0));
    assert_eq!(c.decide(&write(&["t"], Some(1)), t0), Verdict::Ok);
    assert!(matches!(
        c.decide(&write(&["t"], Some(1)), t0),
        Verdict::Throttled { .. }
    ));
}

#[test]
fn burst_seconds_fill_the_shared_and_the_tables_buckets() {
    let t0 = Instant::now();
    let mut c = capacity(&[rate("t", None, 20.0)], None, t0);
    c.set_burst_seconds(300.0);
    let many = Demand {
        units: 6000.0,
        ..write(&["t"], None)
    };
    assert_eq!(c.decide(&many, t0), Verdict::Ok);
    assert!(matches!(
        c.decide(&write(&["t"], None), t0),
        Verdict::Throttled { .. }
    ));
    assert_eq!(c.shared().level(t0), (300_000, 300_000, Duration::ZERO));
}
