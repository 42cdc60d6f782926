//! The webhook's Kubernetes Events, with the real binary against a
//! stand-in API server (`common::apiserver`). A checklist:
//!
//! - one event series per owner and reason: 1,000 pods of one TFJob, some
//!   wrapped and some skipped, and one pod of a Job make exactly three
//!   creates and, when the webhook stops, two patches with the counts;
//! - a skip's note is inject's sentence for the same pod template, word for
//!   word; a wrap's names the container, the mesh and the quit policy;
//! - an admission is answered as fast while the API server is slow, hangs
//!   or is down as while it is up;
//! - the poster keeps taking notices while its requests hang or are slow,
//!   with at most WRITERS (16) out at once: none dropped, every new
//!   owner's first event written soon;
//! - `--events off` (and `MESHWRAP_EVENTS=off`) posts nothing;
//! - a pod with no owner gets its event on its namespace;
//! - the token is read from its file for every request;
//! - the cache of series is bounded: the least recently seen is forgotten;
//! - an expired event is created again; a refused one is counted;
//! - outside a cluster events are off, said once, and the webhook serves;
//! - every event body validates strictly against the Kubernetes 1.36
//!   OpenAPI schema and the API server's own rules for events.k8s.io/v1.

mod common;

use std::time::{Duration, Instant};

use common::apiserver::{Mode, Recorded, StandIn, closed_port};
use common::https::*;
use serde_json::{Value, json};

const TFJOB: (&str, &str, &str, &str) = (
    "kubeflow.org/v1",
    "TFJob",
    "mnist",
    "7f000000-0000-4000-8000-000000000001",
);
const JOB: (&str, &str, &str, &str) = ("batch/v1", "Job", "train", "c0ffee00-0000-4000-8000-000000000002");

/// A pod of `owner` (apiVersion, kind, name, uid), or a bare one.
fn pod(namespace: &str, owner: Option<(&str, &str, &str, &str)>, containers: Value) -> Value {
    let mut metadata = json!({
        "generateName": "p-",
        "namespace": namespace,
        "annotations": {"sidecar.istio.io/inject": "true"},
    });
    if let Some((api_version, kind, name, uid)) = owner {
        metadata["ownerReferences"] = json!([{
            "apiVersion": api_version, "kind": kind, "name": name, "uid": uid,
            "controller": true, "blockOwnerDeletion": true
        }]);
    }
    json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": metadata,
        "spec": {"restartPolicy": "Never", "containers": containers},
    })
}

/// A container meshwrap wraps, and the Istio proxy beside it.
fn runs() -> Value {
    json!([
        {"name": "tensorflow", "image": "registry.example.com/train:1", "command": ["python", "train.py"]},
        {"name": "istio-proxy", "image": "docker.io/istio/proxyv2:1.28.0", "args": ["proxy", "sidecar"]}
    ])
}

/// A container with no command: skipped.
fn no_command() -> Value {
    json!([{"name": "trainer", "image": "registry.example.com/train:1"}])
}

/// Sends one admission; its answer, which must allow the pod.
fn admit(client: &mut Client, pod: &Value, uid: usize) -> Value {
    let response = client
        .post(common::pod_review(pod, uid).to_string().as_bytes())
        .unwrap();
    assert_eq!(response.status, 200, "{}", response.text());
    let answer = response.json();
    assert_eq!(answer["response"]["allowed"], true);
    answer
}

/// The webhook pointed at `api`, with `extra` flags, once it says events
/// are on.
fn webhook(name: &str, ca: &Ca, api: &StandIn, extra: &[&str]) -> Webhook {
    let mut flags = api.flags();
    flags.extend(extra.iter().map(|s| s.to_string()));
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    let webhook = Webhook::start(name, ca, &flags);
    webhook.wait_for("events are on");
    webhook
}

/// SIGTERM, and the exit: the poster's last writes are done by then.
fn stop(mut webhook: Webhook) {
    webhook.signal(libc::SIGTERM);
    assert_eq!(webhook.exit_code(Duration::from_secs(20)), Some(0));
}

/// Creates answered and learnt by the poster (its connection free again).
const CREATED: &str = "meshwrap_webhook_event_writes_total{request=\"create\",result=\"ok\"}";

fn creates(requests: &[Recorded]) -> Vec<&Recorded> {
    requests.iter().filter(|r| r.method == "POST").collect()
}

// ---- the Kubernetes 1.36 schema and the API server's rules -----------------

/// The swagger definitions as strict JSON Schema (draft 4), as
/// tests/schemas.rs reads them: every object closed to unknown fields.
fn definitions() -> Value {
    fn fix(node: &mut Value) {
        match node {
            Value::Object(map) => {
                if map.get("format").and_then(Value::as_str) == Some("int-or-string") {
                    map.insert("type".into(), json!(["integer", "string"]));
                }
                if map.contains_key("$ref") {
                    map.retain(|k, _| k == "$ref");
                }
                map.values_mut().for_each(fix);
            }
            Value::Array(items) => items.iter_mut().for_each(fix),
            _ => {}
        }
    }
    // Upstream files stay out of the project: ../shared, beside the checkout.
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../shared/k8s-schemas/k8s/swagger-release-1.36.json"
    );
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{path}: {e}"));
    let mut all: Value = serde_json::from_str(&text).unwrap();
    let mut definitions = all["definitions"].take();
    fix(&mut definitions);
    for definition in definitions.as_object_mut().unwrap().values_mut() {
        let definition = definition.as_object_mut().unwrap();
        if definition.contains_key("properties") && !definition.contains_key("additionalProperties") {
            definition.insert("additionalProperties".into(), json!(false));
        }
    }
    definitions
}

/// The errors of `doc` against the upstream schema. Without
/// ../shared/k8s-schemas beside the checkout: a failure in CI (CI or
/// POD_TESTS_REQUIRED set), elsewhere one line and no schema check (the
/// test's other checks still run).
fn schema_errors(definition: &str, doc: &Value) -> Vec<String> {
    let shared = concat!(env!("CARGO_MANIFEST_DIR"), "/../../shared/k8s-schemas");
    if !std::path::Path::new(shared).is_dir() {
        let required = std::env::var_os("CI").is_some() || std::env::var_os("POD_TESTS_REQUIRED").is_some();
        assert!(
            !required,
            "{shared} is missing (CI has it): the Event schema check cannot run"
        );
        println!("skipped the {definition} schema check: {shared} is missing (CI has it)");
        return Vec::new();
    }
    let schema = json!({"$ref": format!("#/definitions/{definition}"), "definitions": definitions()});
    let validator = jsonschema::options()
        .with_draft(jsonschema::Draft::Draft4)
        .build(&schema)
        .unwrap();
    validator
        .iter_errors(doc)
        .map(|e| format!("{definition} at {}: {e}", e.instance_path()))
        .collect()
}

fn dns_subdomain(name: &str) -> bool {
    name.len() <= 253
        && name.split('.').all(|l| {
            !l.is_empty()
                && l.len() <= 63
                && !l.starts_with('-')
                && !l.ends_with('-')
                && l.bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        })
}

fn micro_time(text: &str) -> bool {
    let b = text.as_bytes();
    b.len() == 27
        && b[4] == b'-'
        && b[10] == b'T'
        && b[19] == b'.'
        && b[26] == b'Z'
        && b[20..26].iter().all(u8::is_ascii_digit)
}

/// A create's body: the 1.36 schema, strictly, and what the API server's
/// `ValidateEventCreate` checks for events.k8s.io/v1 (kubernetes
/// `pkg/apis/core/validation/events.go`).
fn check_event(event: &Value) {
    let errors = schema_errors("io.k8s.api.events.v1.Event", event);
    assert!(errors.is_empty(), "{errors:#?}\n{event:#}");
    let text = |field: &str| event.pointer(field).and_then(Value::as_str).unwrap_or("");
    assert_eq!(text("/apiVersion"), "events.k8s.io/v1");
    assert_eq!(text("/kind"), "Event");
    assert!(dns_subdomain(text("/metadata/name")), "{event}");
    assert!(micro_time(text("/eventTime")), "{event}");
    assert!(["Normal", "Warning"].contains(&text("/type")), "{event}");
    assert_eq!(text("/reportingController"), "meshwrap.io/webhook");
    for (field, limit) in [("/reportingInstance", 128), ("/action", 128), ("/reason", 128)] {
        assert!(
            !text(field).is_empty() && text(field).len() <= limit,
            "{field}: {event}"
        );
    }
    assert!(text("/note").len() <= 1024, "{event}");
    // An event with an eventTime about an object without a namespace must
    // live in default or kube-system: its regarding names one.
    assert!(!text("/regarding/namespace").is_empty(), "{event}");
    assert_eq!(text("/regarding/namespace"), text("/metadata/namespace"));
    for legacy in [
        "deprecatedFirstTimestamp",
        "deprecatedLastTimestamp",
        "deprecatedCount",
        "deprecatedSource",
    ] {
        assert!(event.get(legacy).is_none(), "{legacy}: {event}");
    }
    if let Some(series) = event.get("series") {
        check_series(series);
    }
}

fn check_series(series: &Value) {
    let errors = schema_errors("io.k8s.api.events.v1.EventSeries", series);
    assert!(errors.is_empty(), "{errors:#?}\n{series}");
    assert!(series["count"].as_u64().unwrap() >= 2, "{series}");
    assert!(micro_time(series["lastObservedTime"].as_str().unwrap()), "{series}");
}

/// A patch's body: only the series, as a merge patch.
fn check_patch(patch: &Recorded) {
    assert_eq!(patch.header("content-type"), Some("application/merge-patch+json"));
    let keys: Vec<&String> = patch.body.as_object().unwrap().keys().collect();
    assert_eq!(keys, ["series"], "{}", patch.body);
    check_series(&patch.body["series"]);
}

// ---- the tests -------------------------------------------------------------

#[test]
fn a_thousand_pods_make_one_series_per_owner_and_reason() {
    let api = StandIn::start("thousand", Mode::Answer);
    let ca = Ca::new("thousand CA");
    let webhook = webhook("thousand", &ca, &api, &["--events-interval", "1h"]);
    let mut client = webhook.client(&ca);
    let worker = pod("team-a", Some(TFJOB), runs());
    let broken = pod("team-a", Some(TFJOB), no_command());
    let other = pod("team-a", Some(JOB), no_command());
    // One of each first, and their creates seen: each series starts at 1.
    admit(&mut client, &worker, 0);
    admit(&mut client, &broken, 1);
    admit(&mut client, &other, 2);
    api.wait_requests(3);
    // 1,000 pods of the TFJob in all.
    for i in 3..1001 {
        admit(&mut client, if i % 5 < 3 { &worker } else { &broken }, i);
    }
    client.wait_metric("meshwrap_webhook_events_queued", 0);
    assert_eq!(api.requests().len(), 3, "a count was written before its interval");
    stop(webhook);

    let requests = api.requests();
    let posts = creates(&requests);
    assert_eq!(posts.len(), 3, "{requests:#?}");
    for post in &posts {
        assert_eq!(post.path, "/apis/events.k8s.io/v1/namespaces/team-a/events");
        assert_eq!(post.header("content-type"), Some("application/json"));
        assert_eq!(post.status, 201);
        assert!(
            post.body.get("series").is_none(),
            "created at its first pod: {}",
            post.body
        );
        check_event(&post.body);
    }
    let by = |kind: &str, reason: &str| -> &Recorded {
        posts
            .iter()
            .find(|p| p.body["regarding"]["kind"] == kind && p.body["reason"] == reason)
            .unwrap_or_else(|| panic!("no {reason} create on a {kind}: {posts:#?}"))
    };
    let wrapped = by("TFJob", "Injected");
    let skipped = by("TFJob", "InjectionSkipped");
    by("Job", "InjectionSkipped");
    assert_eq!(
        wrapped.body["regarding"],
        json!({"apiVersion": TFJOB.0, "kind": "TFJob", "name": "mnist", "namespace": "team-a", "uid": TFJOB.3})
    );
    let patches: Vec<&Recorded> = requests.iter().filter(|r| r.method == "PATCH").collect();
    assert_eq!(
        patches.len(),
        2,
        "one count each for the two series that grew: {requests:#?}"
    );
    let mut counts = Vec::new();
    for patch in patches {
        check_patch(patch);
        assert_eq!(patch.status, 200);
        let name = patch.path.rsplit('/').next().unwrap();
        let of = posts.iter().find(|p| p.body["metadata"]["name"] == name).unwrap();
        counts.push((
            of.body["reason"].as_str().unwrap(),
            patch.body["series"]["count"].as_u64().unwrap(),
        ));
    }
    counts.sort();
    // 1 + 598 wrapped (i % 5 < 3 for i in 3..1001), 1 + 400 skipped.
    assert_eq!(counts, [("Injected", 599), ("InjectionSkipped", 401)]);
    assert_ne!(wrapped.body["metadata"]["name"], skipped.body["metadata"]["name"]);
}

/// inject's report for each pod template of `yaml`: the skips' sentences.
fn injects_reasons(yaml: &str) -> Vec<String> {
    let run = common::kubectl_meshwrap(&["inject", "--image", common::IMAGE], yaml);
    run.stderr
        .lines()
        .filter_map(|l| l.split_once(": skipped: ").map(|(_, why)| why.to_string()))
        .collect()
}

#[test]
fn an_event_says_why_in_injects_words_and_a_wrap_says_container_mesh_and_policy() {
    let template = |containers: &Value| {
        json!({
            "apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": "train", "namespace": "team-a"},
            "spec": {"template": {
                "metadata": {"annotations": {"sidecar.istio.io/inject": "true"}},
                "spec": {"restartPolicy": "Never", "containers": containers}
            }}
        })
    };
    let two = json!([
        {"name": "a", "image": "x", "command": ["run"]},
        {"name": "b", "image": "y", "command": ["run"]}
    ]);
    let mut yaml = String::new();
    for containers in [&no_command(), &two] {
        yaml.push_str(&format!("---\n{}\n", template(containers)));
    }
    let words = injects_reasons(&yaml);
    assert_eq!(words.len(), 2, "{words:?}");
    assert!(
        words[0].contains("has no command") && words[1].contains("2 containers"),
        "{words:?}"
    );

    let api = StandIn::start("words", Mode::Answer);
    let ca = Ca::new("words CA");
    let webhook = webhook("words", &ca, &api, &[]);
    let mut client = webhook.client(&ca);
    let second = ("batch/v1", "Job", "two", "c0ffee00-0000-4000-8000-000000000003");
    admit(&mut client, &pod("team-a", Some(JOB), no_command()), 1);
    admit(&mut client, &pod("team-a", Some(second), two), 2);
    admit(&mut client, &pod("team-a", Some(TFJOB), runs()), 3);
    let mut requests = api.wait_requests(3);
    // Written at once, in any order: as admitted (train, two, mnist).
    let rank = |r: &Recorded| {
        ["train", "two", "mnist"]
            .iter()
            .position(|n| r.body["regarding"]["name"] == *n)
    };
    requests.sort_by_key(rank);
    let note = |i: usize| requests[i].body["note"].as_str().unwrap().to_string();
    assert_eq!(note(0), format!("pod not wrapped: {}", words[0]));
    assert_eq!(note(1), format!("pod not wrapped: {}", words[1]));
    for skip in &requests[..2] {
        assert_eq!(skip.body["reason"], "InjectionSkipped");
        assert_eq!(skip.body["type"], "Warning", "it runs unwrapped: the Job hangs");
        assert_eq!(skip.body["action"], "Inject");
    }
    assert_eq!(requests[0].body["regarding"]["name"], "train");
    assert_eq!(requests[1].body["regarding"]["name"], "two");
    assert_eq!(requests[2].body["reason"], "Injected");
    assert_eq!(requests[2].body["type"], "Normal");
    assert_eq!(
        note(2),
        "pod wrapped: container tensorflow, mesh istio, quit policy always, with the guard"
    );
    for r in &requests {
        check_event(&r.body);
    }
}

/// Admission latencies (ms) of `n` pods, each of its own Job, so each
/// needs a create.
fn latencies(client: &mut Client, n: usize) -> Vec<f64> {
    let mut took = Vec::new();
    for i in 0..n {
        let owner_name = format!("job-{i}");
        let uid = format!("c0ffee00-0000-4000-8000-{i:012}");
        let owner = ("batch/v1", "Job", owner_name.as_str(), uid.as_str());
        let pod = pod("team-a", Some(owner), runs());
        let started = Instant::now();
        admit(client, &pod, 100 + i);
        took.push(started.elapsed().as_secs_f64() * 1000.0);
    }
    took
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

#[test]
fn an_admission_is_answered_as_fast_while_the_api_server_is_slow_hangs_or_is_down() {
    let ca = Ca::new("latency CA");
    // A small queue: an admission that waited for room in it would wait
    // for the API server.
    let flags = ["--events-queue", "8", "--events-timeout", "60s"];
    let mut results = Vec::new();
    for (label, mode) in [
        ("up", Some(Mode::Answer)),
        ("slow", Some(Mode::Slow(Duration::from_secs(3)))),
        ("hanging", Some(Mode::Hang)),
        ("down", None),
    ] {
        let api = StandIn::start(&format!("latency-{label}"), mode.unwrap_or(Mode::Answer));
        let webhook = match mode {
            Some(_) => webhook(&format!("latency-{label}"), &ca, &api, &flags),
            None => {
                let url = format!("https://127.0.0.1:{}", closed_port());
                let mut all = vec!["--api-server", url.as_str()];
                let (token, ca_file) = (api.token.display().to_string(), api.ca_file.display().to_string());
                all.extend(["--api-token", token.as_str(), "--api-ca", ca_file.as_str()]);
                all.extend(flags);
                let webhook = Webhook::start("latency-down", &ca, &all);
                webhook.wait_for("events are on");
                webhook
            }
        };
        let mut client = webhook.client(&ca);
        // The first create under way (or refused) before the measure.
        latencies(&mut client, 1);
        match mode {
            Some(_) => drop(api.wait_requests(1)),
            None => drop(webhook.wait_for("event not written")),
        }
        let took = latencies(&mut client, 40);
        let max = took.iter().copied().fold(0.0, f64::max);
        let dropped = client.metric("meshwrap_webhook_events_dropped_total{reason=\"queue-full\"}");
        results.push((label, median(took), max, dropped));
    }
    eprintln!("admission latency (median ms, max ms, dropped): {results:?}");
    let up = results[0].1;
    for (label, median, max, _) in &results {
        assert!(
            *median <= 3.0 * up + 25.0 && *max < 2000.0,
            "{label}: median {median:.1} ms, max {max:.1} ms, against {up:.1} ms with the API server up: {results:?}"
        );
    }
    // Drops are not the point here (a queue of 8 against 40 admissions
    // as fast as one connection goes); the poster's intake has tests of
    // its own below.
}

#[test]
fn the_poster_keeps_taking_notices_while_its_requests_hang_with_bounded_concurrency() {
    let api = StandIn::start("hang", Mode::Hang);
    let ca = Ca::new("hang CA");
    // A queue of 50 (main, held by its one request, drops 150 of the 200).
    let webhook = webhook("hang", &ca, &api, &["--events-queue", "50", "--events-timeout", "60s"]);
    let mut client = webhook.client(&ca);
    let dropped = "meshwrap_webhook_events_dropped_total{reason=\"queue-full\"}";
    // 200 pods of 200 new owners, against an API server that never answers.
    for i in 0..200 {
        let name = format!("job-{i:03}");
        admit(
            &mut client,
            &pod("team-a", Some(("batch/v1", "Job", name.as_str(), "u")), no_command()),
            i,
        );
    }
    // Every notice taken off the queue and counted in its series...
    client.wait_metric("meshwrap_webhook_event_series", 200);
    client.wait_metric("meshwrap_webhook_events_queued", 0);
    assert_eq!(client.metric(dropped), 0, "the poster stopped taking notices");
    // ...while the requests out are at most WRITERS (16), each on its own
    // connection, and none has been answered.
    api.wait_requests(16);
    let text = client.get("/metrics").unwrap().text();
    assert!(api.requests().len() <= 16, "{} requests out", api.requests().len());
    assert!(api.connections() <= 16, "{} connections", api.connections());
    for line in [
        "# TYPE meshwrap_webhook_events_dropped_total counter",
        "meshwrap_webhook_events_dropped_total{reason=\"evicted\"} 0",
        "meshwrap_webhook_event_writes_total{request=\"create\",result=\"ok\"} 0",
    ] {
        assert!(text.lines().any(|l| l == line), "no `{line}` in:\n{text}");
    }
}

#[test]
fn a_burst_of_new_owners_against_a_slow_api_server_gets_every_first_event_soon() {
    // 300 new owners as fast as one connection admits them, each create
    // answered in 100 ms: one request at a time (main) takes 30 s for the
    // creates, the last first event 30 s late; WRITERS at once write them
    // within a few seconds.
    let api = StandIn::start("burst", Mode::Slow(Duration::from_millis(100)));
    let ca = Ca::new("burst CA");
    let webhook = webhook("burst", &ca, &api, &[]);
    let mut client = webhook.client(&ca);
    let started = Instant::now();
    for i in 0..300 {
        let name = format!("job-{i:03}");
        admit(
            &mut client,
            &pod("team-a", Some(("batch/v1", "Job", name.as_str(), "u")), no_command()),
            i,
        );
    }
    let requests = api.wait_requests(300);
    let took = started.elapsed();
    let dropped = "meshwrap_webhook_events_dropped_total{reason=\"queue-full\"}";
    assert_eq!(client.metric(dropped), 0);
    let mut owners: Vec<&str> = requests
        .iter()
        .map(|r| r.body["regarding"]["name"].as_str().unwrap())
        .collect();
    owners.sort();
    owners.dedup();
    assert_eq!(owners.len(), 300, "one create per owner");
    // 300 creates of 100 ms, 16 at a time: about 2 s (20 s bound of
    // wait_requests otherwise); one at a time would take 30 s.
    assert!(took < Duration::from_secs(10), "{took:?}");
    assert!(api.connections() <= 16, "{} connections", api.connections());
    stop(webhook);
}

#[test]
fn events_off_posts_nothing() {
    let api = StandIn::start("off", Mode::Answer);
    let ca = Ca::new("off CA");
    let (cert, key) = ca.serving(1);
    let mut flags = api.flags();
    flags.extend(["--events".to_string(), "off".to_string()]);
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    for (name, flags, env) in [
        ("off-flag", flags.as_slice(), &[][..]),
        ("off-env", &flags[..6], &[("MESHWRAP_EVENTS", "off")][..]),
    ] {
        let webhook = Webhook::start_env(name, &cert, &key, flags, env);
        let off = webhook.wait_for("events are off");
        assert_eq!(off["reason"], "--events off");
        let mut client = webhook.client(&ca);
        for i in 0..20 {
            let containers = if i % 2 == 0 { runs() } else { no_command() };
            admit(&mut client, &pod("team-a", Some(JOB), containers), i);
        }
        admit(&mut client, &pod("team-b", None, no_command()), 99);
        stop(webhook);
    }
    assert_eq!(api.connections(), 0, "{:#?}", api.requests());
}

#[test]
fn a_pod_with_no_owner_gets_its_event_on_its_namespace() {
    let api = StandIn::start("bare", Mode::Answer);
    let ca = Ca::new("bare CA");
    let webhook = webhook("bare", &ca, &api, &[]);
    let mut client = webhook.client(&ca);
    admit(&mut client, &pod("team-b", None, no_command()), 1);
    let requests = api.wait_requests(1);
    let event = &requests[0];
    assert_eq!(event.path, "/apis/events.k8s.io/v1/namespaces/team-b/events");
    assert_eq!(
        event.body["regarding"],
        json!({"apiVersion": "v1", "kind": "Namespace", "name": "team-b", "namespace": "team-b"})
    );
    assert_eq!(event.body["metadata"]["namespace"], "team-b");
    assert!(
        event.body["metadata"]["name"].as_str().unwrap().starts_with("team-b."),
        "{}",
        event.body
    );
    check_event(&event.body);
}

#[test]
fn the_token_is_read_from_its_file_for_every_request() {
    let api = StandIn::start("token", Mode::Answer);
    let ca = Ca::new("token CA");
    let webhook = webhook("token", &ca, &api, &[]);
    let mut client = webhook.client(&ca);
    admit(&mut client, &pod("team-a", Some(JOB), no_command()), 1);
    api.wait_requests(1);
    // Its answer learnt, its connection is free again.
    client.wait_metric(CREATED, 1);
    // The kubelet rotates a projected token by swapping the file.
    replace(&api.token, "token-two\n");
    admit(&mut client, &pod("team-a", Some(TFJOB), no_command()), 2);
    let requests = api.wait_requests(2);
    assert_eq!(requests[0].header("authorization"), Some("Bearer token-one"));
    assert_eq!(requests[1].header("authorization"), Some("Bearer token-two"));
    assert_eq!(api.connections(), 1, "one keep-alive connection");
}

#[test]
fn the_cache_of_series_is_bounded_and_forgets_the_least_recently_seen() {
    let api = StandIn::start("cache", Mode::Answer);
    let ca = Ca::new("cache CA");
    let webhook = webhook("cache", &ca, &api, &["--events-cache", "2", "--events-interval", "1h"]);
    let mut client = webhook.client(&ca);
    let owner = |name: &'static str| pod("team-a", Some(("batch/v1", "Job", name, "u")), no_command());
    admit(&mut client, &owner("a"), 1);
    api.wait_requests(1);
    client.wait_metric(CREATED, 1);
    admit(&mut client, &owner("a"), 2); // counted, not written: interval
    admit(&mut client, &owner("b"), 3);
    api.wait_requests(2);
    // c takes a's place: a's second pod was never written.
    admit(&mut client, &owner("c"), 4);
    api.wait_requests(3);
    let evicted = "meshwrap_webhook_events_dropped_total{reason=\"evicted\"}";
    assert_eq!(client.metric(evicted), 1);
    // a again: a series of its own again, a new event.
    admit(&mut client, &owner("a"), 5);
    let requests = api.wait_requests(4);
    let names: Vec<&str> = requests
        .iter()
        .map(|r| r.body["metadata"]["name"].as_str().unwrap())
        .collect();
    assert!(requests.iter().all(|r| r.method == "POST"), "{requests:#?}");
    assert!(names[0].starts_with("a.") && names[3].starts_with("a.") && names[0] != names[3]);
    // A flood of distinct owners: never more than two series remembered.
    for i in 0..50 {
        let name = format!("flood-{i}");
        admit(
            &mut client,
            &pod("team-a", Some(("batch/v1", "Job", name.as_str(), "u")), no_command()),
            10 + i,
        );
    }
    client.wait_metric("meshwrap_webhook_events_queued", 0);
    assert_eq!(client.metric("meshwrap_webhook_event_series"), 2);
}

#[test]
fn an_expired_event_is_created_again_and_a_refused_one_is_counted() {
    let api = StandIn::start("expired", Mode::Answer);
    let ca = Ca::new("expired CA");
    let webhook = webhook("expired", &ca, &api, &["--events-interval", "0s"]);
    let mut client = webhook.client(&ca);
    let job = pod("team-a", Some(JOB), no_command());
    admit(&mut client, &job, 1);
    api.wait_requests(1);
    admit(&mut client, &job, 2);
    let requests = api.wait_requests(2);
    assert_eq!(requests[1].method, "PATCH");
    assert_eq!(requests[1].body["series"]["count"], 2);
    // The event expires (the API server's --event-ttl): the next count's
    // PATCH finds nothing, and the series is created again, with its count.
    api.forget_events();
    admit(&mut client, &job, 3);
    let requests = api.wait_requests(4);
    assert_eq!((requests[2].method.as_str(), requests[2].status), ("PATCH", 404));
    assert_eq!((requests[3].method.as_str(), requests[3].status), ("POST", 201));
    assert_eq!(requests[3].body["series"]["count"], 3);
    assert_ne!(
        requests[3].body["metadata"]["name"],
        requests[0].body["metadata"]["name"]
    );
    check_event(&requests[3].body);

    // RBAC missing: refused, counted, said once.
    api.set_mode(Mode::Status(403));
    admit(&mut client, &pod("team-a", Some(TFJOB), no_command()), 4);
    api.wait_requests(5);
    client.wait_metric(
        "meshwrap_webhook_event_writes_total{request=\"create\",result=\"refused\"}",
        1,
    );
    assert_eq!(
        client.metric("meshwrap_webhook_events_dropped_total{reason=\"refused\"}"),
        1
    );
    let said = webhook.wait_for("event not written");
    assert!(
        said["error"].as_str().unwrap().contains("403: the stand-in says 403"),
        "{said}"
    );
}

#[test]
fn outside_a_cluster_events_are_off_it_says_why_once_and_serves() {
    let ca = Ca::new("outside CA");
    let webhook = Webhook::start("outside", &ca, &[]);
    let off = webhook.wait_for("events are off");
    assert_eq!(off["level"], "warn");
    assert!(
        off["reason"].as_str().unwrap().contains("KUBERNETES_SERVICE_HOST"),
        "{off}"
    );
    let mut client = webhook.client(&ca);
    admit(&mut client, &pod("team-a", Some(JOB), no_command()), 1);
    let text = client.get("/metrics").unwrap().text();
    assert!(text.contains("meshwrap_webhook_events_dropped_total{reason=\"queue-full\"} 0"));
    let offs = webhook
        .log_lines()
        .iter()
        .filter(|l| l["msg"] == "events are off")
        .count();
    assert_eq!(offs, 1);

    // In a pod whose ServiceAccount token is not mounted: the same.
    let api = StandIn::start("no-token", Mode::Answer);
    std::fs::remove_file(&api.token).unwrap();
    let (cert, key) = ca.serving(2);
    let flags = api.flags();
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    let webhook = Webhook::start_env("no-token", &cert, &key, &flags, &[]);
    let off = webhook.wait_for("events are off");
    assert!(
        off["reason"]
            .as_str()
            .unwrap()
            .contains(&api.token.display().to_string()),
        "{off}"
    );
    admit(&mut webhook.client(&ca), &pod("team-a", Some(JOB), no_command()), 2);
    assert_eq!(api.connections(), 0);
}

#[test]
fn bad_event_flags_are_one_line_that_names_them() {
    let ca = Ca::new("flags CA");
    let (cert, key) = ca.serving(1);
    let dir = temp_dir("event-flags");
    std::fs::write(dir.join("tls.crt"), cert).unwrap();
    std::fs::write(dir.join("tls.key"), key).unwrap();
    let (c, k) = (dir.join("tls.crt"), dir.join("tls.key"));
    let (c, k) = (c.to_str().unwrap(), k.to_str().unwrap());
    for (args, env, flag, accepts) in [
        (vec!["--events", "maybe"], vec![], "--events", "on, off"),
        (vec![], vec![("MESHWRAP_EVENTS", "yes")], "--events", "on, off"),
        (
            vec!["--api-server", "http://10.0.0.1"],
            vec![],
            "--api-server",
            "an https:// URL",
        ),
        (vec!["--events-queue", "0"], vec![], "--events-queue", "at least 1"),
        (vec!["--events-cache", "none"], vec![], "--events-cache", "at least 1"),
        (vec!["--events-timeout", "0s"], vec![], "--events-timeout", "above zero"),
        (
            vec!["--events-interval", "often"],
            vec![],
            "--events-interval",
            "a duration",
        ),
    ] {
        let mut all = vec!["webhook", "--tls-cert", c, "--tls-key", k, "--image", common::IMAGE];
        all.extend(["--listen", "127.0.0.1:0"]);
        all.extend(args);
        let (code, stderr) = bounded_run(&all, &env);
        assert_eq!(code, Some(2), "{all:?} {env:?}: {stderr}");
        assert_eq!(stderr.lines().count(), 1, "{all:?}: {stderr}");
        assert!(
            stderr.contains(flag) && stderr.contains(accepts),
            "{all:?} {env:?}: {stderr}"
        );
    }
    let _ = std::fs::remove_dir_all(dir);
}

/// Runs the binary with `args` and `env`; its exit code and stderr, or
/// None for a webhook still running after 20 s (then killed).
fn bounded_run(args: &[&str], env: &[(&str, &str)]) -> (Option<i32>, String) {
    use std::io::Read;
    let mut cmd = std::process::Command::new(common::bin());
    cmd.args(args)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .env_remove("KUBERNETES_SERVICE_HOST");
    for (k, v) in env {
        cmd.env(k, v);
    }
    let mut child = cmd.spawn().unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    let code = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status.code();
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    let mut stderr = String::new();
    child.stderr.take().unwrap().read_to_string(&mut stderr).unwrap();
    (code, stderr)
}

#[test]
fn a_dry_run_admission_is_answered_as_any_other_and_posts_no_event() {
    let api = StandIn::start("dry-run", Mode::Answer);
    let ca = Ca::new("dry-run CA");
    let webhook = webhook("dry-run", &ca, &api, &["--events-interval", "1s"]);
    let mut client = webhook.client(&ca);
    // A dry run of a TFJob's pods, wrapped and skipped, then a real pod of
    // a Job: only the Job's event is posted.
    let mut answers = Vec::new();
    for (i, containers) in [runs(), no_command()].into_iter().enumerate() {
        let mut dry = common::pod_review(&pod("team-a", Some(TFJOB), containers), i);
        dry["request"]["dryRun"] = json!(true);
        let response = client.post(dry.to_string().as_bytes()).unwrap();
        assert_eq!(response.status, 200, "{}", response.text());
        answers.push(response.json());
    }
    // Decided as any other: the wrap's patch, the skip's warning.
    assert!(answers[0]["response"]["patch"].is_string(), "{}", answers[0]);
    assert!(answers[1]["response"]["warnings"].is_array(), "{}", answers[1]);
    admit(&mut client, &pod("team-a", Some(JOB), no_command()), 9);
    api.wait_requests(1);
    // The stop writes every series it holds: a dry run's would be here.
    stop(webhook);
    let requests = api.requests();
    assert!(
        requests.iter().all(|r| r.body["regarding"]["kind"] == "Job"),
        "an event for a dry run: {requests:#?}"
    );
    assert_eq!(creates(&requests).len(), 1, "{requests:#?}");
}

/// The API group of a request's path: `/apis/GROUP/...`, or the core
/// group (`""`) for `/api/v1/...`.
fn api_group(path: &str) -> String {
    match path.strip_prefix("/apis/") {
        Some(rest) => rest.split('/').next().unwrap_or_default().to_string(),
        None => String::new(),
    }
}

#[test]
fn the_events_role_grants_exactly_the_groups_and_verbs_the_poster_uses() {
    // What manifests grants (the chart renders the same: tests/chart.rs).
    let run = common::kubectl_meshwrap(
        &[
            "manifests",
            "--image",
            common::IMAGE,
            "--webhook-image",
            "registry.example.com/kubectl-meshwrap:0.1.0",
        ],
        "",
    );
    assert_eq!(run.code, 0, "{}", run.stderr);
    let (docs, _) = kubectl_meshwrap::yaml::tree::parse(&run.stdout);
    let role = docs
        .iter()
        .map(|d| d.root.to_json())
        .find(|d| d["kind"] == "ClusterRole")
        .expect("a ClusterRole");
    let mut granted = std::collections::BTreeSet::new();
    for rule in role["rules"].as_array().unwrap() {
        assert_eq!(rule["resources"], json!(["events"]), "{rule}");
        for group in rule["apiGroups"].as_array().unwrap() {
            for verb in rule["verbs"].as_array().unwrap() {
                granted.insert((group.as_str().unwrap().to_string(), verb.as_str().unwrap().to_string()));
            }
        }
    }
    // What the poster does: a create, a count patched, and an expired
    // event's create again.
    let api = StandIn::start("rbac", Mode::Answer);
    let ca = Ca::new("rbac CA");
    let webhook = webhook("rbac", &ca, &api, &["--events-interval", "1s"]);
    let mut client = webhook.client(&ca);
    admit(&mut client, &pod("team-a", Some(JOB), runs()), 1);
    api.wait_requests(1);
    admit(&mut client, &pod("team-a", Some(JOB), runs()), 2);
    api.wait_requests(2);
    api.forget_events();
    admit(&mut client, &pod("team-a", Some(JOB), runs()), 3);
    api.wait_requests(4);
    stop(webhook);
    let used: std::collections::BTreeSet<(String, String)> = api
        .requests()
        .iter()
        .map(|r| {
            let verb = match r.method.as_str() {
                "POST" => "create",
                "PATCH" => "patch",
                other => panic!("the poster sent a {other}, which the role does not grant"),
            };
            (api_group(&r.path), verb.to_string())
        })
        .collect();
    assert_eq!(granted, used, "granted (left) and used (right) differ");
}
