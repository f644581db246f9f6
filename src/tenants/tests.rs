use std::sync::Arc;

use http::{HeaderMap, HeaderName, HeaderValue};

use super::*;
use crate::metrics::Metrics;

fn tenants(settings: FairnessSettings) -> Tenants {
    let metrics = Arc::new(Metrics::new().unwrap().upstream("api"));
    Tenants::new(&settings, &[HeaderName::from_static("x-secret")], metrics)
}

fn by_header(name: &'static str) -> FairnessSettings {
    FairnessSettings {
        by: Caller::Header(HeaderName::from_static(name)),
        weights: vec![("batch".into(), 3)],
        priority: Some(HeaderName::from_static("x-priority")),
        max_tenants: 3,
        max_waiting: 10,
    }
}

fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
    pairs
        .iter()
        .map(|(k, v)| {
            (
                HeaderName::from_static(k),
                HeaderValue::from_str(v).unwrap(),
            )
        })
        .collect()
}

#[test]
fn a_header_names_the_tenant_and_weights_come_from_the_config() {
    let t = tenants(by_header("x-tenant"));
    let batch = t.ticket(&headers(&[("x-tenant", "batch")]), None);
    let web = t.ticket(&headers(&[("x-tenant", "web")]), None);
    let nobody = t.ticket(&HeaderMap::new(), None);
    assert_eq!((batch.weight, web.weight, nobody.weight), (3, 1, 1));
    assert_eq!(nobody.tenant, 0);
    assert_eq!(t.get(batch.tenant).unwrap().name.as_ref(), "batch");
    assert_eq!(t.get(web.tenant).unwrap().name.as_ref(), "web");
    assert_eq!(t.ticket(&headers(&[("x-tenant", "web")]), None), web);
}

#[test]
fn tenants_past_max_tenants_share_other() {
    let t = tenants(by_header("x-tenant"));
    // `other` and `batch` are known from the start; two more names fit.
    let ids: Vec<u16> = ["a", "b", "c", "d"]
        .iter()
        .map(|name| t.ticket(&headers(&[("x-tenant", name)]), None).tenant)
        .collect();
    assert_eq!(ids, [2, 3, 0, 0]);
    let names: Vec<String> = t.all().iter().map(|t| t.name.to_string()).collect();
    assert_eq!(names, ["other", "batch", "a", "b"]);
}

#[test]
fn a_credential_or_secret_header_names_its_tenant_by_a_hash() {
    for header in ["authorization", "x-secret"] {
        let t = tenants(by_header(header));
        let who = t.ticket(&headers(&[(header, "Bearer sk-live-123")]), None);
        let name = t.get(who.tenant).unwrap().name.to_string();
        assert_eq!(name, "key:af7d75077050", "{header}");
    }
}

#[test]
fn the_priority_header_is_a_class_within_an_i8() {
    let t = tenants(by_header("x-tenant"));
    let class = |v: &str| t.ticket(&headers(&[("x-priority", v)]), None).class;
    assert_eq!(class("1"), 1);
    assert_eq!(class(" -2 "), -2);
    assert_eq!(class("100000"), 127);
    assert_eq!(class("-100000"), -128);
    assert_eq!(class("high"), 0);
    assert_eq!(t.ticket(&HeaderMap::new(), None).class, 0);
}

#[test]
fn the_client_address_names_the_tenant_when_asked() {
    let t = tenants(FairnessSettings {
        by: Caller::ClientIp,
        ..by_header("x-tenant")
    });
    assert!(t.by_client_ip());
    let ip = "10.0.0.7".parse().unwrap();
    let who = t.ticket(&HeaderMap::new(), Some(ip));
    assert_eq!(t.get(who.tenant).unwrap().name.as_ref(), "10.0.0.7");
    assert_eq!(t.ticket(&HeaderMap::new(), None).tenant, 0);
}
