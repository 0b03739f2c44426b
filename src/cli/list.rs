//! `decodesim list`: the bundled models, systems and calibration profiles.

use super::print;
use crate::error::Result;
use crate::report::table::Table;
use crate::scenario::{catalog, ModelSpec, SystemSpec};
use crate::units::grouped;

/// Widths of the free-text columns, so every line stays within about 100 characters.
const DESCRIPTION_WIDTH: usize = 22;
const PROVENANCE_WIDTH: usize = 56;
const ERROR_WIDTH: usize = 64;

pub fn run() -> Result<()> {
    let mut out = String::from("models (models/*.json; --model NAME or a config.json path)\n");
    let mut t = Table::new(&["name", "family", "layers", "hidden", "experts", "weights"])
        .align_left(&[1, 4, 5])
        .wrap(1, ERROR_WIDTH);
    for name in catalog::stems(&catalog::models_dir(), "json") {
        let path = catalog::models_dir().join(format!("{name}.json"));
        match ModelSpec::from_file(&path) {
            Ok(m) => t.row(vec![
                name,
                m.family.name().into(),
                m.num_layers.to_string(),
                grouped(m.hidden as f64, 0),
                m.moe
                    .as_ref()
                    .map(|x| format!("{} top-{}", x.n_routed_experts, x.top_k))
                    .unwrap_or_else(|| "-".into()),
                m.quant
                    .as_ref()
                    .map(|q| format!("{} ({})", q.format.name(), q.method))
                    .unwrap_or_else(|| "bf16".into()),
            ]),
            Err(e) => t.row(vec![name, format!("error: {e}")]),
        }
    }
    out.push_str(&t.render());
    out.push_str("\nsystems (data/systems/*.toml; --system NAME or a path)\n");
    let mut t = Table::new(&["name", "GPUs", "link", "calibration", "description"])
        .align_left(&[1, 2, 3, 4])
        .wrap(1, ERROR_WIDTH)
        .wrap(4, DESCRIPTION_WIDTH);
    for name in catalog::stems(&catalog::systems_dir(), "toml") {
        let path = catalog::systems_dir().join(format!("{name}.toml"));
        match SystemSpec::from_file(&path, &catalog::gpus_dir()) {
            Ok(s) => t.row(vec![
                name,
                format!("{}x {}", s.gpu_count, s.gpu.name),
                format!("{:?}", s.interconnect.kind).to_lowercase(),
                s.default_calibration.clone(),
                s.description.clone(),
            ]),
            Err(e) => t.row(vec![name, format!("error: {e}")]),
        }
    }
    out.push_str(&t.render());
    out.push_str(
        "\ncalibration profiles (data/calibration/*/profile.toml; --calibration NAME or a path)\n",
    );
    let mut t = Table::new(&["name", "gpu", "provenance"])
        .align_left(&[1, 2])
        .wrap(1, ERROR_WIDTH)
        .wrap(2, PROVENANCE_WIDTH);
    for name in catalog::profile_names() {
        let path = catalog::calibration_dir().join(&name).join("profile.toml");
        match crate::cost::CalibrationProfile::from_file(&path) {
            Ok(p) => t.row(vec![
                name,
                p.profile.gpu.clone(),
                p.profile.provenance.clone(),
            ]),
            Err(e) => t.row(vec![name, format!("error: {e}"), String::new()]),
        }
    }
    out.push_str(&t.render());
    print(&out)
}
