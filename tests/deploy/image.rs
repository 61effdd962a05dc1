//! The OCI image's recipe (deploy/image/Containerfile) against the real binary, without building
//! the image (scripts/build-image.sh does that, with podman, buildah or docker; CI has none).
//!
//! What must hold:
//! - the server runs as a fixed non-root user, the one the recipe creates; it is started as
//!   `speechstream serve` with `--host 0.0.0.0`; the ports it EXPOSEs are exactly the ports the
//!   CMD listens on, and the CMD's flags start the real server (its port flags each open a
//!   listener); the stop signal is SIGTERM, on which the server drains;
//! - the HEALTHCHECK probes the CMD's `--port`, and its very command (bash's /dev/tcp, the image
//!   has no curl) succeeds against the real server and fails once it is gone;
//! - the layout lets `serve` find its voice and libtorch without flags: `SPEECHSTREAM_CACHE` is
//!   where the voices are copied, ld.so's path where libtorch is copied, the binary on `PATH`;
//! - every file the build script stages exists after set-up (hibari's model among them), and
//!   every library the release binary loads is either staged from libtorch's folder, in the
//!   Debian base, or installed by the recipe.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use serde_json::Value;

use crate::process::{get, root, Server};

/// What a Debian bookworm minbase (and so `debian:bookworm-slim`) already holds of the libraries
/// the binary links: glibc, and apt's own dependencies libstdc++ and libgcc.
const BASE_PACKAGES: [&str; 3] = ["libc6", "libgcc-s1", "libstdc++6"];

/// One instruction of the recipe: its keyword (upper case) and the rest of its logical line.
struct Instruction {
    keyword: String,
    args: String,
}

/// The recipe's instructions: comments dropped, `\` continuations joined (as the Dockerfile
/// syntax reads them: a comment line inside a continuation is dropped too).
fn parse(text: &str) -> Vec<Instruction> {
    let mut instructions = Vec::new();
    let mut current = String::new();
    for line in text.lines() {
        let trimmed = line.trim();
        if trimmed.starts_with('#') || (trimmed.is_empty() && current.is_empty()) {
            continue;
        }
        let (body, continued) = match trimmed.strip_suffix('\\') {
            Some(body) => (body, true),
            None => (trimmed, false),
        };
        current.push_str(body);
        current.push(' ');
        if !continued {
            let logical = std::mem::take(&mut current);
            let logical = logical.trim();
            if logical.is_empty() {
                continue;
            }
            let (keyword, args) = logical.split_once(char::is_whitespace).unwrap_or((logical, ""));
            instructions.push(Instruction { keyword: keyword.to_uppercase(), args: args.trim().to_owned() });
        }
    }
    assert!(current.trim().is_empty(), "the recipe ends inside a continued line: {current}");
    instructions
}

struct Recipe {
    instructions: Vec<Instruction>,
}

impl Recipe {
    fn load() -> Recipe {
        let path = root().join("deploy/image/Containerfile");
        let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        Recipe { instructions: parse(&text) }
    }

    fn all(&self, keyword: &str) -> Vec<&str> {
        self.instructions.iter().filter(|i| i.keyword == keyword).map(|i| i.args.as_str()).collect()
    }

    /// The instruction that takes effect (the last one of its kind); it must be there.
    fn last(&self, keyword: &str) -> &str {
        self.all(keyword).last().copied().unwrap_or_else(|| panic!("the recipe has no {keyword}"))
    }

    /// An exec-form (JSON array) instruction's words.
    fn exec_form(&self, keyword: &str) -> Vec<String> {
        json_words(self.last(keyword)).unwrap_or_else(|| panic!("{keyword} is not in exec (JSON) form"))
    }

    /// `ENV` settings, `KEY=VALUE` form.
    fn env(&self) -> BTreeMap<String, String> {
        let mut env = BTreeMap::new();
        for args in self.all("ENV") {
            for pair in args.split_whitespace() {
                let (key, value) = pair.split_once('=').unwrap_or_else(|| panic!("ENV {pair}: want KEY=VALUE"));
                env.insert(key.to_owned(), value.trim_matches('"').to_owned());
            }
        }
        env
    }

    /// `COPY SOURCE DEST`: the destination of the source.
    fn copy_destination(&self, source: &str) -> String {
        let found: Vec<&str> = self
            .all("COPY")
            .into_iter()
            .filter_map(|args| {
                let words: Vec<&str> = args.split_whitespace().filter(|w| !w.starts_with("--")).collect();
                (words.len() == 2 && words[0] == source).then_some(words[1])
            })
            .collect();
        assert_eq!(found.len(), 1, "want exactly one COPY {source} DEST, found {found:?}");
        found[0].to_owned()
    }

    /// The packages the RUN steps `apt-get install`.
    fn installed_packages(&self) -> BTreeSet<String> {
        let mut packages = BTreeSet::new();
        for run in self.all("RUN") {
            for command in run.split([';', '&']) {
                if let Some((_, rest)) = command.split_once("apt-get install") {
                    packages.extend(
                        rest.split_whitespace()
                            .filter(|w| !w.starts_with('-') && !w.starts_with('$'))
                            .map(str::to_owned),
                    );
                }
            }
        }
        packages
    }
}

fn json_words(text: &str) -> Option<Vec<String>> {
    let value: Value = serde_json::from_str(text).ok()?;
    value.as_array()?.iter().map(|w| w.as_str().map(str::to_owned)).collect()
}

/// The CMD's `--port`-like flags (`--port`, `--agent-port`, `--wyoming-port`, ...) and values.
fn port_flags(cmd: &[String]) -> Vec<(String, u16)> {
    cmd.windows(2)
        .filter(|w| w[0].starts_with("--") && w[0].ends_with("port"))
        .map(|w| (w[0].clone(), w[1].parse().unwrap_or_else(|_| panic!("{} {}: not a port", w[0], w[1]))))
        .collect()
}

/// The value of `flag` in `cmd`.
fn flag_value<'a>(cmd: &'a [String], flag: &str) -> Option<&'a str> {
    cmd.windows(2).find(|w| w[0] == flag).map(|w| w[1].as_str())
}

#[test]
fn image_recipe_matches_the_server() {
    let recipe = Recipe::load();

    // A fixed non-root user, the one the recipe makes.
    let user = recipe.last("USER");
    let uid = user.split(':').next().unwrap_or(user);
    let uid: u32 = uid.parse().unwrap_or_else(|_| panic!("USER {user}: want a numeric UID (Kubernetes' runAsNonRoot)"));
    assert!(uid >= 1000, "USER {user}: want a non-root, non-system UID");
    let useradd = recipe.all("RUN").into_iter().find(|run| run.contains("useradd")).expect("a RUN that adds the user");
    assert!(useradd.contains(&format!("--uid {uid}")), "the recipe's useradd does not make UID {uid}: {useradd}");

    assert_eq!(recipe.exec_form("ENTRYPOINT"), ["speechstream"]);
    let cmd = recipe.exec_form("CMD");
    assert_eq!(cmd.first().map(String::as_str), Some("serve"), "CMD {cmd:?}");
    assert_eq!(flag_value(&cmd, "--host"), Some("0.0.0.0"), "CMD {cmd:?} must listen beyond the container's loopback");
    let http_port: u16 = flag_value(&cmd, "--port").expect("CMD names --port").parse().expect("--port");

    // EXPOSE exactly the CMD's ports.
    let ports = port_flags(&cmd);
    let cmd_ports: BTreeSet<u16> = ports.iter().map(|(_, port)| *port).collect();
    let exposed: BTreeSet<u16> = recipe
        .all("EXPOSE")
        .into_iter()
        .flat_map(str::split_whitespace)
        .map(|p| p.trim_end_matches("/tcp").parse().unwrap_or_else(|_| panic!("EXPOSE {p}")))
        .collect();
    assert_eq!(exposed, cmd_ports, "EXPOSE against the CMD's port flags {ports:?}");

    assert_eq!(recipe.last("STOPSIGNAL"), "SIGTERM", "the server drains on SIGTERM");

    // The layout `serve` needs without flags.
    let env = recipe.env();
    let cache = env.get("SPEECHSTREAM_CACHE").expect("ENV SPEECHSTREAM_CACHE (where serve looks for its voices)");
    assert_eq!(recipe.copy_destination("voices/").trim_end_matches('/'), cache.trim_end_matches('/'));
    let bin = recipe.copy_destination("bin/");
    let path = env.get("PATH").expect("ENV PATH");
    assert!(path.split(':').any(|d| d == bin.trim_end_matches('/')), "PATH {path} lacks {bin}");
    let torch_lib = format!("{}/lib", recipe.copy_destination("torch/").trim_end_matches('/'));
    assert!(
        recipe
            .all("RUN")
            .iter()
            .any(|run| run.contains(&format!("echo {torch_lib} > /etc/ld.so.conf.d/")) && run.contains("ldconfig")),
        "no RUN puts {torch_lib} in ld.so's path"
    );

    // The HEALTHCHECK: its command, exec form, probing the CMD's --port.
    let healthcheck = recipe.last("HEALTHCHECK");
    let (_, probe) = healthcheck.split_once(" CMD ").expect("HEALTHCHECK ... CMD [...]");
    let probe = json_words(probe.trim()).expect("HEALTHCHECK CMD in exec (JSON) form");
    assert_eq!(probe[..2], ["bash", "-c"], "HEALTHCHECK {probe:?}");
    let script = &probe[2];
    let target = format!("/dev/tcp/127.0.0.1/{http_port}");
    assert!(script.contains(&target), "HEALTHCHECK does not probe the CMD's --port {http_port}: {script}");
    let health_path = script.split("GET ").nth(1).and_then(|rest| rest.split_whitespace().next()).expect("GET PATH");

    // The CMD's flags on the real server: loopback, and port 0 for every port (tests run side
    // by side); each port flag must open its listener.
    let mut args: Vec<String> = Vec::new();
    let mut words = cmd[1..].iter();
    while let Some(word) = words.next() {
        if word == "--host" || word == "--port" {
            words.next();
        } else if word.starts_with("--") && word.ends_with("port") {
            words.next();
            args.extend([word.clone(), "0".to_owned()]);
        } else {
            args.push(word.clone());
        }
    }
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let mut server = Server::start(&args);
    let deadline = std::time::Instant::now() + crate::process::TIMEOUT;
    let listeners = loop {
        let listeners = server.log().iter().filter(|line| line.contains("listening addr=")).count();
        if listeners >= ports.len() || std::time::Instant::now() > deadline {
            break listeners;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    assert_eq!(listeners, ports.len(), "the CMD's port flags {ports:?} against the listeners: {:?}", server.log());
    assert_eq!(get(server.addr, health_path, "").0, 200, "GET {health_path}");
    assert_eq!(get(server.addr, "/ready", "").0, 200, "GET /ready");

    // The probe's own command, on the server's port: healthy now, unhealthy once it is gone.
    let probe_script = script.replace(&target, &format!("/dev/tcp/127.0.0.1/{}", server.addr.port()));
    let run_probe = || {
        let status = Command::new("bash").args(["-c", &probe_script]).stderr(std::process::Stdio::null()).status();
        status.expect("bash").success()
    };
    assert!(run_probe(), "the HEALTHCHECK's command fails against a healthy server: {probe_script}");
    server.terminate();
    assert!(server.wait(Duration::from_secs(10)).success(), "SIGTERM: the server exits 0");
    assert!(!run_probe(), "the HEALTHCHECK's command succeeds with no server");
}

#[test]
fn image_context_exists_after_set_up() {
    let recipe = Recipe::load();
    let root = root();
    let mut staged = BTreeSet::new();
    for voices in ["hibari", "hibari,kokoro,piper"] {
        let output = Command::new("bash")
            .args(["scripts/build-image.sh", "--list-files", "--voices", voices])
            .current_dir(&root)
            .output()
            .expect("run scripts/build-image.sh");
        assert!(output.status.success(), "build-image.sh --list-files: {}", String::from_utf8_lossy(&output.stderr));
        let listed = String::from_utf8(output.stdout).expect("utf-8");
        assert!(listed.lines().count() >= 5, "too few files listed: {listed}");
        staged.extend(listed.lines().map(str::to_owned));
    }
    for path in &staged {
        let full = root.join(path);
        assert!(
            full.is_file() || full.read_dir().is_ok_and(|mut d| d.next().is_some()),
            "{path} (staged into the image) is missing or empty: run scripts/setup.sh"
        );
    }
    let hibari = staged.iter().find(|p| p.ends_with("/hibari")).expect("hibari's folder is staged");
    assert!(root.join(hibari).join("hibari.onnx").is_file(), "{hibari}/hibari.onnx");

    // Every library the release binary loads is staged, in the base, or installed by the recipe.
    let binary = root.join("target/release/speechstream");
    assert!(staged.contains("target/release/speechstream") && binary.is_file(), "target/release/speechstream");
    let ldd = Command::new("ldd").arg(&binary).output().expect("ldd");
    assert!(ldd.status.success(), "ldd {}", binary.display());
    let ldd = String::from_utf8_lossy(&ldd.stdout).into_owned();
    assert!(!ldd.contains("not found"), "libraries not found:\n{ldd}");
    let staged_libs: BTreeSet<&str> =
        staged.iter().filter(|p| p.contains("libtorch/lib/")).filter_map(|p| p.rsplit('/').next()).collect();
    let mut debian_libs = Vec::new();
    for line in ldd.lines() {
        let Some(path) = line.split("=>").nth(1).and_then(|rest| rest.split_whitespace().next()).or_else(|| {
            let word = line.split_whitespace().next()?;
            word.starts_with('/').then_some(word)
        }) else {
            continue; // linux-vdso
        };
        let name = Path::new(path).file_name().and_then(|n| n.to_str()).expect("file name");
        if path.contains("/libtorch/lib/") {
            assert!(
                staged_libs.contains(name),
                "{name} (the binary loads it from libtorch) is not staged: {staged_libs:?}"
            );
        } else {
            debian_libs.push(path.to_owned());
        }
    }
    // dpkg knows a file under the path it was packaged with (/lib or /usr/lib: merged /usr).
    let mut candidates = Vec::new();
    for path in &debian_libs {
        candidates.push(path.clone());
        match path.strip_prefix("/usr") {
            Some(rest) => candidates.push(rest.to_owned()),
            None => candidates.push(format!("/usr{path}")),
        }
    }
    let dpkg = Command::new("dpkg").arg("-S").args(&candidates).output().expect("dpkg -S");
    let owners: BTreeMap<String, String> = String::from_utf8_lossy(&dpkg.stdout)
        .lines()
        .filter_map(|line| {
            let (package, path) = line.split_once(": ")?;
            Some((path.trim().to_owned(), package.split(':').next()?.to_owned()))
        })
        .collect();
    let installed = recipe.installed_packages();
    for path in &debian_libs {
        let package = owners
            .get(path)
            .or_else(|| owners.get(path.strip_prefix("/usr").unwrap_or("")))
            .or_else(|| owners.get(&format!("/usr{path}")))
            .unwrap_or_else(|| panic!("no Debian package owns {path}"));
        assert!(
            BASE_PACKAGES.contains(&package.as_str()) || installed.contains(package),
            "{path} is {package}'s: neither in the base nor installed by the recipe ({installed:?})"
        );
    }
    assert!(installed.contains("libopus0"), "the recipe installs {installed:?}");
}
