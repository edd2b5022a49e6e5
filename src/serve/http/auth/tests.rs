//! The guard's own bookkeeping: unknown users cost the costliest hash, a
//! source gets its share of the pool and no more, and a check records its
//! outcome even when its request gave up first.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use super::*;

#[test]
fn unknown_users_cost_as_much_as_the_costliest_user() {
    // Costs 4 and 6 keep the test quick; what matters is which is used.
    let cheap = bcrypt::hash("a", 4).unwrap();
    let dear = bcrypt::hash("b", 6).unwrap();
    let users = BTreeMap::from([("aaa".to_string(), cheap.clone()), ("zzz".to_string(), dear.clone())]);
    let auth = BasicAuth::new(users).unwrap();
    let cost = |h: &str| h.parse::<bcrypt::HashParts>().unwrap().get_cost();
    let (h, known) = auth.hash_for(b"nobody");
    assert!(!known);
    assert_eq!(cost(h), 6, "an unknown user is checked at the highest configured cost");
    assert_eq!(auth.hash_for(b"aaa"), (cheap.as_str(), true));
    assert_eq!(auth.hash_for(b"zzz"), (dear.as_str(), true));
}

#[tokio::test]
async fn a_source_gets_its_share_and_no_more() {
    let users = BTreeMap::from([("u".to_string(), bcrypt::hash("p", 4).unwrap())]);
    let auth = BasicAuth::new(users).unwrap();
    let admit = |ip: IpAddr| auth.admit(source_of(ip), PER_SOURCE);
    let ip: IpAddr = [10, 0, 0, 1].into();
    let held: Vec<_> = (0..PER_SOURCE).map(|_| admit(ip).expect("within share")).collect();
    assert!(admit(ip).is_none(), "over its share");
    assert!(admit([10, 0, 0, 2].into()).is_some(), "another source is admitted");
    let mapped: IpAddr = "::ffff:10.0.0.1".parse().unwrap();
    assert!(admit(mapped).is_none(), "the same host over IPv6-mapped");
    let v6a: IpAddr = "2001:db8::1".parse().unwrap();
    let v6b: IpAddr = "2001:db8::2:3".parse().unwrap();
    let _a = (admit(v6a).unwrap(), admit(v6a).unwrap());
    assert!(admit(v6b).is_none(), "one /64 is one source");
    drop(held);
    assert!(admit(ip).is_some(), "places come back");
}

#[tokio::test]
async fn a_check_whose_request_timed_out_still_marks_its_source_failing() {
    // Cost 10: the check outlives the 1 ms its request waits.
    let users = BTreeMap::from([("u".to_string(), bcrypt::hash("p", 10).unwrap())]);
    let auth = BasicAuth::new(users).unwrap();
    let mut headers = HeaderMap::new();
    let guess = base64::engine::general_purpose::STANDARD.encode("u:wrong");
    headers.insert(header::AUTHORIZATION, format!("Basic {guess}").parse().unwrap());
    let ip: IpAddr = [10, 0, 0, 9].into();
    let asked = tokio::time::timeout(Duration::from_millis(1), auth.check(&headers, ip)).await;
    assert!(asked.is_err(), "the request gave up before bcrypt ended");
    crate::tests::wait_true("the source marked failing", || auth.outcomes.is_failing(ip));
    crate::tests::wait_true("its place given back", || auth.admit(ip, 1).is_some());
}
