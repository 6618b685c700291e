//! The `docker/` files, checked against the code (no Docker engine runs here): the Dockerfile, the compose
//! file, Prometheus's scrape configuration, the Grafana provisioning and dashboard, and the
//! Kubernetes manifests under `docker/k8s/` (no cluster runs here either).
//!
//! Every file they mount or copy exists, every `orderly` flag they pass is accepted by the built
//! binary (`<command> --help` lists it), every port agrees from one file to the next, every
//! `cargo xtask` task and target they name exists, and every metric name a dashboard query uses is
//! one the code emits.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

use yaml_rust2::{Yaml, YamlLoader};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .unwrap()
}

fn docker() -> PathBuf {
    root().join("docker")
}

fn yaml(path: &Path) -> Yaml {
    let text = std::fs::read_to_string(path).unwrap();
    YamlLoader::load_from_str(&text)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .into_iter()
        .next()
        .unwrap_or_else(|| panic!("{} is empty", path.display()))
}

fn strings(y: &Yaml) -> Vec<String> {
    match y {
        Yaml::Array(a) => a.iter().filter_map(scalar).collect(),
        Yaml::String(s) => s.split_whitespace().map(str::to_string).collect(),
        _ => Vec::new(),
    }
}

fn scalar(y: &Yaml) -> Option<String> {
    match y {
        Yaml::String(s) | Yaml::Real(s) => Some(s.clone()),
        Yaml::Integer(i) => Some(i.to_string()),
        Yaml::Boolean(b) => Some(b.to_string()),
        _ => None,
    }
}

/// The long flags `orderly <command> --help` lists.
fn accepted_flags(command: &str) -> BTreeSet<String> {
    let out = Command::new(env!("CARGO_BIN_EXE_orderly"))
        .args([command, "--help"])
        .output()
        .unwrap();
    assert!(out.status.success(), "orderly {command} --help failed");
    String::from_utf8_lossy(&out.stdout)
        .split(|c: char| c.is_whitespace() || c == ',' || c == '[' || c == ']' || c == '=')
        .filter(|w| w.starts_with("--") && w.len() > 2)
        .map(|w| {
            w.trim_end_matches(|c: char| !c.is_ascii_alphanumeric())
                .to_string()
        })
        .collect()
}

/// The `ORDERLY_*` variables `orderly <command> --help` lists.
fn accepted_env(command: &str) -> BTreeSet<String> {
    let out = Command::new(env!("CARGO_BIN_EXE_orderly"))
        .args([command, "--help"])
        .output()
        .unwrap();
    assert!(out.status.success(), "orderly {command} --help failed");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    text.match_indices("env: ")
        .map(|(i, _)| {
            text[i + 5..]
                .chars()
                .take_while(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || *c == '_')
                .collect::<String>()
        })
        .collect()
}

/// Every `orderly_*` metric name emitted in the code (string literals in the library crates).
fn emitted_metrics() -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    let mut stack = vec![root().join("crates")];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                if !path.ends_with("target") {
                    stack.push(path);
                }
            } else if path.extension().is_some_and(|e| e == "rs") {
                let text = std::fs::read_to_string(&path).unwrap();
                for (i, _) in text.match_indices("\"orderly_") {
                    let rest = &text[i + 1..];
                    let end = rest
                        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                        .unwrap_or(rest.len());
                    if rest[end..].starts_with('"') {
                        names.insert(rest[..end].to_string());
                    }
                }
            }
        }
    }
    names
}

/// `orderly_*` identifiers in a PromQL expression.
fn metrics_in(expr: &str) -> Vec<String> {
    let mut out = Vec::new();
    for (i, _) in expr.match_indices("orderly_") {
        let before_ok = i == 0
            || !expr[..i]
                .chars()
                .next_back()
                .is_some_and(|c| c.is_ascii_alphanumeric() || c == '_');
        if !before_ok {
            continue;
        }
        let rest = &expr[i..];
        let end = rest
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(rest.len());
        out.push(rest[..end].to_string());
    }
    out
}

struct Dockerfile {
    /// (instruction, arguments) of the final stage.
    final_stage: Vec<(String, String)>,
    /// Every instruction's text, joined continuation lines.
    all: Vec<(String, String)>,
}

fn dockerfile() -> Dockerfile {
    let text = std::fs::read_to_string(docker().join("Dockerfile")).unwrap();
    let mut all = Vec::new();
    let mut current = String::new();
    for line in text.lines() {
        let t = line.trim();
        if current.is_empty() && (t.is_empty() || t.starts_with('#')) {
            continue;
        }
        if let Some(cont) = t.strip_suffix('\\') {
            current.push_str(cont);
            current.push(' ');
            continue;
        }
        current.push_str(t);
        let (ins, args) = current.split_once(' ').unwrap_or((&current, ""));
        all.push((ins.to_uppercase(), args.trim().to_string()));
        current.clear();
    }
    let last_from = all.iter().rposition(|(i, _)| i == "FROM").unwrap();
    Dockerfile {
        final_stage: all[last_from..].to_vec(),
        all,
    }
}

#[test]
fn dockerfile_ships_the_static_binary_in_scratch_as_a_non_root_user() {
    let d = dockerfile();
    let (_, from) = &d.final_stage[0];
    assert_eq!(from, "scratch", "the final image is empty");
    let user = d
        .final_stage
        .iter()
        .find(|(i, _)| i == "USER")
        .map(|(_, a)| a.clone())
        .expect("the final stage sets USER");
    let uid: u32 = user.split(':').next().unwrap().parse().unwrap();
    assert_ne!(uid, 0, "not root");
    // The user exists in the /etc/passwd the image gets.
    let build = d
        .all
        .iter()
        .find(|(i, a)| i == "RUN" && a.contains("/out/etc/passwd"))
        .map(|(_, a)| a.clone())
        .unwrap();
    assert!(build.contains(&format!(":x:{uid}:")), "{build}");
    // The entrypoint is the binary copied into the image.
    let entry = d
        .final_stage
        .iter()
        .find(|(i, _)| i == "ENTRYPOINT")
        .unwrap()
        .1
        .clone();
    let entry: Vec<String> = serde_json::from_str(&entry).unwrap();
    assert!(
        d.final_stage
            .iter()
            .any(|(i, a)| i == "COPY" && a.ends_with(&format!(" {}", entry[0]))),
        "ENTRYPOINT {entry:?} is copied in"
    );
    // The build runs a real task for real targets, and copies the binary from where it leaves it.
    assert!(build.contains("cargo xtask dist --target"), "{build}");
    assert!(xtask::SUBCOMMANDS.contains(&"dist"));
    for t in xtask::dist::TARGETS {
        assert!(build.contains(t), "the Dockerfile maps an arch to {t}");
    }
    assert!(
        build.contains(&format!("target/$target/{}/orderly", xtask::dist::PROFILE)),
        "{build}"
    );
    // Exposed port = the metrics port the compose file serves.
    let exposed: Vec<String> = d
        .final_stage
        .iter()
        .filter(|(i, _)| i == "EXPOSE")
        .map(|(_, a)| a.clone())
        .collect();
    assert_eq!(exposed, vec!["9898".to_string()]);
    // The ignore file keeps build output and broker state out of the context.
    let ignore = std::fs::read_to_string(docker().join("Dockerfile.dockerignore")).unwrap();
    for p in ["target", "dist", ".kafka"] {
        assert!(ignore.lines().any(|l| l.trim() == p), "{p} ignored");
    }
}

#[test]
fn compose_files_flags_and_ports_exist() {
    let compose = yaml(&docker().join("compose.yaml"));
    let services = compose["services"].as_hash().unwrap();
    let names: BTreeSet<String> = services
        .keys()
        .map(|k| k.as_str().unwrap().to_string())
        .collect();
    for s in ["kafka", "orderly", "prometheus", "grafana"] {
        assert!(names.contains(s), "compose has {s}");
    }
    // Kafka is the version the tests run against.
    let kafka_image = compose["services"]["kafka"]["image"].as_str().unwrap();
    assert_eq!(
        kafka_image,
        format!("apache/kafka:{}", orderly_testkit::KAFKA_VERSION)
    );
    // Every depends_on names a service.
    for (name, svc) in services {
        match &svc["depends_on"] {
            Yaml::Hash(h) => {
                for k in h.keys() {
                    assert!(
                        names.contains(k.as_str().unwrap()),
                        "{name:?} depends on {k:?}"
                    );
                }
            }
            Yaml::Array(a) => {
                for k in a {
                    assert!(
                        names.contains(k.as_str().unwrap()),
                        "{name:?} depends on {k:?}"
                    );
                }
            }
            _ => {}
        }
    }
    // Build context and Dockerfile exist.
    let build = &compose["services"]["seed"]["build"];
    let context = docker().join(build["context"].as_str().unwrap());
    assert!(context.join("Cargo.toml").is_file());
    assert!(
        context
            .join(build["dockerfile"].as_str().unwrap())
            .is_file()
    );
    // Every bind-mounted file or folder exists.
    let mut mounts = 0;
    for (_, svc) in services {
        for v in strings(&svc["volumes"]) {
            let source = v.split(':').next().unwrap();
            if source.starts_with('.') {
                assert!(docker().join(source).exists(), "mount source {source}");
                mounts += 1;
            }
        }
    }
    assert!(
        mounts >= 3,
        "prometheus config, grafana provisioning and dashboards"
    );
    // Every orderly flag is accepted by the binary; every bootstrap names the kafka listener.
    let listeners = compose["services"]["kafka"]["environment"]["KAFKA_ADVERTISED_LISTENERS"]
        .as_str()
        .unwrap();
    let mut checked = 0;
    for svc_name in ["seed", "orderly"] {
        let cmd = strings(&compose["services"][svc_name]["command"]);
        let sub = &cmd[0];
        let flags = accepted_flags(sub);
        for (i, arg) in cmd.iter().enumerate() {
            if arg.starts_with("--") {
                assert!(
                    flags.contains(arg),
                    "orderly {sub} has no flag {arg}: {flags:?}"
                );
                checked += 1;
            }
            if arg == "--bootstrap" {
                let bs = &cmd[i + 1];
                assert!(
                    listeners.ends_with(&format!("//{bs}")),
                    "{bs} vs {listeners}"
                );
            }
        }
    }
    assert!(checked >= 10, "{checked} flags checked");
    // The metrics port agrees everywhere: orderly's --metrics-addr, its published port,
    // Prometheus's scrape target.
    let cmd = strings(&compose["services"]["orderly"]["command"]);
    let addr = &cmd[cmd.iter().position(|a| a == "--metrics-addr").unwrap() + 1];
    let port = addr.rsplit(':').next().unwrap();
    let published = strings(&compose["services"]["orderly"]["ports"]);
    assert_eq!(published, vec![format!("{port}:{port}")]);
    let prom = yaml(&docker().join("prometheus.yml"));
    let targets = strings(&prom["scrape_configs"][0]["static_configs"][0]["targets"]);
    assert_eq!(targets, vec![format!("orderly:{port}")]);
    // Grafana's data source URL is the prometheus service on the port it publishes.
    let ds = yaml(&docker().join("grafana/provisioning/datasources/prometheus.yml"));
    let url = ds["datasources"][0]["url"].as_str().unwrap();
    let prom_port = strings(&compose["services"]["prometheus"]["ports"])[0]
        .split(':')
        .next_back()
        .unwrap()
        .to_string();
    assert_eq!(url, format!("http://prometheus:{prom_port}"));
    // The topics the consumer reads are the ones the topics service creates.
    let topics_cmd = strings(&compose["services"]["topics"]["command"]).join(" ");
    for flag in ["--topic", "--dlq-topic"] {
        let t = &cmd[cmd.iter().position(|a| a == flag).unwrap() + 1];
        assert!(
            topics_cmd.contains(&format!("--topic {t} ")),
            "{t} is created"
        );
    }
}

#[test]
fn dashboard_queries_only_metrics_the_code_emits() {
    let provider = yaml(&docker().join("grafana/provisioning/dashboards/orderly.yml"));
    let in_container = provider["providers"][0]["options"]["path"]
        .as_str()
        .unwrap();
    let compose = yaml(&docker().join("compose.yaml"));
    let mounted = strings(&compose["services"]["grafana"]["volumes"])
        .into_iter()
        .find(|v| v.split(':').nth(1) == Some(in_container))
        .expect("the dashboards folder is mounted where the provider reads");
    let folder = docker().join(mounted.split(':').next().unwrap());
    let dashboard: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(folder.join("orderly.json")).unwrap())
            .unwrap();
    let emitted = emitted_metrics();
    assert!(
        emitted.contains("orderly_records_handled_total"),
        "{emitted:?}"
    );
    let ds_uid = yaml(&docker().join("grafana/provisioning/datasources/prometheus.yml"))
        ["datasources"][0]["uid"]
        .as_str()
        .unwrap()
        .to_string();
    let mut used = BTreeSet::new();
    for panel in dashboard["panels"].as_array().unwrap() {
        assert_eq!(panel["datasource"]["uid"].as_str(), Some(ds_uid.as_str()));
        for target in panel["targets"].as_array().unwrap() {
            let expr = target["expr"].as_str().unwrap();
            let names = metrics_in(expr);
            assert!(!names.is_empty(), "{expr}");
            for name in names {
                // The exporter renders histograms as summaries: <name>{quantile=...}, _sum, _count.
                let base = name
                    .strip_suffix("_sum")
                    .or_else(|| name.strip_suffix("_count"))
                    .unwrap_or(&name);
                assert!(
                    emitted.contains(&name) || emitted.contains(base),
                    "{name} (in {expr:?}) is not emitted by the code"
                );
                used.insert(base.to_string());
            }
        }
    }
    // The dashboard covers the signals an operator needs first.
    for m in [
        "orderly_records_handled_total",
        "orderly_ordering_violations_total",
        "orderly_partition_lag",
        "orderly_records_dead_lettered_total",
        "orderly_active_sessions",
    ] {
        assert!(used.contains(m), "dashboard shows {m}");
    }
}

#[test]
fn metric_names_are_found_in_promql() {
    assert_eq!(
        metrics_in("sum by (kind) (rate(orderly_records_failed_total[1m]))"),
        vec!["orderly_records_failed_total"]
    );
    assert_eq!(
        metrics_in(r#"max(orderly_x{quantile="0.99"}) + not_orderly_y"#),
        vec!["orderly_x"]
    );
}

/// `10s`, `500ms`, `2m` (the forms the manifests use).
fn secs(d: &str) -> f64 {
    let split = d.find(|c: char| !c.is_ascii_digit() && c != '.').unwrap();
    let n: f64 = d[..split].parse().unwrap();
    match &d[split..] {
        "ms" => n / 1000.0,
        "s" => n,
        "m" => n * 60.0,
        u => panic!("unit {u}"),
    }
}

#[test]
fn kubernetes_manifests_match_the_binary() {
    let k8s = docker().join("k8s");
    let set = yaml(&k8s.join("statefulset.yaml"));
    let config_map = yaml(&k8s.join("configmap.yaml"));
    let secret = yaml(&k8s.join("secret.yaml"));
    let service = yaml(&k8s.join("service.yaml"));
    let keda = yaml(&k8s.join("keda-scaledobject.yaml"));
    assert_eq!(set["kind"].as_str(), Some("StatefulSet"));
    assert_eq!(set["spec"]["serviceName"], service["metadata"]["name"]);
    let pod = &set["spec"]["template"]["spec"];
    let orderly = pod["containers"]
        .as_vec()
        .unwrap()
        .iter()
        .find(|c| c["name"].as_str() == Some("orderly"))
        .expect("an orderly container");

    // The command and every flag and variable it is given exist.
    let args = strings(&orderly["args"]);
    assert_eq!(args[0], "consume");
    let flags = accepted_flags("consume");
    for a in args.iter().filter(|a| a.starts_with("--")) {
        assert!(flags.contains(a), "orderly consume has no flag {a}");
    }
    let known_env = accepted_env("consume");
    assert!(known_env.contains("ORDERLY_INSTANCE_ID"), "{known_env:?}");
    let mut env = Vec::new();
    for e in orderly["env"].as_vec().unwrap() {
        let name = e["name"].as_str().unwrap().to_string();
        assert!(
            known_env.contains(&name),
            "orderly consume reads no variable {name}: {known_env:?}"
        );
        env.push((name, e.clone()));
    }
    let var = |n: &str| {
        env.iter()
            .find(|(k, _)| k == n)
            .map(|(_, e)| e.clone())
            .unwrap_or_else(|| panic!("{n} is set"))
    };
    // Static membership from the pod name.
    assert_eq!(
        var("ORDERLY_INSTANCE_ID")["valueFrom"]["fieldRef"]["fieldPath"].as_str(),
        Some("metadata.name")
    );

    // Ports: the admin address, the container port the probes use, the Service, the image's
    // EXPOSE and the scrape annotation agree.
    let admin_addr = var("ORDERLY_ADMIN_ADDR")["value"]
        .as_str()
        .unwrap()
        .to_string();
    let (host, port) = admin_addr.rsplit_once(':').unwrap();
    assert_eq!(host, "0.0.0.0", "the kubelet probes the pod IP");
    let ports = orderly["ports"].as_vec().unwrap();
    let admin_port = ports
        .iter()
        .find(|p| {
            p["containerPort"]
                .as_i64()
                .map(|n| n.to_string())
                .as_deref()
                == Some(port)
        })
        .expect("the admin port is a container port");
    let port_name = admin_port["name"].as_str().unwrap();
    let exposed: Vec<String> = dockerfile()
        .final_stage
        .iter()
        .filter(|(i, _)| i == "EXPOSE")
        .map(|(_, a)| a.clone())
        .collect();
    assert_eq!(exposed, vec![port.to_string()]);
    assert_eq!(
        scalar(&set["spec"]["template"]["metadata"]["annotations"]["prometheus.io/port"]),
        Some(port.to_string())
    );
    let svc_port = &service["spec"]["ports"][0];
    assert_eq!(scalar(&svc_port["port"]).as_deref(), Some(port));
    assert_eq!(svc_port["targetPort"].as_str(), Some(port_name));
    // Probes: the paths the admin endpoint serves, on the admin port.
    let admin_src = std::fs::read_to_string(root().join("crates/cli/src/admin.rs")).unwrap();
    for (probe, path) in [
        ("livenessProbe", "/healthz"),
        ("readinessProbe", "/readyz"),
        ("startupProbe", "/healthz"),
    ] {
        let get = &orderly[probe]["httpGet"];
        assert_eq!(get["path"].as_str(), Some(path), "{probe}");
        assert!(
            get["port"].as_str() == Some(port_name)
                || scalar(&get["port"]).as_deref() == Some(port),
            "{probe} port"
        );
        assert!(
            admin_src.contains(&format!("\"{path}\" =>")),
            "{path} is served"
        );
    }

    // Config from the ConfigMap, mounted where ORDERLY_CONFIG points.
    let mounts = orderly["volumeMounts"].as_vec().unwrap();
    let volumes = pod["volumes"].as_vec().unwrap();
    let volume_of = |mount: &Yaml| {
        volumes
            .iter()
            .find(|v| v["name"] == mount["name"])
            .unwrap_or_else(|| panic!("volume {:?}", mount["name"]))
            .clone()
    };
    let config_path = var("ORDERLY_CONFIG")["value"].as_str().unwrap().to_string();
    let config_mount = mounts
        .iter()
        .find(|m| m["mountPath"].as_str() == Some(config_path.as_str()))
        .expect("the configuration file is mounted");
    assert_eq!(
        volume_of(config_mount)["configMap"]["name"],
        config_map["metadata"]["name"]
    );
    let toml_text = config_map["data"][config_mount["subPath"].as_str().unwrap()]
        .as_str()
        .unwrap();
    // Secrets from the Secret, as files in its mount.
    let secret_mount = mounts
        .iter()
        .find(|m| volume_of(m)["secret"]["secretName"] == secret["metadata"]["name"])
        .expect("the Secret is mounted");
    let secret_dir = secret_mount["mountPath"].as_str().unwrap();
    let tmp = std::env::temp_dir().join(format!("orderly-k8s-{}", std::process::id()));
    std::fs::create_dir_all(&tmp).unwrap();
    let mut child_env = vec![("ORDERLY_CONFIG".to_string(), {
        let p = tmp.join("orderly.toml");
        std::fs::write(&p, toml_text).unwrap();
        p.to_str().unwrap().to_string()
    })];
    for (name, e) in &env {
        if name == "ORDERLY_CONFIG" {
            continue;
        }
        let value = match e["value"].as_str() {
            Some(v) if v.starts_with(&format!("{secret_dir}/")) => {
                let key = &v[secret_dir.len() + 1..];
                let content = secret["stringData"][key]
                    .as_str()
                    .unwrap_or_else(|| panic!("the Secret has no {key} for {name}"));
                let p = tmp.join(key);
                std::fs::write(&p, content).unwrap();
                p.to_str().unwrap().to_string()
            }
            Some(v) => v.to_string(),
            // From the downward API: the pod name of the first replica.
            None => "orderly-0".to_string(),
        };
        child_env.push((name.clone(), value));
    }
    // `orderly config check` takes exactly what `consume` takes: it checks the whole setup.
    let out = Command::new(env!("CARGO_BIN_EXE_orderly"))
        .args(["config", "check"])
        .args(&args[1..])
        .env_clear()
        .envs(child_env)
        .output()
        .unwrap();
    let effective = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let effective: toml::Table = toml::from_str(&effective).unwrap();
    assert_eq!(effective["instance-id"].as_str(), Some("orderly-0"));
    assert_eq!(effective["admin-addr"].as_str(), Some(admin_addr.as_str()));
    assert!(effective.contains_key("admin-token-file"), "{effective:?}");
    assert!(
        effective.contains_key("sasl-password-file"),
        "{effective:?}"
    );
    // The handler is the app container's port on loopback.
    let app_ports: Vec<i64> = pod["containers"]
        .as_vec()
        .unwrap()
        .iter()
        .filter(|c| c["name"].as_str() != Some("orderly"))
        .flat_map(|c| c["ports"].as_vec().cloned().unwrap_or_default())
        .filter_map(|p| p["containerPort"].as_i64())
        .collect();
    let url = effective["http"].as_str().unwrap();
    assert!(
        app_ports
            .iter()
            .any(|p| url.starts_with(&format!("http://127.0.0.1:{p}/"))),
        "{url} vs {app_ports:?}"
    );
    // The grace period covers the stop: running attempts finish (the shutdown timeout), the final
    // commit is retried (the engine's final-commit timeout), and a margin for the LeaveGroup.
    let stop = effective
        .get("shutdown-timeout")
        .or_else(|| effective.get("drain-timeout"))
        .and_then(|v| v.as_str())
        .map(secs)
        .unwrap();
    let commit = effective
        .get("final-commit-timeout")
        .and_then(|v| v.as_str())
        .map(secs)
        .unwrap_or_else(|| {
            orderly_engine::EngineConfig::default()
                .final_commit_timeout
                .as_secs_f64()
        });
    let grace = pod["terminationGracePeriodSeconds"].as_i64().unwrap() as f64;
    assert!(
        grace >= stop + commit + 5.0,
        "terminationGracePeriodSeconds {grace} < {stop} + {commit} + 5"
    );

    // KEDA scales this StatefulSet on a Prometheus query of metrics the code emits.
    let target = &keda["spec"]["scaleTargetRef"];
    assert_eq!(target["kind"], set["kind"]);
    assert_eq!(target["name"], set["metadata"]["name"]);
    let trigger = &keda["spec"]["triggers"][0];
    assert_eq!(trigger["type"].as_str(), Some("prometheus"));
    let query = trigger["metadata"]["query"].as_str().unwrap();
    let emitted = emitted_metrics();
    let used = metrics_in(query);
    assert_eq!(used, vec!["orderly_partition_pending_records"], "{query}");
    for m in &used {
        assert!(emitted.contains(m), "{m} is not emitted by the code");
    }
    let topics = effective["topic"].as_array().unwrap();
    assert!(
        topics
            .iter()
            .any(|t| query.contains(&format!("topic=\"{}\"", t.as_str().unwrap()))),
        "{query} names a consumed topic"
    );
    assert!(
        trigger["metadata"]["threshold"]
            .as_str()
            .is_some_and(|t| t.parse::<u64>().is_ok_and(|n| n > 0))
    );
}
