use super::*;

#[test]
fn the_windows_allowed_to_miss_are_the_floor_of_the_rest() {
    // Worked by hand: (1 - f) * windows, rounded down.
    let cases = [(1.0, 1441, 0), (0.99, 100, 1), (0.99, 99, 0), (0.5, 7, 3), (0.9, 10, 1), (0.95, 1441, 72)];
    for (fraction, windows, allowed) in cases {
        assert_eq!(Need { fraction }.allowed(windows), allowed, "{fraction} of {windows}");
    }
}

/// Runs [`smallest`] against "meets from `k` up" and returns its answer and
/// every count asked, in order.
fn search(limit: u32, k: u32) -> (Option<u32>, Vec<Vec<u32>>) {
    let mut asked = Vec::new();
    let found = smallest::<()>(limit, |round| {
        asked.push(round.to_vec());
        Ok(round.iter().map(|&n| n >= k).collect())
    })
    .unwrap();
    (found, asked)
}

#[test]
fn the_static_search_finds_the_smallest_count_that_meets() {
    for limit in 1..=70u32 {
        for k in 1..=75u32 {
            let (found, asked) = search(limit, k);
            let want = (k <= limit).then_some(k);
            assert_eq!(found, want, "limit {limit}, meets from {k}: asked {asked:?}");
            let all: Vec<u32> = asked.iter().flatten().copied().collect();
            assert!(all.iter().all(|&n| (1..=limit).contains(&n)), "inside 1..={limit}: {asked:?}");
            assert!(asked.iter().all(|r| !r.is_empty() && r.len() <= 3), "at most 3 a round: {asked:?}");
            let mut sorted = all.clone();
            sorted.sort_unstable();
            sorted.dedup();
            assert_eq!(sorted.len(), all.len(), "no count asked twice: {asked:?}");
            // The answer is proven: it was asked and met, and the count
            // below it was asked and failed (or is 0).
            if let Some(n) = found {
                assert!(all.contains(&n) && (n == 1 || all.contains(&(n - 1))), "limit {limit}, k {k}: {asked:?}");
            }
        }
    }
}

#[test]
fn the_static_search_asks_in_rounds_of_three() {
    // Meets from 5, limit 64: doubling asks 1, 2, 4, then 8, 16, 32 (8
    // meets: the bracket is (4, 8]); then 4 + 4k/4 for k = 1..3: 5, 6, 7.
    assert_eq!(search(64, 5).1, vec![vec![1, 2, 4], vec![8, 16, 32], vec![5, 6, 7]]);
    // Limit 6, meets from 6: 1, 2, 4, then the limit.
    assert_eq!(search(6, 6).1, vec![vec![1, 2, 4], vec![6], vec![5]]);
    // Meets from 100, limit 1000: 1..4, 8..32, 64..256 (128 meets:
    // (64, 128]), then 64 + 64k/4: 80, 96, 112 ((96, 112]), 100, 104, 108
    // ((96, 100]), 97, 98, 99.
    assert_eq!(
        search(1000, 100).1,
        vec![
            vec![1, 2, 4],
            vec![8, 16, 32],
            vec![64, 128, 256],
            vec![80, 96, 112],
            vec![100, 104, 108],
            vec![97, 98, 99]
        ]
    );
}

#[test]
fn an_error_stops_the_static_search() {
    let mut rounds = 0;
    let got = smallest(100, |_| {
        rounds += 1;
        Err("a run failed")
    });
    assert_eq!(got, Err("a run failed"));
    assert_eq!(rounds, 1);
}
