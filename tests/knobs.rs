//! The table of scenario settings (`scenario::knobs`): every knob reaches the same request
//! through each place that reads it (flags, `whatif --vary`, `sweep --grid` files, throughput
//! CSV columns), shows its default as a value, and unknown keys list the real ones. Every
//! command's help fits in 100 columns.

use clap::Parser;
use decodesim::cli::{Cli, Command};
use decodesim::scenario::knobs::{knob, Sweep, KNOBS};
use decodesim::sim::ScenarioRequest;
use std::path::PathBuf;

/// A value other than the default for every knob (a knob added without one fails
/// `every_knob_has_a_sample`).
const SAMPLES: &[(&str, &str)] = &[
    ("model", "llama-3.1-70b"),
    ("system", "h200-8x-nvlink"),
    ("tp", "4"),
    ("batch", "8"),
    ("context", "1024"),
    ("cuda-graphs", "off"),
    ("nccl-proto", "Simple"),
    ("nccl-algo", "Tree"),
    ("p2p", "off"),
    ("seed", "7"),
    ("calibration", "h200"),
    ("runtime", "reference"),
    ("layers", "4"),
    ("kv-cache-dtype", "fp8"),
    ("routing", "uniform"),
    ("allreduce", "nccl"),
    ("fuse-allreduce-rms", "on"),
    ("nccl-max-nchannels", "16"),
    ("nccl-min-nchannels", "8"),
    ("nccl-buffsize", "8388608"),
    ("ep", "8"),
    ("ep-comm", "all-to-all"),
    ("dcp", "2"),
    ("link-gbps", "50"),
    ("link-latency-us", "2.5"),
    ("nccl-ll-threshold", "65536"),
    ("pp", "2"),
    ("dp", "2"),
    ("redundant-experts", "8"),
    ("tbo", "on"),
];

fn sample(name: &str) -> &'static str {
    SAMPLES.iter().find(|(k, _)| *k == name).unwrap().1
}

/// The default request with one knob set through the table.
fn with(name: &str, value: &str) -> ScenarioRequest {
    let mut r = ScenarioRequest::default();
    knob(name).set(&mut r, value).unwrap();
    r
}

fn from_flags(name: &str, value: &str) -> ScenarioRequest {
    let flag = format!("--{name}");
    match Cli::try_parse_from(["decodesim", "simulate", &flag, value])
        .unwrap()
        .command
    {
        Command::Simulate(a) => a.scenario.request(),
        _ => unreachable!(),
    }
}

fn from_vary(name: &str, value: &str) -> ScenarioRequest {
    let mut r = ScenarioRequest::default();
    // The underscore spelling reaches the same knob.
    decodesim::whatif::vary::set(&mut r, &name.replace('-', "_"), value).unwrap();
    r
}

fn temp(tag: &str, text: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("decodesim-knobs-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    let p = d.join(tag);
    std::fs::write(&p, text).unwrap();
    p
}

fn sweep(argv: &[&str]) -> decodesim::whatif::sweep::SweepRequest {
    let mut full = vec!["decodesim", "sweep"];
    full.extend_from_slice(argv);
    match Cli::try_parse_from(full).unwrap().command {
        Command::Sweep(a) => decodesim::cli::sweep::request(&a).unwrap(),
        _ => unreachable!(),
    }
}

#[test]
fn every_knob_has_a_sample() {
    for k in KNOBS {
        let s = sample(k.name());
        assert_ne!(
            with(k.name(), s),
            ScenarioRequest::default(),
            "{}: the sample {s} is the default",
            k.flag
        );
    }
    assert_eq!(SAMPLES.len(), KNOBS.len());
}

#[test]
fn every_knob_parses_its_default_and_shows_it_as_a_value() {
    let d = ScenarioRequest::default();
    for k in KNOBS {
        let shown = k.default_text();
        if let Some(v) = k.get(&d) {
            assert_eq!(shown, v.to_string(), "{}", k.flag);
            assert_eq!(with(k.name(), &shown), d, "{}", k.flag);
            assert_eq!(from_flags(k.name(), &shown), d, "{}", k.flag);
            assert_eq!(from_vary(k.name(), &shown), d, "{}", k.flag);
        }
        assert!(k.help_text().ends_with(&format!("[default: {shown}]")));
    }
    assert_eq!(knob("nccl-proto").default_text(), "LL");
    assert_eq!(knob("batch").default_text(), "32");
    assert_eq!(knob("cuda-graphs").default_text(), "on");
    assert_eq!(knob("kv-cache-dtype").default_text(), "bf16");
    assert!(knob("routing").default_text().contains("power-law:0.66"));
}

#[test]
fn every_knob_reaches_the_same_request_through_flags_and_vary() {
    for k in KNOBS {
        let v = sample(k.name());
        let want = with(k.name(), v);
        assert_eq!(from_flags(k.name(), v), want, "{} {v}", k.flag);
        assert_eq!(from_vary(k.name(), v), want, "{} {v}", k.flag);
        // What the table shows parses back to the same request.
        let shown = k.get(&want).unwrap().to_string();
        assert_eq!(with(k.name(), &shown), want, "{} shows {shown}", k.flag);
    }
}

#[test]
fn sweep_knobs_reach_the_same_request_through_grid_files_and_flags() {
    for k in KNOBS.iter().filter(|k| k.sweep != Sweep::No) {
        let v = sample(k.name());
        let want = with(k.name(), v);
        let value = if v.parse::<u64>().is_ok() {
            v.to_string()
        } else {
            format!("\"{v}\"")
        };
        let grid = temp(
            &format!("{}.toml", k.name()),
            &format!("{} = {value}\n", k.column()),
        );
        let g = sweep(&["--grid", grid.to_str().unwrap()]);
        let flag = format!("--{}", k.name());
        let f = sweep(&[&flag, v]);
        assert_eq!(format!("{g:?}"), format!("{f:?}"), "{}", k.flag);
        match k.name() {
            "batch" => assert_eq!(g.batch, vec![want.batch]),
            "context" => assert_eq!(g.context, vec![want.context]),
            "nccl-proto" => assert_eq!(g.proto, vec![want.proto]),
            "nccl-algo" => assert_eq!(g.algo, vec![want.algo]),
            "cuda-graphs" => assert_eq!(g.cuda_graphs, vec![want.cuda_graphs]),
            "pp" => assert_eq!(g.pp, vec![want.pp.unwrap()]),
            "dp" => assert_eq!(g.dp, vec![want.dp.unwrap()]),
            _ if k.sweep.is_layout() => {
                assert_eq!(
                    g.settings,
                    vec![(k, vec![k.get(&want).unwrap()])],
                    "{}",
                    k.flag
                )
            }
            _ => assert_eq!(g.base, want, "{}", k.flag),
        }
    }
}

/// A layout setting costs its knob's row alone: every `Sweep::Layout` knob is a `sweep` flag
/// and a `--grid` key whose values each make a layout of their own, at the value given.
#[test]
fn every_layout_setting_is_a_sweep_flag_and_a_grid_key() {
    let layout: Vec<_> = KNOBS.iter().filter(|k| k.sweep.is_layout()).collect();
    assert!(layout.iter().any(|k| k.name() == "tbo"));
    assert!(layout.iter().any(|k| k.name() == "nccl-min-nchannels"));
    for k in layout {
        let v = sample(k.name());
        let want = k.get(&with(k.name(), v)).unwrap();
        let flag = format!("--{}", k.name());
        let grid = temp(
            &format!("layout-{}.toml", k.name()),
            &format!("{} = [\"{v}\"]\n", k.column()),
        );
        for req in [
            sweep(&[&flag, v]),
            sweep(&["--grid", grid.to_str().unwrap()]),
        ] {
            assert_eq!(req.settings, vec![(k, vec![want.clone()])], "{}", k.flag);
            let layouts = req.layout_requests();
            assert_eq!(layouts.len(), 1, "{}", k.flag);
            assert_eq!(k.get(&layouts[0]), Some(want.clone()), "{}", k.flag);
            // The base keeps its own value: the list alone sets the knob.
            assert_eq!(req.base, ScenarioRequest::default(), "{}", k.flag);
        }
    }
}

#[test]
fn csv_columns_reach_the_same_request_as_the_knobs() {
    use decodesim::calibrate::from_throughput::read_points;
    for name in ["kv-cache-dtype", "nccl-proto", "nccl-algo", "p2p", "dcp"] {
        let k = knob(name);
        let v = sample(name);
        let csv = temp(
            &format!("{name}.csv"),
            &format!(
                "concurrency,context,tokens_per_s,{}\n8,1024,100,{v}\n16,1024,180,{v}\n",
                k.column()
            ),
        );
        let points = read_points(&csv).unwrap();
        let mut r = ScenarioRequest::default();
        for (k, v) in points[0].settings() {
            k.apply(&mut r, v);
        }
        let mut want = with(name, v);
        knob("batch").set(&mut want, "8").unwrap();
        knob("context").set(&mut want, "1024").unwrap();
        assert_eq!(r, want, "{name}");
    }
    // A bad value names the file, line, column and what it takes.
    let csv = temp(
        "bad.csv",
        "concurrency,context,tokens_per_s,nccl_proto\n8,1024,100,Fast\n",
    );
    let e = read_points(&csv).unwrap_err().to_string();
    assert!(
        e.contains("bad.csv") && e.contains("column nccl_proto") && e.contains("LL, LL128"),
        "{e}"
    );
}

#[test]
fn unknown_keys_list_the_real_keys() {
    let all = decodesim::scenario::knobs::names();
    let mut r = ScenarioRequest::default();
    let e = decodesim::whatif::vary::set(&mut r, "speed", "1")
        .unwrap_err()
        .to_string();
    assert!(e.contains("unknown key 'speed'") && e.contains(&all), "{e}");
    let e = decodesim::whatif::vary::parse_axes(&["nccl_protocol=LL".into()])
        .unwrap_err()
        .to_string();
    assert!(e.contains("nccl_protocol") && e.contains(&all), "{e}");
    let grid = temp("unknown.toml", "nccl_protocol = \"LL\"\n");
    let a = match Cli::try_parse_from(["decodesim", "sweep", "--grid", grid.to_str().unwrap()])
        .unwrap()
        .command
    {
        Command::Sweep(a) => a,
        _ => unreachable!(),
    };
    let e = decodesim::cli::sweep::request(&a).unwrap_err().to_string();
    assert!(
        e.contains("nccl_protocol") && e.contains("model, system, tp, batch, context"),
        "{e}"
    );
    // A bad value names the knob and its choices, on the command line too.
    let e = Cli::try_parse_from(["decodesim", "simulate", "--nccl-algo", "Star"])
        .unwrap_err()
        .to_string();
    assert!(e.contains("--nccl-algo") && e.contains("Ring"), "{e}");
}

#[test]
fn json_echo_carries_every_knob() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_decodesim"))
        .args(["simulate", "--format", "json", "--nccl-proto", "Simple"])
        .output()
        .unwrap();
    assert!(out.status.success());
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let s = &v["scenario"];
    for k in KNOBS.iter().filter(|k| k.name() != "calibration") {
        assert!(s.get(k.column()).is_some(), "{} missing in {s}", k.column());
    }
    assert_eq!(s["nccl_proto"], "Simple");
    assert_eq!(s["batch"], 32);
    assert_eq!(s["kv_cache_dtype"], "bf16");
    assert_eq!(s["routing"], "power-law:0.66");
    assert_eq!(s["p2p"], true);
    assert_eq!(s["nccl_max_nchannels"], serde_json::Value::Null);
}

/// Every command path: `simulate`, `whatif spec-decode`, ...
fn command_paths(cmd: &clap::Command, prefix: Vec<String>, out: &mut Vec<Vec<String>>) {
    for sub in cmd.get_subcommands().filter(|s| s.get_name() != "help") {
        let mut p = prefix.clone();
        p.push(sub.get_name().to_string());
        out.push(p.clone());
        command_paths(sub, p, out);
    }
}

#[test]
fn every_help_line_fits_in_100_columns() {
    let mut paths = vec![Vec::new()];
    command_paths(&decodesim::cli::command(), Vec::new(), &mut paths);
    assert!(paths.len() >= 10, "{paths:?}");
    for p in &paths {
        for h in ["--help", "-h"] {
            let out = std::process::Command::new(env!("CARGO_BIN_EXE_decodesim"))
                .args(p)
                .arg(h)
                .output()
                .unwrap();
            assert!(out.status.success(), "{p:?} {h}");
            let text = String::from_utf8(out.stdout).unwrap();
            for line in text.lines() {
                assert!(
                    line.chars().count() <= 100,
                    "decodesim {} {h}: {} columns: {line}",
                    p.join(" "),
                    line.chars().count()
                );
            }
        }
    }
}

#[test]
fn help_shows_defaults_as_values_and_whatif_names_both_studies() {
    let help = |args: &[&str]| {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_decodesim"))
            .args(args)
            .output()
            .unwrap();
        String::from_utf8(out.stdout).unwrap()
    };
    let sim = help(&["simulate", "--help"]);
    for want in [
        "[default: LL]",
        "[default: Ring]",
        "[default: 32]",
        "[default: kimi-k2.5]",
        "power-law:0.66",
        "[default: the system's GPUs over --dp × --pp]",
    ] {
        assert!(sim.contains(want), "{want} not in simulate --help");
    }
    assert!(!sim.contains("DEFAULT_ROUTING") && !sim.contains("::"));
    let top = help(&["--help"]);
    // The `whatif` entry of the commands list, up to the next command.
    let at = top.find("\n  whatif").unwrap();
    let line = &top[at..at + top[at..].find("\n  sweep").unwrap()];
    assert!(
        line.contains("--vary") && line.contains("spec-decode"),
        "{line}"
    );
    let whatif = help(&["whatif", "--help"]);
    assert!(whatif.contains("--vary") && whatif.contains("spec-decode"));
    assert!(
        whatif.contains("nccl-ll-threshold"),
        "--vary lists the knob table's keys"
    );
}
