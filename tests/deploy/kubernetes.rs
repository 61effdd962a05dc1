//! The Kubernetes manifests in deploy/kubernetes, checked offline: every kustomization renders
//! with `kubectl kustomize` (`KUBECTL=/path/to/kubectl` picks another one, e.g. Debian's 1.20
//! with kustomize v2.0.3, which the kustomizations are written for as well as v5), the result
//! validates strictly (unknown fields are errors) against Kubernetes 1.25's and 1.37's OpenAPI
//! schemas with kubernetes-validate, and the invariants a working rollout depends on hold: the
//! grace period outlasts preStop and the drain, the autoscaler targets the Deployment that
//! exists, selectors select the pods, ports and flags agree, and the probe paths answer on the
//! real server started with the manifests' own arguments.
//!
//! kubernetes-validate has no schema for custom resources (KEDA's ScaledObject, Prometheus
//! Operator's ServiceMonitor), and their CRDs are not on this machine: for those the fields their
//! CRDs require, and the types they insist on, are checked here by hand.
//!
//! The YAML is read by tests/deploy/kubernetes_check.py in `.venv-deploy` (PyYAML comes with
//! kubernetes-validate) and handed over as JSON. These tests fail, rather than skip, when kubectl
//! or the venv is missing: run `scripts/setup.sh` (or `scripts/setup-deploy.sh`).

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, Stdio};

use serde_json::Value;

use crate::process::{get, root, Server};

/// The Kubernetes versions whose schemas the manifests must satisfy: the oldest that
/// kubernetes-validate 1.37 carries, and the newest.
const VERSIONS: &[&str] = &["1.25.0", "1.37.0"];

/// The custom resources, whose schemas kubernetes-validate does not have.
const CUSTOM: &[(&str, &str)] = &[("keda.sh/v1alpha1", "ScaledObject"), ("monitoring.coreos.com/v1", "ServiceMonitor")];

const SERVER: &[&str] = &["Namespace", "Deployment", "Service", "PodDisruptionBudget"];

/// Every kustomization, and the kinds it renders (one object of each).
const KUSTOMIZATIONS: &[(&str, &[&str])] = &[
    (
        "deploy/kubernetes",
        &["Namespace", "Deployment", "Service", "PodDisruptionBudget", "ServiceMonitor", "ScaledObject"],
    ),
    ("deploy/kubernetes/base", SERVER),
    ("deploy/kubernetes/monitoring", &["ServiceMonitor"]),
    ("deploy/kubernetes/keda", &["ScaledObject"]),
    (
        "deploy/kubernetes/overlays/hpa",
        &["Namespace", "Deployment", "Service", "PodDisruptionBudget", "ServiceMonitor", "HorizontalPodAutoscaler"],
    ),
    (
        "deploy/kubernetes/overlays/gpu",
        &["Namespace", "Deployment", "Service", "PodDisruptionBudget", "ServiceMonitor", "ScaledObject"],
    ),
];

/// The kustomizations that deploy the server, each with one autoscaler.
const STACKS: &[&str] = &["deploy/kubernetes", "deploy/kubernetes/overlays/hpa", "deploy/kubernetes/overlays/gpu"];

/// The headroom gauge both autoscalers scale on.
pub const USAGE_METRIC: &str = "speechstream_capacity_usage";

const SETUP: &str = "run scripts/setup.sh (or scripts/setup-deploy.sh)";

/// kubectl kustomize's output, parsed, with kubernetes-validate's verdicts.
pub struct Rendered {
    pub dir: String,
    pub objects: Vec<Value>,
    validation: Vec<Value>,
}

impl Rendered {
    /// The one object of this kind (a failure if there are none or several).
    pub fn one(&self, kind: &str) -> &Value {
        let found: Vec<&Value> = self.objects.iter().filter(|o| o["kind"] == kind).collect();
        assert_eq!(found.len(), 1, "{}: expected one {kind}, found {}", self.dir, found.len());
        found[0]
    }

    fn kinds(&self) -> Vec<String> {
        let mut kinds: Vec<String> = self.objects.iter().map(|o| text(&o["kind"]).to_owned()).collect();
        kinds.sort();
        kinds
    }
}

fn kubectl() -> String {
    std::env::var("KUBECTL").unwrap_or_else(|_| "kubectl".to_owned())
}

/// `.venv-deploy`'s Python, or a clear failure saying how to make it.
fn deploy_python() -> PathBuf {
    let python = root().join(".venv-deploy/bin/python");
    assert!(python.exists(), "{} is missing: {SETUP} to create the venv with kubernetes-validate", python.display());
    python
}

/// Parse YAML (and validate what it holds) with tests/deploy/kubernetes_check.py.
fn read_yaml(yaml: &[u8], what: &str) -> (Vec<Value>, Vec<Value>) {
    let mut child = Command::new(deploy_python())
        .arg(root().join("tests/deploy/kubernetes_check.py"))
        .args(VERSIONS)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run kubernetes_check.py");
    child.stdin.take().expect("stdin").write_all(yaml).expect("write the YAML to kubernetes_check.py");
    let output = child.wait_with_output().expect("kubernetes_check.py");
    assert!(
        output.status.success(),
        "kubernetes_check.py failed on {what}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let mut parsed: Value = serde_json::from_slice(&output.stdout).expect("kubernetes_check.py's JSON");
    let objects = parsed["objects"].as_array_mut().map(std::mem::take).expect("objects");
    let validation = parsed["validation"].as_array_mut().map(std::mem::take).expect("validation");
    (objects, validation)
}

/// `kubectl kustomize DIR` (DIR relative to the repository root), parsed and validated.
pub fn render(dir: &str) -> Rendered {
    let kubectl = kubectl();
    let output =
        Command::new(&kubectl).args(["kustomize", dir]).current_dir(root()).output().unwrap_or_else(|e| {
            panic!("cannot run `{kubectl} kustomize`: {e}: {SETUP} (it installs Debian's kubectl)")
        });
    assert!(
        output.status.success(),
        "`{kubectl} kustomize {dir}` failed ({}): {}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    let (objects, validation) = read_yaml(&output.stdout, dir);
    Rendered { dir: dir.to_owned(), objects, validation }
}

/// A YAML file of the repository that is not a Kubernetes object (Helm values), as JSON.
fn read_values(path: &str) -> Value {
    let yaml = std::fs::read(root().join(path)).unwrap_or_else(|e| panic!("{path}: {e}"));
    let (mut objects, _) = read_yaml(&yaml, path);
    assert_eq!(objects.len(), 1, "{path}: one YAML document");
    objects.remove(0)
}

fn text(value: &Value) -> &str {
    value.as_str().unwrap_or("")
}

fn labels(value: &Value) -> BTreeMap<String, String> {
    value.as_object().map(|m| m.iter().map(|(k, v)| (k.clone(), text(v).to_owned())).collect()).unwrap_or_default()
}

/// Whether a LabelSelector (matchLabels only: these manifests use nothing else) selects `labels`.
fn selects(selector: &Value, target: &BTreeMap<String, String>, what: &str) -> bool {
    assert!(selector.get("matchExpressions").is_none(), "{what}: this check reads matchLabels only");
    let wanted = labels(&selector["matchLabels"]);
    assert!(!wanted.is_empty(), "{what}: an empty selector selects everything");
    wanted.iter().all(|(k, v)| target.get(k) == Some(v))
}

/// A Kubernetes quantity (`2`, `500m`, `0.7`) as a number.
fn quantity(value: &Value) -> f64 {
    if let Some(n) = value.as_f64() {
        return n;
    }
    let s = text(value);
    match s.strip_suffix('m') {
        Some(milli) => milli.parse::<f64>().map(|m| m / 1000.0),
        None => s.parse::<f64>(),
    }
    .unwrap_or_else(|_| panic!("not a plain quantity: {value}"))
}

/// A container's `--flag value` arguments after the subcommand, by flag (a flag followed by
/// another flag, or last, maps to "").
pub fn flags(args: &[String]) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let mut i = 0;
    while i < args.len() {
        let arg = &args[i];
        assert!(arg.starts_with("--"), "argument {arg:?} is neither a flag nor a flag's value: {args:?}");
        match args.get(i + 1).filter(|next| !next.starts_with("--")) {
            Some(value) => {
                out.insert(arg.clone(), value.clone());
                i += 2;
            }
            None => {
                out.insert(arg.clone(), String::new());
                i += 1;
            }
        }
    }
    out
}

/// The speechstream container's arguments: `serve` and its flags.
pub fn container_args(deployment: &Value) -> Vec<String> {
    let args: Vec<String> =
        container(deployment)["args"].as_array().expect("args").iter().map(|a| text(a).to_owned()).collect();
    assert_eq!(args.first().map(String::as_str), Some("serve"), "the container runs `speechstream serve`: {args:?}");
    args
}

fn container(deployment: &Value) -> &Value {
    let containers = deployment["spec"]["template"]["spec"]["containers"].as_array().expect("containers");
    assert_eq!(containers.len(), 1, "one container per pod");
    assert_eq!(containers[0]["name"], "speechstream");
    &containers[0]
}

/// The metric and `label="value"` matchers of the first selector in a PromQL query
/// (`sum(metric{a="b",c="d"})`); equality matchers only, which is what the manifests use.
pub fn selector(query: &str) -> (String, BTreeMap<String, String>) {
    let open = query.find('{').unwrap_or_else(|| panic!("no label matchers in {query:?}"));
    let close = open + query[open..].find('}').expect("closing brace");
    let metric = metric_of(query);
    let mut matchers = BTreeMap::new();
    for matcher in query[open + 1..close].split(',').map(str::trim).filter(|m| !m.is_empty()) {
        let (name, value) = matcher.split_once('=').unwrap_or_else(|| panic!("matcher {matcher:?}"));
        assert!(
            !name.ends_with('!') && !value.starts_with('~'),
            "{matcher:?}: equality matchers only (the check substitutes labels by value)"
        );
        let value = value.strip_prefix('"').and_then(|v| v.strip_suffix('"')).expect("a quoted value");
        matchers.insert(name.trim().to_owned(), value.to_owned());
    }
    (metric, matchers)
}

/// The metric name before the first `{` of a PromQL selector.
fn metric_of(query: &str) -> String {
    let open = query.find('{').unwrap_or(query.len());
    let start =
        query[..open].rfind(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == ':')).map_or(0, |i| i + 1);
    query[start..open].to_owned()
}

/// The KEDA trigger the default stack scales on: its query and threshold.
pub fn keda_trigger(rendered: &Rendered) -> (String, f64) {
    let triggers = rendered.one("ScaledObject")["spec"]["triggers"].as_array().expect("triggers");
    let trigger = triggers.iter().find(|t| t["type"] == "prometheus").expect("a prometheus trigger");
    let metadata = &trigger["metadata"];
    (text(&metadata["query"]).to_owned(), text(&metadata["threshold"]).parse().expect("threshold"))
}

/// prometheus-operator's Duration (`5s`, `1m30s`, `500ms`) in seconds.
fn duration(value: &Value, what: &str) -> f64 {
    let s = text(value);
    assert!(!s.is_empty(), "{what}: a duration string, got {value}");
    let (mut total, mut number) = (0.0, String::new());
    let mut chars = s.chars().peekable();
    while let Some(c) = chars.next() {
        if c.is_ascii_digit() {
            number.push(c);
            continue;
        }
        let unit = match (c, chars.peek()) {
            ('m', Some('s')) => {
                chars.next();
                0.001
            }
            ('s', _) => 1.0,
            ('m', _) => 60.0,
            ('h', _) => 3600.0,
            ('d', _) => 86400.0,
            _ => panic!("{what}: {s:?} is not a Prometheus duration"),
        };
        let n: f64 = number.parse().unwrap_or_else(|_| panic!("{what}: {s:?} is not a Prometheus duration"));
        total += n * unit;
        number.clear();
    }
    assert!(number.is_empty(), "{what}: {s:?} ends without a unit");
    total
}

/// What KEDA's ScaledObject CRD (keda.sh/v1alpha1) requires of the fields used here, and the
/// prometheus scaler's metadata: the CRD types `metadata` as a map of strings, so a bare number
/// (`threshold: 0.7`) would be refused by the API server.
fn check_scaled_object(object: &Value, dir: &str) {
    let what = format!("{dir}: ScaledObject");
    let spec = &object["spec"];
    assert!(!text(&object["metadata"]["name"]).is_empty(), "{what}: metadata.name");
    assert!(!text(&spec["scaleTargetRef"]["name"]).is_empty(), "{what}: spec.scaleTargetRef.name is required");
    let (min, max) = (spec["minReplicaCount"].as_u64(), spec["maxReplicaCount"].as_u64());
    assert!(matches!((min, max), (Some(min), Some(max)) if 1 <= min && min <= max), "{what}: 1 <= min <= max");
    assert!(spec["pollingInterval"].is_u64(), "{what}: pollingInterval is an integer (seconds)");
    let triggers = spec["triggers"].as_array().filter(|t| !t.is_empty()).expect("spec.triggers is required");
    for trigger in triggers {
        assert!(!text(&trigger["type"]).is_empty(), "{what}: a trigger's type is required");
        let metric_type = text(&trigger["metricType"]);
        assert!(["AverageValue", "Value", "Utilization"].contains(&metric_type), "{what}: metricType {metric_type:?}");
        let metadata = trigger["metadata"].as_object().expect("a trigger's metadata is required");
        for (key, value) in metadata {
            assert!(
                value.is_string(),
                "{what}: trigger metadata {key} must be a string (map[string]string), got {value}"
            );
        }
        if trigger["type"] == "prometheus" {
            let address = text(&trigger["metadata"]["serverAddress"]);
            assert!(address.starts_with("http://") || address.starts_with("https://"), "{what}: serverAddress");
            assert!(!text(&trigger["metadata"]["query"]).is_empty(), "{what}: query");
            let threshold: f64 = text(&trigger["metadata"]["threshold"]).parse().expect("threshold is a number");
            assert!(threshold > 0.0, "{what}: threshold");
        }
    }
}

/// What Prometheus Operator's ServiceMonitor CRD (monitoring.coreos.com/v1) requires of the
/// fields used here.
fn check_service_monitor(object: &Value, dir: &str) {
    let what = format!("{dir}: ServiceMonitor");
    let spec = &object["spec"];
    assert!(spec["selector"].is_object(), "{what}: spec.selector is required");
    let endpoints = spec["endpoints"].as_array().filter(|e| !e.is_empty()).expect("spec.endpoints");
    for endpoint in endpoints {
        assert!(!text(&endpoint["port"]).is_empty(), "{what}: an endpoint names its Service port");
        assert!(text(&endpoint["path"]).starts_with('/'), "{what}: path");
        let interval = duration(&endpoint["interval"], &what);
        if endpoint.get("scrapeTimeout").is_some() {
            assert!(duration(&endpoint["scrapeTimeout"], &what) <= interval, "{what}: scrapeTimeout <= interval");
        }
    }
}

#[test]
fn every_kustomization_renders_and_validates_against_kubernetes_schemas() {
    for (dir, kinds) in KUSTOMIZATIONS {
        let rendered = render(dir);
        let mut expected: Vec<String> = kinds.iter().map(|k| k.to_string()).collect();
        expected.sort();
        assert_eq!(rendered.kinds(), expected, "{dir} renders these kinds");
        for verdict in &rendered.validation {
            let (kind, result) = (text(&verdict["kind"]), text(&verdict["result"]));
            let object = rendered.one(kind);
            let custom = CUSTOM.contains(&(text(&object["apiVersion"]), kind));
            match result {
                "ok" => {}
                "no-schema" if custom => {}
                _ => panic!("{dir}: {kind} against Kubernetes {}: {result}", text(&verdict["version"])),
            }
        }
        for object in &rendered.objects {
            match text(&object["kind"]) {
                "ScaledObject" => check_scaled_object(object, dir),
                "ServiceMonitor" => check_service_monitor(object, dir),
                _ => {}
            }
            // Everything but the Namespace itself lives in it.
            if object["kind"] != "Namespace" {
                assert_eq!(
                    text(&object["metadata"]["namespace"]),
                    "speechstream",
                    "{dir}: {}'s namespace",
                    object["kind"]
                );
            }
        }
    }
    // The validator does reject what it should: an unknown field, strictly.
    let broken = br#"{"apiVersion": "v1", "kind": "Service", "metadata": {"name": "x"}, "spec": {"prots": []}}"#;
    let (_, validation) = read_yaml(broken, "a misspelt Service");
    assert!(text(&validation[0]["result"]).starts_with("error:"), "strict validation missed a typo: {validation:?}");
}

/// The invariants of one stack (a kustomization that deploys the server and one autoscaler).
fn check_stack(rendered: &Rendered) {
    let dir = &rendered.dir;
    let deployment = rendered.one("Deployment");
    let namespace = text(&deployment["metadata"]["namespace"]);
    let pod = &deployment["spec"]["template"];
    let pod_labels = labels(&pod["metadata"]["labels"]);
    assert!(selects(&deployment["spec"]["selector"], &pod_labels, dir), "{dir}: the Deployment selects its pods");

    let pdb = rendered.one("PodDisruptionBudget");
    assert!(selects(&pdb["spec"]["selector"], &pod_labels, dir), "{dir}: the PodDisruptionBudget selects the pods");
    assert_eq!(pdb["spec"]["maxUnavailable"], 1, "{dir}: drains evict one replica at a time");

    let container = container(deployment);
    let args = container_args(deployment);
    let flags = flags(&args[1..]);
    let flag = |name: &str| flags.get(name).unwrap_or_else(|| panic!("{dir}: {name} missing from {args:?}")).clone();
    assert_eq!(flag("--host"), "0.0.0.0", "{dir}: listen on the pod's address, where probes and the Service reach it");

    // Grace period > preStop + drain.
    let grace = pod["spec"]["terminationGracePeriodSeconds"].as_f64().expect("terminationGracePeriodSeconds");
    let command: Vec<&str> = container["lifecycle"]["preStop"]["exec"]["command"]
        .as_array()
        .expect("a preStop exec command")
        .iter()
        .map(text)
        .collect();
    assert!(matches!(command.as_slice(), [sleep, _] if sleep.rsplit('/').next() == Some("sleep")), "{command:?}");
    let pre_stop: f64 = command[1].parse().expect("preStop sleep seconds");
    let drain: f64 = flag("--shutdown-grace").parse().expect("--shutdown-grace seconds");
    assert!(pre_stop >= 5.0, "{dir}: preStop sleeps {pre_stop} s: too short for endpoints to update");
    assert!(
        grace > pre_stop + drain,
        "{dir}: terminationGracePeriodSeconds {grace} must exceed preStop {pre_stop} + --shutdown-grace {drain}"
    );

    // Ports: the container's named ports are the ones the flags open.
    let ports: BTreeMap<String, u64> = container["ports"]
        .as_array()
        .expect("ports")
        .iter()
        .map(|p| (text(&p["name"]).to_owned(), p["containerPort"].as_u64().expect("containerPort")))
        .collect();
    for (name, flag_name) in [("http", "--port"), ("agent", "--agent-port"), ("wyoming", "--wyoming-port")] {
        assert_eq!(ports.get(name).map(|p| p.to_string()), Some(flag(flag_name)), "{dir}: port {name} is {flag_name}");
    }

    // Probes: on the HTTP port, /health for startup and liveness, /ready for readiness.
    for (probe, path) in [("startupProbe", "/health"), ("livenessProbe", "/health"), ("readinessProbe", "/ready")] {
        let get = &container[probe]["httpGet"];
        assert_eq!(text(&get["path"]), path, "{dir}: {probe}'s path");
        assert_eq!(text(&get["port"]), "http", "{dir}: {probe}'s port");
    }

    // Resources: whole cores, requests = limits, one worker per core.
    let resources = &container["resources"];
    let cpu = quantity(&resources["limits"]["cpu"]);
    assert_eq!(quantity(&resources["requests"]["cpu"]), cpu, "{dir}: CPU request = limit");
    assert_eq!(cpu.fract(), 0.0, "{dir}: whole cores");
    assert_eq!(flag("--workers").parse::<f64>().ok(), Some(cpu), "{dir}: --workers matches the CPU limit");
    assert!(resources["limits"]["memory"].is_string() && resources["requests"]["memory"].is_string());

    // Non-root, read-only root filesystem (the server writes no files).
    assert_eq!(pod["spec"]["securityContext"]["runAsNonRoot"], true, "{dir}: runAsNonRoot");
    assert_eq!(container["securityContext"]["readOnlyRootFilesystem"], true, "{dir}: readOnlyRootFilesystem");
    assert_eq!(container["securityContext"]["allowPrivilegeEscalation"], false, "{dir}: allowPrivilegeEscalation");

    // The Service selects the pods, and every port it names exists on them.
    let service = rendered.one("Service");
    let service_labels = labels(&service["metadata"]["labels"]);
    let service_selector = labels(&service["spec"]["selector"]);
    assert!(
        !service_selector.is_empty() && service_selector.iter().all(|(k, v)| pod_labels.get(k) == Some(v)),
        "{dir}: the Service selects the pods"
    );
    let mut service_ports = BTreeSet::new();
    for port in service["spec"]["ports"].as_array().expect("Service ports") {
        service_ports.insert(text(&port["name"]).to_owned());
        let target = &port["targetPort"];
        let exists = match target.as_u64() {
            Some(number) => ports.values().any(|p| *p == number),
            None => ports.contains_key(text(target)),
        };
        assert!(exists, "{dir}: the Service's targetPort {target} is no container port of the pod ({ports:?})");
    }
    assert_eq!(service_ports, ports.keys().cloned().collect(), "{dir}: the Service carries every listener");

    // The ServiceMonitor scrapes that Service's HTTP port.
    let monitor = rendered.one("ServiceMonitor");
    assert!(
        selects(&monitor["spec"]["selector"], &service_labels, dir),
        "{dir}: the ServiceMonitor selects the Service"
    );
    for endpoint in monitor["spec"]["endpoints"].as_array().expect("endpoints") {
        assert!(service_ports.contains(text(&endpoint["port"])), "{dir}: ServiceMonitor port {}", endpoint["port"]);
        assert_eq!(endpoint["path"], "/metrics");
    }

    // One autoscaler, aimed at the Deployment that exists.
    let autoscalers: Vec<&Value> = rendered
        .objects
        .iter()
        .filter(|o| o["kind"] == "ScaledObject" || o["kind"] == "HorizontalPodAutoscaler")
        .collect();
    assert_eq!(autoscalers.len(), 1, "{dir}: exactly one autoscaler (two would fight over the replica count)");
    let autoscaler = autoscalers[0];
    let target = &autoscaler["spec"]["scaleTargetRef"];
    assert_eq!(target["name"], deployment["metadata"]["name"], "{dir}: the autoscaler targets the Deployment");
    // KEDA defaults kind and apiVersion to a Deployment's; the HPA requires them.
    assert_eq!(target.get("kind").map(text).unwrap_or("Deployment"), "Deployment", "{dir}: scaleTargetRef.kind");
    assert_eq!(target.get("apiVersion").map(text).unwrap_or("apps/v1"), "apps/v1", "{dir}: scaleTargetRef.apiVersion");
    let min = autoscaler["spec"]["minReplicaCount"].as_u64().or(autoscaler["spec"]["minReplicas"].as_u64());
    assert!(min >= Some(2), "{dir}: at least two replicas, so the PodDisruptionBudget lets a drain proceed");

    match text(&autoscaler["kind"]) {
        "ScaledObject" => {
            let (query, threshold) = keda_trigger(rendered);
            let (metric, matchers) = selector(&query);
            assert_eq!(metric, USAGE_METRIC, "{dir}: the query sums the headroom gauge");
            assert!(query.starts_with("sum("), "{dir}: the query sums over the fleet: {query}");
            // Prometheus Operator's job label for a ServiceMonitor's targets is the Service's name.
            assert_eq!(matchers.get("job").map(String::as_str), Some(text(&service["metadata"]["name"])), "{query}");
            assert_eq!(matchers.get("namespace").map(String::as_str), Some(namespace), "{dir}: {query}");
            assert!(threshold > 0.0 && threshold < 1.0, "{dir}: a target usage per replica below full");
            let trigger = &autoscaler["spec"]["triggers"][0];
            assert_eq!(trigger["metricType"], "AverageValue", "{dir}: desired = ceil(sum / threshold)");
        }
        _ => {
            let metric = &autoscaler["spec"]["metrics"][0];
            assert_eq!(metric["type"], "Pods");
            assert_eq!(metric["pods"]["metric"]["name"], USAGE_METRIC);
            assert_eq!(metric["pods"]["target"]["type"], "AverageValue");
            let average = quantity(&metric["pods"]["target"]["averageValue"]);
            // The same policy as the KEDA stack's.
            let (_, threshold) = keda_trigger(&render("deploy/kubernetes"));
            assert_eq!(average, threshold, "{dir}: the HPA's target is KEDA's threshold");
            // prometheus-adapter serves that name from that series.
            let values = read_values("deploy/kubernetes/overlays/hpa/prometheus-adapter-values.yaml");
            let rule = &values["rules"]["custom"][0];
            assert_eq!(rule["name"]["as"], USAGE_METRIC, "prometheus-adapter's rule names the HPA's metric");
            assert_eq!(
                metric_of(text(&rule["seriesQuery"])),
                USAGE_METRIC,
                "prometheus-adapter's rule reads the gauge"
            );
            assert_eq!(rule["resources"]["overrides"]["pod"]["resource"], "pod");
            assert_eq!(rule["resources"]["overrides"]["namespace"]["resource"], "namespace");
        }
    }
}

#[test]
fn manifests_hold_their_invariants() {
    for dir in STACKS {
        check_stack(&render(dir));
    }
    // The GPU variant asks for a GPU and insists on it.
    let gpu = render("deploy/kubernetes/overlays/gpu");
    let deployment = gpu.one("Deployment");
    let resources = &container(deployment)["resources"];
    assert_eq!(resources["limits"]["nvidia.com/gpu"], 1, "one GPU per replica");
    assert_eq!(flags(&container_args(deployment)[1..]).get("--device").map(String::as_str), Some("cuda"));
    assert!(text(&container(deployment)["image"]).starts_with("speechstream:"), "the CUDA image");
}

/// The manifests' own arguments, for a loopback test: `serve`, `--host` and `--port` dropped
/// (process::Server adds its own) and the other listeners on free ports.
pub fn loopback_args(args: &[String]) -> Vec<String> {
    let mut out = Vec::new();
    for (flag, value) in flags(&args[1..]) {
        match flag.as_str() {
            "--host" | "--port" => {}
            "--agent-port" | "--wyoming-port" => out.extend([flag, "0".to_owned()]),
            _ if value.is_empty() => out.push(flag),
            _ => out.extend([flag, value]),
        }
    }
    out
}

#[test]
fn the_server_accepts_the_manifests_arguments_and_answers_their_probes() {
    for dir in ["deploy/kubernetes", "deploy/kubernetes/overlays/gpu"] {
        let rendered = render(dir);
        let deployment = rendered.one("Deployment");
        let container = container(deployment);
        let args = loopback_args(&container_args(deployment));
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        // The synthetic engine takes the hibari flags (--workers, --device) and ignores them, so
        // this checks that every flag parses, on a machine without a GPU too.
        let server = Server::start(&args);
        for probe in ["startupProbe", "livenessProbe", "readinessProbe"] {
            let path = text(&container[probe]["httpGet"]["path"]);
            let (status, body) = get(server.addr, path, "");
            assert_eq!(status, 200, "{dir}: {probe} {path} answered {status} {body}");
        }
        let deadline = std::time::Instant::now() + crate::process::TIMEOUT;
        for listener in ["wyoming listening", "agent-check listening"] {
            while !server.log().iter().any(|line| line.contains(listener)) {
                assert!(std::time::Instant::now() < deadline, "{dir}: no `{listener}` in the log: {:?}", server.log());
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
        }
    }
}

#[test]
fn promql_selectors_and_flags_are_read_as_written() {
    let (metric, matchers) = selector(r#"sum(speechstream_capacity_usage{job="speechstream", namespace="ns"})"#);
    assert_eq!(metric, "speechstream_capacity_usage");
    assert_eq!(metric_of(r#"speechstream_capacity_usage{namespace!="",pod!=""}"#), "speechstream_capacity_usage");
    assert_eq!(
        matchers.into_iter().collect::<Vec<_>>(),
        [("job".into(), "speechstream".into()), ("namespace".into(), "ns".into())]
    );
    let args: Vec<String> = ["--a", "1", "--b", "--c", "x"].iter().map(|s| s.to_string()).collect();
    let parsed = flags(&args);
    assert_eq!((parsed["--a"].as_str(), parsed["--b"].as_str(), parsed["--c"].as_str()), ("1", "", "x"));
    assert_eq!(duration(&Value::from("1m30s"), "t"), 90.0);
    assert_eq!(duration(&Value::from("500ms"), "t"), 0.5);
    assert_eq!(quantity(&Value::from("700m")), 0.7);
}
