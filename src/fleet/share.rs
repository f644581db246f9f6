//! Max-min fair shares: how a fleet rate is split among members by what each wants.
//! Members that want less than an equal share get what they want; the rest split what
//! is left equally (Doorman's "fair share" algorithm, with the capacity learned instead
//! of configured). Pure.

/// Each member's allocation of `capacity`, in the order of `demands`. Demands are
/// rates (requests per second); `f64::INFINITY` means "as much as there is"; negative
/// or NaN demands count as 0. The allocations never add up to more than `capacity`,
/// and add up to exactly it when the demands do.
pub fn max_min(demands: &[f64], capacity: f64) -> Vec<f64> {
    let wanted = |d: f64| if d.is_nan() { 0.0 } else { d.max(0.0) };
    let mut order: Vec<usize> = (0..demands.len()).collect();
    order.sort_by(|&a, &b| wanted(demands[a]).total_cmp(&wanted(demands[b])));
    let mut allocations = vec![0.0; demands.len()];
    let mut left = capacity.max(0.0);
    for (done, &i) in order.iter().enumerate() {
        let equal = left / (demands.len() - done) as f64;
        let given = wanted(demands[i]).min(equal);
        allocations[i] = given;
        left -= given;
    }
    allocations
}

#[cfg(test)]
mod tests {
    use super::*;

    const INF: f64 = f64::INFINITY;

    #[test]
    fn members_wanting_less_than_an_equal_share_get_what_they_want() {
        // 100/s among 4: the two light members get 5 each, the heavy two split 90.
        assert_eq!(
            max_min(&[5.0, INF, 5.0, 200.0], 100.0),
            vec![5.0, 45.0, 5.0, 45.0]
        );
    }

    #[test]
    fn equal_demand_above_capacity_splits_equally() {
        assert_eq!(max_min(&[INF; 4], 100.0), vec![25.0; 4]);
        assert_eq!(max_min(&[30.0; 4], 100.0), vec![25.0; 4]);
    }

    #[test]
    fn demand_below_capacity_is_met_and_the_rest_stays_unallocated() {
        assert_eq!(max_min(&[10.0, 20.0], 100.0), vec![10.0, 20.0]);
    }

    #[test]
    fn a_member_between_the_light_and_the_equal_share_gets_its_demand() {
        // 90 among 3: 10 is met, 35 is split by the others, of which 30 is met, and
        // the last gets the remaining 50.
        assert_eq!(max_min(&[10.0, 30.0, INF], 90.0), vec![10.0, 30.0, 50.0]);
    }

    #[test]
    fn zero_demand_gets_nothing_and_a_lone_member_gets_what_it_asks_up_to_capacity() {
        assert_eq!(max_min(&[0.0, INF], 10.0), vec![0.0, 10.0]);
        assert_eq!(max_min(&[INF], 10.0), vec![10.0]);
        assert_eq!(max_min(&[4.0], 10.0), vec![4.0]);
        assert_eq!(max_min(&[0.0, 0.0], 10.0), vec![0.0, 0.0]);
    }

    #[test]
    fn nonsense_demands_count_as_zero_and_no_members_get_nothing() {
        assert_eq!(max_min(&[f64::NAN, -3.0, INF], 10.0), vec![0.0, 0.0, 10.0]);
        assert!(max_min(&[], 10.0).is_empty());
        assert_eq!(max_min(&[INF, 1.0], 0.0), vec![0.0, 0.0]);
    }

    #[test]
    fn allocations_never_exceed_capacity_nor_demand() {
        let mut rng = fastrand::Rng::with_seed(7);
        for _ in 0..1000 {
            let n = rng.usize(1..20);
            let demands: Vec<f64> = (0..n).map(|_| rng.f64() * 50.0).collect();
            let capacity = rng.f64() * 300.0;
            let a = max_min(&demands, capacity);
            let total: f64 = a.iter().sum();
            assert!(total <= capacity + 1e-9);
            let wanted: f64 = demands.iter().sum();
            assert!((total - wanted.min(capacity)).abs() < 1e-6);
            for (given, want) in a.iter().zip(&demands) {
                assert!(*given <= want + 1e-12);
            }
        }
    }
}
