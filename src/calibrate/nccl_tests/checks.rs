//! Checks of the files against each other and against the system: one time per size, the GPU
//! model, a bus bandwidth the links can carry.

use super::reader::{dtype_size, NcclTestsFile};
use super::Measured;
use crate::error::{Error, Result};
use std::collections::BTreeMap;
use std::path::Path;

/// The table prices a single-node (op, ranks) curve by message size alone, from its 2-byte
/// rows when it has any (`cost::aic`): two files (or logs) of one collective at one rank count
/// in dtypes of one size would give one size two prices. Refused here, by the user's files and
/// lines, rather than by the generated table when it is read back.
pub(super) fn same_size_conflicts(table: &Measured, files: &[NcclTestsFile]) -> Result<()> {
    let single = |op: &str, n: u32| {
        files
            .iter()
            .any(|f| f.op == op && f.nranks == n && f.nodes == 1)
    };
    let two_byte = |op: &str, n: u32| {
        table
            .keys()
            .any(|(o, m, d, _)| o == op && *m == n && dtype_size(d) == 2)
    };
    // (op, ranks, bytes) → (µs, dtype, file, line) of the first row seen.
    type Seen<'a> = BTreeMap<(&'a str, u32, u64), (f64, &'a str, &'a Path, usize)>;
    let mut seen: Seen = BTreeMap::new();
    for ((op, n, dtype, bytes), (us, _, path, line)) in table {
        if !single(op, *n) || (two_byte(op, *n) && dtype_size(dtype) != 2) {
            continue;
        }
        match seen.get(&(op.as_str(), *n, *bytes)) {
            Some(&(v, d, p, l)) if v != *us => {
                return Err(Error::Conflict {
                    first: format!("{} line {l}", crate::units::path(p)),
                    second: format!("{} line {line}", crate::units::path(path)),
                    problem: format!(
                        "{op} of {bytes} B at {n} ranks measured in {d} and in {dtype} with different times ({v} and {us} µs); the table prices a collective by its size in bytes, so keep one data type per test and rank count"
                    ),
                })
            }
            Some(_) => {}
            None => {
                seen.insert((op, *n, *bytes), (*us, dtype, path, *line));
            }
        }
    }
    Ok(())
}

/// The GPU model of a name, its first word after the vendor (`H200`, `H100`, `RTX`).
pub(super) fn gpu_model(name: &str) -> String {
    name.split_whitespace()
        .find(|w| !w.eq_ignore_ascii_case("nvidia"))
        .unwrap_or("")
        .to_ascii_uppercase()
}

/// The ranks' GPUs (the `# Rank` lines) are the system's: timings of another GPU would price
/// this machine's collectives.
pub(super) fn check_gpus(f: &NcclTestsFile, system: &crate::scenario::SystemSpec) -> Result<()> {
    let want = gpu_model(&system.gpu.display_name);
    match f.gpus.iter().find(|g| gpu_model(g) != want) {
        None => Ok(()),
        Some(g) => Err(Error::field(
            &f.path,
            "# Rank lines",
            format!(
                "the ranks ran on '{g}', but system '{}' has {} GPUs ('{}'): these timings would price another GPU's collectives; pass the --system they were measured on",
                system.name, want, system.gpu.display_name
            ),
        )),
    }
}

/// No row moves data faster than the fastest link a rank has (twice it: NVLink SHARP reduces
/// in the switch and can beat the per-GPU rate, no file beats it twice): a faster row is a
/// unit mistake (ms read as µs, a wrong size column).
pub(super) fn check_bus_bandwidth(
    f: &NcclTestsFile,
    system: &crate::scenario::SystemSpec,
) -> Result<()> {
    let ic = &system.interconnect;
    let link = ic
        .nvlink_gbps
        .max(ic.p2p_gbps_same_socket)
        .max(ic.p2p_gbps_cross_socket)
        .max(system.pcie_gbps());
    let n = f.nranks.max(2) as f64;
    let factor = match f.op.as_str() {
        "all_reduce" => 2.0 * (n - 1.0) / n,
        "all_gather" | "reduce_scatter" | "alltoall" => (n - 1.0) / n,
        _ => 1.0,
    };
    for r in &f.rows {
        let us = r.out_of_place_us.min(r.in_place_us);
        let bus = factor * r.bytes as f64 / (us * 1e3);
        if bus > 2.0 * link {
            return Err(Error::field(
                &f.path,
                format!("line {}", r.line),
                format!(
                    "{} B in {us} µs is {bus:.0} GB/s of bus bandwidth, more than twice the fastest link of system '{}' ({link:.0} GB/s); expected nccl-tests' times in µs of this machine",
                    r.bytes, system.name
                ),
            ));
        }
    }
    Ok(())
}
