//! Every chart is written as a valid, non-empty SVG and PNG; bad names and empty data are
//! errors, not panics.

use decodesim::accounting::{compare::compare, Breakdown};
use decodesim::category::Category;
use decodesim::report::plot::{
    self, BreakdownChart, CurveChart, CurveMetric, CurveSeries, MeasuredPoint, MemoryChart,
    MemorySeries, PlotError, SpeedupChart, SpeedupPanel,
};
use std::path::{Path, PathBuf};

fn dir(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("decodesim-plots-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn check(path: &Path) {
    let bytes = std::fs::read(path).unwrap();
    match path.extension().and_then(|e| e.to_str()) {
        Some("png") => {
            assert_eq!(&bytes[..8], b"\x89PNG\r\n\x1a\n", "{}", path.display());
            assert!(
                bytes.len() > 5_000,
                "{}: {} bytes",
                path.display(),
                bytes.len()
            );
        }
        _ => {
            let text = String::from_utf8(bytes).unwrap();
            assert!(text.starts_with("<svg"), "{}", path.display());
            assert!(text.contains("<text"), "{}", path.display());
            assert!(text.trim_end().ends_with("</svg>"), "{}", path.display());
        }
    }
}

fn breakdown(us: &[(Category, f64)]) -> Breakdown {
    let mut b = Breakdown::default();
    for &(c, t) in us {
        b.exclusive_us[c.index()] = t;
        b.busy_us[c.index()] = t;
    }
    b.step_time_us = us.iter().map(|x| x.1).sum();
    b
}

#[test]
fn comparison_bars_group_small_categories() {
    let d = dir("cmp");
    let pred = breakdown(&[
        (Category::Moe, 11_000.0),
        (Category::Attention, 1_800.0),
        (Category::Communication, 240.0),
        (Category::Norm, 30.0),
    ]);
    let meas = breakdown(&[
        (Category::Moe, 10_500.0),
        (Category::Attention, 1_900.0),
        (Category::Communication, 470.0),
        (Category::Idle, 180.0),
    ]);
    let cmp = compare(&pred, &meas);
    for name in ["cmp.svg", "cmp.png"] {
        let p = d.join(name);
        plot::plot_comparison(&cmp, &p, "test comparison").unwrap();
        check(&p);
    }
    let svg = std::fs::read_to_string(d.join("cmp.svg")).unwrap();
    // Segment values, and the small categories in one "other" entry.
    assert!(svg.contains("moe 11,000 µs"), "segment labels");
    assert!(svg.contains("other: "), "other group");
    assert!(svg.contains("norm, idle"), "other members");
}

fn series() -> Vec<CurveSeries> {
    vec![
        CurveSeries {
            label: "a TP=8".into(),
            points: vec![(1.0, 80.0, 12.5), (8.0, 350.0, 23.0), (24.0, 510.0, 47.0)],
            knee: Some(8),
            plateau: Some(24),
        },
        CurveSeries {
            label: "b TP=8".into(),
            points: vec![
                (1.0, 90.0, 11.0),
                (64.0, 1700.0, 37.0),
                (190.0, 3000.0, 63.0),
            ],
            knee: None,
            plateau: None,
        },
    ]
}

#[test]
fn throughput_and_tpot_curves_with_measured_points() {
    let d = dir("curves");
    let measured = [
        MeasuredPoint {
            concurrency: 8.0,
            tokens_per_s: 330.0,
            tpot_ms: Some(24.0),
        },
        MeasuredPoint {
            concurrency: 16.0,
            tokens_per_s: 430.0,
            tpot_ms: None,
        },
    ];
    let s = series();
    for (metric, stem) in [
        (CurveMetric::TokensPerS, "tp"),
        (CurveMetric::TpotMs, "tpot"),
    ] {
        for ext in ["svg", "png"] {
            let p = d.join(format!("{stem}.{ext}"));
            plot::plot_curves(
                &CurveChart {
                    title: "curves",
                    metric,
                    series: &s,
                    measured: &measured,
                    limit: Some((50.0, "TPOT limit".into())),
                },
                &p,
            )
            .unwrap();
            check(&p);
        }
    }
    let svg = std::fs::read_to_string(d.join("tp.svg")).unwrap();
    assert!(svg.contains("a TP=8") && svg.contains("measured") && svg.contains("knee ▲ 8"));
}

#[test]
fn memory_and_breakdown_charts() {
    let d = dir("mem");
    let mem = [MemorySeries {
        label: "rtx".into(),
        terms: vec![
            ("weights".into(), 76e9),
            ("nccl_buffers".into(), 38e6),
            ("kv_cache".into(), 13e9),
        ],
        total_bytes: 102e9,
    }];
    let mut times = Vec::new();
    for b in [1.0, 8.0, 32.0] {
        let mut row = [0.0; Category::COUNT];
        row[Category::Moe.index()] = 1000.0 * b;
        row[Category::Communication.index()] = 500.0 + 100.0 * b;
        row[Category::Sampling.index()] = 5.0;
        times.push(row);
    }
    for ext in ["svg", "png"] {
        let p = d.join(format!("mem.{ext}"));
        plot::plot_memory(
            &MemoryChart {
                title: "memory",
                series: &mem,
            },
            &p,
        )
        .unwrap();
        check(&p);
        let p = d.join(format!("bd.{ext}"));
        plot::plot_breakdown(
            &BreakdownChart {
                title: "breakdown",
                batches: &[1, 8, 32],
                times_us: &times,
            },
            &p,
        )
        .unwrap();
        check(&p);
    }
    let svg = std::fs::read_to_string(d.join("mem.svg")).unwrap();
    assert!(svg.contains("36.2 MiB"), "small terms labelled");
    let svg = std::fs::read_to_string(d.join("bd.svg")).unwrap();
    assert!(svg.contains("other (sampling)"));
}

#[test]
fn bad_names_and_empty_data_are_errors() {
    let d = dir("bad");
    let s = series();
    let chart = CurveChart {
        title: "x",
        metric: CurveMetric::TokensPerS,
        series: &s,
        measured: &[],
        limit: None,
    };
    assert!(matches!(
        plot::plot_curves(&chart, &d.join("x.jpg")),
        Err(PlotError::Format { .. })
    ));
    let empty = CurveChart {
        series: &[],
        ..chart
    };
    assert!(matches!(
        plot::plot_curves(&empty, &d.join("x.png")),
        Err(PlotError::Empty { .. })
    ));
    assert!(matches!(
        plot::plot_breakdown(
            &BreakdownChart {
                title: "x",
                batches: &[],
                times_us: &[],
            },
            &d.join("x.svg")
        ),
        Err(PlotError::Empty { .. })
    ));
}

fn speedup_panels(n: usize) -> Vec<SpeedupPanel> {
    (0..n)
        .map(|i| SpeedupPanel {
            label: format!("acceptance rate 0.{}", i + 3),
            note: "best 1.50x (k = 3, batch 1)".into(),
            // Three k over five batches, falling below 1.0 with batch.
            speedup: (1..=3)
                .map(|k| {
                    (0..5)
                        .map(|b| 1.0 + 0.1 * k as f64 + 0.05 * i as f64 - 0.12 * b as f64)
                        .collect()
                })
                .collect(),
        })
        .collect()
}

#[test]
fn speedup_lines_and_heatmap_one_and_several_panels() {
    let d = dir("speedup");
    let batches = [1u32, 2, 4, 8, 256];
    for n in [1usize, 4] {
        let panels = speedup_panels(n);
        let chart = SpeedupChart {
            title: "Speculative decoding (eagle3): test",
            subtitle: "line one\nline two",
            batches: &batches,
            draft_tokens: &[1, 2, 3],
            panels: &panels,
        };
        for ext in ["svg", "png"] {
            let lines = d.join(format!("lines-{n}.{ext}"));
            plot::plot_speedup(&chart, &lines).unwrap();
            check(&lines);
            let heat = d.join(format!("heat-{n}.{ext}"));
            plot::plot_speedup_heatmap(&chart, &heat).unwrap();
            check(&heat);
        }
        let svg = std::fs::read_to_string(d.join(format!("lines-{n}.svg"))).unwrap();
        assert!(svg.contains("k = 3") && svg.contains("256") && svg.contains("no speculation"));
        assert!(svg.contains("acceptance rate 0.3") && svg.contains("line two"));
        let heat = std::fs::read_to_string(d.join(format!("heat-{n}.svg"))).unwrap();
        // Every cell carries its value.
        assert!(heat.contains("1.30x") && heat.contains("0.62x"), "{n}");
    }
    // The README's chart stays small (palette PNG).
    let png = std::fs::metadata(d.join("lines-4.png")).unwrap().len();
    assert!(png < 100_000, "{png} bytes");
}

#[test]
fn speedup_bad_names_and_shapes_are_errors() {
    let d = dir("speedup-bad");
    let panels = speedup_panels(1);
    let chart = SpeedupChart {
        title: "x",
        subtitle: "y",
        batches: &[1, 2, 4, 8, 16],
        draft_tokens: &[1, 2, 3],
        panels: &panels,
    };
    for name in ["x.jpg", "x", "x.PNG.txt"] {
        assert!(matches!(
            plot::plot_speedup(&chart, &d.join(name)),
            Err(PlotError::Format { .. })
        ));
        assert!(matches!(
            plot::plot_speedup_heatmap(&chart, &d.join(name)),
            Err(PlotError::Format { .. })
        ));
    }
    // One batch too few for the speedups, no panels, a NaN: nothing drawn, no panic.
    let short = SpeedupChart {
        batches: &[1, 2, 4, 8],
        ..chart
    };
    assert!(matches!(
        plot::plot_speedup(&short, &d.join("x.png")),
        Err(PlotError::Empty { .. })
    ));
    let none = SpeedupChart {
        panels: &[],
        ..chart
    };
    assert!(matches!(
        plot::plot_speedup_heatmap(&none, &d.join("x.svg")),
        Err(PlotError::Empty { .. })
    ));
    let mut nan = speedup_panels(1);
    nan[0].speedup[0][0] = f64::NAN;
    let bad = SpeedupChart {
        panels: &nan,
        ..chart
    };
    assert!(matches!(
        plot::plot_speedup(&bad, &d.join("x.svg")),
        Err(PlotError::Empty { .. })
    ));
    assert!(!d.join("x.png").exists() && !d.join("x.svg").exists());
}
