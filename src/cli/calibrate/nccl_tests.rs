//! `calibrate --from-nccl-tests`: collectives measured by nccl-tests logs written into a
//! profile's tables, and what the written table measures and from where.

use super::{paths, CalibrateArgs};
use crate::calibrate::nccl_tests::{MeasuredChannels, NcclTestsResult};
use crate::cli::print;
use crate::error::Result;

pub(super) fn from_nccl_tests(a: &CalibrateArgs) -> Result<()> {
    let mut req = a.scenario.request();
    if let Some(p) = &a.profile {
        req.calibration = Some(p.clone());
    }
    let (scenario, base) = req.load()?;
    // The base as loaded (the system's own when none was named) is read again while the new
    // profile is written: neither it nor its tables may be what is replaced.
    let mut p = paths(a);
    p.input("the base profile", &base.path);
    if let Some(t) = &base.aic {
        p.input("the base profile's tables", &t.dir);
    }
    p.check()?;
    let r = crate::calibrate::nccl_tests::from_nccl_tests(
        &crate::calibrate::nccl_tests::NcclTestsRequest {
            files: a.from_nccl_tests.clone(),
            column: a.nccl_tests_column,
            base,
            system: scenario.system.clone(),
            out: a.out.clone(),
            name: a.name.clone(),
            channels: a.nccl_channels,
        },
    )?;
    let mut s = format!(
        "wrote {} (profile '{}': collectives from nccl-tests, {} column, tables in {})\n",
        crate::units::path(&a.out),
        r.profile.profile.name,
        a.nccl_tests_column,
        crate::units::path(&r.tables_dir)
    );
    s.push_str(&file_lines(&r));
    s.push_str(&curve_lines(&r));
    s.push_str(&provenance_lines(&r));
    s.push_str(&channel_line(&r.channels));
    print(&s)
}

/// The channel count the profile now states as measured, or a warning that nothing stated it.
fn channel_line(c: &MeasuredChannels) -> String {
    match c {
        MeasuredChannels::Stated { count, from } => {
            format!("NCCL channels measured: {count} ({from}); --nccl-min-nchannels / --nccl-max-nchannels scale from it\n")
        }
        MeasuredChannels::Unstated { kept: Some(n) } => format!(
            "warning: the logs do not say how many channels NCCL ran on (NCCL_DEBUG=INFO prints them): the profile keeps the base profile's {n}, so --nccl-min-nchannels / --nccl-max-nchannels scale your measurement from a count it may not have run at; give --nccl-channels N\n"
        ),
        MeasuredChannels::Unstated { kept: None } => String::new(),
    }
}

/// Each file read: its collective, ranks, nodes, GPUs, rows and versions.
fn file_lines(r: &NcclTestsResult) -> String {
    let mut s = String::new();
    for f in &r.files {
        s.push_str(&format!(
            "  {}{}: {} at {} ranks{}{}, {} rows{}\n",
            crate::units::path(&f.path),
            if f.line > 1 {
                format!(" (log from line {})", f.line)
            } else {
                String::new()
            },
            f.op,
            f.nranks,
            if f.nodes > 1 {
                format!(" on {} nodes (multi-node table)", f.nodes)
            } else {
                String::new()
            },
            if f.gpus.is_empty() {
                String::new()
            } else {
                format!(" ({})", f.gpus.join(" / "))
            },
            f.rows.len(),
            if f.versions.is_empty() {
                String::new()
            } else {
                format!("; {}", f.versions.join("; "))
            }
        ));
    }
    s
}

/// Each collective's measured curve against the table it replaces.
fn curve_lines(r: &NcclTestsResult) -> String {
    let mut s = String::new();
    s.push_str("\ncollective   ranks  rows  sizes (B)             measured µs          previous table µs   LL->Simple\n");
    for c in &r.curves {
        s.push_str(&format!(
            "{:<12} {:>5} {:>5}  {:>9.0}..{:<10.0} {:>8.2}..{:<10.2} {:<19} {}\n",
            c.op,
            c.nranks,
            c.rows,
            c.bytes[0],
            c.bytes[1],
            c.us[0],
            c.us[1],
            c.base_us
                .map(|b| format!("{:.2}..{:.2}", b[0], b[1]))
                .unwrap_or_else(|| "none".into()),
            c.switch_bytes
                .map(|(a, b)| format!("between {a:.0} and {b:.0} B"))
                .unwrap_or_else(|| "not seen".into())
        ));
    }
    s
}

/// Exactly what the written table measures, and from where: the files, or the base.
fn provenance_lines(r: &NcclTestsResult) -> String {
    let mut s = String::new();
    if r.multinode_rows > 0 {
        s.push_str(&format!(
            "multi-node table: {} rows in {} (prices collectives whose group spans nodes)\n",
            r.multinode_rows,
            crate::units::path(&r.tables_dir.join(crate::cost::internode::MULTINODE_CSV))
        ));
    }
    let list = |m: &[((String, u32), usize)]| {
        m.iter()
            .map(|((op, n), rows)| format!("{op} at {n} ranks ({rows} rows)"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    if !r.measured.is_empty() {
        s.push_str(&format!("measured by these files: {}\n", list(&r.measured)));
    }
    if !r.kept.is_empty() {
        s.push_str(&format!(
            "kept from the base profile's measured table (the files do not measure them): {}\n",
            list(&r.kept)
        ));
    }
    if r.kept_multinode {
        s.push_str(
            "multi-node table kept from the base profile (no file ran over several nodes)\n",
        );
    }
    s.push_str("every other collective and rank count: priced by the profile's collective laws\n");
    if !r.copied.is_empty() {
        s.push_str(&format!(
            "other tables copied from the base profile: {}\n",
            r.copied.join(", ")
        ));
    }
    s
}
