//! The webhook's AdmissionReview handler, on any bytes: never a panic or a
//! stack overflow; a 400 for what is not an AdmissionReview; and when it
//! patches, the patch is JSON Patch that applies to the request's pod, only
//! adds, and the patched pod reviewed again gets no patch (reinvocation).
#![no_main]

use base64::Engine;
use kubectl_meshwrap::transform::{Delivery, Options};
use kubectl_meshwrap::webhook::admission::{Settings, review};
use libfuzzer_sys::fuzz_target;
use serde_json::Value;

fuzz_target!(|data: &[u8]| {
    let settings = Settings {
        options: Options {
            image: "registry.example.com/meshwrap:0.1.0".into(),
            delivery: Delivery::InitContainer,
            ..Options::default()
        },
        namespace: "meshwrap-system".into(),
    };
    let Ok(answer) = review(data, &settings) else { return };
    let response = &answer.review["response"];
    assert_eq!(response["allowed"], Value::Bool(true));
    let Some(patch) = response["patch"].as_str() else { return };
    let bytes = base64::engine::general_purpose::STANDARD.decode(patch).expect("base64");
    let ops: json_patch::Patch = serde_json::from_slice(&bytes).expect("a JSON Patch");
    assert!(ops.0.iter().all(|op| matches!(op, json_patch::PatchOperation::Add(_))));
    let request: Value = serde_json::from_slice(data).expect("it was JSON");
    let mut pod = request["request"]["object"].clone();
    json_patch::patch(&mut pod, &ops).expect("the patch applies to the pod it was made for");
    let mut again = request.clone();
    again["request"]["object"] = pod;
    let second = review(again.to_string().as_bytes(), &settings).expect("still an AdmissionReview");
    assert!(second.review["response"].get("patch").is_none(), "patched twice: {}", second.review);
});
